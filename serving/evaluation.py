"""Evaluation of a trained run of any model family, every transition exactly once.

Works through the language-model interface (model/interface.py) only: the
state in, the state out, `token_nll`. A split's whole id stream (its records
read back row by row and the tail the records leave out, see
`data_utils.read_stream`) or a text file tokenized with the run's tokenizer
is re-batched with the evaluation's own batch size B and segment length T:

    R = (L - 1) // (B*T) full segments per row; row b holds the stream ids
        [b*R*T, (b+1)*R*T] (consecutive rows share their boundary id, as the
        build's records do), all rows run together, R segments of [B, T];
    the tail, the L - 1 - B*R*T transitions after the last row (< B*T),
        continues row B-1: its state (the last row of the batch state) is
        carried into segments of [1, T] over ids [B*R*T, L), the last one
        shorter.

So each of the L - 1 transitions is scored once, every one with the context
of the row it continues, and the state (Transformer-XL memories, SHA-RNN's
LSTM states and attention memory) is carried across all segments, starting
from the model's zero state `initial_state(B, mem_len)` as training's
evaluation does. With the data's eval batch, its seq_len and the run's
eval_mem_len, the batched part is exactly the build's records, so its NLL
is the number `Trainer.evaluate` writes to metrics.json; the tail adds the
rest. The NLL is summed per segment on the device (float32) and over the
split on the host in float64 (`runstore.metrics.NllAccumulator`).

Perplexity `exp(total NLL / tokens)`, word perplexity `exp(total NLL /
words)` and bits per byte `total NLL / ln 2 / bytes` come from
`runstore.metrics.lm_metrics`. Words (whitespace words plus one per line; without
the line ends for a `--nosp_eos` build) and UTF-8 bytes (without the newlines for
such a build) are meta.json's for a split and are counted by the build's own
code (`pardata.build.encode_split`) for a text file; they are exact because
the whole text is scored.

Size glossary: L ids of the stream, B rows, T segment length, R segments per
row, M memory length (mem_len), D model width.
"""

import dataclasses
import math
import os
import time

from absl import logging
import numpy as np
import tensorflow as tf

import data_utils
from model.interface import check_model
from pardata.text import Progress
from runstore import run_dir
from runstore.metrics import NllAccumulator, lm_metrics
from serving.errors import EvaluationError
from serving.sources import split_ids, text_file_ids

# Model config fields that evaluation may change on a trained run (the
# weights stay valid); a family whose config lacks one refuses it.
MODEL_SETTINGS = ("clamp_len", "same_length")


def check_settings(seq_len, mem_len, batch_size):
    """Raises EvaluationError naming the flag of the first bad setting."""
    integer = (int, np.integer)
    for name, value, low in (("seq_len", seq_len, 1), ("mem_len", mem_len, 0),
                             ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, integer) or value < low:
            raise EvaluationError(f"--{name}={value} must be an integer >= {low}")


@dataclasses.dataclass(frozen=True)
class StreamResult:
    """Summed NLL and tokens of one evaluated stream, by part.

    Attributes:
        batched: NllAccumulator of the R segments of [B, T].
        tail: NllAccumulator of the tail segments at batch 1.
        batched_segments: R.
        tail_segments: number of tail segments.
        batch_size: B.
    """

    batched: NllAccumulator
    tail: NllAccumulator
    batched_segments: int
    tail_segments: int
    batch_size: int

    @property
    def total_nll(self):
        return self.batched.total + self.tail.total

    @property
    def tokens(self):
        return int(round(self.batched.count + self.tail.count))

    def parts(self):
        """JSON-ready summary of both parts."""
        out = {}
        for name, acc, segments, batch in (
                ("batched", self.batched, self.batched_segments, self.batch_size),
                ("tail", self.tail, self.tail_segments, 1)):
            out[name] = {"total_nll": acc.total, "tokens": int(round(acc.count)),
                         "nll": acc.total / acc.count if acc.count else None,
                         "segments": segments, "batch_size": batch}
        return out


