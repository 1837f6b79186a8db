"""`keras.layers.LSTM` with a faster recurrence off GPUs.

Size glossary: B batch, T steps, I input width, H units (gates 4H).

Keras' LSTM runs as one cuDNN kernel on a GPU; elsewhere its generic loop
calls the cell once per step, which multiplies the step's input by the
input kernel inside the recurrence (two matrix products per step, and their
gradients, one step at a time). `ProjectedLSTM` computes the input
projection of all T steps as one [B*T, I] x [I, 4H] product outside the
recurrence, and the loop (`tf.scan`, so XLA compiles it) only adds
`h_{t-1} U` and applies the gates:

    z_t = (x_t W + b) + h_{t-1} U          # gates i, f, c, o (Keras' order)
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(c)
    h_t = sigmoid(o) * tanh(c_t)

The recurrence has its own gradient (`_recurrence`): the backward loop
computes the gate gradients step by step and the recurrent kernel's
gradient afterwards as one product over all steps.

Same weights (names, shapes, gate order), same numbers to float rounding
(tests/model/sha_rnn/test_lstm.py compares it with Keras' loop and a NumPy
loop). On a GPU, or with a mask, dropout, other activations or
`go_backwards`, it is Keras' LSTM unchanged (so cuDNN stays in use).
Measured on this project's CPU: docs/results/sha_rnn_fidelity.md.
"""

import keras
import tensorflow as tf


def _gpu_visible():
    return bool(tf.config.list_logical_devices("GPU"))


@keras.saving.register_keras_serializable(package="par")
class ProjectedLSTM(keras.layers.LSTM):
    """`keras.layers.LSTM` (same arguments) with the input projection hoisted out
    of the recurrence when no GPU is visible (see the module docstring)."""

    def _projected_applies(self, mask):
        return (mask is None and self.return_sequences and not self.go_backwards
                and not self.cell.dropout
                and not self.cell.recurrent_dropout and self.cell.use_bias
                and self.cell.activation is keras.activations.tanh
                and self.cell.recurrent_activation is keras.activations.sigmoid
                and not _gpu_visible())

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if not self._projected_applies(mask):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        dtype = sequences.dtype
        kernel = tf.cast(self.cell.kernel, dtype)  # [I, 4H]
        recurrent = tf.cast(self.cell.recurrent_kernel, dtype)  # [H, 4H]
        bias = tf.cast(self.cell.bias, dtype)  # [4H]
        h0, c0 = (tf.cast(s, dtype) for s in initial_state)
        projected = tf.einsum("bti,ig->tbg", sequences, kernel) + bias  # [T, B, 4H]
        hs, cs = _recurrence(projected, h0, c0, recurrent)  # [T, B, H] each
        last_h, last_c = hs[-1], cs[-1]
        return last_h, tf.transpose(hs, [1, 0, 2]), [last_h, last_c]


@tf.custom_gradient
def _recurrence(projected, h0, c0, recurrent):
    """The LSTM recurrence over precomputed input projections, with its own gradient.

    Args:
        projected: [T, B, 4H], x_t W + b.
        h0, c0: [B, H] initial states.
        recurrent: [H, 4H], U.

    Returns:
        (hs, cs), each [T, B, H]: h_t and c_t of every step.

    The backward pass runs the recurrence backwards for the gate gradients
    dz_t only (one [B, 4H] x [4H, H] product per step) and computes dU as one
    product over all steps afterwards, instead of automatic differentiation's
    per-step [H, B] x [B, 4H] products accumulated into a [H, 4H] sum.
    """

    def step(carry, z_input):
        h, c = carry[0], carry[1]
        z = z_input + tf.matmul(h, recurrent)  # [B, 4H]
        i, f, g, o = tf.split(z, 4, axis=-1)
        i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
        c = f * c + i * g
        tanh_c = tf.tanh(c)
        return o * tanh_c, c, tf.concat([i, f, g, o], axis=-1), tanh_c

    zeros = tf.zeros_like(h0)
    start = (h0, c0, tf.concat([zeros] * 4, axis=-1), zeros)
    hs, cs, gates, tanh_cs = tf.scan(step, projected, initializer=start)

    def grad(d_hs, d_cs):
        d_hs = tf.zeros_like(hs) if d_hs is None else d_hs
        d_cs = tf.zeros_like(cs) if d_cs is None else d_cs
        c_prev = tf.concat([c0[None], cs[:-1]], axis=0)  # [T, B, H]
        h_prev = tf.concat([h0[None], hs[:-1]], axis=0)  # [T, B, H]
        recurrent_t = tf.transpose(recurrent)  # [4H, H]

        def back(carry, inputs):
            dh_next, dc_next = carry[0], carry[1]
            d_h, d_c, gate, tanh_c, prev_c = inputs
            i, f, g, o = tf.split(gate, 4, axis=-1)
            dh = d_h + dh_next
            dc = d_c + dc_next + dh * o * (1.0 - tf.square(tanh_c))
            dz = tf.concat([dc * g * i * (1.0 - i), dc * prev_c * f * (1.0 - f),
                            dc * i * (1.0 - tf.square(g)), dh * tanh_c * o * (1.0 - o)],
                           axis=-1)  # [B, 4H]
            return tf.matmul(dz, recurrent_t), dc * f, dz

        dh0, dc0, dz = tf.scan(
            back, (d_hs, d_cs, gates, tanh_cs, c_prev),
            initializer=(tf.zeros_like(h0), tf.zeros_like(c0), tf.zeros_like(gates[0])),
            reverse=True)
        d_recurrent = tf.einsum("tbh,tbg->hg", h_prev, dz)  # [H, 4H]
        return dz, dh0[0], dc0[0], d_recurrent

    return (hs, cs), grad
