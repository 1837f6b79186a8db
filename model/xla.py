"""What the layers need to compile under XLA (`tf.function(jit_compile=True)`).

XLA compiles a function for fixed shapes. An op whose output shape depends on
tensor *values* (`tf.dynamic_partition` of tokens by adaptive-softmax
cluster, a memory slice whose length comes from the learned spans) still
compiles on TensorFlow 2.21, but XLA then treats those values as compile-time
constants and compiles the step again for every new batch (seconds per
step). So the layers with data-dependent shapes take a static-shape path
while they are traced for XLA (`compiling_with_xla()`) and keep their dynamic
path, cheaper without XLA, otherwise:

    AdaptiveSoftmax.nll / embed, AdaptiveEmbedding: every tail cluster for
        all N tokens, masked to its own tokens (same NLL, same vectors);
    AdaptiveSpanAttention: keeps the whole memory (exact: the positions the
        dynamic path drops have mask 0 for every query and head);
    StochasticBlock, hard search: every candidate computed and the chosen one
        selected with a one-hot weight (same value and gradients; no
        `tf.switch_case`, whose gradient under XLA carries every branch's
        intermediates and takes minutes to compile).

Random numbers: TensorFlow's stateless ops with the default algorithm
("auto_select") pick Philox on CPU and GPU but another generator under XLA
(other bits, and several times slower on CPU). Naming the algorithm
(`RNG_ALG`) and converting bits to floats with TensorFlow's own CPU rule
(`uniform_from_bits`) give the same numbers with and without XLA, equal to
the ones the default gave before.
"""

import tensorflow as tf

# Stateless RNG algorithm of every random op in the layers (see above).
RNG_ALG = "philox"


def compiling_with_xla():
    """True while tracing inside a function compiled by XLA (jit_compile=True).

    Also true inside `tf.cond` / `tf.switch_case` branches of such a function.
    Eager code and plain `tf.function`s give False.
    """
    return tf.__internal__.get_enclosing_xla_context() is not None


def uniform_from_bits(shape, seed):
    """Uniform float32 in [0, 1), the same with and without XLA.

    TensorFlow's CPU conversion (23 random mantissa bits under exponent 0,
    minus 1) of Philox words: without XLA this is exactly
    `tf.random.stateless_uniform(shape, seed)` with the default algorithm.

    Args:
        shape: int list or 1-D int32 tensor.
        seed: int32 or int64 [2] stateless seed.

    Returns:
        float32 tensor of `shape`.
    """
    bits = tf.random.stateless_uniform(shape, seed=seed, minval=None, maxval=None,
                                       dtype=tf.uint32, alg=RNG_ALG)
    mantissa = tf.bitwise.bitwise_or(tf.bitwise.bitwise_and(bits, 0x7FFFFF), 0x3F800000)
    return tf.bitcast(mantissa, tf.float32) - 1.0
