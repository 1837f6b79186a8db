"""Tests for model/layers/relative_attention.py against slow explicit-loop references."""


import keras
import numpy as np
import pytest
import tensorflow as tf

from model.layers.relative_attention import (
    RelativeMultiHeadAttention,
    causal_mask,
    rel_shift,
    relative_positional_encoding,
)
from tests.helpers.layers import check_config_round_trip, check_keras_reload
from tests.helpers.reference import randomize_weights, sinusoid, slow_attention

D, N, H = 8, 2, 3  # d_head != d_model / num_heads on purpose


def make_layer(seed=0, **overrides):
    kwargs = dict(d_model=D, num_heads=N, d_head=H)
    kwargs.update(overrides)
    layer = RelativeMultiHeadAttention(**kwargs)
    layer.build((None, None, D))
    randomize_weights(layer, seed)
    return layer


def random_inputs(batch=2, qlen=3, mlen=4, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, qlen, D)).astype("float32")
    mem = rng.normal(size=(batch, mlen, D)).astype("float32")
    return x, mem


def test_positional_encoding_matches_formula():
    for clamp_len in (-1, 0, 3):
        got = relative_positional_encoding(6, D, clamp_len).numpy()
        for k in range(6):
            position = 5 - k if clamp_len <= 0 else min(5 - k, clamp_len)
            np.testing.assert_allclose(got[k], sinusoid(position, D), atol=1e-6)


def test_clamp_len_zero_or_negative_means_no_clamping():
    # As the reference Transformer-XL: `if self.clamp_len > 0: pos_seq.clamp_(max=...)`.
    unclamped = np.stack([sinusoid(5 - k, D) for k in range(6)])
    for clamp_len in (0, -1, -7):
        got = relative_positional_encoding(6, D, clamp_len).numpy()
        np.testing.assert_allclose(got, unclamped, atol=1e-6)
    x, mem = random_inputs()
    expected = make_layer(clamp_len=-1)(x, mem).numpy()  # same seed: same weights
    np.testing.assert_array_equal(make_layer(clamp_len=0)(x, mem).numpy(), expected)
    # ...while a positive clamp does change the output at this scale.
    assert np.abs(make_layer(clamp_len=1)(x, mem).numpy() - expected).max() > 1e-3


@pytest.mark.parametrize("qlen,klen", [(3, 7), (4, 4), (1, 5)])
def test_rel_shift_matches_double_loop(qlen, klen):
    x = np.random.default_rng(0).normal(size=(2, 3, qlen, klen)).astype("float32")
    got = rel_shift(tf.constant(x)).numpy()
    assert got.shape == x.shape
    mlen = klen - qlen
    for i in range(qlen):
        for j in range(mlen + i + 1):
            # Row c of the position scores holds distance klen - 1 - c; key j is at distance M + i -
            # j.
            c = klen - 1 - (mlen + i - j)
            np.testing.assert_array_equal(got[..., i, j], x[..., i, c])


@pytest.mark.parametrize(
    "mlen,overrides",
    [
        (None, {}),
        (0, {}),
        (4, {}),
        (4, {"clamp_len": 2}),
        (4, {"pre_norm": True}),
        (5, {"pre_norm": True, "clamp_len": 0}),
    ],
)
def test_matches_slow_reference(mlen, overrides):
    layer = make_layer(**overrides)
    x, mem = random_inputs(mlen=mlen or 0)
    mem = None if mlen is None else mem
    got = layer(x, mem).numpy()
    np.testing.assert_allclose(got, slow_attention(layer, x, mem), rtol=1e-5, atol=1e-5)


def reference_same_length_mask(qlen, mlen):
    """NumPy port of `_create_mask(qlen, mlen, same_length=True)` of the reference
    TensorFlow Transformer-XL (kimiyoung/transformer-xl, tf/model.py): 1 = hidden."""
    ones = np.ones((qlen, qlen))
    mask_u, mask_dia, mask_l = np.triu(ones), np.eye(qlen), np.tril(ones)
    ret = np.concatenate([np.zeros((qlen, mlen)), mask_u - mask_dia], axis=1)
    return np.concatenate([ret[:, :qlen] + mask_l - mask_dia, ret[:, qlen:]], axis=1)


