"""Finding, verifying, repairing and restoring the checkpoints of a run directory.

The trainer (`training.run.checkpoint.Checkpointer`) writes the checkpoints;
this module is what both the trainer and serving need to *use* them:

- which checkpoints a directory holds (`checkpoints`, `listed_steps`,
  `unfinished`), newest first, whether or not TensorFlow's `checkpoint` list
  is intact;
- whether one is whole (`verify`: TensorFlow reads every tensor back, index
  and data checksums; an optional check looks at the content) and the newest
  good one (`find_good`);
- repairs: a damaged checkpoint set aside (`set_aside`), the list rewritten
  (`rewrite_list`), the files of a failed save removed (`remove_partial`);
- "which checkpoint" (`resolve_checkpoint`: best, latest or a path) and
  "load a model's weights" (`restore_model_variables`), the model-only restore
  that serving uses.

A checkpoint stores the model's variables flat under `model/<i>`
(`VariableList`, see training/run/checkpoint.py for why) and the model's optional
`checkpoint_extras()`; other objects in the file (optimizers, trainer state)
are ignored by the model-only restore.
"""

import os

import tensorflow as tf

from runstore import run_dir


class CheckpointError(ValueError):
    """No usable checkpoint, or one that does not fit the model (user-fixable)."""


class NoCheckpoint(CheckpointError):
    """The directory holds no checkpoint at all."""


# ----------------------------------------------------------- finding checkpoints


def _listed(directory):
    """Prefixes named by TensorFlow's `checkpoint` file (unreadable: none)."""
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):
        return []
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    return [p if os.path.isabs(p) else os.path.join(directory, p) for p in paths if p]


def listed_steps(directory):
    """The steps of the checkpoints TensorFlow's `checkpoint` file lists (complete saves).

    Returns:
        Sorted steps ([] when there is no such file: no save ever completed),
        or None when the file is there but unreadable.
    """
    state = os.path.join(directory, run_dir.CHECKPOINT_STATE)
    if not os.path.exists(state):
        return []
    try:
        if tf.train.get_checkpoint_state(directory) is None:
            return None
    except (tf.errors.OpError, ValueError):
        return None
    steps = (run_dir.checkpoint_step(p) for p in _listed(directory))
    return sorted(s for s in steps if s is not None)


def unfinished(directory, prefix, listed):
    """True for a checkpoint newer than every listed one (`listed_steps`): its save
    never completed (TensorFlow lists a checkpoint once its files are written)."""
    if listed is None:
        return False  # the list itself is damaged: nothing can be told
    return not listed or run_dir.checkpoint_step(prefix) > max(listed)


def checkpoints(directory):
    """The checkpoint prefixes of `directory`, newest (highest step) first.

    Both the ones TensorFlow's `checkpoint` file lists and every
    `ckpt-<step>.index` present: the list file may be damaged, or a save may
    have finished its files just before the process died.
    """
    steps = set()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        step = run_dir.checkpoint_file_step(name)
        if step is not None and name.endswith(".index"):
            steps.add(step)
    for path in _listed(directory):
        step = run_dir.checkpoint_step(path)
        if step is not None and os.path.dirname(os.path.abspath(path)) == os.path.abspath(
                directory):
            steps.add(step)
    return [run_dir.checkpoint_prefix(directory, s) for s in sorted(steps, reverse=True)]


def _data_files(prefix):
    directory, base = os.path.split(prefix)
    try:
        return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                      if n.startswith(base + ".data-"))
    except OSError:
        return []


def verify(prefix, check=None):
    """Reads a whole checkpoint back; returns None if it is good, else what is wrong.

    TensorFlow reads the index (block checksums) and every tensor (each
    tensor's checksum), so a truncated or corrupted file is found.

    Args:
        prefix: `dir/ckpt-<step>`.
        check: optional `check(reader, prefix)` returning a problem (str) or
            None, for what the content must satisfy.

    Returns:
        None, or one line naming the damaged file and the error.
    """
    index = prefix + ".index"
    if not os.path.exists(index):
        return f"{index} is missing"
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError, IndexError, OSError) as error:
        return f"{index} is damaged ({run_dir.reason(error)})"
    try:
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError, OSError) as error:
        data = _data_files(prefix)
        where = data[0] if len(data) == 1 else f"the data files of {prefix}"
        if not data:
            where = f"{prefix}.data-00000-of-00001 (missing)"
        return f"{where} is damaged ({run_dir.reason(error)})"
    if check is not None:
        return check(reader, prefix)
    return None


