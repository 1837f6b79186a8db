"""Progressive freezing's resumable state (docs/freezing.md): the per-block counters a
search keeps in its checkpoints (`ParSearch.checkpoint_objects`, as `search`)."""

import tensorflow as tf


class FreezeState(tf.Module):
    """The freezing counters of a search, saved in the checkpoints (per block).

    stable_since: first step of the current run of steps at which the block's
        most probable candidate `stable_choice` had a probability of at least
        the threshold (-1: none).
    frozen_step, frozen_probability: when the block was frozen and the
        probability of its choice then (-1 and 0 while it searches); the
        choice itself is the model's (`TransformerXLLM.frozen_blocks`).
    """

    def __init__(self, num_blocks):
        super().__init__(name="freeze_state")
        minus_one = tf.fill([num_blocks], tf.constant(-1, tf.int64))
        self.stable_since = tf.Variable(minus_one, trainable=False, name="stable_since")
        self.stable_choice = tf.Variable(minus_one, trainable=False, name="stable_choice")
        self.frozen_step = tf.Variable(minus_one, trainable=False, name="frozen_step")
        self.frozen_probability = tf.Variable(tf.zeros([num_blocks], tf.float64),
                                              trainable=False, name="frozen_probability")