@pytest.mark.parametrize("qlen,mlen", [(4, 6), (4, 4), (5, 2), (3, 0), (1, 3)])
def test_same_length_mask_is_the_reference_mask(qlen, mlen):
    got = causal_mask(qlen, qlen + mlen, max_distance=mlen).numpy()
    np.testing.assert_array_equal(got, reference_same_length_mask(qlen, mlen) == 0)
    assert (got.sum(axis=1) == mlen + 1).all()  # the same number of keys for every query
    plain = causal_mask(qlen, qlen + mlen).numpy()
    np.testing.assert_array_equal(plain, np.tril(np.ones((qlen, qlen + mlen)), mlen) == 1)


@pytest.mark.parametrize("mlen,overrides", [(4, {}), (2, {}), (0, {}), (None, {}),
                                            (3, {"pre_norm": True, "clamp_len": 2})])
def test_same_length_matches_slow_reference(mlen, overrides):
    layer = make_layer(same_length=True, **overrides)
    x, mem = random_inputs(qlen=5, mlen=mlen or 0)
    mem = None if mlen is None else mem
    got = layer(x, mem).numpy()
    np.testing.assert_allclose(got, slow_attention(layer, x, mem), rtol=1e-5, atol=1e-5)
    # Query 0 sees all its causal keys either way; later ones see fewer, which
    # changes the output at this scale (guards the reference itself).
    full = slow_attention(layer, x, mem, same_length=False)
    np.testing.assert_allclose(full[:, 0], got[:, 0], rtol=1e-5, atol=1e-5)
    assert np.abs(full[:, 1:] - got[:, 1:]).max() > 1e-3


def test_position_term_matters_at_test_scale():
    # Guards the reference itself: the position term must matter at this scale.
    layer = make_layer()
    x, mem = random_inputs()
    expected = slow_attention(layer, x, mem)
    layer.position_kernel.assign(np.zeros(layer.position_kernel.shape, "float32"))
    assert np.abs(layer(x, mem).numpy() - expected).max() > 1e-2


@pytest.mark.parametrize("pre_norm", [False, True])
def test_memory_equivalence(pre_norm):
    layer = make_layer(pre_norm=pre_norm)
    seg_a, seg_b = random_inputs(qlen=4, mlen=4, seed=3)
    with_memory = layer(seg_b, seg_a).numpy()
    one_pass = layer(np.concatenate([seg_a, seg_b], axis=1)).numpy()
    np.testing.assert_allclose(with_memory, one_pass[:, 4:], rtol=1e-5, atol=1e-5)


def test_causal_future_inputs_do_not_leak():
    layer = make_layer()
    x, mem = random_inputs(qlen=5)
    changed = x.copy()
    changed[:, 3:] += 10.0
    a, b = layer(x, mem).numpy(), layer(changed, mem).numpy()
    np.testing.assert_allclose(a[:, :3], b[:, :3], rtol=1e-6, atol=1e-6)
    assert np.abs(a[:, 3:] - b[:, 3:]).max() > 1e-2


def test_dynamic_shapes_in_tf_function():
    layer = make_layer()
    spec = tf.TensorSpec([None, None, D], tf.float32)
    fn = tf.function(lambda x, m: layer(x, m), input_signature=[spec, spec])
    for qlen, mlen in ((3, 4), (2, 0), (5, 1)):
        x, mem = random_inputs(qlen=qlen, mlen=mlen)
        np.testing.assert_allclose(fn(x, mem).numpy(), layer(x, mem).numpy(), rtol=1e-5, atol=1e-5)


def test_dropout_only_when_training():
    layer = make_layer(dropout=0.3, attn_dropout=0.3)
    x, mem = random_inputs()
    np.testing.assert_array_equal(layer(x, mem).numpy(), layer(x, mem, training=False).numpy())
    assert np.abs(layer(x, mem, training=True).numpy() - layer(x, mem).numpy()).max() > 1e-3


def shared_bias(seed=5):
    rng = np.random.default_rng(seed)
    return tuple(tf.constant(rng.normal(0.0, 0.4, (N, H)), tf.float32) for _ in range(2))


@pytest.mark.parametrize("untie_rel_bias", [True, False])
def test_config_json_round_trip(untie_rel_bias):
    layer = make_layer(clamp_len=3, pre_norm=True, dropout=0.1, untie_rel_bias=untie_rel_bias,
                       same_length=not untie_rel_bias, name="attn")
    bias = {} if untie_rel_bias else {"rel_bias": shared_bias()}
    check_config_round_trip(layer, random_inputs(), bias)


