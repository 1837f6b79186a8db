"""The host side of training: `train(config)` and the loop that drives `Trainer`.

`train` checks the config against the data, the replicas and model_dir, then
`_Run` feeds the training split to `Trainer.train_step` (training/trainer.py,
which documents the step), logs, evaluates, saves checkpoints and writes
metrics.json. Epochs start from fresh memories; a run resumes from the exact
data position of its latest checkpoint, with the schedules planned at its
first start (--max_steps/--epochs may change how long it runs, not the
learning-rate or temperature curves).
"""

import contextlib
import json
import math
import os
import shutil
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import data_utils
from training import checkpoint as checkpoint_lib
from training import metrics, run_lock, summaries
from training import strategy as strategy_lib
from training.config import ConfigError, check_data, check_replicas, check_resume
from training.trainer import Trainer

TRAINING_LOG = "training_log.log"
RUN_DATA_DIR = "data"  # meta.json + tokenizer files of the training data
METRICS_FILE = "metrics.json"


# Keys of Trainer.train_step's result that are not plug-in step values.
_STEP_OUTPUTS = frozenset({"loss", "nll", "lr", "finite"})


class NonFiniteError(RuntimeError):
    """The loss or a gradient norm became NaN or infinite."""


class Callback:
    """Hooks called by `train`; override what you need (e.g. in a notebook)."""

    def on_train_log(self, step, logs):
        """After every `log_interval` steps with the logged training values."""

    def on_evaluate(self, split, step, results):
        """After each evaluation with its metrics."""

    def on_train_end(self, results):
        """At the end with the content of metrics.json."""


class _TrainingLog:
    """model_dir/training_log.log: one plain-text line per logged step."""

    def __init__(self, path, enabled):
        self.path = path
        self.enabled = enabled

    def truncate(self, step):
        """Drops lines after `step` (logged by a run that died before saving)."""
        if not (self.enabled and os.path.exists(self.path)):
            return
        with open(self.path, encoding="utf-8") as f:
            lines = f.readlines()
        kept = [line for line in lines if _line_step(line) <= step]
        if len(kept) != len(lines):
            with open(self.path, "w", encoding="utf-8") as f:
                f.writelines(kept)

    def write(self, values):
        if not self.enabled:
            return
        line = " ".join(f"{k}={v}" for k, v in values.items())
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _line_step(line):
    head = line.split(" ", 1)[0]
    return int(head[len("step="):]) if head.startswith("step=") else -1


