"""The host side of training: `train(config)` and the loop that drives `Trainer`.

`train` checks the config against the data, the replicas and model_dir, then
`_Run` feeds the training split to `Trainer.train_step` (training/trainer.py,
which documents the step), logs, evaluates, saves checkpoints and writes
metrics.json. Epochs start from fresh memories; a run resumes from the exact
data position of its newest good checkpoint, with the schedules planned at
its first start (--max_steps/--epochs may change how long it runs, not the
learning-rate or temperature curves).

Faults (docs/faults.md says what the user sees):
- SIGINT/SIGTERM: the step in progress finishes (an evaluation is abandoned
  and redone after the resume: `run_dir.PENDING_EVALUATION`), a checkpoint
  is written at that step and `interrupt.TrainingInterrupted` is raised
  (training/interrupt.py; multi-worker through TensorFlow's
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
import json
import math
import os
import shlex
import signal
import time

from absl import logging
import keras
import tensorflow as tf

import data_utils
from runstore import checkpoints, metrics, run_dir, run_lock
from training import checkpoint as checkpoint_lib
from training import collapse, eta, interrupt, run_notes, summaries
from training import strategy as strategy_lib
from training.checkpoint import NonFiniteError
from training.config import ConfigError, check_data, check_model_dir, check_replicas, check_resume
from training.interrupt import TrainingInterrupted
from training.trainer import Trainer

# The run-directory names, kept here for the callers that import them from the loop.
TRAINING_LOG = run_dir.TRAINING_LOG
RUN_DATA_DIR = run_dir.DATA_DIR
METRICS_FILE = run_dir.METRICS_FILE

__all__ = ["Callback", "NonFiniteError", "TrainingInterrupted", "default_logdir",
           "format_duration", "read_training_log", "train"]

# Keys of Trainer.train_step's result that are not plug-in step values.
_STEP_OUTPUTS = frozenset({"loss", "nll", "lr", "finite", "nonfinite"})


class Callback:
    """Hooks called by `train`; override what you need (e.g. in a notebook)."""

    def on_train_log(self, step, logs):
        """After every `log_interval` steps with the logged training values."""

    def on_evaluate(self, split, step, results):
        """After each evaluation with its metrics."""

    def on_train_end(self, results):
        """At the end with the content of metrics.json."""


class _TrainingLog:
    """model_dir/training_log.log: one plain-text line per logged step.

    Lines are appended whole or not at all (`run_dir.append_line`).
    """

    def __init__(self, path, enabled):
        self.path = path
        self.enabled = enabled

    def truncate(self, step):
        """Drops lines after `step` (logged by a run that died before saving) and a
        last line without its newline."""
        if not (self.enabled and os.path.exists(self.path)):
            return
        with open(self.path, encoding="utf-8") as f:
            lines = f.readlines()
        kept = [line for line in lines if line.endswith("\n") and _line_step(line) <= step]
        if len(kept) != len(lines):
            run_dir.atomic_write(self.path, "".join(kept))

    def write(self, values):
        if not self.enabled:
            return
        run_dir.append_line(self.path, " ".join(f"{k}={v}" for k, v in values.items()))


def _line_step(line):
    head = line.split(" ", 1)[0]
    return int(head[len("step="):]) if head.startswith("step=") else -1


def read_training_log(path):
    """Parses training_log.log into a list of dicts (numbers as floats, step int).

    A last line without its newline (a write cut short) is ignored.
    """
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            fields = dict(item.split("=", 1) for item in line.split())
            rows.append({k: int(v) if k == "step" else float(v) for k, v in fields.items()})
    return rows


def _split_scalars(result):
    keys = ("perplexity", "bits_per_token", "word_perplexity", "bits_per_byte")
    return {"loss": result["nll"], **{k: result.get(k) for k in keys}}


def format_duration(seconds):
    """'1h02m', '3m05s' or '42s'."""
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def default_logdir(model_dir):
    """logs/<basename of model_dir>, so `tensorboard --logdir logs` shows every run."""
    return os.path.join("logs", os.path.basename(os.path.normpath(model_dir)))


def nonfinite_fixes(config, skip_hint=True):
    """The likely fixes of a non-finite loss, with the run's current values."""
    clip = f"{config.clip_norm:g}" if config.clip_norm else "0 = off"
    text = (f"likely fixes: lower --learning_rate (now {config.learning_rate:g}), clip with "
            f"--clip_norm (now {clip}), train in --precision=float32 (now {config.precision})")
    if skip_hint and config.on_nonfinite == "stop":
        text += ", or skip such steps with --on_nonfinite=skip"
    return text


