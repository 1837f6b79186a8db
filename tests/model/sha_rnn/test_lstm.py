"""ProjectedLSTM (model/sha_rnn/lstm.py) against Keras' LSTM loop and a NumPy LSTM.

Same weights, same outputs, final states and gradients; under XLA too.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.sha_rnn.lstm import ProjectedLSTM

B, T, D_IN, H = 3, 7, 5, 6
TOL = dict(rtol=2e-5, atol=2e-6)


def _layers():
    kwargs = dict(return_sequences=True, return_state=True, unit_forget_bias=False,
                  bias_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=3))
    ours = ProjectedLSTM(H, name="lstm", **kwargs)
    theirs = keras.layers.LSTM(H, name="lstm", **kwargs)
    for layer in (ours, theirs):
        layer.build((None, None, D_IN))
    for a, b in zip(ours.weights, theirs.weights):
        b.assign(a)
    return ours, theirs


def _numpy_lstm(x, h, c, kernel, recurrent, bias):
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4, axis=-1)  # Keras' gate order
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1), h, c


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_same_numbers_and_gradients_as_keras_lstm(jit):
    ours, theirs = _layers()
    assert [w.path for w in ours.weights] == [w.path for w in theirs.weights]
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(B, T, D_IN)), tf.float32)
    h0 = tf.constant(rng.normal(size=(B, H)), tf.float32)
    c0 = tf.constant(rng.normal(size=(B, H)), tf.float32)

    def run(layer):
        @tf.function(jit_compile=jit)
        def fn(x, h0, c0):
            with tf.GradientTape() as tape:
                tape.watch([x, h0, c0])
                y, h, c = layer(x, initial_state=[h0, c0])
                loss = tf.reduce_sum(y * y) + tf.reduce_sum(h) + tf.reduce_sum(c * c)
            return y, h, c, tape.gradient(loss, [x, h0, c0] + layer.trainable_weights)
        return fn(x, h0, c0)

    y, h, c, grads = run(ours)
    y_k, h_k, c_k, grads_k = run(theirs)
    for got, want in zip([y, h, c, *grads], [y_k, h_k, c_k, *grads_k]):
        np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)
    weights = [w.numpy().astype(np.float64) for w in ours.weights]
    y_np, h_np, c_np = _numpy_lstm(*(v.numpy().astype(np.float64) for v in (x, h0, c0)),
                                   *weights)
    np.testing.assert_allclose(y.numpy(), y_np, **TOL)
    np.testing.assert_allclose(h.numpy(), h_np, **TOL)
    np.testing.assert_allclose(c.numpy(), c_np, **TOL)


def test_hoisted_path_is_taken_on_cpu_and_config_round_trips():
    ours, _ = _layers()
    assert ours._projected_applies(None) == (not tf.config.list_logical_devices("GPU"))
    again = keras.layers.deserialize(keras.layers.serialize(ours))
    assert type(again) is ProjectedLSTM and again.units == H
    # Options the hoisted loop does not implement fall back to Keras' loop.
    base = ProjectedLSTM(H, return_sequences=True)
    assert base._projected_applies(None) == ours._projected_applies(None)
    for layer in (ProjectedLSTM(H, return_sequences=True, go_backwards=True),
                  ProjectedLSTM(H, return_sequences=True, dropout=0.1),
                  ProjectedLSTM(H, return_sequences=True, activation="relu"),
                  ProjectedLSTM(H)):  # only the last output
        assert not layer._projected_applies(None)
    assert not base._projected_applies(tf.ones([B, T], bool))