def read_training_log(path):
    """Parses training_log.log into a list of dicts (numbers as floats, step int)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
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


def train(config, callbacks=None, *, strategy=None, overwrite=False):
    """Trains, or resumes, the run described by `config`.

    Everything that can be checked is checked before anything is written.
    Then: config.json, checkpoints every checkpoint_interval steps and at the
    end, the best checkpoint on valid in model_dir/best, training_log.log,
    TensorBoard summaries under config.logdir (default logs/<run>),
    metrics.json with valid and test metrics of the last and the best
    checkpoints, and what the plug-ins add (training/plugins: for a PAR
    supernet the derived architecture, architecture.json/.txt and the
    probability plots). A plug-in may then name a run to train next in the
    same call (`Plugin.follow_up`: the PAR search's --then_retrain), whose
    results it adds to this run's.

    Args:
        config: TrainConfig.
        callbacks: iterable of `Callback`.
        strategy: an existing tf.distribute strategy (default: made from
            config.strategy; must be created before any TF op).
        overwrite: discard a previous run in model_dir instead of resuming.

    Returns:
        The content of metrics.json (dict).

    Raises:
        ConfigError: flags, data or model_dir do not fit together.
        NonFiniteError: the loss or a gradient became non-finite.
    """
    callbacks = list(callbacks or [])
    if strategy is None:
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
    try:
        meta, tokenizer = data_utils.load_built(config.data_dir)
        data_utils.verify_built(config.data_dir, meta)  # every shard, before step 1
    except data_utils.DataError as error:
        raise ConfigError(f"--data_dir={config.data_dir}: {error}") from None
    check_data(config, meta)
    check_replicas(config, meta, strategy.num_replicas_in_sync)
    chief = strategy_lib.is_chief(strategy)
    # One training process per run directory (only the chief writes there).
    with run_lock.RunLock(config.model_dir) if chief else contextlib.nullcontext():
        resume = check_resume(config, overwrite)
        logdir = config.logdir or default_logdir(config.model_dir)
        if chief:
            if overwrite:
                checkpoint_lib.clear_run(config.model_dir, logdir)
            os.makedirs(config.model_dir, exist_ok=True)
            config.save()
            _copy_tokenizer(config.data_dir, meta, config.model_dir)
        policy = keras.mixed_precision.global_policy()
        # A resumed run keeps the horizon it started with (lr, tau, warm-ups).
        horizon = checkpoint_lib.saved_horizon(config.model_dir) if resume else None
        try:
            trainer = Trainer(config, meta, strategy, tokenizer, horizon=horizon)
            return _Run(trainer, logdir, chief, callbacks, resume).run(), trainer.plugins
        finally:
            keras.mixed_precision.set_global_policy(policy)


def _copy_tokenizer(data_dir, meta, model_dir):
    """Copies meta.json and the tokenizer files into `model_dir/data/`.

    A run directory then generates and exports without the built dataset
    (serving.generation looks there first). Files are written under a
    temporary name and renamed, meta.json last.
    """
    target = os.path.join(model_dir, RUN_DATA_DIR)
    os.makedirs(target, exist_ok=True)
    for name in list(meta["tokenizer"].get("files", [])) + ["meta.json"]:
        partial = os.path.join(target, name + ".partial")
        shutil.copyfile(os.path.join(data_dir, name), partial)
        os.replace(partial, os.path.join(target, name))


class _Run:
    """The host loop of `train` (logging, evaluation, checkpoints, the end)."""

    def __init__(self, trainer, logdir, chief, callbacks, resume):
        self.trainer = trainer
        self.config = trainer.config
        self.state = trainer.state
        self.chief = chief
        self.callbacks = callbacks
        model_dir = self.config.model_dir
        start = trainer.restore() if resume else None
        self.step = start or 0
        self.log = _TrainingLog(os.path.join(model_dir, TRAINING_LOG), chief)
        self.log.truncate(self.step)
        self.summaries = summaries.TrainSummaries(logdir) if chief else None
        for plugin in trainer.plugins:
            plugin.on_start(model_dir, start)
        if start is not None:
            logging.info("resuming %s at step %d", model_dir, self.step)

    def run(self):
        trainer, config, state = self.trainer, self.config, self.state
        records = trainer.meta["splits"]["train"]["records"]
        tokens_per_step = trainer.batch_size * config.seq_len
        interval_nll = float(state.interval_nll.numpy())
        interval_steps = int(state.interval_steps.numpy())
        # Step time and tokens/s count the steps only, not evaluations or saves.
        timed_steps, busy = 0, 0.0
        iterator, evaluated_at = None, None
        self._valid = (None, None)
        logging.info("training %d steps (%d records per epoch, %d replica(s))",
                     trainer.total_steps, records, trainer.replicas)
        first_step = True
        # The ETA counts everything after the first step (evaluations and saves
        # included), so it is the wall time still to wait.
        self._clock = None
        stop = any(plugin.should_stop() for plugin in trainer.plugins)
        while self.step < trainer.total_steps and not stop:
            start = time.perf_counter()
            if first_step:
                logging.info("step %d: tracing and compiling the training step (the first step "
                             "takes longer: tens of seconds on a CPU)", self.step + 1)
            position = int(state.data_position.numpy())
            if iterator is None:
                iterator = iter(data_utils.make_dataset(
                    config.data_dir, "train", meta=trainer.meta, skip_records=position))
            inputs, targets = next(iterator)
            out = trainer.train_step(inputs, targets)
            busy += time.perf_counter() - start
            if first_step:
                logging.info("first step done in %.1f s", time.perf_counter() - start)
                first_step = False
                self._clock = (time.perf_counter(), self.step + 1)
            if not out["finite"]:
                norms = ", ".join(f"{k}={v}" for k, v in out.items() if k.endswith("grad_norm"))
                raise NonFiniteError(
                    f"non-finite loss or gradient at step {self.step + 1} (nll={out['nll']}, "
                    f"{norms}); "
                    f"stopped without saving, the last checkpoint ({trainer.checkpointer.latest}) "
                    "is intact: lower --learning_rate or --clip_norm, or use float32")
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
            interval_nll += out["nll"]
            interval_steps += 1
            timed_steps += 1
            if self.step % config.log_interval == 0 or self.step == trainer.total_steps:
                self._log_train(out, interval_nll / interval_steps, busy / timed_steps,
                                tokens_per_step * timed_steps / max(busy, 1e-9))
                interval_nll, interval_steps = 0.0, 0
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
                state.interval_nll.assign(interval_nll)
                state.interval_steps.assign(interval_steps)
                trainer.save()
        if evaluated_at != self.step:  # a finished run started again
            self._evaluate_valid()
        return self._finish()

    def _eta(self, step):
        """' eta 1h02m' from the wall time per step since the first step, or ''."""
        if self._clock is None or step <= self._clock[1]:
            return ""
        since, first = self._clock
        per_step = (time.perf_counter() - since) / (step - first)
        return f" eta {format_duration(per_step * (self.trainer.total_steps - step))}"

    def _log_train(self, out, nll, step_time, tokens_per_sec):
        trainer, step = self.trainer, self.step
        values = dict(loss=nll, perplexity=metrics.lm_metrics(nll, 1)["perplexity"],
                      bits_per_token=nll / math.log(2), lr_weights=out["lr"],
                      step_time=step_time, tokens_per_sec=tokens_per_sec,
                      grad_norm=out["grad_norm"])
        step_values = {k: out[k] for k in out if k not in _STEP_OUTPUTS
                       and not k.endswith("grad_norm")}  # the plug-ins' (e.g. tau)
        values.update(step_values)
        for plugin in trainer.plugins:
            values.update(plugin.log_values(step, out))
        line = {"step": step, "loss": f"{nll:.7f}", "ppl": f"{values['perplexity']:.4f}",
                "lr": f"{out['lr']:.6e}"}
        line.update({k: f"{v:.6f}" for k, v in step_values.items()})
        line["tokens_per_sec"] = f"{tokens_per_sec:.1f}"
        self.log.write(line)
        extra = "".join(f" {k} {v:.3f}" for k, v in step_values.items())
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

    def _evaluate(self, split):
        result = self.trainer.evaluate(split, self.config.eval_max_records)
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
        results = {"step": self.step, "model_family": config.model_family}
        for plugin in trainer.plugins:
            plugin.on_finish(results, model_dir, self.chief)
        valid = self._valid[1]  # run() always ends with a valid evaluation at this step
        results["last"] = {"step": self.step, "valid": valid, "test": self._evaluate("test")}
        best_step = int(self.state.best_step.numpy())
        if best_step == self.step:  # the last weights are the best ones
            results["best"] = dict(results["last"])
        elif trainer.checkpointer.restore_best_model():
            results["best"] = {"step": best_step, "valid": trainer.evaluate(
                "valid", config.eval_max_records), "test": trainer.evaluate(
                "test", config.eval_max_records)}
            logging.info("best checkpoint (step %d): valid ppl %.2f, test ppl %.2f", best_step,
                         results["best"]["valid"]["perplexity"],
                         results["best"]["test"]["perplexity"])
        if self.chief:
            path = os.path.join(model_dir, METRICS_FILE)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2, sort_keys=True)
            os.replace(path + ".tmp", path)
            self.summaries.close()
        for callback in self.callbacks:
            callback.on_train_end(results)
        return results
