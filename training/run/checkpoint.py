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
- `weight_average` (only with --ema_decay): the moving averages of the
  weights, `weight_average/<i>` in the order of the weights group, and their
  update counter (training/run/ema.py). Runs without it write nothing more.
- `state`: `TrainState` below: step, epoch, position in the training split,
  the run's horizon (the total steps its schedules were planned for at the
  first start), the best validation NLL and its step, the partial sums of the
  current logging interval, and the model's state (`memories`: the per-row state
  tensors of the language-model interface, e.g. Transformer-XL memories or
  LSTM states). They are stored as *global* `[B, ...]` tensors (rows of all
  replicas, in replica order, see `pardata.replicas.gather_rows`) and split again on restore, so
  the replica
  count may change between save and restore.

The best checkpoint on validation (`model_dir/best/ckpt-<step>.*`) holds the
model variables (and the model's extras) only: with --ema_decay the weights it
was evaluated with, the averages (the host loop saves it with them swapped in).
Under multi-worker training every worker takes part in a save (collectives);
workers other than the chief write into a scratch directory that is deleted
right away, as tf.distribute requires.

Safety (docs/faults.md):
- Nothing non-finite is saved: `Checkpointer.save` and `save_best` check the
  model's and the optimizers' variables and the memories first and raise
  `NonFiniteError` instead of writing.
- A save that fails (full disk, I/O error) removes what it had written of
  the new checkpoint and raises `run_dir.WriteError`; TensorFlow updates its
  `checkpoint` list only after a complete write, and deletes the oldest
  checkpoint only after that, so the previous checkpoints stay intact.
- Before a checkpoint is used it is verified (`runstore.checkpoints.verify`):
  TensorFlow reads every tensor back (index and data checksums), and the
  trainer's check (`state_check`) looks at the content (step, data position).

Finding, verifying, repairing and the model-only restore live in the run
store (`runstore.checkpoints`), shared with serving; this module keeps what
only the trainer needs: the `Checkpointer`, its `TrainState` and the checks
of its content.
"""

import os
import shutil

from absl import logging
import numpy as np
import tensorflow as tf

from runstore import run_dir
from runstore.checkpoints import (
    checkpoints,
    find_good,
    model_objects,
    remove_partial,
    restore_optional,
)
from training.run import strategy as strategy_lib


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
        weight_average: the run's `ema.WeightAverage` (--ema_decay), saved and
            restored with every checkpoint (not the best one), or None.
    """

    def __init__(self, model_dir, model, optimizers, state, keep, strategy, extras=None,
                 weight_average=None):
        self.model_dir = model_dir
        self.state = state
        self.keep = max(int(keep), 2)
        self._chief = strategy_lib.is_chief(strategy)
        self._worker = strategy_lib.worker_id(strategy)
        self._model = model
        self._optimizers = optimizers
        model_required, model_optional = model_objects(model)
        self._required = {**model_required, "state": state, **optimizers}
        self._averages = []
        if weight_average is not None:
            self._required["weight_average"] = weight_average
            self._averages = list(weight_average.averages)
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
                checkpoint_name=run_dir.CHECKPOINT_NAME)
        return self._manager

    def _best(self):
        if self._best_manager is None:
            self._best_manager = tf.train.CheckpointManager(
                self.best_checkpoint,
                self._write_dir(os.path.join(self.model_dir, run_dir.BEST_DIR)),
                max_to_keep=1, checkpoint_name=run_dir.CHECKPOINT_NAME)
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
        self._check_finite(self._averages, "moving average of the weights")
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
