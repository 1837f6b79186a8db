"""LAMB as the SHA-RNN reference trains with it (a floored trust ratio).

The SHA-RNN reference (smerity/sha-rnn, main.py with `--optimizer lamb`)
uses the LAMB of Smerity's pytorch-lamb fork, which differs from LAMB as
published (You et al. 2019, arXiv 1904.00962) and from `keras.optimizers.Lamb`
in four ways. Per weight tensor w with gradient g, at every step:

    m = beta_1 m + (1 - beta_1) g
    v = beta_2 v + (1 - beta_2) g^2
    u = m / (sqrt(v) + epsilon) + weight_decay * w     # no bias correction
    r = min(||w||, weight_norm_clip) / ||u||           # 1 if either norm is 0
    r = max(r, min_trust)                              # the floor
    w = w - lr * r * u

* no bias correction (`bias_correction=True` divides m and v by
  1 - beta^t as Keras' Lamb does);
* the weight norm is clamped at `weight_norm_clip` (10);
* the trust ratio is floored at `min_trust` (0.25). With the reference's
  small initial weights the raw ratio stays near 0.01-0.07 for almost every
  tensor, so the floor sets the step size: about Adam at lr / 4 without bias
  correction. Weights that start at zero (biases, layer-norm offsets, the
  attention gates) have ratio 1 while they are zero, then the floor;
* weight decay is coupled into the update of every weight (main.py hands all
  parameters to the optimizer), inside the trust ratio.

Keras' Lamb has no floor and no clamp and applies bias correction: on the
SHA-RNN it leaves zero-initialised vectors near zero and barely moves the
small matrices (docs/results/sha_rnn_fidelity.md).

The slots are Keras' usual `momentum` and `velocity` per weight, so
checkpoints hold them and a resumed run continues exactly. The update is
written with TensorFlow ops per variable, like Keras' own optimizers, and
runs under tf.distribute, mixed precision (variables stay float32) and XLA.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="par")
class LambSharnn(keras.optimizers.Optimizer):
    """The SHA-RNN reference's LAMB (see the module docstring for the formulas).

    Args:
        learning_rate: float, schedule or callable.
        beta_1, beta_2: moment decay rates.
        epsilon: added to sqrt(v) (the reference: 1e-6).
        weight_decay: coefficient of `w` added to the update of every weight
            (coupled, inside the trust ratio). Keras' own decoupled decay
            mechanism is not used.
        min_trust: floor of the trust ratio (0: none; the reference: 0.25).
        weight_norm_clip: clamp of ||w|| in the trust ratio (None: no clamp;
            the reference: 10).
        bias_correction: divide m and v by 1 - beta^t (the reference: no).
        name: optimizer name (its variables are named after it).
        **kwargs: other `keras.optimizers.Optimizer` arguments (not
            `weight_decay`'s decoupled form).
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 weight_decay=0.0, min_trust=0.25, weight_norm_clip=10.0,
                 bias_correction=False, name="lamb_sharnn", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        for label, value in (("weight_decay", weight_decay), ("min_trust", min_trust)):
            if not value >= 0:
                raise ValueError(f"{label} must be >= 0, got {value!r}")
        if weight_norm_clip is not None and not weight_norm_clip > 0:
            raise ValueError(f"weight_norm_clip must be > 0 or None (no clamp), got "
                             f"{weight_norm_clip!r}")
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        # Not `self.weight_decay`: the base class would apply it decoupled.
        self.weight_decay_rate = float(weight_decay)
        self.min_trust = float(min_trust)
        self.weight_norm_clip = None if weight_norm_clip is None else float(weight_norm_clip)
        self.bias_correction = bool(bias_correction)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"])

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        gradient = tf.cast(gradient, dtype)
        lr = tf.cast(learning_rate, dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, (gradient - m) * (1.0 - self.beta_1))
        self.assign_add(v, (tf.square(gradient) - v) * (1.0 - self.beta_2))
        m_hat, v_hat = tf.convert_to_tensor(m), tf.convert_to_tensor(v)
        if self.bias_correction:
            step = tf.cast(self.iterations + 1, dtype)
            m_hat = m_hat / (1.0 - tf.pow(tf.cast(self.beta_1, dtype), step))
            v_hat = v_hat / (1.0 - tf.pow(tf.cast(self.beta_2, dtype), step))
        w = tf.convert_to_tensor(variable)
        update = m_hat / (tf.sqrt(v_hat) + tf.cast(self.epsilon, dtype))
        if self.weight_decay_rate:
            update += tf.cast(self.weight_decay_rate, dtype) * w
        w_norm = tf.norm(w)
        if self.weight_norm_clip is not None:
            w_norm = tf.minimum(w_norm, tf.cast(self.weight_norm_clip, dtype))
        u_norm = tf.norm(update)
        both = (w_norm > 0) & (u_norm > 0)
        ratio = tf.where(both, w_norm / tf.where(both, u_norm, 1.0), tf.ones_like(w_norm))
        if self.min_trust:
            ratio = tf.maximum(ratio, tf.cast(self.min_trust, dtype))
        self.assign_sub(variable, lr * ratio * update)

    def get_config(self):
        config = super().get_config()
        config.update({
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay": self.weight_decay_rate,
            "min_trust": self.min_trust,
            "weight_norm_clip": self.weight_norm_clip,
            "bias_correction": self.bias_correction,
        })
        return config
