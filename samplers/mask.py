"""Excluded tokens: ids a sampler must never draw (the unknown-word token, by default)."""

import numpy as np
import tensorflow as tf


def mask_tokens(logits, token_ids):
    """Sets the logits of `token_ids` to -inf in every row, so no sampler draws them.

    Args:
        logits: float [B, V] (log-probabilities or unnormalised logits).
        token_ids: int sequence or int32 tensor [K] of ids in [0, V); K may be 0.

    Returns:
        float32 [B, V]: the other entries unchanged.
    """
    logits = tf.cast(logits, tf.float32)  # [B, V]
    ids = tf.reshape(tf.convert_to_tensor(token_ids, tf.int32), [-1])  # [K]
    hit = tf.scatter_nd(ids[:, None], tf.ones_like(ids), tf.shape(logits)[-1:]) > 0  # [V]
    return tf.where(hit[None, :], tf.constant(-np.inf, tf.float32), logits)
