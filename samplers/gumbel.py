"""One categorical draw per row by the Gumbel-max trick, with a stateless seed per row.

`argmax(l + g)`, `g = -log(-log u)`, `u ~ U(0, 1)`, is distributed as
`softmax(l)`, and a `-inf` logit never wins. Each row draws its own uniforms
from its seed, so row r of a batch equals a single row drawn with the same
seed, and a seed reproduces a sample.
"""

import numpy as np
import tensorflow as tf

# Smallest uniform draw: keeps -log(-log u) finite.
_TINY = float(np.finfo(np.float32).tiny)


def gumbel_max(logits, seeds):
    """int32 [B]: one token per row of float logits [B, V], row b with seeds[b].

    Args:
        logits: float [B, V] (unnormalised; -inf entries are never drawn).
        seeds: int [B, 2], the stateless seed of each row.
    """
    logits = tf.cast(logits, tf.float32)

    def one_row(args):
        row, seed = args  # [V], [2]
        uniform = tf.random.stateless_uniform(tf.shape(row), seed=seed, minval=_TINY, maxval=1.0)
        return tf.argmax(row - tf.math.log(-tf.math.log(uniform)), output_type=tf.int32)

    return tf.map_fn(one_row, (logits, tf.cast(seeds, tf.int64)), fn_output_signature=tf.int32)
