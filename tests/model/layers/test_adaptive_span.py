"""Tests for model/layers/adaptive_span.py: mask formula, equivalences, trimming, training."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.layers.adaptive_span import (
    AdaptiveSpanAttention,
    ClampConstraint,
    adaptive_span_mask,
    memory_keep_length,
    query_blocks,
    windowed_context,
    windowed_scores,
)
from model.layers.relative_attention import RelativeMultiHeadAttention
from tests.helpers.layers import check_config_round_trip, check_keras_reload
from tests.helpers.reference import randomize_weights, slow_attention

D, N, H = 8, 2, 3


def make_layer(spans=None, seed=0, **overrides):
    kwargs = dict(d_model=D, num_heads=N, d_head=H, span_max=8, span_ramp=2)
    kwargs.update(overrides)
    layer = AdaptiveSpanAttention(**kwargs)
    layer.build((None, None, D))
    randomize_weights(layer, seed)
    if spans is not None:
        layer.span.assign(np.asarray(spans, "float32"))
    return layer


def random_inputs(batch=2, qlen=3, mlen=4, seed=1):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(batch, qlen, D)).astype("float32"),
        rng.normal(size=(batch, mlen, D)).astype("float32"),
    )


def mask_formula(z, ramp, distance):
    return 0.0 if distance < 0 else min(1.0, max(0.0, (ramp + z - distance) / ramp))


def test_mask_equals_formula():
    spans = np.array([0.0, 2.5, 6.0], "float32")
    got = adaptive_span_mask(spans, 2, 3, 7).numpy()
    assert got.shape == (3, 3, 7)
    for h in range(3):
        for i in range(3):
            for j in range(7):
                assert got[h, i, j] == pytest.approx(mask_formula(spans[h], 2, 4 + i - j), abs=1e-7)
    # The ramp is really used: partial values exist, as do exact 0 and 1.
    assert np.any((got > 0) & (got < 1)) and np.any(got == 0) and np.any(got == 1)


def test_memory_keep_length():
    # ceil(max span + ramp), at most M.
    assert int(memory_keep_length([0.0, 0.0], 32, 1000)) == 32
    assert int(memory_keep_length([0.5, 0.0], 32, 1000)) == 33  # 32.5 -> 33
    assert int(memory_keep_length([33.0, 1.0], 32, 1000)) == 65
    assert int(memory_keep_length([33.0, 1.0], 32, 60)) == 60
    assert int(memory_keep_length([0.0], 32, 0)) == 0


def test_memory_keep_length_rounds_to_the_multiple(monkeypatch):
    import model.layers.adaptive_span as adaptive_span

    monkeypatch.setattr(adaptive_span, "TRIM_MULTIPLE", 16)
    assert int(memory_keep_length([0.5, 0.0], 32, 1000)) == 48  # 32.5 -> 48
    assert int(memory_keep_length([33.0, 1.0], 32, 1000)) == 80  # 65 -> 80
    assert int(memory_keep_length([33.0, 1.0], 32, 70)) == 70


def test_block_costs_trim_with_the_layers_multiple():
    from model.layers.adaptive_span import TRIM_MULTIPLE
    from model.transformer_xl.block_costs import SPAN_TRIM_MULTIPLE

    assert SPAN_TRIM_MULTIPLE == TRIM_MULTIPLE


def test_full_span_tiny_ramp_equals_relative_attention():
    layer = make_layer(spans=[1.0, 1.0], span_max=16, span_ramp=1)
    plain = RelativeMultiHeadAttention(D, N, H)
    plain.build((None, None, D))
    by_name = {w.path.split("/", 1)[1]: w for w in layer.weights}
    for weight in plain.weights:
        weight.assign(by_name[weight.path.split("/", 1)[1]])
    x, mem = random_inputs(mlen=5)  # K = 8 <= span_max: mask is exactly 1
    np.testing.assert_allclose(layer(x, mem).numpy(), plain(x, mem).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("overrides", [{}, {"pre_norm": True, "clamp_len": 2}])
def test_matches_slow_reference_with_span_mask(overrides):
    layer = make_layer(spans=[0.25, 0.6], **overrides)  # z = 2 and 4.8 tokens, R = 2
    x, mem = random_inputs(mlen=5)
    z = layer.spans.numpy()
    expected = slow_attention(
        layer, x, mem, span_weight=lambda h, dist: mask_formula(z[h], 2, dist), renorm_eps=1e-8
    )
    np.testing.assert_allclose(layer(x, mem).numpy(), expected, rtol=1e-5, atol=1e-5)
    # The mask bites: without it the output differs.
    unmasked = slow_attention(layer, x, mem)
    assert np.abs(unmasked - expected).max() > 1e-2


def test_trimming_is_exact_and_effective():
    trimmed = make_layer(spans=[0.1, 0.25], span_max=16, span_ramp=4)  # max z + R = 8 -> keep 8
    full = make_layer(spans=[0.1, 0.25], span_max=16, span_ramp=4, trim_memory=False)
    x, mem = random_inputs(batch=1, qlen=4, mlen=80)
    expected = full(x, mem).numpy()
    poisoned = mem.copy()
    poisoned[:, :72] = np.nan  # the 80 - 8 oldest positions must never be read
    got = trimmed(x, poisoned).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.isnan(full(x, poisoned).numpy()))
    # Large keys just past the spans (their scores far above the rest) change nothing either.
    loud = mem.copy()
    loud[:, 60:72] *= 30.0
    np.testing.assert_allclose(trimmed(x, loud).numpy(), full(x, loud).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_trimming_follows_span_variable_inside_tf_function():
    layer = make_layer(spans=[0.1, 0.0], span_max=128, span_ramp=4)
    reference = make_layer(spans=[0.1, 0.0], span_max=128, span_ramp=4, trim_memory=False)
    spec = tf.TensorSpec([None, None, D], tf.float32)
    step = tf.function(lambda x, m: layer(x, m), input_signature=[spec, spec])
    x, mem = random_inputs(batch=1, qlen=2, mlen=200)
    for span, keep in ((0.1, 17), (1.0, 132)):  # z + R = 16.8 -> 17; 132
        layer.span.assign([span, 0.0])
        reference.span.assign([span, 0.0])
        assert int(memory_keep_length(layer.spans, 4, 200)) == keep
        poisoned = mem.copy()
        poisoned[:, : 200 - keep] = np.nan
        expected = reference(x, mem).numpy()
        np.testing.assert_allclose(step(x, poisoned).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert step.experimental_get_tracing_count() == 1


def test_clamp_constraint_applied_by_optimizer():
    layer = make_layer(spans=[0.5, 0.5])
    optimizer = keras.optimizers.Adam(learning_rate=10.0)
    optimizer.apply_gradients([(tf.constant([1.0, -1.0]), layer.span)])
    np.testing.assert_array_equal(layer.span.numpy(), [0.0, 1.0])
    assert ClampConstraint.from_config(json.loads(json.dumps(ClampConstraint(0, 1).get_config())))(
        tf.constant([-2.0, 0.3, 5.0])
    ).numpy().tolist() == pytest.approx([0.0, 0.3, 1.0])


def test_span_loss_value_and_add_loss():
    layer = make_layer(spans=[0.25, 0.75], span_max=8, span_loss_coef=0.1)
    np.testing.assert_allclose(layer.spans.numpy(), [2.0, 6.0])
    assert float(layer.span_loss()) == pytest.approx(0.1 * 4.0)
    x, mem = random_inputs()
    layer(x, mem)
    assert layer.losses == []
    layer(x, mem, training=True)
    assert len(layer.losses) == 1 and float(layer.losses[0]) == pytest.approx(0.4)


def functional_model(layer, qlen=3, mlen=4):
    x_in = keras.Input((qlen, D))
    mem_in = keras.Input((mlen, D))
    return keras.Model([x_in, mem_in], layer(x_in, mem_in))


@pytest.mark.slow
def test_fit_step_trains_weights_and_clamps_span():
    # The span loss (gradient 10 * 8 / 2 = 40 per s_h) pushes both s_h far
    # below 0 in one SGD step; the constraint must clamp them to exactly 0.
    layer = make_layer(spans=[0.3, 0.05], span_loss_coef=10.0)
    model = functional_model(layer)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, mem = random_inputs()
    mse_before = float(np.mean((model([x, mem]).numpy() - 1.0) ** 2))
    before = [w.numpy().copy() for w in layer.trainable_weights]
    history = model.fit([x, mem], np.ones_like(x), epochs=1, batch_size=2, verbose=0)
    for weight, old in zip(layer.trainable_weights, before):
        assert np.abs(weight.numpy() - old).max() > 0, weight.path
    np.testing.assert_array_equal(layer.span.numpy(), [0.0, 0.0])
    # The reported loss is the MSE plus the span loss 10 * mean(8 * s) = 14.
    assert history.history["loss"][0] == pytest.approx(mse_before + 14.0, rel=1e-5)


def test_gradients_finite_and_reach_span():
    layer = make_layer(spans=[0.25, 0.6])
    x, mem = (tf.constant(a) for a in random_inputs())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x, mem) ** 2)
    grads = tape.gradient(loss, layer.trainable_weights)
    for grad in grads:
        assert np.all(np.isfinite(grad.numpy()))
    assert (
        np.abs(grads[-1].numpy()).min() > 0
    )  # the span (last weight) gets a gradient via the ramp


@pytest.mark.parametrize("positions", ["relative", "learned"])
def test_span_gradient_matches_the_reference_formula(positions):
    # The in-span softmax's gradient with respect to the spans against central differences
    # of the reference's formula (softmax, times the mask, renormalised with 1e-8) in the
    # float64 loops. Spans of 2.4 and 4.8 tokens: away from the ramp's kinks at integers.
    span_max, ramp = 8, 2
    layer = make_layer(spans=[0.3, 0.6], span_max=span_max, span_ramp=ramp,
                       span_positions=positions)
    x, mem = random_inputs(mlen=9, seed=4)
    weights = np.random.default_rng(5).normal(size=x.shape)
    table = learned_table(span_max) if positions == "learned" else None

    def reference(z):
        if positions == "learned":
            out = slow_learned_attention(layer, table, x, mem, z, ramp)
        else:
            out = slow_attention(layer, x, mem, renorm_eps=1e-8,
                                 span_weight=lambda h, dist: mask_formula(z[h], ramp, dist))
        return float(np.sum(out * weights))

    with tf.GradientTape() as tape:
        out = layer(x, mem, key_positions=table)
        loss = tf.reduce_sum(out * tf.constant(weights, tf.float32))
    got = tape.gradient(loss, layer.span).numpy()  # d loss / d s_h, z_h = S s_h
    z, step = layer.spans.numpy().astype(np.float64), 1e-4
    expected = []
    for h in range(N):
        up, down = z.copy(), z.copy()
        up[h] += step
        down[h] -= step
        expected.append(span_max * (reference(up) - reference(down)) / (2 * step))
    assert np.all(np.abs(expected) > 1e-2)  # the spans matter here
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=1e-4)


def test_config_round_trip_and_keras_save_load(tmp_path):
    layer = make_layer(
        spans=[0.4, 0.9],
        span_max=6,
        span_ramp=3,
        span_init=0.5,
        trim_memory=False,
        name="span_attn",
    )
    x, mem = random_inputs()
    fresh = AdaptiveSpanAttention.from_config(layer.get_config())
    fresh(x, mem)
    assert fresh.span.numpy().tolist() == [0.5, 0.5]  # span_init
    check_config_round_trip(layer, [x, mem])
    loaded = check_keras_reload(layer, [x, mem], tmp_path)
    loaded_layer = loaded.get_layer("span_attn")
    assert isinstance(loaded_layer.span.constraint, ClampConstraint)


def test_mixed_bfloat16_policy():
    layer = AdaptiveSpanAttention(
        D, N, H, span_max=8, span_ramp=2, span_init=0.5, dtype="mixed_bfloat16"
    )
    x, mem = random_inputs()
    out = layer(x, mem, training=True)
    assert out.dtype == tf.bfloat16 and layer.spans.dtype == tf.float32
    assert np.all(np.isfinite(out.numpy().astype("float32")))
    assert layer.losses[0].dtype == tf.float32


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"span_max": 0}, "span_max"),
        ({"span_max": 8, "span_ramp": 9}, "span_ramp"),
        ({"span_ramp": 0}, "span_ramp"),
        ({"span_init": 1.5}, "span_init"),
        ({"span_loss_coef": -1.0}, "span_loss_coef"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AdaptiveSpanAttention(D, N, H, **kwargs)


# ---------------------------------------------- learned key positions (the reference's)


def slow_learned_attention(layer, table, x, mem, spans, ramp, renorm_eps=1e-8):
    """The adaptive-span reference's attention (models.py, adaptive_span.py), one
    (b, i, n) at a time, in float64: query i sees the keys at distances
    1..S (not itself), score (q . k + q . P[x - 1]) / sqrt(H), softmax, times
    the reference's mask clamp((R + z + 1 - x) / R, 0, 1) (its template
    `linspace(1 - S, 0, S) + z`, divided by R, plus 1), renormalised with
    `renorm_eps` (the reference's 1e-8); post-norm residual as in
    `TransformerSeqLayer`. `renorm_eps=None`: the layer's in-span softmax
    m exp(s) / sum(m exp(s)) over the keys of nonzero mask, in log space."""
    w = {v.path.split("/")[-1]: np.asarray(v.numpy(), np.float64) for v in layer.weights}
    table = np.asarray(table, np.float64)
    x, mem = np.asarray(x, np.float64), np.asarray(mem, np.float64)
    keys = np.concatenate([mem, x], axis=1)
    mlen, span = mem.shape[1], table.shape[0]
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            attn = np.zeros(x.shape[2])
            for n in range(layer.num_heads):
                q = x[b, i] @ w["query_kernel"][:, n]
                seen = [j for j in range(mlen + i) if 1 <= mlen + i - j <= span]
                if not seen:
                    continue
                scores = [(q @ (keys[b, j] @ w["key_kernel"][:, n])
                           + q @ table[mlen + i - j - 1]) / np.sqrt(layer.d_head) for j in seen]
                m = np.array([min(1.0, max(0.0, (ramp + spans[n] + 1 - (mlen + i - j)) / ramp))
                              for j in seen])
                if renorm_eps is None:
                    logits = np.where(m > 0, np.array(scores) + np.log(np.maximum(m, 1e-300)),
                                      -np.inf)
                    p = np.exp(logits - logits.max())
                    p /= p.sum()
                else:
                    p = np.exp(np.array(scores) - max(scores))
                    p /= p.sum()
                    p *= m
                    p /= p.sum() + renorm_eps
                attn += (p @ np.array([keys[b, j] @ w["value_kernel"][:, n] for j in seen])
                         ) @ w["output_kernel"][n]
            out[b, i] = x[b, i] + attn
    mean = out.mean(-1, keepdims=True)
    var = out.var(-1, keepdims=True)
    return (out - mean) / np.sqrt(var + layer.layer_norm_epsilon) * w["gamma"] + w["beta"]


def learned_table(span, seed=3):
    return np.random.default_rng(seed).normal(size=(span, H)).astype("float32")


def test_learned_positions_match_the_reference_loop():
    layer = make_layer(spans=[0.3, 0.7], span_max=6, span_ramp=2, span_positions="learned")
    assert layer.position_kernel is None and layer.content_bias is None
    table = learned_table(6)
    spans = layer.spans.numpy()
    # Memory of 8: the kept positions fill the window of 6 slots (every slot a real key);
    # memory of 5: the window reaches past it (slots masked).
    x, mem = random_inputs(qlen=4, mlen=8, seed=2)
    np.testing.assert_allclose(layer(x, mem, key_positions=table).numpy(),
                               slow_learned_attention(layer, table, x, mem, spans, 2),
                               rtol=1e-5, atol=1e-5)
    x, mem = random_inputs(qlen=4, mlen=5)  # K = 9 > S = 6: the window cuts keys too
    expected = slow_learned_attention(layer, table, x, mem, spans, 2)
    got = layer(x, mem, key_positions=table).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # A slot past the memory (query 0's distance 6) is masked before the softmax, not only by
    # the span mask: a large score there must not take the weight of the real keys. (Where a
    # key of mask 0 has such a score, the reference's renormalisation gives rounding noise
    # (its epsilon is most of the denominator) and the in-span softmax ignores the key.)
    loud = table.copy()
    loud[5] *= 1e3
    np.testing.assert_allclose(layer(x, mem, key_positions=loud).numpy(),
                               slow_learned_attention(layer, loud, x, mem, spans, 2, None),
                               rtol=1e-5, atol=1e-5)
    # An empty memory: query 0 has no key at all (the reference attends nowhere: zeros).
    x0, empty = random_inputs(qlen=4, mlen=0, seed=5)
    np.testing.assert_allclose(layer(x0, empty, key_positions=table).numpy(),
                               slow_learned_attention(layer, table, x0, empty, spans, 2),
                               rtol=1e-5, atol=1e-5)
    # The table is used: another table gives another output.
    other = layer(x, mem, key_positions=learned_table(6, seed=4)).numpy()
    assert np.abs(other - got).max() > 1e-3
    # Memory as zeros (the reference's first cache) attends to zero keys, finite.
    assert np.all(np.isfinite(layer(x, np.zeros_like(mem), key_positions=table).numpy()))


def test_learned_positions_trimming_is_exact():
    kwargs = dict(spans=[0.05, 0.1], span_max=96, span_ramp=4, span_positions="learned")
    trimmed, full = make_layer(**kwargs), make_layer(trim_memory=False, **kwargs)
    table = learned_table(96)
    x, mem = random_inputs(batch=1, qlen=4, mlen=96)  # max z + R = 13.6 -> keep 14
    expected = full(x, mem, key_positions=table).numpy()
    poisoned = mem.copy()
    poisoned[:, :82] = np.nan  # 96 - 14 oldest positions: never read
    np.testing.assert_allclose(trimmed(x, poisoned, key_positions=table).numpy(), expected,
                               rtol=1e-5, atol=1e-5)
    assert np.all(np.isnan(full(x, poisoned, key_positions=table).numpy()))
    # Keys just past the spans with large scores: a renormalisation whose epsilon is scaled
    # by the softmax sum over every key would let them change the output; dropping them
    # changes nothing.
    loud = table.copy()
    loud[14:20] *= 1e2
    np.testing.assert_allclose(trimmed(x, mem, key_positions=loud).numpy(),
                               full(x, mem, key_positions=loud).numpy(), rtol=1e-5, atol=1e-5)


def test_learned_positions_config_and_call_errors():
    layer = make_layer(span_positions="learned")
    x, mem = random_inputs()
    check_config_round_trip(layer, [x, mem], {"key_positions": learned_table(8)})
    assert layer.get_config()["span_positions"] == "learned"
    with pytest.raises(ValueError, match="takes key_positions"):
        layer(x, mem)
    with pytest.raises(ValueError, match="takes no key_positions"):
        make_layer()(x, mem, key_positions=learned_table(8))
    with pytest.raises(ValueError, match="span_positions must be one of"):
        AdaptiveSpanAttention(D, N, H, span_positions="absolute")


def test_query_blocks():
    assert query_blocks(128) == 2 and query_blocks(256) == 4
    assert query_blocks(64) == 1  # one block: nothing to gain
    assert query_blocks(96) == 1 and query_blocks(1) == 1  # not a multiple
    assert query_blocks(None) == 1  # unknown when traced
    assert query_blocks(128, block=32) == 4


@pytest.mark.parametrize("blocks", [2, 4])
def test_blocked_scores_and_context_equal_the_whole_segment_s(blocks):
    rng = np.random.default_rng(7)
    qlen, window = 128, 48
    q = tf.constant(rng.normal(size=(2, 3, qlen, 5)), tf.float32)
    k = tf.constant(rng.normal(size=(2, 3, window + qlen, 5)), tf.float32)
    v = tf.constant(rng.normal(size=(2, 3, window + qlen, 5)), tf.float32)
    w = tf.constant(rng.normal(size=(2, 3, qlen, window)), tf.float32)
    # The definitions, by loops: scores[i, l] = q_i . k_{i + l};
    # context_i = sum_l w[i, l] v_{i + l}.
    qn, kn, vn, wn = q.numpy(), k.numpy(), v.numpy(), w.numpy()
    scores = np.stack([np.einsum("bnh,bnlh->bnl", qn[:, :, i], kn[:, :, i:i + window])
                       for i in range(qlen)], axis=2)
    context = np.stack([np.einsum("bnl,bnlh->bnh", wn[:, :, i], vn[:, :, i:i + window])
                        for i in range(qlen)], axis=2)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([q, k, v, w])
        outs = {b: (windowed_scores(q, k, window, b), windowed_context(w, v, b))
                for b in (1, blocks)}
        losses = {b: tf.reduce_sum(s * s) + tf.reduce_sum(c * c) for b, (s, c) in outs.items()}
    for b in (1, blocks):
        np.testing.assert_allclose(outs[b][0].numpy(), scores, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outs[b][1].numpy(), context, rtol=1e-5, atol=1e-5)
    whole, blocked = (tape.gradient(losses[b], [q, k, v, w]) for b in (1, blocks))
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-4)


def test_learned_positions_in_query_blocks_match_the_reference_loop():
    """A 128-query segment is scored in two blocks of 64 (inside a traced step, where T is
    known); the slow loop knows no blocks."""
    layer = make_layer(spans=[0.2, 0.5], span_max=40, span_ramp=4, span_positions="learned")
    table = learned_table(40)
    x, mem = random_inputs(batch=1, qlen=128, mlen=40)
    assert query_blocks(x.shape[1]) == 2
    expected = slow_learned_attention(layer, table, x, mem, layer.spans.numpy(), 4)
    step = tf.function(lambda x, m: layer(x, m, key_positions=table))
    np.testing.assert_allclose(step(x, mem).numpy(), expected, rtol=1e-5, atol=1e-5)
