"""Tests for model/layers/feed_forward.py against a NumPy reference."""

import keras
import numpy as np
import pytest

from model.layers.feed_forward import PositionwiseFeedForward
from tests.helpers.layers import run_layer_test

D, F = 6, 10


def make_layer(seed=0, **overrides):
    kwargs = dict(d_model=D, d_ffn=F)
    kwargs.update(overrides)
    layer = PositionwiseFeedForward(**kwargs)
    layer.build((None, None, D))
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        value = rng.normal(0.0, 0.5, weight.shape)
        weight.assign((1.0 + value if weight.path.endswith("gamma") else value).astype("float32"))
    return layer


def reference(layer, x):
    w = {v.path.split("/", 1)[1]: np.asarray(v.numpy(), np.float64) for v in layer.weights}

    def norm(h):
        var = h.var(-1, keepdims=True)
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(var + layer.layer_norm_epsilon)
        return h * w["layer_norm/gamma"] + w["layer_norm/beta"]

    x = np.asarray(x, np.float64)
    h = norm(x) if layer.pre_norm else x
    h = np.maximum(h @ w["inner_dense/kernel"] + w["inner_dense/bias"], 0.0)
    h = h @ w["output_dense/kernel"] + w["output_dense/bias"]
    return x + h if layer.pre_norm else norm(x + h)


def inputs(seed=1):
    return np.random.default_rng(seed).normal(size=(2, 3, D)).astype("float32")


@pytest.mark.parametrize("pre_norm", [False, True])
def test_matches_reference(pre_norm):
    layer = make_layer(pre_norm=pre_norm)
    x = inputs()
    np.testing.assert_allclose(layer(x).numpy(), reference(layer, x), rtol=1e-5, atol=1e-5)


def test_dropout_only_when_training():
    layer = make_layer(dropout=0.4)
    x = inputs()
    np.testing.assert_allclose(layer(x).numpy(), reference(layer, x), rtol=1e-5, atol=1e-5)
    assert np.abs(layer(x, training=True).numpy() - layer(x).numpy()).max() > 1e-3


def test_generic_layer_checks(tmp_path):
    """Config JSON round trip, symbolic call and .keras reload, mixed precision, gradients."""
    run_layer_test(lambda dtype: make_layer(pre_norm=True, dropout=0.1, activation="gelu",
                                            name="ffn", dtype=dtype), inputs(), tmp_path=tmp_path)


def test_fit_step_updates_every_weight():
    layer = PositionwiseFeedForward(D, F, dropout=0.1)
    x_in = keras.Input((3, D))
    model = keras.Model(x_in, layer(x_in))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [w.numpy().copy() for w in layer.trainable_weights]
    model.fit(inputs(), np.ones((2, 3, D), "float32"), epochs=1, batch_size=2, verbose=0)
    for weight, old in zip(layer.trainable_weights, before):
        assert np.abs(weight.numpy() - old).max() > 0, weight.path


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"d_model": 0, "d_ffn": 4}, "d_model"),
        ({"d_model": 4, "d_ffn": -1}, "d_ffn"),
        ({"d_model": 4, "d_ffn": 4, "dropout": 1.5}, "dropout"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PositionwiseFeedForward(**kwargs)


def test_seeded_initializer_gives_distinct_kernels():
    layer = PositionwiseFeedForward(
        D, D, kernel_initializer=keras.initializers.RandomNormal(seed=3)
    )
    layer.build((None, None, D))
    assert not np.allclose(layer.inner_dense.kernel.numpy(), layer.output_dense.kernel.numpy())
