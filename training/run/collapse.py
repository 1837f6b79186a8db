"""A warning when training falls back to unigram level.

A model that has diverged often does not produce NaN: it settles on
predicting token frequencies, and its loss sits at the training data's
unigram entropy `H = -sum_w p(w) log p(w)` (nats per token). With the
adaptive-span reference's recipe and a global gradient clip before Adagrad
that is what happened (docs/results/adaptive_span_fidelity.md), silently.

`CollapseGuard` watches the validation loss: once the learning-rate warm-up is
over, an evaluation whose NLL is at least `THRESHOLD * H` logs one warning
line naming the likely cause and the flags to change. It is a `train`
callback (see `training.run.loop.Callback`), added to every run.
"""

import math

from absl import logging
import numpy as np

# Valid NLL at or above this fraction of the unigram entropy counts as
# unigram level (a unigram model scores about H on valid; the collapsed
# adaptive-span run sat at 0.95-0.99 H, a learning one far below).
THRESHOLD = 0.9


def unigram_entropy(counts):
    """Entropy in nats of the unigram distribution of `counts` (int [V])."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def likely_cause(config):
    """One sentence naming the flags most likely to blame for `config` (TrainConfig)."""
    if config.optimizer in ("adagrad", "adagrad_clip") and config.clip_norm > 0:
        return (f"--clip_norm={config.clip_norm:g} clips the gradients before Adagrad, which "
                "accumulates the clipped squares, so the step is not throttled: use "
                "--optimizer=adagrad_clip --tensor_clip_norm=C --clip_norm=0, or lower "
                f"--learning_rate={config.learning_rate:g}")
    return (f"the learning rate is likely too high for this model: lower "
            f"--learning_rate={config.learning_rate:g} or lengthen "
            f"--warmup_steps={config.warmup_steps}")


class CollapseGuard:
    """Warns once when a validation loss after the warm-up is at unigram level.

    Args:
        unigram_nll: the training data's unigram entropy (nats per token).
        warmup_steps: evaluations up to this step are not judged.
        cause: the sentence of `likely_cause`.
    """

    def __init__(self, unigram_nll, warmup_steps, cause):
        self.unigram_nll = float(unigram_nll)
        self.warmup_steps = int(warmup_steps)
        self.cause = cause
        self.warned = False

    @classmethod
    def for_run(cls, config, counts):
        """The guard of a run: its TrainConfig and its data's unigram counts (int [V])."""
        return cls(unigram_entropy(counts), config.warmup_steps, likely_cause(config))

    def message(self, step, nll):
        """The warning for a validation NLL at `step`, or None when it is fine."""
        if (step <= self.warmup_steps or not math.isfinite(nll)
                or nll < THRESHOLD * self.unigram_nll):
            return None
        return (f"step {step}: validation loss {nll:.4f} nats/token is at unigram level (the "
                f"training data's unigram entropy is {self.unigram_nll:.4f}): the model "
                f"predicts little more than token frequencies, training has likely collapsed; "
                f"{self.cause}")

    def on_evaluate(self, split, step, results):
        if split != "valid" or self.warned:
            return
        text = self.message(step, float(results["nll"]))
        if text is not None:
            self.warned = True
            logging.warning("%s", text)

    def on_train_log(self, step, logs):
        """Not used (the training loss is noisy)."""

    def on_train_end(self, results):
        """Not used."""
