"""Checkpoints that make a resumed run continue exactly where it stopped.

A checkpoint (`model_dir/ckpt-<step>.*`, TF's own format, no pickle) holds:
- `model/<i>`: every variable of the model, `model.variables` in order. The
  flat list is deliberate: Keras 3 layers kept in Python lists, and the
  dropout `SeedGenerator` states, are not reached by TensorFlow's object-graph
  tracking, so `tf.train.Checkpoint(model=model)` would silently drop them.
  With the seed-generator states saved, dropout after a resume draws exactly
  the masks the uninterrupted run would have drawn. The Gumbel noise is a
  function of (seed, block, step), and `tau`/`search_step` are model
  variables, so they need nothing more.
- the model's `checkpoint_extras()` when it has them (a supernet's
  `frozen_blocks`, progressive freezing) and the plug-ins'
  `checkpoint_objects()` (the search plug-in's freezing counters, `search`):
  *optional* objects, restored only when the file has them, so checkpoints
  written before they existed keep loading (`restore_optional`).
- `weights_optimizer`, `arch_optimizer`: Keras optimizer variables (moments,
  iteration counters, loss scale).
- `state`: `TrainState` below: step, epoch, position in the training split,
  the run's horizon (the total steps its schedules were planned for at the
  first start), the best validation NLL and its step, the partial sums of the
  current logging interval, and the model's state (`memories`: the per-row state
  tensors of the language-model interface, e.g. Transformer-XL memories or
  LSTM states). They are stored as *global* `[B, ...]` tensors (rows of all
  replicas, in replica order, see `training.strategy.gather_rows`) and split again on restore, so
  the replica
  count may change between save and restore.

The best checkpoint on validation (`model_dir/best/ckpt-<step>.*`) holds the
model variables (and the model's extras) only. Under multi-worker training
every worker takes part in a save (collectives); workers other than the chief write into a scratch
directory that is deleted right away, as tf.distribute requires.

Safety (docs/faults.md):
- Nothing non-finite is saved: `Checkpointer.save` and `save_best` check the
  model's and the optimizers' variables and the memories first and raise
  `NonFiniteError` instead of writing.
- A save that fails (full disk, I/O error) removes what it had written of
  the new checkpoint and raises `run_dir.WriteError`; TensorFlow updates its
  `checkpoint` list only after a complete write, and deletes the oldest
  checkpoint only after that, so the previous checkpoints stay intact.
- Before a checkpoint is used it is verified (`verify`): TensorFlow reads
  every tensor back (index and data checksums), and an optional check looks
  at the content (the trainer: step, data position). `find_good` returns the
  newest checkpoint that passes, with the damaged newer ones and why.
- The public entry points for "which checkpoint" and "load a model's
  weights" are `resolve_checkpoint` and `restore_model_variables`, used by
  the trainer and by serving/ alike.
"""

import os
import shutil

from absl import logging
import numpy as np
import tensorflow as tf

from runstore import run_dir
from training import strategy as strategy_lib

# Kept for callers of the names before runstore/run_dir.py held them.
BEST_DIR = run_dir.BEST_DIR
CHECKPOINT_NAME = run_dir.CHECKPOINT_NAME


class CheckpointError(ValueError):
    """No usable checkpoint, or one that does not fit the model (user-fixable)."""


class NoCheckpoint(CheckpointError):
    """The directory holds no checkpoint at all."""


class NonFiniteError(RuntimeError):
    """The loss, a gradient or a saved variable became NaN or infinite."""


class TrainState(tf.Module):
    """Trainer counters and the model state saved with every checkpoint.

    Create it outside `strategy.scope()`: these are plain host variables,
    never mirrored.

    Args:
        memory_shapes: list of global shapes [B, ...] of the model's state
            tensors (`model.initial_state(B)`).
        memory_dtype: dtype of the state (the compute dtype).
    """

    def __init__(self, memory_shapes, memory_dtype):
        super().__init__(name="train_state")
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        # Records of the training split consumed in the current epoch.
        self.data_position = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_position")
        # Total steps the schedules are planned for, fixed at the first start
        # (0 in checkpoints written before it existed: not restored).
        self.horizon = tf.Variable(0, dtype=tf.int64, trainable=False, name="horizon")
        self.best_valid_nll = tf.Variable(np.inf, dtype=tf.float64, trainable=False,
                                          name="best_valid_nll")
        self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
        self.interval_nll = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                        name="interval_nll")
        self.interval_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name="interval_steps")
        self.memories = [
            tf.Variable(tf.zeros(shape, memory_dtype), trainable=False, name=f"memory_{i}")
            for i, shape in enumerate(memory_shapes)
        ]


def _state_key(name):
    return f"state/{name}/.ATTRIBUTES/VARIABLE_VALUE"


HORIZON_KEY = _state_key("horizon")


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


