"""Tests for model/layers/dropout.py: FastDropout statistics, state, dtype, gradient."""

import json
import math
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.layers.dropout import FastDropout, quantize_rate, random_bytes

# 2^22 elements: the kept fraction has a standard deviation below 1.5e-4.
BIG = (2048, 2048)


def bound(p, n, sigmas=5.0):
    """`sigmas` standard deviations of the mean of n Bernoulli(p) draws."""
    return sigmas * math.sqrt(p * (1.0 - p) / n)


def normal(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize(
    "rate, threshold",
    [(0.0, 0), (0.001, 0), (0.1, 26), (0.2, 51), (0.5, 128), (0.999, 256), (1.0, 256)],
)
def test_quantized_rate(rate, threshold):
    assert quantize_rate(rate) == threshold
    layer = FastDropout(rate)
    assert layer.effective_rate == threshold / 256
    if threshold < 256:
        assert layer.scale == 256 / (256 - threshold)


@pytest.mark.parametrize("rate", [0.0, 0.001])
def test_zero_effective_rate_is_identity_without_state(rate):
    layer = FastDropout(rate)
    x = normal((4, 5))
    np.testing.assert_array_equal(layer(x, training=True).numpy(), x)
    assert layer.variables == []  # no seed state, like keras.layers.Dropout(0)


def test_rate_one_drops_everything():
    np.testing.assert_array_equal(FastDropout(1.0)(normal((3, 4)), training=True).numpy(), 0.0)


def test_inference_is_identity_and_keeps_the_state():
    layer = FastDropout(0.5, seed=1)
    x = normal((4, 6))
    state = layer.seed_generator.state.numpy().copy()
    np.testing.assert_array_equal(layer(x).numpy(), x)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x)
    np.testing.assert_array_equal(layer.seed_generator.state.numpy(), state)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_kept_fraction_scale_and_mean(rate):
    # rate 0.1 applies 26/256 = 0.1016: the nominal rate is 10 sigma away, so
    # using it for the mask or the scale would fail the bounds below.
    layer = FastDropout(rate, seed=3)
    p_keep = 1.0 - layer.effective_rate
    x = normal(BIG, seed=4) + 3.0  # no zeros
    y = layer(x, training=True).numpy()
    kept = y != 0.0
    n = kept.size
    assert abs(kept.mean() - p_keep) < bound(p_keep, n)
    # Survivors are scaled by exactly 1 / (1 - effective rate) (float32).
    np.testing.assert_array_equal(y[kept], x[kept] * np.float32(256 / (256 - layer.threshold)))
    # E[y] = x: on ones, the mean of y is scale * kept fraction.
    ones = layer(np.ones(BIG, "float32"), training=True).numpy()
    assert abs(ones.mean() - 1.0) < layer.scale * bound(p_keep, n)
    # Random bytes: neighbours (same and different words) are independent,
    # and all four byte positions of a word are used alike.
    both = (kept[:, :-1] & kept[:, 1:]).mean()
    assert abs(both - p_keep**2) < bound(p_keep**2, n)
    for k in range(4):
        assert abs(kept[:, k::4].mean() - p_keep) < bound(p_keep, n // 4)


def test_sizes_not_multiple_of_four():
    layer = FastDropout(0.5, seed=5)
    for shape in ((3, 5, 7), (1,), (1023, 1021)):
        y = layer(np.ones(shape, "float32"), training=True).numpy()
        assert y.shape == shape
        assert set(np.unique(y)) <= {0.0, 2.0}
    assert abs((y != 0).mean() - 0.5) < bound(0.5, y.size)


def test_random_bytes_are_uniform():
    values = random_bytes([1 << 20], tf.constant([7, 8], tf.int32)).numpy()
    counts = np.bincount(values, minlength=256)
    expected = values.size / 256
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 400  # 255 degrees of freedom: mean 255, sd 22.6


def test_calls_differ_and_same_state_same_mask():
    layer = FastDropout(0.5, seed=11)
    x = np.ones((64, 64), "float32")
    saved = layer.seed_generator.state.numpy().copy()
    first = layer(x, training=True).numpy()
    second = layer(x, training=True).numpy()
    assert (first != second).mean() > 0.3
    layer.seed_generator.state.assign(saved)
    np.testing.assert_array_equal(layer(x, training=True).numpy(), first)

    step = tf.function(lambda x: layer(x, training=True))
    layer.seed_generator.state.assign(saved)
    np.testing.assert_array_equal(step(x).numpy(), first)  # same seed in a graph
    np.testing.assert_array_equal(step(x).numpy(), second)  # and it advances
    np.testing.assert_array_equal(layer.seed_generator.state.numpy(), saved + [0, 2])


def test_config_json_round_trip():
    layer = FastDropout(0.25, seed=9, name="drop")
    config = json.loads(json.dumps(layer.get_config()))
    clone = FastDropout.from_config(config)
    assert clone.get_config() == layer.get_config()
    assert config["rate"] == 0.25 and config["seed"] == 9 and config["name"] == "drop"
    x = normal((16, 16))
    np.testing.assert_array_equal(clone(x, training=True).numpy(), layer(x, training=True).numpy())
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, FastDropout) and restored.rate == 0.25


