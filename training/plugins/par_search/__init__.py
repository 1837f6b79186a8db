"""The PAR architecture search as a training plug-in, with everything it owns.

    config.py     SearchConfig: its section of the training config (flags
                  --tau_start, --arch_*, --search_cost_*, --search_speed_target,
                  --freeze_*, --then_retrain), the --tau_schedule names and the
                  migration of older config.json files
    plugin.py     ParSearch: architecture optimizer, temperature, cost term,
                  progressive freezing, derivation at the end
    schedules.py  the Gumbel-softmax temperature schedule (`tau_at`)
    summaries.py  the architecture summaries (TensorBoard scalars and heat map)
    derive.py     the derived architecture: report, architecture.json/.txt,
                  reading --architecture
    speed_target.py  the derivation under --search_speed_target: the most
                  probable architecture within a FLOPs budget
    plots.py      the probability history (arch_history.json) and its plots
    settle.py     several finished searches settled by their supernets' valid NLL:
                  each candidate architecture scored as a masked sub-network
                  (python -m experiments.settle)

`PLUGIN` registers it (training/plugins/__init__.py lists it). Importing this
package does not load TensorFlow (plugin.py does).
"""

from training.plugins.base import Registration
from training.plugins.par_search import config


def _load():
    from training.plugins.par_search.plugin import ParSearch

    return ParSearch


def _load_report():
    from training.plugins.par_search.report import ParSearchReport

    return ParSearchReport


def _read_architecture(value):
    """--architecture: a finished search run (or its architecture.json/.txt) -> its derived
    string; a name or a string of block letters as it is."""
    import os

    from training.plugins.par_search import derive

    if not (os.path.exists(value) or os.sep in value or value.endswith((".json", ".txt"))):
        return value
    return derive.read_architecture(value)


def _later_runs(train_config):
    """A search with --then_retrain trains its derived network next in <model_dir>_retrain
    (retrain.retrain_config)."""
    import os

    search = getattr(train_config, config.SECTION, None)
    if not (search and search.then_retrain
            and getattr(train_config.model, "architecture", None) == "supernet"):
        return []
    return [os.path.normpath(train_config.model_dir) + "_retrain"]


PLUGIN = Registration(name="par_search", load=_load, section=config.SECTION,
                      config=config.SearchConfig, resumable=config.RESUMABLE,
                      migrate=config.migrate_flat,
                      model_flag_readers={"architecture": _read_architecture},
                      later_runs=_later_runs, report=_load_report)
