"""The host side of training: `train(config)` and the loop that drives `Trainer`.

`train` checks the config against the data, the replicas and model_dir,
prepares the run directory and finds the checkpoint to resume from, then
`host.RunLoop` (training.run.host) feeds the training split to `Trainer.train_step`
(training/run/trainer.py, which documents the step), logs, evaluates, saves
checkpoints and writes metrics.json. Epochs start from fresh memories; a run resumes from the exact
data position of its newest good checkpoint, with the schedules planned at
its first start (--max_steps/--epochs may change how long it runs, not the
learning-rate or temperature curves).

Faults (docs/faults.md says what the user sees):
- SIGINT/SIGTERM: the step in progress finishes (an evaluation is abandoned
  and redone after the resume: `run_dir.PENDING_EVALUATION`), a checkpoint
  is written at that step and `interrupt.TrainingInterrupted` is raised
  (training/run/interrupt.py; multi-worker through TensorFlow's
  PreemptionCheckpointHandler).
- Checkpoints also every --checkpoint_every_minutes of wall time.
- A damaged newest checkpoint is set aside and the run resumes from the
  newest good one; with none good, a ConfigError says so.
- A failed write (full disk) raises `run_dir.WriteError` naming the file;
  the files written before are intact and the same command resumes.
- A non-finite loss or gradient: --on_nonfinite=stop raises
  `NonFiniteError` naming the step and the quantity; skip goes on without
  the update, counts it (training_log `skipped`, TensorBoard
  `train/skipped_steps`) and stops after --max_nonfinite_steps in a row.
  No checkpoint with a non-finite value is ever written.
"""

import contextlib
import os

from absl import logging
import keras
import tensorflow as tf

from pardata.errors import DataError
from pardata.meta import verify_built
from pardata.records import load_built, unigram_counts
from runstore import checkpoints, run_dir, run_lock
from training import plugins
from training.report.log import read_training_log
from training.report.summary import default_logdir, format_duration
from training.run import checkpoint as checkpoint_lib
from training.run import collapse, interrupt
from training.run import strategy as strategy_lib
from training.run.checkpoint import NonFiniteError
from training.run.host import RunLoop
from training.run.interrupt import TrainingInterrupted
from training.run.trainer import Trainer
from training.setup import finished
from training.setup.checks import check_data, check_model_dir, check_replicas, check_resume
from training.setup.config import ConfigError

# The run-directory names, kept here for the callers that import them from the loop.
TRAINING_LOG = run_dir.TRAINING_LOG
RUN_DATA_DIR = run_dir.DATA_DIR
METRICS_FILE = run_dir.METRICS_FILE

__all__ = ["Callback", "NonFiniteError", "TrainingInterrupted", "default_logdir",
           "format_duration", "read_training_log", "train"]


class Callback:
    """Hooks called by `train`; override what you need (e.g. in a notebook)."""

    def on_train_log(self, step, logs):
        """After every `log_interval` steps with the logged training values."""

    def on_evaluate(self, split, step, results):
        """After each evaluation with its metrics."""

    def on_train_end(self, results):
        """At the end with the content of metrics.json."""



