"""Layer normalisation over the last axis with a hand-written gradient.

`LayerNorm` is `keras.layers.LayerNormalization` (same arguments, variables
`gamma` and `beta`, config and float32 computation under mixed precision)
whose common case, normalising the last axis with a scale and an offset,
runs as a few TensorFlow ops with the gradient written out instead of
differentiated op by op:

    mu = mean(x),  r = 1 / sqrt(mean((x - mu)^2) + eps),  x^ = (x - mu) r
    y = gamma x^ + beta
    dL/dx = r (g - mean(g) - x^ mean(g x^)),  g = gamma dL/dy
    dL/dgamma = sum over rows of dL/dy x^,  dL/dbeta = sum of dL/dy

(the mean taken over the normalised axis). The forward value is Keras' to
float rounding; the backward pass has about half the ops of the
differentiated one and makes the training step faster
(bench/README.md#speed-against-earlier-code). Other settings (other axes, no
scale or offset, `rms_scaling`) fall back to Keras' own call.
"""

import keras
import tensorflow as tf


def layer_norm(x, gamma, beta, epsilon):
    """Normalises the last axis of `x`: `gamma * (x - mean) / std + beta`.

    Args:
        x: float tensor [..., D] (float32 or float64).
        gamma, beta: [D] in the dtype of `x`.
        epsilon: float added to the variance.

    Returns:
        Tensor of the shape and dtype of `x`; its gradient is the closed form
        in the module docstring (first order only: the backward pass is not
        itself differentiated, so no gradient of a gradient through it).
    """

    @tf.custom_gradient
    def normalise(x, gamma, beta):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centred = x - mean
        variance = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
        rstd = tf.math.rsqrt(variance + epsilon)
        normed = centred * rstd  # x^
        # The tape would build the backward ops at the top level; name them
        # like TensorFlow's own gradients, "gradient_tape/<forward scope>/",
        # so that graphs and profiles (bench/op_categories.py) place them.
        scope = tf.get_current_name_scope()

        def grad(upstream):
            with tf.name_scope(f"gradient_tape/{scope}/" if scope else "gradient_tape/"):
                g = upstream * gamma
                dx = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                             - normed * tf.reduce_mean(g * normed, axis=-1, keepdims=True))
                rank = x.shape.rank
                rows = list(range(rank - 1)) if rank is not None else tf.range(tf.rank(x) - 1)
                return dx, tf.reduce_sum(upstream * normed, rows), tf.reduce_sum(upstream, rows)

        return normed * gamma + beta, grad

    return normalise(x, gamma, beta)


@keras.saving.register_keras_serializable(package="par")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` with `layer_norm`'s gradient for the
    last axis (see the module docstring); same arguments and variables."""

    def _fast_path(self, rank):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        return (self.center and self.scale and not self.rms_scaling
                and [a % rank for a in axes] == [rank - 1])

    def call(self, inputs):
        if not self._fast_path(len(inputs.shape)):
            return super().call(inputs)
        # At least float32, as Keras: mixed-precision inputs are normalised in float32.
        dtype = tf.float64 if inputs.dtype == tf.float64 else tf.float32
        outputs = layer_norm(tf.cast(inputs, dtype), tf.cast(self.gamma, dtype),
                             tf.cast(self.beta, dtype), self.epsilon)
        return tf.cast(outputs, self.compute_dtype)
