"""Language-modeling metrics computed from a total negative log-likelihood.

Perplexity is `exp(total NLL / total tokens)` over a whole split, never a mean
of per-batch perplexities (that mean is biased upward by Jensen's inequality
and depends on the batching). Word perplexity `exp(total NLL / words)` and
bits per byte `total NLL / ln 2 / bytes` divide the same total by counts of the
source text (from meta.json), so models with different tokenizers compare.
"""

import math

import numpy as np

_LN2 = math.log(2.0)


def _exp(x):
    """exp that returns inf instead of raising for a diverged model."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _positive_count(name, value):
    value = float(value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0 to compute a per-{name} metric, got {value}")
    return value


def lm_metrics(total_nll, tokens, words=None, num_bytes=None):
    """Metrics of a split from its summed NLL (nats) and its counts.

    Args:
        total_nll: sum of the per-token NLL over the split, in nats.
        tokens: number of predicted tokens (> 0).
        words: words of the source text (whitespace words plus one per line,
            as meta.json counts them), or None.
        num_bytes: UTF-8 bytes of the source text, or None.

    Returns:
        Dict of Python floats: `nll` (nats per token), `perplexity`,
        `bits_per_token`, and `word_perplexity` / `bits_per_byte` when the
        corresponding count is given.

    Raises:
        ValueError: a count is not positive.
    """
    total = float(total_nll)
    tokens = _positive_count("tokens", tokens)
    nll = total / tokens
    result = {
        "nll": nll,
        "perplexity": _exp(nll),
        "bits_per_token": nll / _LN2,
    }
    if words is not None:
        result["word_perplexity"] = _exp(total / _positive_count("words", words))
    if num_bytes is not None:
        result["bits_per_byte"] = total / _LN2 / _positive_count("num_bytes", num_bytes)
    return result


class NllAccumulator:
    """Sums NLL and token counts on the host in float64 across batches.

    float32 sums drift once a split has millions of tokens; the per-batch sums
    coming from the device are small enough for float32, their total is not.

    Example:
        acc = NllAccumulator()
        for batch in split:
            acc.add(nll_sum, count)     # tensors or numbers
        metrics = acc.result(words=meta_words, num_bytes=meta_bytes)
    """

    def __init__(self):
        self.reset()

    def reset(self):
        """Forgets everything added so far."""
        self._total = np.float64(0.0)
        self._count = np.float64(0.0)

    def add(self, nll_sum, count):
        """Adds one batch.

        Args:
            nll_sum: summed NLL of the batch (scalar; tensor, NumPy or Python).
            count: number of tokens it covers (padding excluded).
        """
        self._total += np.float64(np.asarray(nll_sum, dtype=np.float64))
        self._count += np.float64(np.asarray(count, dtype=np.float64))

    @property
    def total(self):
        """Summed NLL so far (nats), a Python float."""
        return float(self._total)

    @property
    def count(self):
        """Tokens so far, a Python float."""
        return float(self._count)

    def result(self, words=None, num_bytes=None):
        """`lm_metrics` of everything added, plus `tokens` (the count).

        Raises:
            ValueError: nothing was added.
        """
        if self._count <= 0:
            raise ValueError("NllAccumulator.result() called before any token was added")
        metrics = lm_metrics(self._total, self._count, words=words, num_bytes=num_bytes)
        metrics["tokens"] = int(round(self.count))
        return metrics
