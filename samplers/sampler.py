"""The sampling every caller runs: excluded ids, temperature, top-k, top-p, one draw.

The excluded ids (`mask.mask_tokens`: the unknown-word token unless a caller
allows it) are set to -inf first, so neither greedy decoding nor any filter
can pick them; then `log_probs / temperature`, then top-k, then top-p (nucleus, on the
renormalised top-k distribution), then one draw per row with a stateless seed
(`gumbel.gumbel_max`); `greedy` takes the argmax of the log-probabilities and
ignores the other options. Used by `serving.decoder.Decoder`, the exported
SavedModel's generate signature and the trainer's evaluation samples.

The same draw as `Sampler` objects (samplers/base.py) for the registry
(samplers/registry.py): `RandomSampler` ("sample": temperature, top_k, top_p),
and KerasHub's single-option names `TemperatureSampler` ("temperature"),
`TopKSampler` ("top_k", k required) and `TopPSampler` ("top_p", p required).
"""

import tensorflow as tf

from samplers.base import Param, Sampler
from samplers.greedy import greedy as argmax_tokens
from samplers.gumbel import gumbel_max
from samplers.mask import mask_tokens
from samplers.temperature import with_temperature
from samplers.top_k import top_k_filter
from samplers.top_p import top_p_filter


def filter_logits(logits, top_k=0, top_p=1.0):
    """Top-k then top-p filtering of float logits [B, V]; removed entries become -inf.

    Args:
        logits: float [B, V] (already divided by the temperature).
        top_k: int or int32 scalar tensor, >= 0 (0: all).
        top_p: float or float32 scalar tensor in (0, 1] (1: all).

    Returns:
        float32 [B, V]: kept logits unchanged, the others -inf.
    """
    return top_p_filter(top_k_filter(logits, top_k), top_p)


def sample_tokens(log_probs, seeds, temperature=1.0, top_k=0, top_p=1.0, greedy=False,
                  exclude_ids=()):
    """Draws one token per row: int32 [B] from log_probs float [B, V].

    `seeds` int64 [B, 2] is the stateless seed of each row; `temperature`
    (> 0), `top_k` (>= 0, 0: off), `top_p` ((0, 1], 1: off) and `greedy`
    (argmax of `log_probs`, the other options ignored) are scalars;
    `exclude_ids` int [K] (K >= 0) are never drawn, greedy or not.
    """
    log_probs = mask_tokens(log_probs, exclude_ids)  # [B, V]

    def draw():
        return gumbel_max(filter_logits(with_temperature(log_probs, temperature), top_k, top_p),
                          seeds)

    return tf.cond(tf.convert_to_tensor(greedy, tf.bool), lambda: argmax_tokens(log_probs), draw)


TEMPERATURE = Param("temperature", 1.0, low=0.0, low_open=True, high_open=True,
                    condition="> 0 (greedy decoding takes the argmax)")
TOP_K = Param("top_k", 0, low=0, high=2**24, integer=True, condition=">= 0 (0 keeps all tokens)")
TOP_P = Param("top_p", 1.0, low=0.0, low_open=True, high=1.0,
              condition="in (0, 1] (1 keeps all tokens)")


class RandomSampler(Sampler):
    """"sample": temperature, then top-k, then top-p, then one Gumbel-max draw per row
    (`sample_tokens` without its greedy option): generate.py's keyword options."""

    name = "sample"
    params = (TEMPERATURE, TOP_K, TOP_P)

    def _options(self):
        """(temperature, top_k, top_p) of this sampler."""
        return self.temperature, self.top_k, self.top_p

    def __call__(self, log_probs, seeds):
        temperature, top_k, top_p = self._options()
        return gumbel_max(filter_logits(with_temperature(log_probs, temperature), top_k, top_p),
                          seeds)


class TemperatureSampler(RandomSampler):
    """"temperature": the whole distribution at a temperature."""

    name = "temperature"
    params = (TEMPERATURE,)

    def _options(self):
        return self.temperature, 0, 1.0


class TopKSampler(RandomSampler):
    """"top_k": the k most likely tokens (top_k >= 1 required), at a temperature."""

    name = "top_k"
    params = (Param("top_k", None, low=1, high=2**24, integer=True,
                    condition=">= 1 (the tokens kept)"), TEMPERATURE)

    def _options(self):
        return self.temperature, self.top_k, 1.0


class TopPSampler(RandomSampler):
    """"top_p": the nucleus of mass top_p (required), at a temperature."""

    name = "top_p"
    params = (Param("top_p", None, low=0.0, low_open=True, high=1.0,
                    condition="in (0, 1], e.g. 0.9"), TEMPERATURE)

    def _options(self):
        return self.temperature, 0, self.top_p
