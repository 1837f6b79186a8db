"""TensorBoard summaries of a run: scalars per split, tagged scalars, images, text.

One `tf.summary` file writer per split under `<logdir>/{train,valid,test}`, so
TensorBoard shows the splits as runs. Scalar tags of the loop are
`{split}/{name}`; a plug-in writes its own tags in its `on_log` hook through
`tagged_scalars` and `image` (the PAR search's architecture under `arch/`:
training/plugins/par_search/summaries.py; the adaptive spans under `spans/`:
training/plugins/span_report/plugin.py). All methods are host-side: call them
from the Python loop with numbers, NumPy arrays or eager tensors, not inside a
`tf.function`.
"""

import functools
import os

import tensorflow as tf

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

class TrainSummaries:
    """TensorBoard writers of one run.

    Args:
        logdir: directory of the run; the writers are created under
            `<logdir>/train`, `<logdir>/valid` and `<logdir>/test` on first use.

    Example:
        with TrainSummaries(model_dir + "/logs") as summaries:
            summaries.scalars("train", step, {"loss": 3.2, "tau": 0.7})
            summaries.tagged_scalars(step, {"arch/block_00/attention": 0.4})
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
    def tagged_scalars(self, step, values, split="train"):
        """Writes scalars under their own tags (a plug-in's, e.g. `arch/block_00/attention`).

        Args:
            step: global step.
            values: dict tag -> number.
            split: the writer ("train" by default).
        """
        with self.writer(split).as_default(step=int(step)):
            for tag, value in values.items():
                tf.summary.scalar(tag, float(value))

    @_write_errors
    def image(self, step, tag, image, description=None, split="train"):
        """Writes one image (uint8 [height, width, 3]) under `tag`."""
        with self.writer(split).as_default(step=int(step)):
            tf.summary.image(tag, image[None], description=description)

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