class StreamEvaluator:
    """Compiled per-segment NLL over a model's state, for one model and `mem_len`.

    The step takes ids `[B, None]` and the state with the relaxed shapes of
    `model.state_signature()`, so it is traced once whatever the batch (B
    rows, then 1 for the tail) and the segment length (the last one shorter).

    Args:
        model: a built language model (model/interface.py), evaluated with
            training=False (no dropout, a supernet's deterministic blocks).
        mem_len: int >= 0, memory positions kept between segments.
    """

    def __init__(self, model, mem_len):
        self.model = check_model(model)
        self.mem_len = int(mem_len)
        if self.mem_len < 0:
            raise EvaluationError(f"--mem_len={self.mem_len} must be an integer >= 0")
        ids = tf.TensorSpec([None, None], tf.int32)  # [B, T]
        self._step = tf.function(self._step_impl,
                                 input_signature=[ids, ids, model.state_signature()])

    def _step_impl(self, inputs, targets, state):
        hidden, new_state = self.model(inputs, state, training=False, mem_len=self.mem_len)
        nll = self.model.token_nll(hidden, targets)  # [B, T]
        count = tf.reduce_sum(tf.cast(targets >= 0, tf.float32))
        return tf.reduce_sum(nll), count, new_state

    def tracing_count(self):
        """Number of traces of the compiled step."""
        return self._step.experimental_get_tracing_count()

    def evaluate(self, ids, batch_size, seq_len, label="evaluating", progress_interval=10.0):
        """Scores every transition of `ids` once (see the module docstring).

        Args:
            ids: int sequence [L], L >= 2, ids in [0, V).
            batch_size: B >= 1.
            seq_len: T >= 1.
            label: prefix of the progress lines.
            progress_interval: seconds between progress lines (with an ETA).

        Returns:
            A `StreamResult`.

        Raises:
            EvaluationError: a bad setting or fewer than 2 ids.
        """
        check_settings(seq_len, self.mem_len, batch_size)
        ids = np.asarray(ids).reshape(-1)
        if ids.size < 2:
            raise EvaluationError(f"{ids.size} id(s): at least 2 are needed to score a "
                                  "transition")
        if ids.min() < 0 or ids.max() >= self.model.vocab_size:
            raise EvaluationError(f"ids must be in [0, {self.model.vocab_size}) (the model's "
                                  f"vocabulary), got {ids.min()}..{ids.max()}")
        ids = ids.astype(np.int32)
        length = ids.size
        rows, records, _ = data_utils.batchify(ids, batch_size, seq_len)  # [B, R*T + 1]
        tail_start = batch_size * records * seq_len  # the tail's first input id
        tail_segments = math.ceil((length - 1 - tail_start) / seq_len)
        if not records and batch_size > 1:
            logging.warning("%s: %d ids do not fill one batch of %d x %d: all evaluated at "
                            "batch 1", label, length, batch_size, seq_len)
        logging.info("%s: %d ids; %d segment(s) of %d x %d, then %d tail segment(s) of 1 x "
                     "<= %d; mem_len %d", label, length, records, batch_size, seq_len,
                     tail_segments, seq_len, self.mem_len)
        progress = Progress(label, records + tail_segments, unit="segments",
                            interval=progress_interval)
        batched, tail = NllAccumulator(), NllAccumulator()
        state = self.model.initial_state(batch_size, self.mem_len)
        for t in range(records):
            window = np.ascontiguousarray(rows[:, t * seq_len:(t + 1) * seq_len + 1])
            nll, count, state = self._step(window[:, :-1], window[:, 1:], state)
            batched.add(nll.numpy(), count.numpy())
            progress.update(t + 1)
        if records:
            state = [s[-1:] for s in state]  # row B-1 continues into the tail
        else:
            state = self.model.initial_state(1, self.mem_len)
        for k, start in enumerate(range(tail_start, length - 1, seq_len)):
            window = ids[None, start:min(start + seq_len, length - 1) + 1]  # [1, <= T + 1]
            nll, count, state = self._step(window[:, :-1], window[:, 1:], state)
            tail.add(nll.numpy(), count.numpy())
            progress.update(records + k + 1)
        progress.finish(f"{length - 1} tokens")
        return StreamResult(batched, tail, records, tail_segments, batch_size)


# --------------------------------------------------------------------- runs


