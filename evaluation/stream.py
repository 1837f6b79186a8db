"""The one stream evaluator of training and serving: every transition exactly once.

Works through the language-model interface (model/interface.py) only: the
state in, the state out, `token_nll`. An id stream (a split's, read back by
`read_stream`: its records row by row and the tail the records
leave out; or a text file's) is scored in the segments of a plan
(`segment_plan`), with batch size B and segment length T:

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
from the model's zero state `initial_state(B, mem_len)`. With a split's own
batch size, the data's seq_len and the run's eval_mem_len, the batched part
is exactly the build's records.

Both sides use it: `Trainer.evaluate` (training/run/trainer.py, the figures of
metrics.json) and `serving.evaluation.evaluate_run` (evaluate.py). On a whole
split both score the same plan (records, then tail) with the same step, so a
checkpoint has one figure per split. A subset evaluation (`records_plan`: the
trainer's periodic evaluations under --eval_max_records) scores only the
split's first records, no tail; its caller scales the split's words and bytes
by the fraction of transitions scored.

With a tf.distribute strategy of R' > 1 replicas (the trainer's), the batched
segments run under `strategy.run`, replica r owning the fixed rows
[r*B/R', (r+1)*B/R') as in training (`pardata.replicas`), and their NLL sums
are reduced over the replicas; the tail runs at batch 1 on one device outside
`strategy.run`, from row B-1's state (`pardata.replicas.last_row`: the last
replica's local result). Under --xla the per-segment step is compiled with
XLA, as the trainer's forward pass is. The NLL is summed per segment on the
device (float32) and over the stream on the host in float64
(`runstore.metrics.NllAccumulator`).

Size glossary: L ids of the stream, B rows, T segment length, R segments per
row, M memory length (mem_len).
"""

import dataclasses
import math

from absl import logging
import numpy as np
import tensorflow as tf

from evaluation.errors import EvaluationError
from model.interface import check_model
from pardata.records import batchify, make_dataset, read_stream
from pardata.replicas import distribute_rows, last_row
from pardata.text import Progress
from runstore.metrics import NllAccumulator

PROGRESS_SECONDS = 10.0  # default seconds between progress lines (read at each evaluation)


def check_settings(seq_len, mem_len, batch_size):
    """Raises EvaluationError naming the flag of the first bad setting."""
    integer = (int, np.integer)
    for name, value, low in (("seq_len", seq_len, 1), ("mem_len", mem_len, 0),
                             ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, integer) or value < low:
            raise EvaluationError(f"--{name}={value} must be an integer >= {low}")


@dataclasses.dataclass(frozen=True)
class SegmentPlan:
    """The segments an evaluation scores, in order.

    Attributes:
        batch_size: B.
        seq_len: T.
        records: R, the number of batched segments.
        batched: iterable (read once) of R pairs (inputs, targets), int32
            [B, T] each (NumPy arrays or tensors).
        tail: int32 [n]: the stream from the tail's first input id (row B-1's
            last id; the stream's first id when R is 0) to its end, scored at
            batch 1 in segments of T; fewer than 2 ids: no tail.
    """

    batch_size: int
    seq_len: int
    records: int
    batched: object
    tail: np.ndarray

    @property
    def tail_segments(self):
        return math.ceil(max(self.tail.size - 1, 0) / self.seq_len)


def segment_plan(ids, batch_size, seq_len):
    """The plan of a whole id stream: R segments of [B, T], then the tail (module docstring)."""
    ids = np.asarray(ids).reshape(-1).astype(np.int32)
    rows, records, _ = batchify(ids, batch_size, seq_len)  # [B, R*T + 1]

    def batched():
        for t in range(records):
            window = np.ascontiguousarray(rows[:, t * seq_len:(t + 1) * seq_len + 1])
            yield window[:, :-1], window[:, 1:]

    return SegmentPlan(batch_size, seq_len, records, batched(),
                       ids[batch_size * records * seq_len:])


def records_plan(batches, records, batch_size, seq_len):
    """The plan of a build's first `records` records and no tail (a subset evaluation).

    Args:
        batches: iterable of (inputs, targets) [B, T], e.g.
            `make_dataset(data_dir, split).take(records)`.
        records: how many it yields.
    """
    return SegmentPlan(batch_size, seq_len, records, batches, np.zeros([0], np.int32))


