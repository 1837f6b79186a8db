"""Top-k filtering (Fan et al. 2018, arXiv 1805.04833): keep the k most likely tokens."""

import numpy as np
import tensorflow as tf


def top_k_filter(logits, top_k):
    """Keeps the `top_k` largest logits of each row (0: all); the others become -inf.

    Ties with the k-th largest value are kept too, so the result does not depend
    on a sort order.

    Args:
        logits: float [B, V].
        top_k: int or int32 scalar tensor, >= 0.

    Returns:
        float32 [B, V].
    """
    logits = tf.cast(logits, tf.float32)  # [B, V]
    vocab = tf.shape(logits)[-1]
    top_k = tf.convert_to_tensor(top_k, tf.int32)

    def keep_k():
        # The k largest values only (no full sort): the k-th is the same.
        kth = tf.math.top_k(logits, tf.minimum(top_k, vocab), sorted=True).values[:, -1:]
        return tf.where(logits < kth, tf.constant(-np.inf, tf.float32), logits)

    # 0 (or k >= V) keeps every token: nothing to sort.
    return tf.cond(tf.logical_and(top_k > 0, top_k < vocab), keep_k,
                   lambda: tf.identity(logits))
