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

        def step(carry, z_input):
            h, c = carry
            z = z_input + tf.matmul(h, recurrent)  # [B, 4H]
            i, f, g, o = tf.split(z, 4, axis=-1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
            return h, c

        hs, cs = tf.scan(step, projected, initializer=(h0, c0))  # [T, B, H] each
        last_h, last_c = hs[-1], cs[-1]
        return last_h, tf.transpose(hs, [1, 0, 2]), [last_h, last_c]
