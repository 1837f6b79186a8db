"""Adam and AdamW whose per-variable update is one fused TensorFlow kernel.

Keras 3's `Adam.update_step` writes the update as separate element-wise ops
(subtract, multiply, square, two assign_adds, sqrt, add, divide,
assign_sub: about ten ops and as many passes over each variable).
`tf.raw_ops.ResourceApplyAdam` is TensorFlow's own kernel for the same
formula in one op and one pass (CPU, GPU, and an XLA kernel for TPUs):

    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m += (g - m) * (1 - beta_1)
    v += (g^2 - v) * (1 - beta_2)
    w -= alpha * m / (sqrt(v) + epsilon)

which is Keras' `Adam.update_step` term for term (t = iterations + 1), so the
results agree to float rounding (tests/training/test_fused_adam.py). The
slots, their names, checkpoints and everything else stay Keras' own; only
the update of a dense (or densified) gradient changes. `amsgrad` falls back
to Keras' update. `apply` is faster than Keras' (a microbenchmark of `apply`
alone: bench/README.md#speed-against-earlier-code).

Importing this module loads Keras and TensorFlow; `training.optimizers`
imports it only when it builds an optimizer.
"""

import keras
import tensorflow as tf


def apply_adam(variable, m, v, gradient, learning_rate, iterations, beta_1, beta_2, epsilon):
    """One Adam step of `variable` as one ResourceApplyAdam (see the module docstring).

    Args:
        variable, m, v: the weight and its first and second moments (Keras variables
            or TensorFlow resource variables).
        gradient: its gradient (dense, or IndexedSlices, densified as Keras does).
        learning_rate: the step's learning rate (scalar).
        iterations: the optimizer's steps so far (t = iterations + 1).
        beta_1, beta_2, epsilon: Adam's constants.
    """
    var, m, v = (x.value if isinstance(x, keras.Variable) else x for x in (variable, m, v))
    dtype = var.dtype
    if isinstance(gradient, tf.IndexedSlices):  # Keras' update densifies it too
        gradient = tf.convert_to_tensor(gradient)
    step = tf.cast(iterations + 1, dtype)
    beta_1 = tf.cast(beta_1, dtype)
    beta_2 = tf.cast(beta_2, dtype)
    tf.raw_ops.ResourceApplyAdam(
        var=var.handle, m=m.handle, v=v.handle,
        beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
        lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
        epsilon=tf.cast(epsilon, dtype), grad=tf.cast(gradient, dtype),
        use_locking=False)


class _FusedUpdate:
    """Mixin placed before `keras.optimizers.Adam` (or AdamW): `update_step`
    as one ResourceApplyAdam (see the module docstring); amsgrad keeps Keras'."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        apply_adam(variable, self._momentums[index], self._velocities[index], gradient,
                   learning_rate, self.iterations, self.beta_1, self.beta_2, self.epsilon)


@keras.saving.register_keras_serializable(package="par")
class FusedAdam(_FusedUpdate, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with the fused update (same arguments and
    default name, so its variables are named as Adam's)."""

    def __init__(self, *args, name="adam", **kwargs):
        super().__init__(*args, name=name, **kwargs)


@keras.saving.register_keras_serializable(package="par")
class FusedAdamW(_FusedUpdate, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with the fused update; Keras applies the
    decoupled decay before it, as for AdamW."""

    def __init__(self, *args, name="adamw", **kwargs):
        super().__init__(*args, name=name, **kwargs)