def state_check(train_records):
    """A `verify` check of a training checkpoint: its step and data position agree.

    A checkpoint `ckpt-<s>` of a split of R records holds
    `step == s == epoch * R + data_position` with `0 <= data_position < R`.
    (That its variables fit the model is checked by the restore itself.)
    """

    def check(reader, prefix):
        try:
            step = int(reader.get_tensor(_state_key("step")))
            epoch = int(reader.get_tensor(_state_key("epoch")))
            position = int(reader.get_tensor(_state_key("data_position")))
        except (tf.errors.OpError, ValueError) as error:
            return f"{prefix}.index lacks the trainer state ({run_dir.reason(error)})"
        expected = run_dir.checkpoint_step(prefix)
        if step != expected:
            return f"{prefix}.index holds step {step}, not {expected}"
        if not 0 <= position < train_records or epoch * train_records + position != step:
            return (f"{prefix}: data position {position} of epoch {epoch} does not match "
                    f"step {step} with {train_records} training records (was the data "
                    "rebuilt?)")
        return None

    return check


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


def saved_horizon(path):
    """The horizon stored in a checkpoint (a prefix, or a directory: its newest).

    Read before the trainer is built, so that a resumed run plans its
    learning rate, temperature and warm-ups for the steps it started with.

    Returns:
        int > 0, or None when there is no checkpoint or it predates the
        horizon.
    """
    if path is not None and os.path.isdir(path):
        found = checkpoints(path)
        path = found[0] if found else None
    if path is None:
        return None
    reader = tf.train.load_checkpoint(path)
    if not reader.has_tensor(HORIZON_KEY):
        return None
    return int(reader.get_tensor(HORIZON_KEY)) or None


class _VariableList(tf.Module):
    """A trackable flat list of variables (see the module docstring)."""

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
    return {"model": _VariableList(model.variables)}, dict(extras)


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
    return tf.train.Checkpoint(model=_VariableList(model.variables))


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


def non_finite_variables(variables):
    """Names of the float variables holding a NaN or an infinity."""
    bad = []
    for v in variables:
        if not tf.as_dtype(v.dtype).is_floating:
            continue
        if not bool(tf.reduce_all(tf.math.is_finite(v))):
            bad.append(getattr(v, "path", None) or v.name)
    return bad