def test_mixed_bfloat16():
    layer = FastDropout(0.5, seed=2, dtype="mixed_bfloat16")
    x = normal((32, 32)) + 3.0
    y = layer(x, training=True)
    assert y.dtype == tf.bfloat16 and layer(x).dtype == tf.bfloat16
    y = y.numpy().astype("float32")
    kept = y != 0
    x16 = tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy()
    np.testing.assert_array_equal(y[kept], x16[kept] * 2.0)
    assert 0.3 < kept.mean() < 0.7


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_gradient_is_mask_times_scale(dtype):
    layer = FastDropout(0.2, seed=6, dtype=dtype)
    x = tf.constant(normal((64, 48)) + 3.0)
    upstream = tf.constant(normal((64, 48), seed=1))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    grad = tape.gradient(loss, x).numpy()
    scale = tf.cast(tf.constant(layer.scale, tf.float32), y.dtype)  # rounded to the dtype
    mask = np.where(y.numpy() != 0, tf.cast(scale, tf.float32).numpy(), 0.0)
    expected = tf.cast(tf.cast(upstream, y.dtype) * tf.cast(mask, y.dtype), tf.float32).numpy()
    np.testing.assert_array_equal(grad, expected)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="rate"):
        FastDropout(1.5)
    with pytest.raises(ValueError, match="seed"):
        FastDropout(0.1, seed=1.5)


_MIRRORED_CHILD = r"""
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import numpy as np
from model.layers.dropout import FastDropout
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
with strategy.scope():
    layer = FastDropout(0.5, seed=3)

@tf.function
def step(x):
    return strategy.run(lambda x: layer(x, training=True), args=(x,))

x = tf.ones((2, 256))
outs = [[v.numpy() for v in strategy.experimental_local_results(step(x))] for _ in range(2)]
state = [v.numpy().tolist() for v in layer.seed_generator.state.value.values]
print("REPORT " + json.dumps({
    "replicas_differ": bool((outs[0][0] != outs[0][1]).any()),
    "steps_differ": bool((outs[0][0] != outs[1][0]).any()),
    "values_ok": all(set(np.unique(o).tolist()) <= {0.0, 2.0} for s in outs for o in s),
    "state": state,
}))
"""


@pytest.mark.slow
def test_mirrored_replicas_draw_different_masks_and_keep_state_in_sync(project_root):
    proc = subprocess.run(
        [sys.executable, "-c", _MIRRORED_CHILD], cwd=project_root, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line[len("REPORT ") :])
    assert report["replicas_differ"] and report["steps_differ"] and report["values_ok"]
    assert report["state"] == [[3, 2], [3, 2]]  # both copies advanced once per step
