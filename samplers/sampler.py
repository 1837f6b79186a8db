"""The sampling every caller runs: excluded ids, temperature, top-k, top-p, one draw.

The excluded ids (`mask.mask_tokens`: the unknown-word token unless a caller
allows it) are set to -inf first, so neither greedy decoding nor any filter
can pick them; then `log_probs / temperature`, then top-k, then top-p (nucleus, on the
renormalised top-k distribution), then one draw per row with a stateless seed
(`gumbel.gumbel_max`); `greedy` takes the argmax of the log-probabilities and
ignores the other options. Used by `serving.decoder.Decoder`, the exported
SavedModel's generate signature and the trainer's evaluation samples.
"""

import tensorflow as tf

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