class Checkpointer:
    """Saves and restores the whole training state of a run.

    Args:
        model_dir: run directory.
        model: the built language model.
        optimizers: dict name -> built Keras optimizer (e.g.
            {"weights_optimizer": ..., "arch_optimizer": ...}).
        state: TrainState.
        keep: number of last checkpoints kept (at least 2, so that a damaged
            newest one leaves one to resume from).
        extras: dict name -> trackable saved with every checkpoint and
            restored when present (e.g. the plug-ins' `checkpoint_objects`).
        strategy: the tf.distribute strategy (decides who writes).
    """

    def __init__(self, model_dir, model, optimizers, state, keep, strategy, extras=None):
        self.model_dir = model_dir
        self.state = state
        self.keep = max(int(keep), 2)
        self._chief = strategy_lib.is_chief(strategy)
        self._worker = strategy_lib.worker_id(strategy)
        self._model = model
        self._optimizers = optimizers
        model_required, model_optional = model_objects(model)
        self._required = {**model_required, "state": state, **optimizers}
        self._optional = {**model_optional, **dict(extras or {})}
        self._best_required, self._best_optional = model_required, model_optional
        self.checkpoint = tf.train.Checkpoint(**self._required, **self._optional)
        self.best_checkpoint = tf.train.Checkpoint(**model_required, **model_optional)
        # Made on first save: after a restore has set damaged checkpoints aside.
        self._manager = None
        self._best_manager = None
        self.last_saved_step = None

    def _write_dir(self, directory):
        if self._chief:
            return directory
        return os.path.join(directory, f"{run_dir.WORKER_SCRATCH_PREFIX}{self._worker}_scratch")

    @property
    def manager(self):
        """The tf.train.CheckpointManager of model_dir (this worker's write directory)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.checkpoint, self._write_dir(self.model_dir), max_to_keep=self.keep,
                checkpoint_name=CHECKPOINT_NAME)
        return self._manager

    def _best(self):
        if self._best_manager is None:
            self._best_manager = tf.train.CheckpointManager(
                self.best_checkpoint,
                self._write_dir(os.path.join(self.model_dir, run_dir.BEST_DIR)),
                max_to_keep=1, checkpoint_name=CHECKPOINT_NAME)
        return self._best_manager

    @property
    def latest(self):
        """Path prefix of the newest checkpoint in model_dir, or None."""
        found = checkpoints(self.model_dir)
        return found[0] if found else None

    @property
    def best(self):
        """Path prefix of the best checkpoint, or None."""
        found = checkpoints(os.path.join(self.model_dir, run_dir.BEST_DIR))
        return found[0] if found else None

    def restore(self, prefix):
        """Restores the whole training state from a checkpoint prefix; returns its step.

        Raises:
            AssertionError (from TensorFlow): the checkpoint does not match
                the model (different architecture or sizes).
        """
        restored = restore_optional(prefix, self._required, self._optional)
        # The manager numbers files with the counter of the checkpoint it saves.
        self.checkpoint.save_counter.assign(restored.save_counter)
        step = int(self.state.step.numpy())
        self.last_saved_step = step
        logging.info("restored %s (step %d)", prefix, step)
        return step

    def restore_best_model(self):
        """Loads the best checkpoint's weights into the model.

        Returns:
            The path restored, or None when no good best checkpoint exists
            (a damaged one is logged and skipped).
        """
        path, damaged = find_good(os.path.join(self.model_dir, run_dir.BEST_DIR))
        for _, problem in damaged:
            logging.warning("the best checkpoint is damaged: %s; not used", problem)
        if path is None:
            return None
        restored = restore_optional(path, self._best_required, self._best_optional)
        self.best_checkpoint.save_counter.assign(restored.save_counter)
        return path

    def _check_finite(self, variables, what):
        bad = non_finite_variables(variables)
        if bad:
            step = int(self.state.step.numpy())
            shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
            raise NonFiniteError(
                f"at step {step} the {what} became non-finite ({shown}): not saved; the last "
                f"checkpoint ({self.latest}) is intact")

    def save(self, memories):
        """Saves a checkpoint at the current step.

        Args:
            memories: list of global state tensors [B, ...] (gathered from
                the replicas), copied into the state first.

        Returns:
            The path written (on the chief), else None.

        Raises:
            NonFiniteError: a variable or a memory holds NaN/inf (nothing written).
            run_dir.WriteError: the write failed (the new checkpoint's files
                are removed; the previous checkpoints are intact).
        """
        self._check_finite(self._model.variables, "model weights")
        self._check_finite([v for o in self._optimizers.values() for v in o.variables],
                           "optimizer state")
        self._check_finite(memories, "model state (memories)")
        for variable, value in zip(self.state.memories, memories):
            variable.assign(value)
        step = int(self.state.step.numpy())
        path = self._save(self.manager, step)
        self.last_saved_step = step
        return self._finish(self.manager, path, "checkpoint")

    def save_best(self):
        """Saves the model weights as the best checkpoint (same guarantees as `save`)."""
        self._check_finite(self._model.variables, "model weights")
        step = int(self.state.step.numpy())
        manager = self._best()
        path = self._save(manager, step)
        return self._finish(manager, path, "best checkpoint")

    def _save(self, manager, step):
        try:
            return manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as error:
            removed = remove_partial(manager.directory, step)
            if removed:
                logging.info("removed the partial checkpoint files %s", ", ".join(removed))
            raise run_dir.WriteError(run_dir.checkpoint_prefix(manager.directory, step),
                                     run_dir.reason(error)) from None

    def _finish(self, manager, path, what):
        if not self._chief:
            shutil.rmtree(manager.directory, ignore_errors=True)
            return None
        logging.info("saved %s %s", what, path)
        return path


def remove_partial(directory, step):
    """Removes the files of an unfinished save of `ckpt-<step>` in `directory`.

    Called after a failed save: the checkpoint is not in TensorFlow's list,
    and its files (if any) are incomplete.

    Returns:
        The names removed.
    """
    base = f"{CHECKPOINT_NAME}-{int(step)}"
    listed = {os.path.basename(p) for p in _listed(directory)}
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if base in listed and not name.startswith(base + "_temp"):
            continue  # a listed (complete) checkpoint of that step: keep it
        if name.startswith(base + ".") or name.startswith(base + "_temp"):
            path = os.path.join(directory, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except OSError:
                    continue
            removed.append(name)
    return removed


def clear_run(model_dir, logdir=None):
    """Deletes the artifacts of a previous run (for --overwrite).

    Only files this trainer writes are removed; anything else the user put in
    model_dir stays.

    Args:
        model_dir: run directory.
        logdir: TensorBoard directory of the run; its split writers' event
            files are removed too.
    """
    if not os.path.isdir(model_dir):
        return
    from training import plugins

    names = (*run_dir.trainer_files(), *plugins.run_files())
    for name in os.listdir(model_dir):
        path = os.path.join(model_dir, name)
        if name in (run_dir.BEST_DIR, run_dir.DATA_DIR) or name.startswith(
                run_dir.WORKER_SCRATCH_PREFIX):
            shutil.rmtree(path, ignore_errors=True)
        elif name in names or run_dir.is_checkpoint_artifact(name):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
    run_dir.remove_temporaries(model_dir)
    if logdir:
        for split in ("train", "valid", "test"):
            shutil.rmtree(os.path.join(logdir, split), ignore_errors=True)
