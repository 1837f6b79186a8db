"""The host loop of a run: the steps, logging, evaluations, checkpoints, faults, the end.

`training.run.loop.train` checks and prepares the run, then `RunLoop.run` feeds
the training split to `Trainer.train_step` (training/run/trainer.py, which
documents the step), logs (training/report/log.py, the console, TensorBoard),
evaluates valid every --eval_interval steps and at the end (then test, and the
best checkpoint's splits), saves checkpoints (every --checkpoint_interval steps,
every --checkpoint_every_minutes, at the end and on an interruption), applies
--on_nonfinite (training/run/nonfinite.py's messages), stops after --early_stop
evaluations without a better valid loss and writes metrics.json. Every evaluation
of the run's own weights, its text sample and the best checkpoint saved after it
use `Trainer.evaluation_weights()` (with --ema_decay the moving average of the
weights, swapped in and out around them), so the best checkpoint, which export.py
packages, holds the weights that were evaluated. A fresh run with
--init_weights starts from that model's weights (training/run/init_weights.py).
training/run/loop.py's docstring lists the faults and what the user sees.
"""

import contextlib
import json
import math
import os
import signal
import time

from absl import logging
import tensorflow as tf

from pardata.records import make_dataset
from pardata.yardsticks import yardsticks
from runstore import metrics, run_dir
from training import plugins
from training.report import eta
from training.report import tensorboard as summaries
from training.report.log import TrainingLog, step_line
from training.report.summary import cut_short_note, format_duration
from training.run import interrupt, nonfinite
from training.run import strategy as strategy_lib
from training.run.checkpoint import NonFiniteError
from training.run.init_weights import load_init_weights
from training.run.interrupt import TrainingInterrupted

# Keys of Trainer.train_step's result that are not plug-in step values.
_STEP_OUTPUTS = frozenset({"loss", "nll", "lr", "finite", "nonfinite"})


def _split_scalars(result):
    keys = ("perplexity", "bits_per_token", "word_perplexity", "bits_per_byte")
    return {"loss": result["nll"], **{k: result.get(k) for k in keys}}


