"""The train.py command that retrains a search's derived network with the search's recipe.

The end-of-run summary lists it after a PAR search (`summaries.next_commands`):
the run's flags that differ from their defaults and its model fields that
differ from its preset, without the ones the retrain sets itself or takes from
the data or the search.
"""

import os
import shlex

from model.families import get_family
from training.plugins.par_search.config import SECTION

# Fields the retrain command sets itself, or that come from the data or the search.
_NOT_RETRAIN_FLAGS = frozenset({"data_dir", "model_dir", "model", "logdir", "preset",
                                "batch_size", "seq_len", "eval_mem_len", "max_steps"})


def _flag_value(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "none"
    return str(value)


def retrain_flags(config):
    """train.py flags that repeat the run's recipe (its values that differ from the
    defaults, model fields that differ from its preset) for a derived retrain."""
    flags = []
    for field in type(config).flag_fields():
        value = getattr(config, field.name)
        if field.name in _NOT_RETRAIN_FLAGS or field.metadata["group"] == SECTION \
                or value == field.default:
            continue
        if isinstance(value, bool):
            flags.append(f"--{'' if value else 'no'}{field.name}")
        else:
            flags.append(f"--{field.name}={_flag_value(value)}")
    if config.max_steps:
        flags.append(f"--max_steps={config.max_steps}")
    preset = get_family(config.model_family).preset_config(
        config.preset, vocab_size=config.model.vocab_size)
    for name, value in config.model.to_dict().items():
        if name in ("architecture", "vocab_size") or value == getattr(
                preset, name) or _flag_value(value) == _flag_value(getattr(preset, name)):
            continue
        if isinstance(value, bool):
            flags.append(f"--{'' if value else 'no'}{name}")
        elif value is not None:
            flags.append(f"--{name}={_flag_value(value)}")
    return flags


def retrain_command(config):
    """`python3 train.py ...` training the derived network of the search run `config`
    into <model_dir>_derived (shell-quoted)."""
    quote = shlex.quote
    derived = quote(os.path.normpath(config.model_dir) + "_derived")
    recipe = " ".join(quote(flag) for flag in retrain_flags(config))
    return (f"python3 train.py --data_dir={quote(config.data_dir)} "
            f"--model_dir={derived} --preset={config.preset} "
            f"--architecture={quote(config.model_dir)} --arch_warmup_steps=0 {recipe}")
