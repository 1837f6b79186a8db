"""Greedy decoding: the most likely token of each row."""

import tensorflow as tf

from samplers.base import Sampler


def greedy(log_probs):
    """int32 [B]: the argmax of float log_probs [B, V] (the first one on a tie)."""
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


class GreedySampler(Sampler):
    """"greedy": the argmax of each row (no parameters, the seeds unused)."""

    name = "greedy"
    params = ()

    def __call__(self, log_probs, seeds):
        return greedy(log_probs)
