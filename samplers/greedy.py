"""Greedy decoding: the most likely token of each row."""

import tensorflow as tf


def greedy(log_probs):
    """int32 [B]: the argmax of float log_probs [B, V] (the first one on a tie)."""
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
