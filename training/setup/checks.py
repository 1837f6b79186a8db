"""The checks of a TrainConfig that need more than the config itself, made before
anything is written, each raising `ConfigError` naming the flag and the fix:
against the built data's meta.json (`check_data`), the replicas of the strategy
(`check_replicas`, with `training.setup.config.check_batch_split`) and the run
directory: a path that can become a directory (`check_model_dir`) and a
previous run there, which a run resumes only with the same config but for the
fields a resumed run may change (`check_resume`, `incompatible_fields`,
`RESUMABLE_FIELDS` and the plug-ins' resumable section fields).
"""

import os

from model.config_base import cutoffs_problem
from runstore.errors import ConfigError
from runstore.run_dir import CONFIG_FILE
from training import plugins
from training.setup.config import TrainConfig, check_batch_split, total_steps

SPLITS = ("train", "valid", "test")

# Fields that may change when a run is resumed: how long it runs, how often it
# evaluates, saves and logs (and the fields of the plug-ins' sections each
# registration names: `resumable_fields`). Everything else must match the saved config.
RESUMABLE_FIELDS = frozenset({
    "epochs", "max_steps", "eval_interval", "eval_max_records", "eval_mem_len",
    "sample_tokens", "checkpoint_interval", "keep_checkpoints", "log_interval",
    "logdir", "batch_split", "checkpoint_every_minutes", "on_nonfinite", "max_nonfinite_steps",
    "early_stop", "plan_steps",
})


def resumable_fields():
    """RESUMABLE_FIELDS and the registered plug-ins' resumable section fields, dotted
    ("search.freeze_threshold")."""
    return RESUMABLE_FIELDS | {f"{r.section}.{name}" for r in plugins.registrations()
                               if r.section for name in r.resumable}


def check_data(config, meta):
    """Checks the config against the built data's meta.json.

    Args:
        config: TrainConfig.
        meta: dict from data_utils.load_meta.

    Raises:
        ConfigError: naming the flag and the fix.
    """
    where = f"the data in {config.data_dir}"
    for split in SPLITS:
        if split not in meta.get("splits", {}):
            raise ConfigError(f"{where} has no '{split}' split: rebuild it with build_data.py")
        if meta["splits"][split].get("records", 0) < 1:
            raise ConfigError(
                f"{where}: split '{split}' has no complete record (batch_size x seq_len too "
                "large for it): rebuild with a smaller --batch_size or --seq_len")
    if config.seq_len != meta["seq_len"]:
        raise ConfigError(
            f"--seq_len={config.seq_len} but {where} was built with seq_len={meta['seq_len']}: "
            "drop --seq_len or rebuild the data with build_data.py --seq_len")
    if config.batch_size != meta["batch_size"]:
        raise ConfigError(
            f"--batch_size={config.batch_size} but {where} was built with batch_size="
            f"{meta['batch_size']}: drop --batch_size or rebuild the data with that batch size")
    vocab = meta["vocab_size"]
    cutoffs = getattr(config.model, "cutoffs", ())
    if cutoffs_problem(cutoffs, vocab):
        raise ConfigError(
            f"--cutoffs={','.join(map(str, cutoffs))} do not fit the data's vocab_size={vocab} "
            "(each cutoff must be in [1, vocab_size)): use --cutoffs=auto or --cutoffs=none")
    if config.model.vocab_size != vocab:
        raise ConfigError(
            f"the model's vocab_size={config.model.vocab_size} differs from {where} "
            f"(vocab_size={vocab}); vocab_size always comes from the data")
    steps = total_steps(config, meta["splits"]["train"]["records"])
    if config.plan_steps and config.plan_steps < steps:
        raise ConfigError(
            f"--plan_steps={config.plan_steps} plans the schedules for fewer steps than the "
            f"run takes ({steps}): give --plan_steps of at least {steps} (the longer run this "
            "one begins), or drop it")
    # The plug-ins' sections check what depends on the run's planned length and model.
    steps = config.plan_steps or steps
    for section in config.sections.values():
        check = getattr(section, "check_run", None)
        if check is not None:
            try:
                check(config, steps)
            except ValueError as error:
                raise ConfigError(str(error)) from None