def split_plan(data_dir, split, meta, max_records=0):
    """The plan of a build's split at its own batch size and the data's seq_len.

    The whole split (`max_records` 0 or at least the split's records): its
    stream (`read_stream`), so the build's records and then the
    tail. Otherwise the first `max_records` records and no tail (a subset;
    the caller scales the split's words and bytes by the fraction of its
    transitions scored). A build made before the tails were stored cannot
    give its tail: its records, with a warning.

    Returns:
        (SegmentPlan, whole: bool, True when every transition is scored).
    """
    info = meta["splits"][split]
    batch_size, seq_len = info["batch_size"], meta["seq_len"]
    whole = not max_records or max_records >= info["records"]
    if whole and "tail_file" not in info:
        logging.warning("split %s of %s has no tail file (built before the tails were "
                        "stored): evaluating its records only; rebuild the data with "
                        "--overwrite to score every transition", split, data_dir)
        whole, max_records = False, info["records"]
    if whole:
        return segment_plan(read_stream(data_dir, split, meta), batch_size,
                            seq_len), True
    batches = make_dataset(data_dir, split, meta=meta).take(max_records)
    return records_plan(batches, max_records, batch_size, seq_len), False


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
    rows, a replica's B/R' rows, then 1 for the tail) and the segment length
    (the last one shorter).

    Args:
        model: a built language model (model/interface.py), evaluated with
            training=False (no dropout, a supernet's deterministic blocks).
        mem_len: int >= 0, memory positions kept between segments.
        strategy: the tf.distribute strategy the model was built under (the
            trainer's); None: the current one (one device). With more than one
            replica the batched segments run under `strategy.run`.
        jit_compile: compile the step with XLA (the trainer's --xla).
    """

    def __init__(self, model, mem_len, strategy=None, jit_compile=False):
        self.model = check_model(model)
        self.mem_len = int(mem_len)
        if self.mem_len < 0:
            raise EvaluationError(f"--mem_len={self.mem_len} must be an integer >= 0")
        self.strategy = strategy or tf.distribute.get_strategy()
        ids = tf.TensorSpec([None, None], tf.int32)  # [B, T]
        self._step = tf.function(self._step_impl, jit_compile=jit_compile or None,
                                 input_signature=[ids, ids, model.state_signature()])
        self._replicated = tf.function(self._replicated_impl)

    def _step_impl(self, inputs, targets, state):
        hidden, new_state = self.model(inputs, state, training=False, mem_len=self.mem_len)
        nll = self.model.token_nll(hidden, targets)  # [B, T]
        count = tf.reduce_sum(tf.cast(targets >= 0, tf.float32))
        return tf.reduce_sum(nll), count, new_state

    def _replicated_impl(self, inputs, targets, state):
        """The step on every replica's rows; NLL and count summed over the replicas."""
        # A plain function around the step: handed a tf.function with an input
        # signature, strategy.run would bind the PerReplica values to it whole.
        nll, count, new_state = self.strategy.run(lambda *args: self._step(*args),
                                                  args=(inputs, targets, state))
        total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, nll, axis=None)
        count = self.strategy.reduce(tf.distribute.ReduceOp.SUM, count, axis=None)
        return total, count, new_state

    @property
    def replicas(self):
        return self.strategy.num_replicas_in_sync

    def tracing_count(self):
        """Number of traces of the compiled per-segment step."""
        return self._step.experimental_get_tracing_count()

    def evaluate(self, ids, batch_size, seq_len, label="evaluating", progress_interval=None):
        """Scores every transition of `ids` once (see the module docstring).

        Args:
            ids: int sequence [L], L >= 2, ids in [0, V).
            batch_size: B >= 1.
            seq_len: T >= 1.
            label: prefix of the progress lines.
            progress_interval: seconds between progress lines (with an ETA);
                None: `PROGRESS_SECONDS`.

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
        if ids.size - 1 < batch_size * seq_len and batch_size > 1:
            # Not a problem: a short text is scored as one row, every transition once.
            logging.info("%s: %d ids, fewer than one batch of %d x %d: scored as one row",
                         label, ids.size, batch_size, seq_len)
        return self.run(segment_plan(ids, batch_size, seq_len), label, progress_interval)

    def run(self, plan, label="evaluating", progress_interval=None, should_stop=None):
        """Scores a `SegmentPlan`: its batched segments, then its tail.

        Args:
            plan: a `SegmentPlan` (`segment_plan` or `records_plan`).
            label: prefix of the progress lines, e.g. "evaluating valid".
            progress_interval: seconds between progress lines; None:
                `PROGRESS_SECONDS`.
            should_stop: optional () -> bool, asked after every segment but
                the last; True abandons the evaluation (an interrupted run).

        Returns:
            A `StreamResult`, or None when abandoned.
        """
        total = plan.records + plan.tail_segments
        logging.info("%s: %d segment(s) of %d x %d, then %d tail segment(s) of 1 x <= %d; "
                     "mem_len %d", label, plan.records, plan.batch_size, plan.seq_len,
                     plan.tail_segments, plan.seq_len, self.mem_len)
        interval = PROGRESS_SECONDS if progress_interval is None else progress_interval
        progress = Progress(label, total, unit="segments", interval=interval)
        batched, tail = NllAccumulator(), NllAccumulator()
        done = 0
        for _ in self._segments(plan, batched, tail):
            done += 1
            progress.update(done)
            if should_stop is not None and done < total and should_stop():
                logging.info("%s abandoned after %d/%d segments", label, done, total)
                return None
        progress.finish(f"{int(round(batched.count + tail.count))} tokens")
        return StreamResult(batched, tail, plan.records, plan.tail_segments, plan.batch_size)

    def _segments(self, plan, batched, tail):
        """Runs the plan's segments one by one, adding each to its accumulator.

        Yields after every segment (so that the caller reports progress and
        may stop); the state is carried from the batched part into the tail.
        """
        distributed = self.replicas > 1
        state = self.model.initial_state(plan.batch_size, self.mem_len)
        if distributed:
            state = distribute_rows(self.strategy, state)
        records = 0
        for inputs, targets in plan.batched:
            if distributed:
                inputs, targets = distribute_rows(self.strategy, (
                    tf.convert_to_tensor(inputs), tf.convert_to_tensor(targets)))
                nll, count, state = self._replicated(inputs, targets, state)
            else:
                nll, count, state = self._step(inputs, targets, state)
            batched.add(nll.numpy(), count.numpy())
            records += 1
            yield
        if plan.tail.size < 2:
            return
        if records:
            state = last_row(self.strategy, list(state))  # row B-1 continues into the tail
        else:
            state = self.model.initial_state(1, self.mem_len)
        ids, seq_len = plan.tail, plan.seq_len
        for start in range(0, ids.size - 1, seq_len):
            window = ids[None, start:min(start + seq_len, ids.size - 1) + 1]  # [1, <= T + 1]
            nll, count, state = self._step(window[:, :-1], window[:, 1:], state)
            tail.add(nll.numpy(), count.numpy())
            yield
