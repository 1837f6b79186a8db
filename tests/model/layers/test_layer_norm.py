"""LayerNorm (hand-written gradient) against NumPy, finite differences and Keras."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.layers.layer_norm import LayerNorm, layer_norm


def _numpy_layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_value_and_gradient_match_numpy_and_finite_differences():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 6)) * 2 + 1
    gamma, beta = rng.normal(size=6), rng.normal(size=6)
    upstream = rng.normal(size=(3, 4, 6))
    eps = 1e-5

    def loss(x_, g_, b_):
        return float((_numpy_layer_norm(x_, g_, b_, eps) * upstream).sum())

    tx, tg, tb = (tf.constant(a) for a in (x, gamma, beta))  # float64
    with tf.GradientTape() as tape:
        tape.watch([tx, tg, tb])
        y = layer_norm(tx, tg, tb, eps)
        total = tf.reduce_sum(y * upstream)
    grads = tape.gradient(total, [tx, tg, tb])
    np.testing.assert_allclose(y.numpy(), _numpy_layer_norm(x, gamma, beta, eps), rtol=1e-12)
    h = 1e-6
    for arg, grad in zip(range(3), grads):
        args = [x, gamma, beta]
        numeric = np.zeros_like(args[arg])
        for index in np.ndindex(args[arg].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[arg][index] += h
            minus[arg][index] -= h
            numeric[index] = (loss(*plus) - loss(*minus)) / (2 * h)
        np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("policy, shape", [("float32", (2, 5, 8)), ("mixed_bfloat16", (2, 5, 8)),
                                           ("float32", (6, 8)), ("float32", (2, 3, 2, 8))])
def test_layer_matches_keras_layer_normalization(policy, shape):
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=shape).astype(np.float32) * 3)
    ours = LayerNorm(epsilon=1e-5, dtype=policy)
    theirs = keras.layers.LayerNormalization(epsilon=1e-5, dtype=policy)
    for layer in (ours, theirs):
        layer.build(x.shape)
        layer.gamma.assign(rng.normal(size=8).astype(np.float32) if layer is ours
                           else ours.gamma.numpy())
    theirs.beta.assign(ours.beta.numpy() + 0.5)
    ours.beta.assign(ours.beta.numpy() + 0.5)
    assert [v.path.split("/")[-1] for v in ours.weights] == ["gamma", "beta"]
    upstream = rng.normal(size=shape).astype(np.float32)
    results = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            total = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        results.append((y, tape.gradient(total, [x] + layer.trainable_weights)))
    (y_ours, g_ours), (y_theirs, g_theirs) = results
    assert y_ours.dtype == y_theirs.dtype
    tol = 1e-5 if policy == "float32" else 2e-2
    np.testing.assert_allclose(tf.cast(y_ours, tf.float32), tf.cast(y_theirs, tf.float32),
                               atol=tol)
    for a, b in zip(g_ours, g_theirs):
        np.testing.assert_allclose(tf.cast(a, tf.float32), tf.cast(b, tf.float32),
                                   atol=tol, rtol=tol)


def test_other_axes_fall_back_to_keras():
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32))
    for kwargs in (dict(axis=1), dict(center=False), dict(scale=False), dict(rms_scaling=True)):
        with warnings.catch_warnings():  # Keras deprecates rms_scaling with a warning
            warnings.simplefilter("ignore", UserWarning)
            ours, theirs = LayerNorm(**kwargs), keras.layers.LayerNormalization(**kwargs)
            np.testing.assert_allclose(ours(x), theirs(x), atol=1e-6)
    assert LayerNorm(axis=-1)._fast_path(3) and not LayerNorm(axis=1)._fast_path(3)


def test_serialises_as_its_own_class():
    layer = LayerNorm(epsilon=1e-3, name="norm")
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is LayerNorm and clone.epsilon == 1e-3


def test_backward_ops_are_named_under_the_layer():
    """The closed-form gradient's ops sit under gradient_tape/<layer scope>/, as
    TensorFlow's own gradients do (profiles attribute ops by scope)."""

    class Outer(keras.layers.Layer):
        def __init__(self):
            super().__init__(name="outer")
            self.norm = LayerNorm(name="norm")

        def call(self, x):
            return self.norm(x)

    outer = Outer()

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(outer(x) * x)
        return tape.gradient(total, [x] + outer.trainable_weights)

    graph = step.get_concrete_function(tf.TensorSpec([2, 3, 4])).graph
    rsqrt_scope = next(op.name for op in graph.get_operations() if op.type == "Rsqrt")
    layer_scope = rsqrt_scope.rsplit("/", 1)[0]  # e.g. outer/norm
    backward = [op.name for op in graph.get_operations()
                if op.type == "Mean" and op.name.startswith("gradient_tape/" + layer_scope + "/")]
    assert len(backward) == 2, [op.name for op in graph.get_operations()]