def find_good(directory, check=None):
    """The newest checkpoint of `directory` that `verify` accepts.

    Returns:
        (prefix or None, list of (prefix, problem) of the newer damaged ones).
    """
    damaged = []
    for prefix in checkpoints(directory):
        problem = verify(prefix, check)
        if problem is None:
            return prefix, damaged
        damaged.append((prefix, problem))
    return None, damaged


def set_aside(prefix):
    """Renames the files of a damaged checkpoint to `<name>.damaged` (kept, not used).

    Returns:
        The new paths.
    """
    directory, base = os.path.split(prefix)
    moved = []
    for name in sorted(os.listdir(directory)):
        if name == base + ".index" or name.startswith(base + ".data-"):
            target = os.path.join(directory, name + run_dir.DAMAGED_SUFFIX)
            os.replace(os.path.join(directory, name), target)
            moved.append(target)
    return moved


def rewrite_list(directory):
    """Makes TensorFlow's `checkpoint` file list the checkpoints present, oldest first."""
    present = [p for p in reversed(checkpoints(directory)) if os.path.exists(p + ".index")]
    if not present:
        state = os.path.join(directory, run_dir.CHECKPOINT_STATE)
        if os.path.exists(state):
            os.remove(state)
        return
    # With their times, so that the CheckpointManager deletes them in turn
    # (--keep_checkpoints) as it does the ones it wrote itself.
    times = [os.path.getmtime(p + ".index") for p in present]
    tf.compat.v1.train.update_checkpoint_state(
        directory, present[-1], all_model_checkpoint_paths=present,
        all_model_checkpoint_timestamps=times, last_preserved_timestamp=min(times) - 1.0)


def describe_damage(damaged):
    return "; ".join(problem for _, problem in damaged)


def resolve_checkpoint(model_dir, which="best"):
    """The checkpoint prefix of a run to load, after verifying it.

    Args:
        model_dir: a run directory.
        which: "best" (model_dir/best; the newest good one when there is no
            best yet or it is damaged), "latest" (the newest good one), or a
            path: a `ckpt-<step>` prefix (absolute or in model_dir) or a
            directory holding checkpoints.

    Returns:
        (prefix, warnings): warnings are lines for the user (e.g. a damaged
        newer checkpoint that was passed over, naming its file).

    Raises:
        CheckpointError: none found, the named one is damaged, or every
            candidate is damaged; the message names the files and the fix.
    """
    model_dir = os.fspath(model_dir)
    warnings = []
    if which in ("best", "latest"):
        if which == "best":
            best_dir = os.path.join(model_dir, run_dir.BEST_DIR)
            path, damaged = find_good(best_dir)
            for _, problem in damaged:
                warnings.append(f"the best checkpoint is damaged: {problem}; using the latest "
                                "good checkpoint instead")
            if path is not None:
                return path, warnings
        path, damaged = find_good(model_dir)
        for prefix, problem in damaged:
            warnings.append(f"skipping {os.path.basename(prefix)}: {problem}")
        if path is None:
            if damaged:
                raise CheckpointError(
                    f"every checkpoint in {model_dir} is damaged ({describe_damage(damaged)}): "
                    "restore the files, or train again (train.py --overwrite)")
            raise NoCheckpoint(f"no checkpoint in {model_dir}")
        if which == "best" and not any("best checkpoint" in w for w in warnings):
            warnings.append(f"{model_dir} has no best checkpoint (no evaluation yet): using the "
                            f"latest, {path}")
        return path, warnings
    for candidate in (which, os.path.join(model_dir, which)):
        if os.path.isdir(candidate):
            path, damaged = find_good(candidate)
            warnings.extend(f"skipping {os.path.basename(p)}: {problem}" for p, problem in damaged)
            if path is not None:
                return path, warnings
            if damaged:
                raise CheckpointError(f"every checkpoint in {candidate} is damaged "
                                      f"({describe_damage(damaged)})")
        elif os.path.isfile(candidate + ".index"):
            problem = verify(candidate)
            if problem:
                raise CheckpointError(f"checkpoint {candidate}: {problem}; choose another "
                                      "(--checkpoint=latest falls back to the newest good one)")
            return candidate, warnings
    raise CheckpointError(
        f"checkpoint {which!r} not found: use best, latest, a ckpt-<step> prefix "
        f"(absolute or in {model_dir}) or a directory holding a 'checkpoint' file")


