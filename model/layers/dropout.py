"""Dropout from random bytes: a cheaper drop-in for `keras.layers.Dropout`.

Dropout (Srivastava et al. 2014, JMLR 15) zeroes each element with
probability `p` and scales the survivors by `1 / (1 - p)`. Keras draws one
float32 uniform per element (`StatelessRandomUniformV2`); on CPU that costs
as much as a large matmul. Here one Philox uint32 word supplies four
independent uniform bytes `b` (the 32 bits of a full-range uint32 are
independent and uniform), and an element is kept when `b >= round(256 p)`.

Rate quantisation: the effective rate is `round(256 p) / 256` (nearest
multiple of 1/256, halves rounded up), e.g. 0.1 -> 26/256 = 0.1015625 and
0.2 -> 51/256 = 0.19921875. Survivors are scaled by `1 / (1 - effective
rate)`, so `E[output] = input` exactly for the rate actually applied. A rate
below 1/512 quantises to 0 (identity); a rate of at least 511/512 drops all.
The scale is applied in the compute dtype: under `mixed_bfloat16` it is
rounded to bfloat16, as in `keras.layers.Dropout` (relative error at most
2^-9, e.g. 256/205 = 1.2488 -> 1.25 for rate 0.2).

Size glossary: S, the shape of the input (any rank); n = prod(S) elements
drawn from ceil(n / 4) random words.
"""

import contextlib
import math

import keras
import tensorflow as tf

from model import xla

# A random byte takes this many values; rates are multiples of its inverse.
_LEVELS = 256
# keras' TF backend folds the int64 seed-generator state into int32 like this
# (`_cast_seed`) so that the stateless ops also compile under XLA.
_SEED_MODULUS = 2**31 - 2


def quantize_rate(rate):
    """Drop threshold of a dropout rate: the rate in units of 1/256.

    Args:
        rate: float in [0, 1].

    Returns:
        int t in [0, 256]; the effective rate is t / 256 (an element is
        dropped when its random byte is < t).
    """
    return int(math.floor(rate * _LEVELS + 0.5))


def random_bytes(shape, seed):
    """Uniform uint8 tensor of `shape` from `ceil(n / 4)` uint32 Philox words.

    Args:
        shape: 1-D int32 tensor or list, the shape S.
        seed: int32 [2] stateless seed.

    Returns:
        uint8 tensor of shape S, independent uniform bytes.
    """
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(
        [(size + 3) // 4], seed=seed, minval=None, maxval=None, dtype=tf.uint32,
        alg=xla.RNG_ALG,  # the same bits with and without XLA (model/xla.py)
    )  # [ceil(n / 4)]
    flat = tf.reshape(tf.bitcast(words, tf.uint8), [-1])  # [4 * ceil(n / 4)]
    # tf.slice, not `flat[:size]`: no StridedSlice; an identity when n % 4 == 0.
    return tf.reshape(tf.slice(flat, [0], [size]), shape)  # S


@contextlib.contextmanager
def fixed_seeds(layers, seeds):
    """While tracing inside this block, each of `layers` uses its given seed.

    For code that draws the seeds of several layers up front, e.g. a hard
    PAR block that must advance every candidate's seed generator whichever
    candidate runs (model/transformer_xl/stochastic_block.py): `draw_seeds` outside, then
    call the layers inside `fixed_seeds`.

    Args:
        layers: FastDropout layers.
        seeds: one int32 [2] seed tensor per layer.
    """
    layers, seeds = list(layers), list(seeds)
    if len(layers) != len(seeds):
        raise ValueError(f"fixed_seeds: {len(layers)} layers but {len(seeds)} seeds")
    previous = [layer._fixed_seed for layer in layers]
    for layer, seed in zip(layers, seeds):
        object.__setattr__(layer, "_fixed_seed", seed)  # not a tracked attribute
    try:
        yield
    finally:
        for layer, seed in zip(layers, previous):
            object.__setattr__(layer, "_fixed_seed", seed)


def draw_seeds(layers):
    """(the layers that drop something, their seeds for one call) for `fixed_seeds`."""
    active = [layer for layer in layers if 0 < layer.threshold < _LEVELS]
    return active, [layer.draw_seed() for layer in active]


@keras.saving.register_keras_serializable(package="par")
class FastDropout(keras.layers.Layer):
    """Inverted dropout with the rate quantised to 1/256 (see the module docstring).

    Training-only: the identity at inference, and when the effective rate is
    0. Randomness comes from a `keras.random.SeedGenerator` owned by the layer
    (created only when the effective rate is > 0, like `keras.layers.Dropout`,
    so `model.variables` keep the same list): each training call takes
    `seed_generator.next()` as the stateless seed, exactly as Keras' Dropout
    does on the TensorFlow backend. Its state is a layer variable, so a
    checkpoint of `model.variables` restores it and a resumed run draws the
    same masks. Inside a `tf.distribute` replica context with more than one
    replica, the replica id is folded into the seed, so replicas draw
    different masks for their rows while the shared state stays in sync
    (`keras.layers.Dropout` gives every replica the same mask).

    The gradient with respect to the input is the upstream gradient times
    the mask times the scale (the same `{0, scale}` tensor as the forward).

    Args:
        rate: float in [0, 1], fraction of the elements to drop (quantised).
        seed: int or None, initial seed of the generator (None: random).
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self.rate = float(rate)
        self.seed = seed
        self.threshold = quantize_rate(self.rate)
        if self.threshold > 0:
            self.seed_generator = keras.random.SeedGenerator(seed)
        object.__setattr__(self, "_fixed_seed", None)  # see fixed_seeds; not tracked
        self.built = True

    @property
    def effective_rate(self):
        """float: the rate applied, `round(256 * rate) / 256`."""
        return self.threshold / _LEVELS

    @property
    def scale(self):
        """float: factor of the kept elements, `1 / (1 - effective_rate)` (inf if all drop)."""
        kept = _LEVELS - self.threshold
        return _LEVELS / kept if kept else math.inf

    def draw_seed(self):
        """int32 [2] seed of the next training call; advances the seed generator.

        Inside `fixed_seeds` it returns the fixed seed instead (no advance).
        """
        if self._fixed_seed is not None:
            return self._fixed_seed
        seed = self.seed_generator.next()  # int64 [2]
        seed = tf.cast(tf.math.floormod(seed, _SEED_MODULUS), tf.int32)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            seed = tf.random.experimental.stateless_fold_in(
                seed, tf.cast(context.replica_id_in_sync_group, tf.int32), alg=xla.RNG_ALG
            )
        return seed

    def call(self, inputs, training=False):
        """Drops and rescales when training.

        Args:
            inputs: float tensor of shape S (cast to the compute dtype).
            training: bool, enables dropout.

        Returns:
            Tensor of shape S: `inputs * mask * scale` when training,
            `inputs` otherwise.
        """
        if not training or self.threshold == 0:
            return inputs
        if self.threshold == _LEVELS:
            return tf.zeros_like(inputs)
        keep = random_bytes(tf.shape(inputs), self.draw_seed()) >= self.threshold  # S
        # One {0, scale} tensor in the input dtype: the product is one pass
        # forward and its gradient (upstream * mask) one pass backward.
        mask = tf.where(
            keep, tf.constant(self.scale, inputs.dtype), tf.constant(0, inputs.dtype)
        )  # S
        return inputs * mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
