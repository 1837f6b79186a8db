"""Top-p (nucleus) filtering (Holtzman et al. 2020, arXiv 1904.09751)."""

import numpy as np
import tensorflow as tf


def top_p_filter(logits, top_p):
    """Keeps, of each row's distribution `softmax(logits)`, the smallest set of most
    likely tokens whose mass is >= `top_p` (1: all); the others become -inf.

    The token at sorted position i is kept when the mass before it is < p; ties
    with the last kept value are kept too. Entries already -inf stay -inf.

    Args:
        logits: float [B, V].
        top_p: float or float32 scalar tensor in (0, 1].

    Returns:
        float32 [B, V].
    """
    logits = tf.cast(logits, tf.float32)  # [B, V]
    top_p = tf.convert_to_tensor(top_p, tf.float32)
    return tf.cond(top_p < 1.0, lambda: _nucleus(logits, top_p), lambda: tf.identity(logits))


def _nucleus(logits, top_p):
    """`top_p_filter` for top_p < 1 (the sort is skipped for 1, which keeps all)."""
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")  # [B, V]
    before = tf.cumsum(tf.nn.softmax(ordered, axis=-1), axis=-1, exclusive=True)  # [B, V]
    kept = tf.logical_and(before < top_p, tf.math.is_finite(ordered))  # [B, V], a prefix
    count = tf.maximum(tf.reduce_sum(tf.cast(kept, tf.int32), axis=-1), 1)  # [B]
    threshold = tf.gather(ordered, count - 1, batch_dims=1)[:, None]  # [B, 1]
    return tf.where(logits < threshold, tf.constant(-np.inf, tf.float32), logits)