def train(config, callbacks=None, *, strategy=None, overwrite=False, stop_requests=None,
          command=None):
    """Trains, or resumes, the run described by `config`.

    Everything that can be checked is checked before anything is written.
    Then: config.json, checkpoints every checkpoint_interval steps, every
    checkpoint_every_minutes and at the end, the best checkpoint on valid in
    model_dir/best, training_log.log, TensorBoard summaries under
    config.logdir (default logs/<run>), metrics.json with valid and test
    metrics of the last and the best checkpoints, and what the plug-ins add
    (training/plugins: for a PAR supernet the derived architecture,
    architecture.json/.txt and the probability plots). A plug-in may then
    name a run to train next in the same call (`Plugin.follow_up`: the PAR
    search's --then_retrain), whose results it adds to this run's.

    Args:
        config: TrainConfig.
        callbacks: iterable of `Callback`.
        strategy: an existing tf.distribute strategy (default: made from
            config.strategy; must be created before any TF op).
        overwrite: discard a previous run in model_dir instead of resuming.
        stop_requests: an active `interrupt.StopRequests` to stop on (default:
            one of this call's own, around this run and the runs it names
            next, so that a signal between two of them stops the next one at
            its step 0).

    Returns:
        The content of metrics.json (dict); after a run named next, also
        `final_model_dir`: that run's directory (the one the command ended with).

    Raises:
        ConfigError: flags, data or model_dir do not fit together (also:
            every checkpoint of the run is damaged).
        NonFiniteError: the loss or a gradient became non-finite (policy
            --on_nonfinite).
        TrainingInterrupted: SIGINT/SIGTERM; a checkpoint was written at the
            step it names.
        run_dir.WriteError: a file could not be written (full disk).
    """
    callbacks = list(callbacks or [])
    check_model_dir(config)
    if strategy is None:
        strategy_lib.configure_threads(config.intra_op_threads, config.inter_op_threads)
        strategy = strategy_lib.make_strategy(config.strategy, config.num_cpu_replicas, config.tpu)
    # One StopRequests for the whole command: a signal between two runs (after the
    # search's last checkpoint, before the retrain's first step) stops the next run
    # at its step 0, with a checkpoint, as a signal during a run does.
    if stop_requests is None:
        with interrupt.StopRequests() as stop:
            return _train_runs(config, callbacks, strategy, overwrite, stop, command)
    return _train_runs(config, callbacks, strategy, overwrite, stop_requests, command)


def _train_runs(config, callbacks, strategy, overwrite, stop, command):
    """The run of `config`, then the runs its plug-ins name next: metrics.json of the first.

    A first run that finished in an earlier process (the pipeline resumed in its
    retrain) is read from its files: its metrics.json and the plug-in classes'
    `finished_follow_up`, without building it or evaluating it again.
    """
    earlier = None if overwrite else finished.finished_run(config)
    if earlier is not None:
        logging.info("%s finished earlier: its results are read from its metrics.json",
                     config.model_dir)
        results = earlier
        steps = [(cls.finished_follow_up(config, results),
                  lambda results, followed, cls=cls: cls.merge_follow_up(config, results,
                                                                         followed))
                 for cls in plugins.reports()]
    else:
        results, made = _train_one(config, callbacks, strategy, overwrite, stop, command)
        steps = [(plugin.follow_up(config, results), plugin.after_follow_up)
                 for plugin in made]
    for follow, merge in steps:
        if follow is None:
            continue
        logging.info("training %s next in the same command", follow.model_dir)
        followed = train(follow, callbacks, strategy=strategy, overwrite=overwrite,
                         stop_requests=stop, command=command)
        results = merge(results, followed)
        # The run that ended the command (what --export packages); not in metrics.json.
        results = dict(results, final_model_dir=follow.model_dir)
    return results


def _train_one(config, callbacks, strategy, overwrite, stop, command):
    """`train` of one run: (metrics.json content, the run's plug-ins)."""
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    try:
        meta, tokenizer = load_built(config.data_dir)
        verify_built(config.data_dir, meta)  # every shard, before step 1
    except DataError as error:
        raise ConfigError(f"--data_dir={config.data_dir}: {error}") from None
    check_data(config, meta)
    check_replicas(config, meta, strategy.num_replicas_in_sync)
    callbacks = [*callbacks, collapse.CollapseGuard.for_run(
        config, unigram_counts(config.data_dir, meta))]
    chief = strategy_lib.is_chief(strategy)
    # One training process per run directory (only the chief writes there).
    with run_lock.RunLock(config.model_dir) if chief else contextlib.nullcontext():
        resume = check_resume(config, overwrite)
        logdir = config.logdir or default_logdir(config.model_dir)
        if chief:
            if overwrite:
                checkpoint_lib.clear_run(config.model_dir, logdir)
            os.makedirs(config.model_dir, exist_ok=True)
            _remove_temporaries(config.model_dir)
            config.save()
            if command:  # what the model card names (serving/card.py)
                run_dir.atomic_write_json(os.path.join(config.model_dir, run_dir.COMMAND_FILE),
                                          {"argv": list(command), "cwd": os.getcwd()})
            _copy_tokenizer(config.data_dir, meta, config.model_dir)
        resume_from = _resume_point(config, meta, chief) if resume else None
        policy = keras.mixed_precision.global_policy()
        # A resumed run keeps the horizon it started with (lr, tau, warm-ups); a first
        # start plans for --plan_steps when given.
        horizon = (checkpoint_lib.saved_horizon(resume_from) if resume_from
                   else config.plan_steps or None)
        try:
            trainer = Trainer(config, meta, strategy, tokenizer, horizon=horizon)
            return (RunLoop(trainer, logdir, chief, callbacks, resume_from, stop).run(),
                    trainer.plugins)
        finally:
            keras.mixed_precision.set_global_policy(policy)