def describe_nonfinite(out):
    """'the loss (nan) is', 'the gradient of the weights (grad_norm=inf) is', ...: what
    was not finite in a step's output (Trainer.train_step's `nonfinite`)."""
    parts = []
    for key in out.get("nonfinite", []):
        if key == "loss":
            parts.append(f"the loss ({out['loss']})")
        elif key == "grad_norm":
            parts.append(f"the gradient of the weights (grad_norm={out[key]})")
        else:
            group = key[:-len("_grad_norm")]
            parts.append(f"the gradient of the {group} group ({key}={out[key]})")
    if not parts:
        return "the loss or a gradient is"
    return " and ".join(parts) + (" are" if len(parts) > 1 else " is")


def train(config, callbacks=None, *, strategy=None, overwrite=False):
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

    Returns:
        The content of metrics.json (dict).

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
    results, plugins = _train_one(config, callbacks, strategy, overwrite)
    for plugin in plugins:
        follow = plugin.follow_up(config, results)
        if follow is None:
            continue
        logging.info("training %s next in the same command (%s)", follow.model_dir,
                     type(plugin).__name__)
        followed = train(follow, callbacks, strategy=strategy, overwrite=overwrite)
        results = plugin.after_follow_up(results, followed)
    return results


def _train_one(config, callbacks, strategy, overwrite):
    """`train` of one run: (metrics.json content, the run's plug-ins)."""
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    with interrupt.StopRequests() as stop:
        try:
            meta, tokenizer = data_utils.load_built(config.data_dir)
            data_utils.verify_built(config.data_dir, meta)  # every shard, before step 1
        except data_utils.DataError as error:
            raise ConfigError(f"--data_dir={config.data_dir}: {error}") from None
        check_data(config, meta)
        check_replicas(config, meta, strategy.num_replicas_in_sync)
        callbacks = [*callbacks, collapse.CollapseGuard.for_run(
            config, data_utils.unigram_counts(config.data_dir, meta))]
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
                _copy_tokenizer(config.data_dir, meta, config.model_dir)
            resume_from = _resume_point(config, meta, chief) if resume else None
            policy = keras.mixed_precision.global_policy()
            # A resumed run keeps the horizon it started with (lr, tau, warm-ups).
            horizon = checkpoint_lib.saved_horizon(resume_from) if resume_from else None
            try:
                trainer = Trainer(config, meta, strategy, tokenizer, horizon=horizon)
                return (_Run(trainer, logdir, chief, callbacks, resume_from, stop).run(),
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


class _Run:
    """The host loop of `train` (logging, evaluation, checkpoints, faults, the end)."""

    def __init__(self, trainer, logdir, chief, callbacks, resume_from, stop):
        self.trainer = trainer
        self.config = trainer.config
        self.state = trainer.state
        self.chief = chief
        self.callbacks = callbacks
        self.stop = stop
        model_dir = self.config.model_dir
        start = trainer.restore(resume_from) if resume_from else None
        self.step = start or 0
        self.log = _TrainingLog(os.path.join(model_dir, TRAINING_LOG), chief)
        self.log.truncate(self.step)
        self.summaries = summaries.TrainSummaries(logdir) if chief else None
        for plugin in trainer.plugins:
            plugin.on_start(model_dir, start)
        if start is not None:
            logging.info("resuming %s at step %d", model_dir, self.step)
        self.preemption = None
        if self.config.strategy == "multi_worker" or isinstance(
                trainer.strategy, tf.distribute.MultiWorkerMirroredStrategy):
            self.preemption = interrupt.TfPreemption(trainer.strategy, stop, self._save)
        self._last_save = time.monotonic()
        self._nonfinite_in_a_row = 0
        self._skipped = 0  # non-finite steps skipped in the current logging interval
        self._interval_nll = float(self.state.interval_nll.numpy())
        self._interval_steps = int(self.state.interval_steps.numpy())
        self._clock = None
        self._eval_spent = [0.0, 0]  # seconds and records evaluated since the clock started

    # ------------------------------------------------------------------ loop

    def run(self):
        try:
            return self._run()
        except BaseException:
            if self.summaries is not None:
                with contextlib.suppress(Exception):
                    self.summaries.close()
            raise
        finally:
            if self.preemption is not None:
                self.preemption.close()

    def _run(self):
        trainer, config, state = self.trainer, self.config, self.state
        records = trainer.meta["splits"]["train"]["records"]
        tokens_per_step = trainer.batch_size * config.seq_len
        # Step time and tokens/s count the steps only, not evaluations or saves.
        timed_steps, busy = 0, 0.0
        iterator, evaluated_at = None, None
        self._valid = (None, None)
        logging.info("training %d steps (%d records per epoch, %d replica(s))",
                     trainer.total_steps, records, trainer.replicas)
        if self._pending_evaluation() == self.step:
            logging.info("step %d: redoing the evaluation the interruption abandoned", self.step)
            self._evaluate_valid()
            evaluated_at = self.step
        self._clear_pending_evaluation()
        first_step = True
        # The ETA counts everything after the first step (evaluations and saves
        # included), so it is the wall time still to wait.
        self._clock = None
        stop = any(plugin.should_stop() for plugin in trainer.plugins)
        while self.step < trainer.total_steps and not stop:
            self._check_stop()
            start = time.perf_counter()
            if first_step:
                logging.info("step %d: tracing and compiling the training step (the first step "
                             "takes longer: tens of seconds on a CPU)", self.step + 1)
            position = int(state.data_position.numpy())
            if iterator is None:
                iterator = iter(data_utils.make_dataset(
                    config.data_dir, "train", meta=trainer.meta, skip_records=position))
            inputs, targets = next(iterator)
            out = self._train_step(inputs, targets)
            busy += time.perf_counter() - start
            if first_step:
                logging.info("first step done in %.1f s", time.perf_counter() - start)
                first_step = False
                self._clock = (time.perf_counter(), self.step + 1)
                self._eval_spent = [0.0, 0]
            if out["finite"]:
                self._nonfinite_in_a_row = 0
            else:
                self._on_nonfinite(out)
            self.step += 1
            for plugin in trainer.plugins:
                for event in plugin.after_step(self.step):
                    self._log_event(event)
            position += 1
            if position == records:  # a new epoch starts from fresh memories
                state.epoch.assign_add(1)
                position, iterator = 0, None
                trainer.reset_state()
            state.data_position.assign(position)
            if out["finite"]:
                self._interval_nll += out["nll"]
                self._interval_steps += 1
            timed_steps += 1
            logged = self.step % config.log_interval == 0 or self.step == trainer.total_steps
            if logged:
                nll = (self._interval_nll / self._interval_steps if self._interval_steps
                       else math.nan)
                self._log_train(out, nll, busy / timed_steps,
                                tokens_per_step * timed_steps / max(busy, 1e-9))
                self._interval_nll, self._interval_steps, self._skipped = 0.0, 0, 0
                timed_steps, busy = 0, 0.0
            stop = any(plugin.should_stop() for plugin in trainer.plugins)
            if stop:
                logging.info("step %d: a plug-in ends the run here", self.step)
            last = self.step == trainer.total_steps or stop
            if last or (config.eval_interval and self.step % config.eval_interval == 0):
                self._evaluate_valid()
                evaluated_at = self.step
            if last or (config.checkpoint_interval
                        and self.step % config.checkpoint_interval == 0):
                self._save()
            elif self._time_to_save(logged):
                logging.info("step %d: %g minutes since the last checkpoint", self.step,
                             config.checkpoint_every_minutes)
                self._save()
        self._check_stop()
        if evaluated_at != self.step:  # a finished run started again
            self._evaluate_valid()
        return self._finish()

    def _train_step(self, inputs, targets):
        if self.preemption is None:
            return self.trainer.train_step(inputs, targets)
        try:
            return self.preemption.run(self.trainer.train_step, inputs, targets)
        except interrupt.PreemptionSaved:
            raise TrainingInterrupted(
                self.step, self.stop.signum or signal.SIGTERM,
                self.trainer.checkpointer.latest if self.chief else None) from None

    def _time_to_save(self, logged):
        minutes = self.config.checkpoint_every_minutes
        if not minutes:
            return False
        due = time.monotonic() - self._last_save >= 60.0 * minutes
        if self.preemption is None:
            return due
        # Multi-worker: every worker must save at the same step; they agree at
        # the logging steps (one collective there).
        return logged and strategy_lib.any_worker(self.trainer.strategy, due)

    # ------------------------------------------------------------- the faults

    def _check_stop(self):
        if self.stop.requested and self.preemption is None:
            self._interrupt()

    def _interrupt(self, abandoned_evaluation=False):
        """Writes a checkpoint at the current step and raises TrainingInterrupted."""
        if abandoned_evaluation and self.chief:
            run_dir.atomic_write_json(
                os.path.join(self.config.model_dir, run_dir.PENDING_EVALUATION),
                {"step": self.step, "split": "valid"})
        path = self._save()
        logging.warning("interrupted at step %d: checkpoint %s", self.step, path)
        raise TrainingInterrupted(self.step, self.stop.signum, path)

    def _save(self):
        """Saves a checkpoint at the current step (nothing if one holds it already)."""
        checkpointer = self.trainer.checkpointer
        if checkpointer.last_saved_step == self.step:
            return checkpointer.latest if self.chief else None
        self.state.interval_nll.assign(self._interval_nll)
        self.state.interval_steps.assign(self._interval_steps)
        try:
            path = self.trainer.save()
        except NonFiniteError as error:
            raise NonFiniteError(f"{error}; {nonfinite_fixes(self.config)}") from None
        self._last_save = time.monotonic()
        return path

    def _on_nonfinite(self, out):
        config, step = self.config, self.step + 1
        what = describe_nonfinite(out)
        latest = self.trainer.checkpointer.latest
        if config.on_nonfinite == "stop":
            raise NonFiniteError(
                f"non-finite loss or gradient at step {step}: {what} not finite; stopped "
                f"without saving; the last checkpoint ({latest}) is intact; "
                f"{nonfinite_fixes(config)}")
        self._nonfinite_in_a_row += 1
        self._skipped += 1
        logging.warning("step %d: %s not finite: update skipped (%d in a row; the run stops "
                        "after %d)", step, what, self._nonfinite_in_a_row,
                        config.max_nonfinite_steps)
        if not self.trainer.state_is_finite():
            logging.warning("step %d: the memories became non-finite: reset to zeros", step)
            self.trainer.reset_state()
        if self._nonfinite_in_a_row >= config.max_nonfinite_steps:
            raise NonFiniteError(
                f"{self._nonfinite_in_a_row} steps in a row were non-finite (--max_nonfinite_"
                f"steps={config.max_nonfinite_steps}), the last at step {step}: {what} not "
                f"finite; stopped "
                f"without saving; the last checkpoint ({latest}) is intact; "
                f"{nonfinite_fixes(config, skip_hint=False)}")

    def _pending_evaluation(self):
        """The step of an evaluation an interruption abandoned, or None."""
        path = os.path.join(self.config.model_dir, run_dir.PENDING_EVALUATION)
        try:
            with open(path, encoding="utf-8") as f:
                return int(json.load(f)["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _clear_pending_evaluation(self):
        if self.chief:
            path = os.path.join(self.config.model_dir, run_dir.PENDING_EVALUATION)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    def _should_stop(self):
        # Multi-worker evaluations are collective: they run to their end.
        return self.preemption is None and self.stop.requested

    # --------------------------------------------------------------- logging

    def _eta(self, step):
        """' eta 1h02m', or '': the steps left at the wall time per step since the first
        step (evaluations excluded) plus the evaluations still planned, each evaluated
        record at the time measured so far (one training step's before any)."""
        if self._clock is None or step <= self._clock[1]:
            return ""
        since, first = self._clock
        spent, records = self._eval_spent
        per_step = (time.perf_counter() - since - spent) / (step - first)
        per_record = spent / records if records else per_step
        meta, cap = self.trainer.meta["splits"], self.config.eval_max_records
        valid, test = (min(meta[split]["records"], cap or math.inf) * per_record
                       for split in ("valid", "test"))
        left = eta.eta_seconds(step, self.trainer.total_steps, self.config.eval_interval,
                               per_step, valid, test)
        return f" eta {format_duration(left)}"

    def _log_train(self, out, nll, step_time, tokens_per_sec):
        trainer, step = self.trainer, self.step
        values = dict(loss=nll, perplexity=metrics.lm_metrics(nll, 1)["perplexity"]
                      if math.isfinite(nll) else math.nan,
                      bits_per_token=nll / math.log(2), lr_weights=out["lr"],
                      step_time=step_time, tokens_per_sec=tokens_per_sec,
                      grad_norm=out["grad_norm"])
        step_values = {k: out[k] for k in out if k not in _STEP_OUTPUTS
                       and not k.endswith("grad_norm")}  # the plug-ins' (e.g. tau)
        values.update(step_values)
        skipping = self.config.on_nonfinite == "skip"
        if skipping:
            values["skipped_steps"] = self._skipped
        for plugin in trainer.plugins:
            values.update(plugin.log_values(step, out))
        line = {"step": step, "loss": f"{nll:.7f}", "ppl": f"{values['perplexity']:.4f}",
                "lr": f"{out['lr']:.6e}"}
        line.update({k: f"{v:.6f}" for k, v in step_values.items()})
        if skipping:
            line["skipped"] = str(self._skipped)
        line["tokens_per_sec"] = f"{tokens_per_sec:.1f}"
        self.log.write(line)
        extra = "".join(f" {k} {v:.3f}" for k, v in step_values.items())
        if skipping and self._skipped:
            extra += f" ({self._skipped} non-finite steps skipped)"
        logging.info("step %d/%d loss %.4f ppl %.2f lr %.3e%s %.0f tokens/s%s",
                     step, trainer.total_steps, nll, values["perplexity"], out["lr"], extra,
                     tokens_per_sec, self._eta(step))
        if self.chief:
            self.summaries.scalars("train", step, values)
            for plugin in trainer.plugins:
                plugin.on_log(step, self.summaries, self.config.model_dir)
            self.summaries.flush()
        for callback in self.callbacks:
            callback.on_train_log(step, values)

    def _log_event(self, event):
        """A plug-in's event (e.g. a block frozen): a training_log.log line and scalars."""
        self.log.write({"step": self.step, **event})
        if self.chief:
            self.summaries.scalars("train", self.step, event)
            self.summaries.flush()

    # ------------------------------------------------------------ evaluation

    def _evaluate(self, split):
        """Evaluates a split; an interruption abandons it (None)."""
        start = time.perf_counter()
        result = self.trainer.evaluate(split, self.config.eval_max_records,
                                       should_stop=self._should_stop)
        if result is None:
            return None
        if self._clock is not None:  # the ETA's cost of an evaluated record
            self._eval_spent[0] += time.perf_counter() - start
            self._eval_spent[1] += result["records"]
        logging.info("step %d %s: nll %.4f ppl %.2f word ppl %.2f bpb %.4f (%d tokens)",
                     self.step, split, result["nll"], result["perplexity"],
                     result["word_perplexity"], result["bits_per_byte"], result["tokens"])
        if self.chief:
            self.summaries.scalars(split, self.step, _split_scalars(result))
            self.summaries.flush()
        for callback in self.callbacks:
            callback.on_evaluate(split, self.step, result)
        return result

    def _evaluate_valid(self):
        result = self._evaluate("valid")
        if result is None:
            self._interrupt(abandoned_evaluation=True)
        self._valid = (self.step, result)
        state = self.state
        if result["nll"] < float(state.best_valid_nll.numpy()):
            state.best_valid_nll.assign(result["nll"])
            state.best_step.assign(self.step)
            self.trainer.checkpointer.save_best()
        if self.chief and self.config.sample_tokens:
            text = self.trainer.sample_text(self.config.sample_tokens, self.step)
            self.summaries.text(self.step, "sample", text)
            logging.info("sample at step %d: %s", self.step, text)
        return result

    def _finish(self):
        trainer, config, model_dir = self.trainer, self.config, self.config.model_dir
        results = {"step": self.step, "model_family": config.model_family,
                   "planned_steps": trainer.horizon}
        for plugin in trainer.plugins:
            plugin.on_finish(results, model_dir, self.chief)
        valid = self._valid[1]  # run() always ends with a valid evaluation at this step
        test = self._evaluate("test")
        if test is None:  # the last checkpoint holds this step: nothing to save
            self._interrupt()
        results["last"] = {"step": self.step, "valid": valid, "test": test}
        best_step = int(self.state.best_step.numpy())
        if best_step == self.step:  # the last weights are the best ones
            results["best"] = dict(results["last"])
        elif trainer.checkpointer.restore_best_model():
            best = {}
            for split in ("valid", "test"):
                best[split] = trainer.evaluate(split, config.eval_max_records,
                                               should_stop=self._should_stop)
                if best[split] is None:
                    raise TrainingInterrupted(self.step, self.stop.signum,
                                              trainer.checkpointer.latest)
            results["best"] = {"step": best_step, **best}
            logging.info("best checkpoint (step %d): valid ppl %.2f, test ppl %.2f", best_step,
                         results["best"]["valid"]["perplexity"],
                         results["best"]["test"]["perplexity"])
        if self.chief:
            run_dir.atomic_write_json(os.path.join(model_dir, METRICS_FILE), results)
            self.summaries.close()
        for callback in self.callbacks:
            callback.on_train_end(results)
        if self.step < trainer.horizon:
            logging.warning("%s", cut_short_note(self.step, trainer.horizon))
        return results


def cut_short_note(step, planned):
    """The line that says a run stopped before the end of its planned schedules."""
    return (f"cut short: stopped at step {step} of the {planned} steps its schedules were "
            "planned for at its first start (the learning rate, the temperature and the "
            "warm-ups did not finish their curves); run it again with the --epochs/--max_steps "
            "of its first start to finish the plan")


# Fields the retrain command sets itself, or that come from the data or the search.
_NOT_RETRAIN_FLAGS = frozenset({"data_dir", "model_dir", "model", "logdir", "preset",
                                "batch_size", "seq_len", "eval_mem_len", "max_steps"})


def _flag_value(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _retrain_flags(config):
    """train.py flags that repeat the run's recipe (its values that differ from the
    defaults, model fields that differ from its preset) for a derived retrain."""
    from model.families import get_family
    from training.config import TrainConfig

    flags = []
    for field in TrainConfig.flag_fields():
        value = getattr(config, field.name)
        if field.name in _NOT_RETRAIN_FLAGS or field.metadata["group"] == "search" \
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


def run_summary(config, results):
    """A short end-of-run summary for the console (train.py prints it).

    Best valid metrics, the derived architecture of a search, where the
    artefacts are (run directory, TensorBoard logdir) and the commands that
    come next: retrain the derived network (after a search), generate,
    evaluate, export, TensorBoard. A run stopped before the end of its
    planned schedules says so in its last line (`cut_short_note`).

    Args:
        config: the run's TrainConfig.
        results: what `train` returned (the content of metrics.json).

    Returns:
        The summary, lines joined by newlines.
    """
    quote = shlex.quote
    model_dir = quote(config.model_dir)
    logdir = config.logdir or default_logdir(config.model_dir)
    best = results.get("best") or results.get("last") or {}
    lines = [f"finished {config.model_dir}: step {results['step']} ({config.model_family}, "
             f"preset {config.preset})"]
    valid, test = best.get("valid"), best.get("test")
    if valid:
        line = (f"best valid (step {best['step']}): perplexity {valid['perplexity']:.2f}, "
                f"word perplexity {valid['word_perplexity']:.2f}, "
                f"bits/byte {valid['bits_per_byte']:.4f}")
        if test:
            line += f"; test perplexity {test['perplexity']:.2f} at that step"
        lines.append(line)
    derivation = results.get("derivation")
    if derivation:
        note = " (untrained: NOT a search result)" if derivation.get("untrained") else ""
        lines.append(f"derived architecture: {derivation['architecture']}{note} "
                     f"({os.path.join(config.model_dir, 'architecture.json')})")
        why = run_notes.no_attention_note(derivation, results["step"])
        lines += [why] if why else []
    elif results.get("architecture"):
        lines.append(f"architecture: {results['architecture']}")
    lines.append(f"run directory: {config.model_dir}   TensorBoard logs: {logdir}")
    lines.append("next:")
    if derivation:
        derived = quote(os.path.normpath(config.model_dir) + "_derived")
        recipe = " ".join(quote(flag) for flag in _retrain_flags(config))
        lines.append(f"  python3 train.py --data_dir={quote(config.data_dir)} "
                     f"--model_dir={derived} --preset={config.preset} --architecture={model_dir} "
                     f"--arch_warmup_steps=0 {recipe}   # retrain the derived network")
    prompt = run_notes.valid_prompt(config.data_dir) or "The game"  # the data's own words
    lines += [
        f"  python3 generate.py --model_dir={model_dir} --prompt={quote(prompt)} --seed=1",
        f"  python3 evaluate.py --model_dir={model_dir} --split=test",
        f"  python3 export.py --model_dir={model_dir} "
        f"--output={quote(os.path.join(config.model_dir, 'model.keras'))}",
        f"  tensorboard --logdir {quote(os.path.dirname(os.path.normpath(logdir)) or logdir)}",
    ]
    planned = results.get("planned_steps")
    if planned and results["step"] < planned:
        lines.append(cut_short_note(results["step"], planned))
    return "\n".join(lines)