class RunLoop:
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
        self.log = TrainingLog(os.path.join(model_dir, run_dir.TRAINING_LOG), chief)
        self.log.truncate(self.step)
        self.summaries = summaries.TrainSummaries(logdir) if chief else None
        if start is None and self.config.init_weights:  # never over a resumed checkpoint
            load_init_weights(trainer.model, self.config.init_weights)
            trainer.reset_average()  # averaged from the weights the run starts from
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
        self._rate = eta.RecentRate()  # the ETA's seconds per step
        self._later_steps = plugins.later_steps(
            self.config, trainer.meta["splits"]["train"]["records"])

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
        stop = any(plugin.should_stop() for plugin in trainer.plugins) or self._early_stop_due()
        while self.step < trainer.total_steps and not stop:
            self._check_stop()
            start = time.perf_counter()
            if first_step:
                logging.info("step %d: tracing and compiling the training step (the first step "
                             "takes longer: tens of seconds on a CPU)", self.step + 1)
            position = int(state.data_position.numpy())
            if iterator is None:
                iterator = iter(make_dataset(
                    config.data_dir, "train", meta=trainer.meta, skip_records=position))
            inputs, targets = next(iterator)
            out = self._train_step(inputs, targets)
            busy += time.perf_counter() - start
            if first_step:
                logging.info("first step done in %.1f s", time.perf_counter() - start)
                first_step = False
                self._clock = (time.perf_counter(), self.step + 1)
                self._rate.start(*self._clock)
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
                self._log_interval(out, busy, timed_steps, tokens_per_step)
                timed_steps, busy = 0, 0.0
            stop = any(plugin.should_stop() for plugin in trainer.plugins)
            if stop:
                logging.info("step %d: a plug-in ends the run here", self.step)
            if self._evaluate_and_save(logged, last=self.step == trainer.total_steps or stop):
                evaluated_at = self.step
                stop = stop or self._early_stop_due()
        # Released before the last evaluations: tearing a tf.data iterator down waits for
        # its threads, which took up to a minute while tf.data autotuned (make_dataset no
        # longer does; the message stays for any other slow teardown).
        with eta.said_if_slow("stopping the training input pipeline (tf.data threads)"):
            iterator = None
        self._check_stop()
        if evaluated_at != self.step:  # a finished run started again
            self._evaluate_valid()
        return self._finish()

    def _evaluate_and_save(self, logged, last):
        """The valid evaluation and the checkpoint due after a step; True if it evaluated."""
        config = self.config
        evaluate = last or bool(config.eval_interval and self.step % config.eval_interval == 0)
        if evaluate:
            self._evaluate_valid()
            if not last and self._early_stop_due():
                logging.info("step %d: %d evaluations without a better valid loss than step "
                             "%d's (--early_stop=%d): stopping early", self.step,
                             config.early_stop, int(self.state.best_step.numpy()),
                             config.early_stop)
                last = True  # the checkpoint of the step the run ends at
        if last or (config.checkpoint_interval
                    and self.step % config.checkpoint_interval == 0):
            self._save()
        elif self._time_to_save(logged):
            logging.info("step %d: %g minutes since the last checkpoint", self.step,
                         config.checkpoint_every_minutes)
            self._save()
        return evaluate

    def _early_stop_due(self):
        """True once --early_stop evaluations in a row found no better valid loss.

        Counted from the checkpointed best step (evaluations come every
        --eval_interval steps), so a resumed run counts exactly as an uninterrupted one.
        """
        patience, interval = self.config.early_stop, self.config.eval_interval
        best = int(self.state.best_step.numpy())
        if not patience or not interval or best < 0:
            return False
        return self.step // interval - best // interval >= patience

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
            raise NonFiniteError(nonfinite.save_refused_message(self.config, error)) from None
        self._last_save = time.monotonic()
        return path

    def _on_nonfinite(self, out):
        config, step = self.config, self.step + 1
        what = nonfinite.describe_nonfinite(out)
        latest = self.trainer.checkpointer.latest
        if config.on_nonfinite == "stop":
            raise NonFiniteError(nonfinite.stop_message(config, step, what, latest))
        self._nonfinite_in_a_row += 1
        self._skipped += 1
        logging.warning("step %d: %s not finite: update skipped (%d in a row; the run stops "
                        "after %d)", step, what, self._nonfinite_in_a_row,
                        config.max_nonfinite_steps)
        if not self.trainer.state_is_finite():
            logging.warning("step %d: the memories became non-finite: reset to zeros", step)
            self.trainer.reset_state()
        if self._nonfinite_in_a_row >= config.max_nonfinite_steps:
            raise NonFiniteError(nonfinite.too_many_message(
                config, self._nonfinite_in_a_row, step, what, latest))

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
        """' eta 1h02m', or '': the steps left at the wall time per step of the recent
        logged intervals (`eta.RecentRate`, evaluations excluded) plus the evaluations still
        planned, each evaluated record at the time measured so far (one training step's
        before any)."""
        spent, records = self._eval_spent
        per_step = self._rate.seconds_per_step(time.perf_counter(), step, spent)
        if self._clock is None or per_step is None:
            return ""
        per_record = spent / records if records else per_step
        meta, cap = self.trainer.meta["splits"], self.config.eval_max_records
        valid, test = (min(meta[split]["records"], cap or math.inf) * per_record
                       for split in ("valid", "test"))
        left = eta.eta_seconds(step, self.trainer.total_steps, self.config.eval_interval,
                               per_step, valid, test)
        if not self._later_steps:
            return f" eta {format_duration(left)}"
        # The later stages (the search's retrain) at this stage's pace: a hint, not a plan.
        later = eta.eta_seconds(0, self._later_steps, self.config.eval_interval, per_step,
                                valid, test)
        return f" eta {format_duration(left)} (whole command {format_duration(left + later)})"

    def _log_interval(self, out, busy, timed_steps, tokens_per_step):
        """Logs the steps since the last logged one (mean nll of their finite steps)."""
        nll = (self._interval_nll / self._interval_steps if self._interval_steps
               else math.nan)
        self._log_train(out, nll, busy / timed_steps,
                        tokens_per_step * timed_steps / max(busy, 1e-9))
        self._interval_nll, self._interval_steps, self._skipped = 0.0, 0, 0

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
        self.log.write(step_line(step, nll, values["perplexity"], out["lr"], step_values,
                                 self._skipped if skipping else None, tokens_per_sec))
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
        # The evaluation, the best checkpoint and the sample see the same weights; the live
        # ones are back before an interruption saves its checkpoint.
        with self.trainer.evaluation_weights():
            result = self._evaluate("valid")
            if result is not None:
                self._after_valid(result)
        if result is None:
            self._interrupt(abandoned_evaluation=True)
        return result

    def _after_valid(self, result):
        """Keeps the valid result, saves a new best checkpoint and logs a sample."""
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

    def _finish(self):
        trainer, config, model_dir = self.trainer, self.config, self.config.model_dir
        results = {"step": self.step, "model_family": config.model_family,
                   "planned_steps": trainer.horizon}
        if self.step < trainer.horizon and any(p.should_stop() for p in trainer.plugins):
            results["ended_by_plugin"] = True  # by design (a decided search), not cut short
        elif self.step < trainer.horizon and self._early_stop_due():
            results["early_stopped"] = {"evaluations": config.early_stop,
                                        "best_step": int(self.state.best_step.numpy())}
        for plugin in trainer.plugins:
            plugin.on_finish(results, model_dir, self.chief)
        valid = self._valid[1]  # run() always ends with a valid evaluation at this step
        with trainer.evaluation_weights():
            test = self._evaluate("test")
        if test is None:  # the last checkpoint holds this step: nothing to save
            self._interrupt()
        results["last"] = {"step": self.step, "valid": valid, "test": test}
        best_step = int(self.state.best_step.numpy())
        if best_step == self.step:  # the last weights are the best ones
            results["best"] = dict(results["last"])
        elif trainer.checkpointer.restore_best_model():
            # Its weights are the ones evaluated at its step (the averages with --ema_decay).
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
        # What the figures compare with (the run summary prints them beside the best).
        results["yardsticks"] = {"valid": yardsticks(config.data_dir, "valid", trainer.meta)}
        if self.chief:
            run_dir.atomic_write_json(os.path.join(model_dir, run_dir.METRICS_FILE), results)
            self.summaries.close()
        for callback in self.callbacks:
            callback.on_train_end(results)
        if self.step < trainer.horizon and not (results.get("ended_by_plugin")
                                                or results.get("early_stopped")):
            logging.warning("%s", cut_short_note(self.step, trainer.horizon))
        return results