def _remove_temporaries(model_dir):
    """Leftovers of a process killed while writing (our temporaries, TF's `_temp`)."""
    for directory in (model_dir, os.path.join(model_dir, run_dir.BEST_DIR),
                      os.path.join(model_dir, run_dir.DATA_DIR)):
        removed = run_dir.remove_temporaries(directory)
        if removed:
            logging.info("removed unfinished writes of an earlier process in %s: %s",
                         directory, ", ".join(sorted(removed)))


def _resume_point(config, meta, chief):
    """The newest good checkpoint of a run to resume.

    A damaged checkpoint newer than every complete (listed) one is the
    remains of a save that never completed: its files are removed. Any other
    damaged checkpoint newer than the good one is set aside (renamed
    `*.damaged`, kept for inspection), and the run resumes from the good one.

    Returns:
        The prefix, or None when the run has no complete checkpoint yet.

    Raises:
        ConfigError: checkpoints were saved but every one is damaged.
    """
    records = meta["splits"]["train"]["records"]
    model_dir = config.model_dir
    path, damaged = checkpoints.find_good(model_dir, checkpoint_lib.state_check(records))
    listed = checkpoints.listed_steps(model_dir)
    broken = [(p, why) for p, why in damaged
              if not checkpoints.unfinished(model_dir, p, listed)]
    if path is None and broken:
        raise ConfigError(
            f"--model_dir={model_dir}: every checkpoint is damaged "
            f"({checkpoints.describe_damage(damaged)}); nothing to resume from: pass "
            "--overwrite to start over (or restore the files)")
    if damaged and chief:
        resume = os.path.basename(path) if path else "step 0"
        for prefix, problem in damaged:
            if (prefix, problem) not in broken:
                removed = checkpoints.remove_partial(model_dir, run_dir.checkpoint_step(prefix))
                logging.warning("removed %s, the files of a checkpoint whose save did not "
                                "complete (%s)", ", ".join(removed), problem)
                continue
            moved = checkpoints.set_aside(prefix)
            logging.warning("%s; resuming from the newest good checkpoint, %s (the damaged "
                            "files are kept as %s)", problem, resume,
                            ", ".join(os.path.basename(m) for m in moved))
        checkpoints.rewrite_list(model_dir)
    if path is None:
        logging.info("%s has no complete checkpoint yet: starting at step 0", model_dir)
    return path


def _copy_tokenizer(data_dir, meta, model_dir):
    """Copies meta.json and the tokenizer files into `model_dir/data/`.

    A run directory then generates and exports without the built dataset
    (serving.generation looks there first). Each file is written atomically
    (meta.json last) and only when it differs from the copy already there.
    """
    target = os.path.join(model_dir, RUN_DATA_DIR)
    os.makedirs(target, exist_ok=True)
    for name in list(meta["tokenizer"].get("files", [])) + ["meta.json"]:
        source, copy = os.path.join(data_dir, name), os.path.join(target, name)
        with open(source, "rb") as f:
            content = f.read()
        if not run_dir.same_content(copy, content):
            run_dir.atomic_write(copy, content)

