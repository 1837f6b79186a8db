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
  LSTM states). They are stored as *global* `[B, ...]` tensors (rows of all replicas, in replica order, see
  `training.strategy.gather_rows`) and split again on restore, so the replica
  count may change between save and restore.

The best checkpoint on validation (`model_dir/best/ckpt-<step>.*`) holds the
model variables (and the model's extras) only. Under multi-worker training every worker takes part in
a save (collectives); workers other than the chief write into a scratch
directory that is deleted right away, as tf.distribute requires.
"""

import os
import shutil

from absl import logging
import numpy as np
import tensorflow as tf

from training import strategy as strategy_lib

BEST_DIR = "best"
CHECKPOINT_NAME = "ckpt"


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


HORIZON_KEY = "state/horizon/.ATTRIBUTES/VARIABLE_VALUE"


def saved_horizon(model_dir):
    """The horizon stored in model_dir's newest checkpoint.

    Read before the trainer is built, so that a resumed run plans its
    learning rate, temperature and warm-ups for the steps it started with.

    Returns:
        int > 0, or None when there is no checkpoint or it predates the
        horizon.
    """
    path = tf.train.latest_checkpoint(model_dir)
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


class Checkpointer:
    """Saves and restores the whole training state of a run.

    Args:
        model_dir: run directory.
        model: the built language model.
        optimizers: dict name -> built Keras optimizer (e.g.
            {"weights_optimizer": ..., "arch_optimizer": ...}).
        state: TrainState.
        extras: dict name -> trackable saved with every checkpoint and
            restored when present (e.g. the plug-ins' `checkpoint_objects`).
        keep: number of last checkpoints kept.
        strategy: the tf.distribute strategy (decides who writes).
    """

    def __init__(self, model_dir, model, optimizers, state, keep, strategy, extras=None):
        self.model_dir = model_dir
        self.state = state
        self._chief = strategy_lib.is_chief(strategy)
        self._worker = strategy_lib.worker_id(strategy)
        model_required, model_optional = model_objects(model)
        self._required = {**model_required, "state": state, **optimizers}
        self._optional = {**model_optional, **dict(extras or {})}
        self._best_required, self._best_optional = model_required, model_optional
        self.checkpoint = tf.train.Checkpoint(**self._required, **self._optional)
        self.best_checkpoint = tf.train.Checkpoint(**model_required, **model_optional)
        self._manager = tf.train.CheckpointManager(
            self.checkpoint, self._write_dir(model_dir), max_to_keep=keep,
            checkpoint_name=CHECKPOINT_NAME)
        self._best_manager = tf.train.CheckpointManager(
            self.best_checkpoint, self._write_dir(os.path.join(model_dir, BEST_DIR)),
            max_to_keep=1, checkpoint_name=CHECKPOINT_NAME)

    def _write_dir(self, directory):
        if self._chief:
            return directory
        return os.path.join(directory, f".worker_{self._worker}_scratch")

    @property
    def latest(self):
        """Path prefix of the newest checkpoint in model_dir, or None."""
        return tf.train.latest_checkpoint(self.model_dir)

    @property
    def best(self):
        """Path prefix of the best checkpoint, or None."""
        return tf.train.latest_checkpoint(os.path.join(self.model_dir, BEST_DIR))

    def restore_latest(self):
        """Restores the newest checkpoint of model_dir, if any.

        Returns:
            The restored step, or None when there is no checkpoint.

        Raises:
            AssertionError (from TensorFlow): the checkpoint does not match
                the model (different architecture or sizes).
        """
        path = self.latest
        if path is None:
            return None
        restored = restore_optional(path, self._required, self._optional)
        # The manager numbers files with the counter of the checkpoint it saves.
        self.checkpoint.save_counter.assign(restored.save_counter)
        step = int(self.state.step.numpy())
        logging.info("restored %s (step %d)", path, step)
        return step

    def restore_best_model(self):
        """Loads the best checkpoint's weights into the model.

        Returns:
            The path restored, or None when no best checkpoint exists.
        """
        path = self.best
        if path is None:
            return None
        restored = restore_optional(path, self._best_required, self._best_optional)
        self.best_checkpoint.save_counter.assign(restored.save_counter)
        return path

    def save(self, memories):
        """Saves a checkpoint at the current step.

        Args:
            memories: list of global state tensors [B, ...] (gathered from
                the replicas), copied into the state first.

        Returns:
            The path written (on the chief), else None.
        """
        for variable, value in zip(self.state.memories, memories):
            variable.assign(value)
        step = int(self.state.step.numpy())
        path = self._manager.save(checkpoint_number=step)
        return self._finish(self._manager, path, "checkpoint")

    def save_best(self):
        """Saves the model weights as the best checkpoint."""
        step = int(self.state.step.numpy())
        path = self._best_manager.save(checkpoint_number=step)
        return self._finish(self._best_manager, path, "best checkpoint")

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

    names = ("checkpoint", "config.json", "training_log.log", "metrics.json",
             *plugins.run_files())
    for name in os.listdir(model_dir):
        path = os.path.join(model_dir, name)
        if name in (BEST_DIR, "data") or name.startswith(".worker_"):
            shutil.rmtree(path, ignore_errors=True)
        elif name in names or name.startswith(CHECKPOINT_NAME + "-"):
            os.remove(path)
    if logdir:
        for split in ("train", "valid", "test"):
            shutil.rmtree(os.path.join(logdir, split), ignore_errors=True)