def check_replicas(config, meta, num_replicas):
    """Checks that every split's batch splits evenly over the replicas, and the
    training batch of each replica into --batch_split micro-batches.

    Raises:
        ConfigError: naming --strategy / --num_cpu_replicas / --batch_split and
            the fix.
    """
    for split in SPLITS:
        batch = meta["splits"][split].get("batch_size", meta["batch_size"])
        if batch % num_replicas:
            raise ConfigError(
                f"batch size {batch} of split '{split}' is not divisible by the "
                f"{num_replicas} replicas of --strategy={config.strategy}"
                + (f" --num_cpu_replicas={config.num_cpu_replicas}"
                   if config.num_cpu_replicas else "")
                + ": use a replica count that divides it or rebuild the data with "
                "build_data.py --batch_size")
    train_batch = meta["splits"]["train"].get("batch_size", meta["batch_size"])
    check_batch_split(config, train_batch // num_replicas, num_replicas)


def incompatible_fields(old, new):
    """Fields (dotted for the model and the sections) that differ and forbid resuming.

    Args:
        old, new: TrainConfig.

    Returns:
        Sorted list of field names outside RESUMABLE_FIELDS whose values differ.
    """
    old_d, new_d = old.to_dict(), new.to_dict()
    # The same directory may be spelled differently (relative, symlinked).
    del old_d["model_dir"], new_d["model_dir"]
    for name in ("data_dir", "init_weights"):
        for values in (old_d, new_d):
            if values.get(name):
                values[name] = os.path.realpath(values[name])
    nested = ("model", *new.sections)
    resumable = resumable_fields()
    diff = [k for k in new_d if k not in nested and k not in resumable
            and old_d.get(k) != new_d[k]]
    for name in nested:
        diff += [f"{name}.{k}" for k in new_d[name] if f"{name}.{k}" not in resumable
                 and old_d.get(name, {}).get(k) != new_d[name][k]]
    return sorted(diff)


def check_model_dir(config):
    """Raises ConfigError unless --model_dir is a directory or can become one.

    An existing file at the path, or at one of its parents, is refused
    before anything is written (the run directory would not be creatable).
    """
    path = os.path.abspath(config.model_dir)
    while True:
        if os.path.exists(path):
            if os.path.isdir(path):
                return
            what = ("is an existing file" if path == os.path.abspath(config.model_dir)
                    else f"is inside {path}, an existing file")
            raise ConfigError(f"--model_dir={config.model_dir} {what}, not a directory: choose "
                              "a directory for the run (e.g. runs/<name>)")
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def check_resume(config, overwrite=False):
    """Checks that model_dir is empty, holds a compatible run, or may be overwritten.

    Args:
        config: TrainConfig of the new run.
        overwrite: the user passed --overwrite.

    Returns:
        True when a previous run with a compatible config exists (resume),
        False otherwise (fresh start; with overwrite the old run is discarded).

    Raises:
        ConfigError: incompatible or unreadable previous config and no overwrite.
    """
    path = os.path.join(config.model_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return False
    if overwrite:
        return False
    try:
        old = TrainConfig.load(config.model_dir)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"--model_dir={config.model_dir} holds an unreadable {CONFIG_FILE} ({error}): "
            "pass --overwrite to start a new run there or choose another --model_dir") from None
    if old.model_family != config.model_family:
        raise ConfigError(
            f"--model_dir={config.model_dir} holds a {old.model_family} run, which "
            f"--model_family={config.model_family} cannot resume: use "
            f"--model_family={old.model_family} to resume it, --overwrite to start over, or "
            "another --model_dir")
    diff = incompatible_fields(old, config)
    if diff:
        shown = ", ".join(
            f"{k}: {_value_at(old, k)!r} -> {_value_at(config, k)!r}" for k in diff[:6])
        raise ConfigError(
            f"--model_dir={config.model_dir} holds a run with a different config ({shown}"
            f"{', ...' if len(diff) > 6 else ''}): pass --overwrite to start over, or use "
            "another --model_dir")
    return True


def _value_at(config, dotted):
    """The value of field `dotted` of a config ("seq_len", or "search.tau_start" in a section)."""
    if "." in dotted:
        section, name = dotted.split(".", 1)
        return getattr(getattr(config, section), name)
    return getattr(config, dotted)