def evaluate_run(run, *, split=None, text_file=None, data_dir=None, seq_len=None,
                 mem_len=None, batch_size=None, progress_interval=10.0):
    """Evaluates a loaded run on a split of its data or on a text file.

    Args:
        run: a `serving.generation.Run` (load it with the evaluation's
            `model_overrides`, e.g. clamp_len, same_length).
        split: "valid", "test" or "train" of the run's data; or
        text_file: a text file, tokenized with the run's tokenizer.
        data_dir: the build to read the split from; None: the run's data_dir.
        seq_len: T; None: the run's seq_len.
        mem_len: M; None: the run's eval_mem_len (its mem_len if that is 0).
        batch_size: B; None: the split's batch size in the data (a text
            file: the data's eval batch size).
        progress_interval: seconds between progress lines.

    Returns:
        JSON-ready dict: nll, perplexity, bits_per_token, word_perplexity,
        bits_per_byte, total_nll, tokens, words, bytes, ids, parts (batched,
        tail), settings, source, model_dir, checkpoint, step, model_family,
        seconds.

    Raises:
        EvaluationError, data_utils.DataError: a problem the user can fix.
    """
    if (split is None) == (text_file is None):
        raise EvaluationError("give one of --split or --text_file")
    config = run.config
    seq_len = config.seq_len if seq_len is None else seq_len
    mem_len = run.default_mem_len if mem_len is None else mem_len
    check_settings(seq_len, mem_len, 1 if batch_size is None else batch_size)
    if split is not None:
        ids, info = split_ids(run, split, data_dir)
        words, num_bytes = info["words"], info["bytes"]
        batch_size = info["batch_size"] if batch_size is None else batch_size
        source = {"split": split}
        if run.package is None:
            source["data_dir"] = data_dir or config.data_dir
        else:
            source["text"] = f"raw {run.meta.get('dataset')} {split}"
        label = f"evaluating {split}"
    else:
        ids, stats = text_file_ids(run.tokenizer, text_file)
        words, num_bytes = stats["words"], stats["bytes"]
        if batch_size is None:
            meta = run.meta if run.meta is not None else data_utils.load_meta(run.data_dir)
            batch_size = meta.get("eval_batch_size", meta["batch_size"])
        source = {"text_file": os.fspath(text_file)}
        label = f"evaluating {os.path.basename(text_file)}"
    start = time.monotonic()
    result = StreamEvaluator(run.model, mem_len).evaluate(
        ids, batch_size, seq_len, label=label, progress_interval=progress_interval)
    metrics = lm_metrics(result.total_nll, result.tokens, words=words, num_bytes=num_bytes)
    settings = {"seq_len": int(seq_len), "mem_len": int(mem_len), "batch_size": int(batch_size)}
    for name in MODEL_SETTINGS:
        if hasattr(config.model, name):
            settings[name] = getattr(config.model, name)
    return dict(
        metrics, total_nll=result.total_nll, tokens=result.tokens, ids=int(len(ids)),
        words=int(words), bytes=int(num_bytes), parts=result.parts(), settings=settings,
        source=source, model_family=config.model_family,
        seconds=round(time.monotonic() - start, 3), **_model_source(run))


def _model_source(run):
    """What was evaluated: model_dir, checkpoint, step (and model, for a package)."""
    if run.package is None:
        return {"model_dir": run.model_dir or os.fspath(run.config.model_dir),
                "checkpoint": run.checkpoint_path,
                "step": run_dir.checkpoint_step(run.checkpoint_path)}
    source = run.package.source
    return {"model": os.fspath(run.checkpoint_path), "model_dir": source.get("run"),
            "checkpoint": source.get("checkpoint"), "step": source.get("step"),
            "storage_dtype": run.package.storage_dtype}


def default_output(model_dir, split=None, text_file=None):
    """`<model_dir>/eval_<split>.json`, or `eval_text_<file stem>.json` for a text file."""
    if split is not None:
        return os.path.join(model_dir, f"eval_{split}.json")
    stem = os.path.splitext(os.path.basename(os.fspath(text_file)))[0]
    return os.path.join(model_dir, f"eval_text_{stem}.json")


def check_output(path):
    """Raises EvaluationError unless `path` can be written (checked before evaluating)."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not path or os.path.isdir(path):
        raise EvaluationError(f"--output={path} must be a file name (a .json file)")
    if not os.path.isdir(parent):
        raise EvaluationError(f"--output={path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise EvaluationError(f"--output={path}: directory {parent} is not writable")
    return path


def write_result(path, result):
    """Writes the result as JSON atomically (runstore.run_dir: temporary name, fsync, rename).

    Raises:
        EvaluationError: the file cannot be written.
    """
    path = check_output(path)
    try:
        run_dir.atomic_write_json(path, result)
    except run_dir.WriteError as error:
        raise EvaluationError(f"--output={path}: cannot write it ({error.reason}); nothing "
                              "was written") from None
    return path
