"""PAR's second stage: the derived network trained with the search's recipe or its own.

`retrain_config`: its TrainConfig when it runs in the same command
(`--then_retrain`), with its own recipe when --retrain_recipe names one
(`with_recipe`; config.check_started_retrain refuses another one for a second stage
already started); `seed_from_search`: its weights taken from the supernet's
candidates (`--retrain_init=supernet`, `--init_from`); `retrain_command`: the
train.py command the end-of-run summary lists after a search
(`summaries.next_commands`): the run's flags that differ from their defaults and
its model fields that differ from its preset, without the ones the retrain sets
itself or takes from the data or the search.
"""

import os
import re
import shlex

from model.families import get_family
from training.plugins.par_search.config import SECTION
from training.setup.recipes import get_recipe

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
    defaults, model fields that differ from its preset) for a derived retrain; with
    --retrain_recipe, that recipe instead of the values it sets."""
    own = config.search.retrain_recipe
    replaced = set(get_recipe(own).values) | {"recipe"} if own else set()
    flags = [f"--recipe={own}"] if own else []
    for field in type(config).flag_fields():
        value = getattr(config, field.name)
        if field.name in _NOT_RETRAIN_FLAGS or field.metadata["group"] == SECTION \
                or value == field.default or field.name in replaced:
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
        if name in ("architecture", "vocab_size") or name in replaced or value == getattr(
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


def retrain_config(config, architecture):
    """The TrainConfig of PAR's second stage: `architecture` from scratch, the same flags
    otherwise (as `./base_model.sh --architecture=<search run> --arch_warmup_steps=0`),
    in `<model_dir>_retrain` (logs in `<logdir>_retrain` when a logdir is given); the
    search-only settings are reset (a --search_speed_target has chosen `architecture`).
    With --retrain_recipe the second stage trains with that recipe's settings instead
    of the search's (`with_recipe`). With --retrain_epochs it trains that many epochs,
    whatever the search's own length; without it, the --retrain_recipe's or else the
    --recipe's length (training/setup/recipes.py), and without either the search's own."""
    model_dir = os.path.normpath(config.model_dir) + "_retrain"
    logdir = os.path.normpath(config.logdir) + "_retrain" if config.logdir else ""
    search = config.search
    if search.retrain_recipe:
        config = with_recipe(config, search.retrain_recipe)
    if search.retrain_epochs:
        length = {"epochs": search.retrain_epochs, "max_steps": 0}
    elif config.recipe:
        length = {"max_steps": 0, **get_recipe(config.recipe).length}
    else:
        length = {}
    init_from = config.model_dir if search.retrain_init == "supernet" else ""
    return config.replace(
        model=config.model.replace(architecture=architecture), model_dir=model_dir,
        logdir=logdir, search=search.replace(
            arch_warmup_steps=0, then_retrain=False, stop_rule="frozen", retrain_epochs=0,
            retrain_recipe="", retrain_init="scratch", init_from=init_from,
            search_speed_target=0.0), **length)


def with_recipe(config, name, flag="--retrain_recipe"):
    """`config` with the settings and warm-up of recipe `name` (training/setup/recipes.py)
    instead of its own, and `recipe` set to it: the TrainConfig fields and the model
    fields (e.g. dropout) it names. Its other length values (epochs, ...) are left to
    the caller. ValueError naming `flag` for an unknown recipe or a model field the
    config's model does not have."""
    try:
        recipe = get_recipe(name)
    except ValueError as error:
        raise ValueError(f"{flag}={name}: {error}") from None
    values = dict(recipe.settings)
    if "warmup_steps" in recipe.length:
        values["warmup_steps"] = recipe.length["warmup_steps"]
    top = {k: v for k, v in values.items() if hasattr(config, k)}
    model = {k: v for k, v in values.items() if k not in top}
    odd = sorted(k for k in model if not hasattr(config.model, k))
    if odd:
        raise ValueError(f"{flag}={name} sets {odd[0]}, which the model "
                         f"({config.model_family}) does not have: give another recipe, or none")
    return config.replace(recipe=name, model=config.model.replace(**model), **top)


def candidate_key(path):
    """A weight's path as the fixed network names it: a supernet candidate's
    `block_3/attention/...` is the derived network's `block_3_attention/...`;
    the model's own name (which TensorFlow numbers) is dropped."""
    path = path.split("/", 1)[1] if path.startswith("transformer_xllm") else path
    return re.sub(r"^block_(\d+)/([a-z]+)/", r"block_\1_\2/", path)


def seed_from_search(model, search_dir):
    """Gives derived network `model` the weights of its candidates in the supernet of
    search run `search_dir` (its best checkpoint). Returns the checkpoint prefix."""
    import tensorflow as tf

    from model.families import build_model
    from runstore import checkpoints
    from runstore.config import RunConfig

    supernet = build_model(RunConfig.load(search_dir).model, dtype="float32")
    prefix, _ = checkpoints.resolve_checkpoint(search_dir, "best")
    checkpoints.restore_model_variables(supernet, prefix, what=f"the supernet of {search_dir}")
    carried = {candidate_key(v.path): v for v in supernet.weight_variables}
    missing = [v.path for v in model.weight_variables if candidate_key(v.path) not in carried]
    if missing:
        raise ValueError(f"--init_from={search_dir}: its supernet has no weights for "
                         f"{', '.join(missing[:3])}: give the search the architecture came from")
    for v in model.weight_variables:
        v.assign(tf.cast(carried[candidate_key(v.path)], v.dtype))
    return prefix
