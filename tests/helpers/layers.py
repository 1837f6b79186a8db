"""`run_layer_test`: the checks every Keras layer of the project passes.

Like KerasHub's `run_layer_test`, written once instead of in every layer's
test file: the config's JSON round trip, an eager and a symbolic call, a
`.keras` reload, mixed precision and finite gradients. Numbers are compared,
not only shapes; each layer's own test file then checks its formulas against
an independent slow reference.
"""

import json

import keras
import numpy as np
import tensorflow as tf


def _as_list(inputs):
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


def _close(got, want, atol, what):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=atol, atol=atol, err_msg=what)


def check_config_round_trip(layer, inputs, call_kwargs=None, atol=1e-6):
    """from_config(JSON(get_config())) rebuilds the same layer: same config, same outputs.

    Returns:
        The clone (its weights set to the layer's).
    """
    call_kwargs = call_kwargs or {}
    config = json.loads(json.dumps(layer.get_config()))
    clone = type(layer).from_config(config)
    assert clone.get_config() == layer.get_config()
    inputs = _as_list(inputs)
    clone(*inputs, **call_kwargs)  # builds it
    clone.set_weights(layer.get_weights())
    _close(clone(*inputs, **call_kwargs), layer(*inputs, **call_kwargs), atol,
           f"{type(layer).__name__}.from_config output")
    return clone


def check_keras_reload(layer, inputs, tmp_path, atol=1e-6):
    """A functional model around the layer (symbolic call) saves to `.keras` and reloads to
    the same outputs; the symbolic output shape is the eager one with a free batch."""
    inputs = [np.asarray(x) for x in _as_list(inputs)]
    symbolic = [keras.Input(x.shape[1:], dtype=str(x.dtype)) for x in inputs]
    model = keras.Model(symbolic, layer(*symbolic))
    expected = layer(*inputs)
    assert tuple(model.output.shape) == (None, *expected.shape[1:])
    _close(model(inputs), expected, atol, "functional model")
    path = tmp_path / f"{layer.name}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    _close(loaded(inputs), expected, atol, ".keras reload")
    return loaded


def check_finite_gradients(layer, inputs, call_kwargs=None):
    """Gradients of a random projection of the output, to the float inputs and every
    trainable weight, exist and are finite."""
    call_kwargs = call_kwargs or {}
    tensors = [tf.constant(x) for x in _as_list(inputs)]
    floats = [t for t in tensors if t.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        out = tf.cast(layer(*tensors, **call_kwargs), tf.float32)
        weights = np.random.default_rng(0).normal(size=out.shape).astype(np.float32)
        loss = tf.reduce_sum(out * weights)
    grads = tape.gradient(loss, floats + list(layer.trainable_weights))
    for grad, source in zip(grads, floats + list(layer.trainable_weights)):
        name = getattr(source, "path", "an input")
        assert grad is not None, f"no gradient to {name}"
        grad = tf.convert_to_tensor(grad)
        assert np.all(np.isfinite(grad.numpy())), f"non-finite gradient to {name}"
    return out


def check_mixed_precision(make_layer, inputs, call_kwargs=None, atol=0.1):
    """The layer built with dtype "mixed_bfloat16" (from `make_layer(dtype)`, same seed)
    computes in bfloat16, stays close to float32 and has finite gradients."""
    call_kwargs = call_kwargs or {}
    full = make_layer("float32")
    half = make_layer("mixed_bfloat16")
    inputs = _as_list(inputs)
    want = full(*inputs, **call_kwargs)
    half(*inputs, **call_kwargs)
    half.set_weights(full.get_weights())
    got = half(*inputs, **call_kwargs)
    assert got.dtype == tf.bfloat16, got.dtype
    _close(tf.cast(got, tf.float32), want, atol, "mixed_bfloat16 against float32")
    check_finite_gradients(half, inputs, call_kwargs)


def run_layer_test(make_layer, inputs, *, tmp_path=None, call_kwargs=None, symbolic=True,
                   mixed_precision=True, atol=1e-6):
    """Every generic check for one layer.

    Args:
        make_layer: `dtype -> built layer` with the same weights for the same
            call (the layer under test is `make_layer("float32")`).
        inputs: the call's positional inputs (an array or a list of arrays).
        tmp_path: a directory for the `.keras` reload (None: skipped, for a
            layer that cannot stand in a functional model).
        call_kwargs: keyword arguments of every eager call (e.g. rel_bias).
        symbolic: also call the layer on keras.Input (with tmp_path: saved).
        mixed_precision: also check "mixed_bfloat16".
        atol: tolerance of the float32 comparisons.

    Returns:
        The float32 layer's eager output.
    """
    layer = make_layer("float32")
    out = layer(*_as_list(inputs), **(call_kwargs or {}))
    check_config_round_trip(layer, inputs, call_kwargs, atol)
    if symbolic and tmp_path is not None and not call_kwargs:
        check_keras_reload(layer, inputs, tmp_path, atol)
    check_finite_gradients(layer, inputs, call_kwargs)
    if mixed_precision:
        check_mixed_precision(make_layer, inputs, call_kwargs)
    return out