def test_shared_rel_bias_is_taken_from_the_call():
    layer = make_layer(untie_rel_bias=False)
    names = [w.path.split("/")[-1] for w in layer.weights]
    assert "content_bias" not in names and "position_bias" not in names
    x, mem = random_inputs()
    u, v = shared_bias()
    got = layer(x, mem, rel_bias=(u, v)).numpy()
    np.testing.assert_allclose(
        got, slow_attention(layer, x, mem, rel_bias=(u, v)), rtol=1e-5, atol=1e-5
    )
    other = layer(x, mem, rel_bias=shared_bias(seed=6)).numpy()
    assert np.abs(other - got).max() > 1e-3  # the biases passed in are the ones used
    with tf.GradientTape() as tape:
        tape.watch([u, v])
        out = layer(x, mem, rel_bias=(u, v))
        loss = tf.reduce_sum(out * np.random.default_rng(0).normal(size=out.shape))
    for grad in tape.gradient(loss, [u, v]):
        assert np.abs(grad.numpy()).max() > 0
    with pytest.raises(ValueError, match="untie_rel_bias=False.*rel_bias"):
        layer(x, mem)
    with pytest.raises(ValueError, match="untie_rel_bias=True.*rel_bias"):
        make_layer()(x, mem, rel_bias=(u, v))


def functional_model(layer, qlen=3, mlen=4):
    x_in = keras.Input((qlen, D))
    mem_in = keras.Input((mlen, D))
    return keras.Model([x_in, mem_in], layer(x_in, mem_in))


def test_symbolic_call_and_keras_save_load(tmp_path):
    layer = make_layer(clamp_len=2)
    model = functional_model(layer)
    assert tuple(model.output.shape) == (None, 3, D)
    assert tuple(layer(keras.Input((5, D))).shape) == (None, 5, D)  # mem=None
    x, mem = random_inputs()
    expected = layer(x, mem).numpy()
    np.testing.assert_allclose(model([x, mem]).numpy(), expected, rtol=1e-6, atol=1e-6)
    check_keras_reload(layer, [x, mem], tmp_path)


def test_fit_step_updates_every_weight():
    # Random weights: with the 0.02 init the residual dominates and the query
    # gradient (~1e-10) vanishes in the float32 update.
    layer = make_layer(dropout=0.1)
    model = functional_model(layer)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, mem = random_inputs()
    before = [w.numpy().copy() for w in layer.trainable_weights]
    model.fit([x, mem], np.ones_like(x), epochs=1, batch_size=2, verbose=0)
    for weight, old in zip(layer.trainable_weights, before):
        assert np.abs(weight.numpy() - old).max() > 0, weight.path


def test_gradients_finite_and_reach_memory():
    layer = make_layer()
    x, mem = (tf.constant(a) for a in random_inputs())
    with tf.GradientTape() as tape:
        tape.watch(mem)
        loss = tf.reduce_sum(layer(x, mem) ** 2)
    grads = tape.gradient(loss, [mem] + layer.trainable_weights)
    for grad in grads:
        assert np.all(np.isfinite(grad.numpy()))
    assert np.abs(grads[0].numpy()).max() > 0


def test_mixed_bfloat16_policy():
    layer = RelativeMultiHeadAttention(D, N, H, dtype="mixed_bfloat16")
    layer.build((None, None, D))
    randomize_weights(layer)
    x, mem = random_inputs()
    got = layer(x, mem)
    assert got.dtype == tf.bfloat16
    assert layer.query_kernel.dtype == "float32"
    got = got.numpy().astype("float32")
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, slow_attention(layer, x, mem), atol=0.15)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"d_model": 8, "num_heads": 0, "d_head": 4}, "num_heads"),
        ({"d_model": 7, "num_heads": 1, "d_head": 4}, "d_model"),
        ({"d_model": 8, "num_heads": 2, "d_head": 4, "dropout": 1.0}, "dropout"),
        ({"d_model": 8, "num_heads": 2, "d_head": 4, "attn_dropout": -0.1}, "attn_dropout"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RelativeMultiHeadAttention(**kwargs)


def test_wrong_input_width_is_reported():
    with pytest.raises(ValueError, match="d_model"):
        RelativeMultiHeadAttention(D, N, H)(np.zeros((1, 2, D + 2), "float32"))


def test_seeded_initializer_gives_distinct_reproducible_kernels():
    def build():
        layer = RelativeMultiHeadAttention(
            D, N, H, kernel_initializer=keras.initializers.RandomNormal(seed=3)
        )
        layer.build((None, None, D))
        return layer

    first, second = build(), build()
    assert not np.allclose(first.query_kernel.numpy(), first.key_kernel.numpy())
    np.testing.assert_array_equal(first.query_kernel.numpy(), second.query_kernel.numpy())
