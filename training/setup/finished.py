"""A command whose runs all finished earlier, answered from their files (no TensorFlow).

Running a finished training command again (`./base_model.sh`, `--pipeline`) should say
so at once, not load TensorFlow, evaluate every split again and rewrite metrics.json,
the plots and the TensorBoard events. A command is finished when its run directory
holds a config.json equal to the command's config and a metrics.json at the planned
end (or where a plug-in ended it by design), and so does every stage the plug-ins
train after it in the same command (`training.plugins.later_runs`: the search's
retrain). A changed setting (e.g. a longer --max_steps) makes it unfinished: the run
resumes as before.
"""

import json
import os

from runstore.progress import is_run_dir, run_progress
from runstore.run_dir import METRICS_FILE
from training import plugins
from training.setup.config import TrainConfig


def _finished(model_dir, config=None):
    """metrics.json of a run that ended at its planned step (or by design), else None;
    with `config`, also None unless the run's config.json equals it."""
    if not is_run_dir(model_dir):
        return None
    try:
        if config is not None and TrainConfig.load(model_dir) != config:
            return None
        progress = run_progress(model_dir)
        if not progress.finished:
            return None
        with open(os.path.join(model_dir, METRICS_FILE), encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: training decides (and says) what to do
    at_end = progress.planned is None or progress.step >= progress.planned
    by_design = results.get("ended_by_plugin") or results.get("early_stopped")
    return results if at_end or by_design else None


def finished_run(config):
    """metrics.json of `config`'s run when it finished earlier with this config, else None
    (its later stages may not have)."""
    return _finished(config.model_dir, config)


def finished_command(config, overwrite=False):
    """(results, final model_dir) of a command that finished earlier, or None.

    `results` is the first run's metrics.json (the plug-ins' later stages are in it,
    e.g. the search's "retrain"); the final model_dir is the last stage's, the one an
    --export packages.
    """
    if overwrite:
        return None
    results = _finished(config.model_dir, config)
    if results is None:
        return None
    later = plugins.later_runs(config)
    if any(_finished(model_dir) is None for model_dir in later):
        return None
    return results, (later[-1] if later else config.model_dir)