class VariableList(tf.Module):
    """A trackable flat list of variables, saved as `model/<i>` (see the module docstring)."""

    def __init__(self, variables):
        super().__init__(name="model_variables")
        self.variables_list = [getattr(v, "value", v) for v in variables]

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # Index keys ("model/0", "model/1", ...) keep the checkpoint readable.
        return {str(i): v for i, v in enumerate(self.variables_list)}


def _top_level_names(path):
    """Names of the objects saved at the top of checkpoint `path` ("model", "state", ...)."""
    reader = tf.train.load_checkpoint(path)
    return {key.split("/", 1)[0] for key in reader.get_variable_to_shape_map()}


def restore_optional(path, required, optional):
    """Restores checkpoint `path` into `required` objects and those `optional` ones it holds.

    Args:
        path: checkpoint prefix.
        required: dict name -> trackable that must all be in the file.
        optional: dict name -> trackable restored only when the file has it
            (objects newer than the checkpoint keep their values).

    Returns:
        The `tf.train.Checkpoint` restored (its `save_counter` is the file's).

    Raises:
        AssertionError (from TensorFlow): a required object does not match.
    """
    present = _top_level_names(path)
    found = {k: v for k, v in optional.items() if k in present}
    checkpoint = tf.train.Checkpoint(**required, **found)
    checkpoint.restore(path).assert_existing_objects_matched()
    return checkpoint


def model_objects(model):
    """The checkpoint objects of a model: {"model": its variables} and its optional extras."""
    extras = getattr(model, "checkpoint_extras", dict)()
    return {"model": VariableList(model.variables)}, dict(extras)


def restore_model(model, path):
    """Restores a model's variables (and extras the file has) from checkpoint `path`.

    Works for the trainer's checkpoints and its best checkpoints (other
    objects in the file are ignored).

    Raises:
        AssertionError (from TensorFlow): the checkpoint does not fit the model.
    """
    required, optional = model_objects(model)
    present = _top_level_names(path)
    found = {k: v for k, v in optional.items() if k in present}
    status = tf.train.Checkpoint(**required, **found).restore(path)
    status.assert_existing_objects_matched().expect_partial()
    return path


def model_checkpoint(model):
    """A `tf.train.Checkpoint` of the model's variables as saved under `model/`
    (without the model's optional extras: `model_objects`)."""
    return tf.train.Checkpoint(model=VariableList(model.variables))


def restore_model_variables(model, prefix, what="the model"):
    """Loads a checkpoint's `model/<i>` variables into a built model.

    Works with the full training checkpoints and the best ones (the
    optimizer and trainer state, if present, is ignored), and restores the
    model's optional extras the file holds (a supernet's frozen blocks).

    Args:
        model: the built model.
        prefix: checkpoint prefix.
        what: how the error message names the model.

    Raises:
        CheckpointError: the checkpoint does not fit the model (other
            architecture or sizes), naming the checkpoint.
    """
    try:
        restore_model(model, prefix)
    except (AssertionError, ValueError, tf.errors.OpError, IndexError) as error:
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        raise CheckpointError(f"checkpoint {prefix} does not fit {what} ({first})") from None
    return prefix


def remove_partial(directory, step):
    """Removes the files of an unfinished save of `ckpt-<step>` in `directory`.

    Called after a failed save: the checkpoint is not in TensorFlow's list,
    and its files (if any) are incomplete.

    Returns:
        The names removed.
    """
    base = f"{run_dir.CHECKPOINT_NAME}-{int(step)}"
    listed = base in {os.path.basename(p) for p in _listed(directory)}

    def wanted(name):
        if name.startswith(base + "_temp"):
            return True
        # A listed (complete) checkpoint of that step is kept.
        return name.startswith(base + ".") and not listed

    return run_dir.remove_entries(directory, wanted)
