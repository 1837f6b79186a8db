"""Samplers defined for the tests only (tests/serving/test_custom_sampler.py): registered
at run time, with no product file edited; a generate.py child registers them too.

`AlwaysToken` ("always_token") draws the token `k` whatever the model says, so its output
is known in advance; `Ranked` ("ranked") takes the `rank`-th most likely token (rank 0 is
greedy decoding).
"""


def _classes():
    import tensorflow as tf

    from samplers.base import Param, Sampler

    class AlwaysToken(Sampler):
        name = "always_token"
        params = (Param("k", None, low=0, integer=True),)

        def __call__(self, log_probs, seeds):
            return tf.fill(tf.shape(log_probs)[:1], tf.cast(self.k, tf.int32))

    class Ranked(Sampler):
        name = "ranked"
        params = (Param("rank", 0, low=0, high=3, integer=True),)

        def __call__(self, log_probs, seeds):
            order = tf.argsort(log_probs, axis=-1, direction="DESCENDING", stable=True)
            return tf.gather(order, tf.cast(self.rank, tf.int32), axis=1)

    return AlwaysToken, Ranked


def register():
    """Registers this file's samplers (the generate.py child calls it too)."""
    from samplers.registry import register_sampler

    for cls in _classes():
        register_sampler(cls, replace=True)  # a fresh class per call


def unregister():
    from samplers.registry import unregister_sampler

    for name in ("always_token", "ranked"):
        unregister_sampler(name)
