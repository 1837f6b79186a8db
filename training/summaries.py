"""TensorBoard summaries of a run: scalars per split, architecture, spans, text.

One `tf.summary` file writer per split under `<logdir>/{train,valid,test}`, so
TensorBoard shows the splits as runs. Scalar tags are `{split}/{name}`; the
architecture of the PAR supernet (per-block probabilities of its candidates,
the block types of model/transformer_xl/blocks.py) and the adaptive spans go
to the train writer under `arch/` and `spans/`. All methods are host-side: call them from the Python
loop with
numbers, NumPy arrays or eager tensors, not inside a `tf.function`.
"""

import functools
import os

import numpy as np
import tensorflow as tf

from model.transformer_xl import blocks
from runstore import run_dir

SPLITS = ("train", "valid", "test")


def _write_errors(method):
    """A failed event write (full disk) becomes run_dir.WriteError naming the directory."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except tf.errors.OpError as error:
            split = args[0] if args and args[0] in SPLITS else None
            where = os.path.join(self.logdir, split) if split else self.logdir
            raise run_dir.WriteError(f"{where} (TensorBoard events)",
                                     run_dir.reason(error)) from None

    return wrapper

# Pixels per cell of the block-by-choice heat map: TensorBoard shows images at
# their native size, and a 6x3 image would be unreadable.
_CELL = 24


def _heat_colors(probs):
    """Maps probabilities in [0, 1] to RGB uint8, white (0) to dark blue (1)."""
    low = np.array([255.0, 255.0, 255.0])
    high = np.array([8.0, 48.0, 107.0])
    p = np.clip(probs, 0.0, 1.0)[..., None]
    return np.round(low + (high - low) * p).astype(np.uint8)


def arch_image(probs, cell=_CELL):
    """Block-by-choice heat map of architecture probabilities.

    Rows are blocks (block 0 at the top), columns the candidates (attention,
    dense, identity); one-pixel grey lines separate the cells.

    Args:
        probs: [num_blocks, C] probabilities.
        cell: pixels per cell side.

    Returns:
        uint8 array [num_blocks * cell, C * cell, 3].
    """
    probs = _check_probs(probs)
    image = np.repeat(np.repeat(_heat_colors(probs), cell, axis=0), cell, axis=1)
    image[::cell, :, :] = 160
    image[:, ::cell, :] = 160
    return image


def _check_probs(probs):
    probs = np.asarray(probs, dtype=np.float64)
    num = len(blocks.specs())
    if probs.ndim != 2 or probs.shape[1] != num or probs.shape[0] == 0:
        raise ValueError(
            f"architecture probabilities must have shape [num_blocks, {num}], got {probs.shape}"
        )
    if not np.all(np.isfinite(probs)):
        raise ValueError("architecture probabilities contain NaN or inf")
    return probs


class TrainSummaries:
    """TensorBoard writers of one run.

    Args:
        logdir: directory of the run; the writers are created under
            `<logdir>/train`, `<logdir>/valid` and `<logdir>/test` on first use.

    Example:
        with TrainSummaries(model_dir + "/logs") as summaries:
            summaries.scalars("train", step, {"loss": 3.2, "tau": 0.7})
            summaries.architecture(step, model.arch_probabilities)
    """

    def __init__(self, logdir):
        self.logdir = os.fspath(logdir)
        self._writers = {}

    def writer(self, split):
        """The `tf.summary` writer of `split` (created on first use)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        if split not in self._writers:
            self._writers[split] = tf.summary.create_file_writer(
                os.path.join(self.logdir, split)
            )
        return self._writers[split]

    @_write_errors
    def scalars(self, split, step, values):
        """Writes `{split}/{name}` scalars.

        Args:
            split: "train", "valid" or "test".
            step: global step (int).
            values: dict name -> number; None values are skipped, so callers
                can pass optional metrics (e.g. word_perplexity) unconditionally.
        """
        with self.writer(split).as_default(step=int(step)):
            for name, value in values.items():
                if value is None:
                    continue
                tf.summary.scalar(f"{split}/{name}", float(value))

    @_write_errors
    def architecture(self, step, probs):
        """Writes per-block choice probabilities and their heat map (train writer).

        Args:
            step: global step.
            probs: [num_blocks, C] probabilities of the registered block types.
        """
        probs = _check_probs(probs)
        names = blocks.names()
        with self.writer("train").as_default(step=int(step)):
            for block, row in enumerate(probs):
                for choice, p in zip(names, row):
                    tf.summary.scalar(f"arch/block_{block:02d}/{choice}", float(p))
            tf.summary.image(
                "arch/probabilities",
                arch_image(probs)[None],
                description=(
                    "Rows: blocks 0 (input side) to "
                    f"{len(probs) - 1}; columns: {', '.join(names)}; darker is more probable."
                ),
            )

    @_write_errors
    def spans(self, step, spans):
        """Writes adaptive attention spans `spans/layer_{l:02d}/head_{h}` (train writer).

        Args:
            step: global step.
            spans: one [N] array of spans (in tokens) per attention layer.
        """
        with self.writer("train").as_default(step=int(step)):
            for layer, heads in enumerate(spans):
                for head, span in enumerate(np.asarray(heads, dtype=np.float64).reshape(-1)):
                    tf.summary.scalar(f"spans/layer_{layer:02d}/head_{head}", float(span))

    @_write_errors
    def text(self, step, tag, text, split="train"):
        """Writes a text summary (e.g. a generated sample) under `tag`."""
        with self.writer(split).as_default(step=int(step)):
            tf.summary.text(tag, str(text))

    @_write_errors
    def flush(self):
        """Flushes every open writer to disk."""
        for writer in self._writers.values():
            writer.flush()

    @_write_errors
    def close(self):
        """Flushes and closes every writer; later calls reopen new event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
