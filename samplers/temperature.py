"""Temperature: a sharper (T < 1) or flatter (T > 1) distribution."""

import tensorflow as tf


def with_temperature(log_probs, temperature):
    """float32 [B, V] logits `log_probs / temperature` (temperature > 0, float or tensor)."""
    return tf.cast(log_probs, tf.float32) / tf.cast(temperature, tf.float32)
