"""Adagrad as the adaptive-span reference trains with it (a per-tensor throttle).

The adaptive-span reference (facebookresearch/adaptive-span,
`adagrad_with_grad_clip.py`, used by `main.py` with `--optim adagrad
--grad-clip c`) does not clip gradients. It scales each tensor's *learning
rate* by how far that tensor's gradient norm exceeds `c`, and its accumulator
sums the *unclipped* squares. Per weight tensor w with gradient g (after any
L2 term), at every step:

    n   = ||g||_2
    lr' = lr * c / (n + 1e-10)    if c > 0 and n > c,   else lr
    acc = acc + g^2                                    # unclipped
    w   = w - lr' * g / (sqrt(acc) + epsilon)          # epsilon after the sqrt

Why it matters: a global-norm clip applied to the gradients before Adagrad
(`--clip_norm` with `--optimizer=adagrad`) also shrinks what the accumulator
sums, so the common factor largely divides out of `g / sqrt(acc)` and the step
is not throttled; with the reference's lr 0.07 the project's model collapsed to
unigram level that way (docs/results/adaptive_span_fidelity.md). Here the
accumulator keeps the true scale and only the step shrinks.

Keras' Adagrad adds its epsilon inside the square root, `sqrt(acc + eps)`;
PyTorch's (and this one) adds it after, `sqrt(acc) + eps` (1e-10 in the
reference). The slot is one `accumulator` per weight (from 0, as PyTorch), so
checkpoints hold it and a resumed run continues exactly.
"""

import keras
import tensorflow as tf

# The reference's guard against a zero norm in `c / norm`.
_NORM_GUARD = 1e-10


@keras.saving.register_keras_serializable(package="par")
class AdagradClip(keras.optimizers.Optimizer):
    """The adaptive-span reference's `AdagradWithGradClip` (formulas above).

    Args:
        learning_rate: float, schedule or callable.
        tensor_clip_norm: c, the gradient norm above which a tensor's learning
            rate is scaled by `c / ||g||` (0: no throttle, plain Adagrad with
            PyTorch's epsilon placement).
        epsilon: added to `sqrt(acc)` (the reference: 1e-10).
        initial_accumulator_value: start of the accumulators (PyTorch: 0).
        name: optimizer name (its variables are named after it).
        **kwargs: other `keras.optimizers.Optimizer` arguments.
    """

    def __init__(self, learning_rate=0.01, tensor_clip_norm=0.0, epsilon=1e-10,
                 initial_accumulator_value=0.0, name="adagrad_clip", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not tensor_clip_norm >= 0:
            raise ValueError(f"tensor_clip_norm must be >= 0 (0: off), got {tensor_clip_norm!r}")
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
        if not initial_accumulator_value >= 0:
            raise ValueError(f"initial_accumulator_value must be >= 0, got "
                             f"{initial_accumulator_value!r}")
        self.tensor_clip_norm = float(tensor_clip_norm)
        self.epsilon = float(epsilon)
        self.initial_accumulator_value = float(initial_accumulator_value)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        initializer = keras.initializers.Constant(self.initial_accumulator_value)
        self._accumulators = self.add_optimizer_variables(
            var_list, "accumulator", initializer=initializer)

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        gradient = tf.cast(gradient, dtype)
        lr = tf.cast(learning_rate, dtype)
        if self.tensor_clip_norm:
            clip = tf.cast(self.tensor_clip_norm, dtype)
            norm = tf.norm(gradient)
            lr = tf.where(norm > clip, lr * clip / (norm + _NORM_GUARD), lr)
        accumulator = self._accumulators[self._get_variable_index(variable)]
        self.assign_add(accumulator, tf.square(gradient))
        denominator = tf.sqrt(tf.convert_to_tensor(accumulator)) + tf.cast(self.epsilon, dtype)
        self.assign_sub(variable, lr * gradient / denominator)

    def get_config(self):
        config = super().get_config()
        config.update({
            "tensor_clip_norm": self.tensor_clip_norm,
            "epsilon": self.epsilon,
            "initial_accumulator_value": self.initial_accumulator_value,
        })
        return config
