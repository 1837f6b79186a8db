"""Tests for model/transformer_xl/model.py: memory, wiring, saving, training, properties."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.families import build_model
from model.transformer_xl.config import ModelConfig
from model.transformer_xl.model import TransformerXLLM
from model.transformer_xl.presets import preset_config

B, V, D = 2, 64, 32


def make_model(seed=0, **overrides):
    """Tiny model, no dropout, large random weights (attention far from uniform)."""
    model = build_model(preset_config("tiny", dropout=0.0, **overrides))
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        name = weight.path.rsplit("/", 1)[-1]
        if name in ("tau", "search_step", "span"):
            continue
        value = rng.normal(0.0, 1.0 if name == "arch_logits" else 0.3, weight.shape)
        if name == "gamma":
            value = 1.0 + value
        weight.assign(value.astype("float32"))
    return model


def token_ids(length, seed=0, batch=B):
    return tf.constant(np.random.default_rng(seed).integers(0, V, (batch, length)), tf.int32)


MEMORY_CASES = {
    "transformer_xl": dict(architecture="transformer_xl"),
    "par_string": dict(architecture="aafiaf", num_blocks=6),
    "pre_norm": dict(architecture="transformer_xl", pre_norm=True, final_norm=True),
    "supernet_argmax": dict(architecture="supernet", eval_mode="argmax"),
    "supernet_expected": dict(architecture="supernet", eval_mode="expected"),
    "supernet_hard_training": dict(architecture="supernet", search_mode="hard"),
    "adaptive_span": dict(
        architecture="transformer_xl", attention="adaptive_span", span_max=16, span_ramp=4
    ),
}


@pytest.mark.parametrize("case", sorted(MEMORY_CASES))
@pytest.mark.slow
def test_segments_with_memory_equal_one_pass(case):
    model = make_model(**MEMORY_CASES[case])
    if model.attention == "adaptive_span":
        for layer in model.attention_layers:  # z = 6.4 < 11 (the longest distance): the mask bites
            layer.span.assign([0.4, 0.6])
    training = case.endswith("training")  # same step on every call: same sampled architecture
    ids = token_ids(12)
    full, _ = model(ids, training=training)
    mems = None
    for start in range(0, 12, 4):
        # mem_len 8 keeps every earlier position of the 12: the same window as one pass.
        hidden, mems = model(ids[:, start : start + 4], mems=mems, training=training, mem_len=8)
        np.testing.assert_allclose(
            hidden.numpy(), full[:, start : start + 4].numpy(), atol=1e-5, rtol=1e-5
        )
    assert [m.shape[1] for m in mems] == [8] * model.num_mems


def test_new_mems_are_the_block_inputs_and_the_blocks_chain():
    model = make_model(architecture="supernet")
    # argmax per block: a, f, i, a
    for variable, choice in zip(model.arch_variables, [0, 1, 2, 0]):
        variable.assign(np.eye(3, dtype="float32")[choice] * 2.0)
    assert model.derived_architecture == "afia"
    ids = token_ids(5)
    rng = np.random.default_rng(3)
    mems = [tf.constant(rng.normal(size=(B, 3, D)), tf.float32) for _ in range(4)]
    hidden, new_mems = model(ids, mems=mems, mem_len=4)

    x = model.embedding(ids) * math.sqrt(D)  # block 0 input
    inputs = []
    for block, mem, letter in zip(model.blocks, mems, "afia"):
        inputs.append(x)
        if letter == "a":
            x = block.attention_layer(x, mem)
        elif letter == "f":
            x = block.dense_layer(x)
    np.testing.assert_allclose(hidden.numpy(), x.numpy(), atol=1e-5)
    for mem, block_input, new_mem in zip(mems, inputs, new_mems):
        expected = np.concatenate([mem.numpy(), block_input.numpy()], axis=1)[:, -4:]
        np.testing.assert_allclose(new_mem.numpy(), expected, atol=1e-6)


def test_memory_lengths_and_empty_memories():
    model = make_model(architecture="afia")
    ids = token_ids(5)
    assert model.num_mems == 2
    hidden, mems = model(ids)  # None: empty memory; mem_len from the config (8)
    assert [m.shape for m in mems] == [(B, 5, D)] * 2
    empty = [tf.zeros([B, 0, D])] * 2
    np.testing.assert_allclose(model(ids, mems=empty)[0].numpy(), hidden.numpy(), atol=1e-6)
    _, mems = model(ids, mems=mems)
    assert [m.shape[1] for m in mems] == [8, 8]
    _, none = model(ids, mems=mems, mem_len=0)
    assert [m.shape for m in none] == [(B, 0, D)] * 2
    zeros = model.initial_mems(3)
    assert len(zeros) == 2 and zeros[0].shape == (3, 8, D) and not np.any(zeros[0].numpy())
    assert model.initial_mems(3, mem_len=5)[1].shape == (3, 5, D)
    with pytest.raises(ValueError, match="memories"):
        model(ids, mems=mems[:1])


@pytest.mark.parametrize("overrides", [
    dict(architecture="afff"),
    dict(architecture="fafi", attention="adaptive_span", span_max=16, span_ramp=4),
    dict(architecture="supernet")], ids=["afff", "adaptive_span", "supernet"])
@pytest.mark.slow
def test_same_length_segments_equal_one_window_per_position(overrides):
    """With one attention block, same_length makes position p see exactly the M + 1
    block inputs p - M .. p: recomputed here position by position from a window
    (plain causal attention, the memory zeros where the window starts before the
    stream, as the zero initial state), independently of the segment recurrence."""
    if overrides["architecture"] == "supernet":
        # argmax blocks: f a i f, one attention block
        model = make_model(same_length=True, **overrides)
        plain = make_model(same_length=False, **overrides)
        for m in (model, plain):
            for variable, choice in zip(m.arch_variables, [1, 0, 2, 1]):
                variable.assign(np.eye(3, dtype="float32")[choice] * 2.0)
    else:
        model, plain = make_model(same_length=True, **overrides), make_model(**overrides)
    if model.attention == "adaptive_span":
        for m in (model, plain):  # z = 3.2, 4.8 (ramp 4) < M = 6: the span mask bites too
            m.attention_layers[0].span.assign([0.2, 0.3])
    mem_len, seq_len, length = 6, 4, 15
    ids = token_ids(length, seed=4)
    mems, got = model.initial_mems(B, mem_len), []
    for start in range(0, length, seq_len):
        hidden, mems = model(ids[:, start:start + seq_len], mems=mems, mem_len=mem_len)
        got.append(hidden.numpy())
    got = np.concatenate(got, axis=1)  # [B, L, D]
    for p in range(length):
        first = max(0, p - mem_len)
        zeros = [tf.zeros([B, mem_len - (p - first), D])] * plain.num_mems
        window, _ = plain(ids[:, first:p + 1], mems=zeros)
        np.testing.assert_allclose(got[:, p], window[:, -1].numpy(), rtol=1e-5, atol=1e-5)
    # ...which differs from attending to every key in memory (the test can fail).
    mems, full = plain.initial_mems(B, mem_len), []
    for start in range(0, length, seq_len):
        hidden, mems = plain(ids[:, start:start + seq_len], mems=mems, mem_len=mem_len)
        full.append(hidden.numpy())
    assert np.abs(np.concatenate(full, axis=1) - got).max() > 1e-3


def test_fixed_architecture_without_attention_has_no_memory():
    model = make_model(architecture="ffif")
    hidden, mems = model(token_ids(3), mems=model.initial_mems(B))
    assert model.num_mems == 0 and mems == [] and hidden.shape == (B, 3, D)


def test_config_json_round_trip_gives_an_equal_model():
    model = make_model(
        architecture="supernet", attention="adaptive_span", adaptive_input=True, seed=1
    )
    config = json.loads(json.dumps(model.get_config()))
    clone = TransformerXLLM.from_config(config)
    clone.build((None, None))
    clone.set_weights(model.get_weights())
    assert clone.get_config() == model.get_config()
    assert ModelConfig.from_dict(config["config"]) == preset_config(
        "tiny", dropout=0.0, attention="adaptive_span", adaptive_input=True
    )
    ids = token_ids(6)
    np.testing.assert_array_equal(clone(ids)[0].numpy(), model(ids)[0].numpy())
    # The form older code wrote: every ModelConfig field at the top level.
    flat = {k: v for k, v in config.items() if k != "config"} | config["config"]
    old_form = TransformerXLLM.from_config(flat)
    assert old_form.model_config == model.model_config
    with pytest.raises(TypeError, match="either a config or its fields"):
        TransformerXLLM(model.model_config, d_model=8)


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        dict(architecture="supernet", search_mode="hard"),
        dict(architecture="afia", attention="adaptive_span", tie_weights=True, final_norm=True),
        dict(architecture="supernet", attention="adaptive_span", untie_rel_bias=False),
    ],
    ids=["supernet", "adaptive_span_tied", "supernet_shared_rel_bias"],
)
def test_keras_save_and_load(tmp_path, overrides):
    model = make_model(**overrides)
    model.set_search_state(0.5, 11)
    ids = token_ids(6)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert float(loaded.tau) == 0.5 and int(loaded.search_step) == 11
    assert loaded.derived_architecture == model.derived_architecture
    for training in (False, True):
        expected, expected_mems = model(ids, training=training)
        got, got_mems = loaded(ids, training=training)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        np.testing.assert_array_equal(got_mems[-1].numpy(), expected_mems[-1].numpy())
    np.testing.assert_array_equal(
        loaded.token_nll(got, ids).numpy(), model.token_nll(got, ids).numpy()
    )


def train(model, ids, targets, steps, traced):
    optimizer = keras.optimizers.Adam(1e-2)

    def step(i):
        model.set_search_state(1.0, i)
        with tf.GradientTape() as tape:
            hidden, _ = model(ids, training=True)
            loss = tf.reduce_mean(model.token_nll(hidden, targets))
            total = loss + tf.add_n(model.span_losses + [0.0])
        grads = tape.gradient(total, model.trainable_variables)
        if traced:  # the untaken switch_case branches get zero gradients, not None
            assert all(g is not None for g in grads)
        optimizer.apply_gradients(
            (g, v) for g, v in zip(grads, model.trainable_variables) if g is not None
        )
        return loss

    step = tf.function(step) if traced else step
    return [float(step(tf.constant(i, tf.int64))) for i in range(steps)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, traced",
    [
        (dict(architecture="supernet", search_mode="soft"), False),
        (
            dict(
                architecture="supernet", search_mode="hard", attention="adaptive_span", num_blocks=2
            ),
            True,
        ),
    ],
    ids=["soft_eager", "hard_span_traced"],
)
def test_training_lowers_the_loss_and_moves_the_architecture(overrides, traced):
    model = build_model(preset_config("tiny", dropout=0.0, **overrides))
    ids, targets = token_ids(8, seed=1), token_ids(8, seed=2)
    before = float(tf.reduce_mean(model.token_nll(model(ids)[0], targets)))
    losses = train(model, ids, targets, steps=6, traced=traced)
    after = float(tf.reduce_mean(model.token_nll(model(ids)[0], targets)))
    assert losses[-1] < losses[0] and after < before - 0.1
    for variable in model.arch_variables:  # the search itself trains
        assert np.abs(variable.numpy()).sum() > 1e-3


def test_arch_and_weight_variables_partition_the_trainable_variables():
    for architecture, num_arch in (("supernet", 4), ("afia", 0)):
        model = make_model(architecture=architecture)
        arch = {id(v) for v in model.arch_variables}
        weights = {id(v) for v in model.weight_variables}
        assert len(arch) == num_arch and not arch & weights
        assert arch | weights == {id(v) for v in model.trainable_variables}
        assert all(v.shape == (3,) for v in model.arch_variables)
        assert not {id(model.tau), id(model.search_step)} & (arch | weights)


def test_architecture_probabilities_and_derivation():
    model = make_model(architecture="supernet")
    logits = np.array(
        [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0], [0.1, 0.0, -1.0]], "float32"
    )
    for variable, row in zip(model.arch_variables, logits):
        variable.assign(row)
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(model.arch_probabilities), expected, rtol=1e-6)
    assert model.derived_architecture == "faia"
    fixed = make_model(architecture="transformer_xl")
    assert fixed.derived_architecture == "afaf"
    np.testing.assert_array_equal(np.asarray(fixed.arch_probabilities), np.eye(3)[[0, 1, 0, 1]])


def test_spans_and_span_losses_come_from_the_span_variables():
    model = make_model(architecture="supernet", attention="adaptive_span", span_max=16, span_ramp=4)
    fractions = [[0.25, 0.5], [0.0, 1.0], [0.125, 0.125], [1.0, 1.0]]
    for layer, value in zip(model.attention_layers, fractions):
        layer.span.assign(value)
    spans = [np.asarray(s) for s in model.spans]
    np.testing.assert_allclose(spans, 16 * np.array(fractions))
    expected = [model.span_loss_coef * 16 * np.mean(f) for f in fractions]
    np.testing.assert_allclose([float(x) for x in model.span_losses], expected, rtol=1e-6)
    relative = make_model(architecture="afia")
    assert relative.span_losses == [] and relative.spans == []


@pytest.mark.slow
def test_search_state_selects_the_noise_inside_tf_function():
    model = make_model(architecture="supernet", search_mode="hard")
    ids = token_ids(4)

    @tf.function
    def forward(step):
        model.set_search_state(1.0, step)
        return model(ids, training=True)[0]

    outputs = [forward(tf.constant(s, tf.int64)).numpy() for s in range(6)]
    assert int(model.search_step) == 5
    np.testing.assert_array_equal(forward(tf.constant(2, tf.int64)).numpy(), outputs[2])
    assert any(not np.array_equal(outputs[0], other) for other in outputs[1:])


@pytest.mark.slow
def test_model_losses_match_span_losses_in_hard_search():
    model = make_model(architecture="supernet", search_mode="hard", attention="adaptive_span")

    @tf.function
    def forward():
        model(token_ids(4), training=True)
        return tf.add_n(model.losses), tf.add_n(model.span_losses)

    from_losses, from_spans = forward()
    assert float(from_losses) == pytest.approx(float(from_spans))


def test_mixed_precision_and_head():
    config = preset_config("tiny", architecture="supernet", search_mode="hard")
    model = build_model(config, dtype="mixed_bfloat16")
    ids = token_ids(5)
    hidden, mems = model(ids, mems=model.initial_mems(B), training=True)
    assert hidden.dtype == tf.bfloat16 and mems[0].dtype == tf.bfloat16
    assert model.initial_mems(B)[0].dtype == tf.bfloat16
    assert all(v.dtype == "float32" for v in model.arch_variables)
    targets = tf.concat([ids[:, 1:], -tf.ones([B, 1], tf.int32)], axis=1)  # last position padded
    nll = model.token_nll(hidden, targets).numpy()
    log_probs = model.log_probs(hidden).numpy()
    assert nll.dtype == np.float32 and np.all(nll[:, -1] == 0)
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-4)
    picked = np.take_along_axis(log_probs[:, :-1], targets.numpy()[:, :-1, None], axis=-1)[..., 0]
    np.testing.assert_allclose(nll[:, :-1], -picked, rtol=1e-4, atol=1e-4)


def test_invalid_arguments_fail_at_construction():
    with pytest.raises(ValueError, match="num_heads"):
        TransformerXLLM(vocab_size=V, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="architecture"):
        TransformerXLLM(vocab_size=V, num_blocks=4, architecture="afxa")


# (overrides, training): every attention layer kind, and the supernet's
# attention candidates in soft (all computed) and hard (one sampled) search.
SHARED_BIAS_CASES = {
    "transformer_xl": (dict(architecture="transformer_xl"), False),
    "par_string_span": (
        dict(architecture="aafa", attention="adaptive_span", span_max=16, span_ramp=4),
        False,
    ),
    "supernet_soft": (dict(architecture="supernet"), True),
    "supernet_hard_span": (
        dict(
            architecture="supernet",
            search_mode="hard",
            attention="adaptive_span",
            span_max=16,
            span_ramp=4,
        ),
        True,
    ),
}


def _relative_path(weight):
    return weight.path.split("/", 1)[1]  # without the model's (uniquified) name


@pytest.mark.parametrize("case", sorted(SHARED_BIAS_CASES))
def test_shared_rel_bias_is_one_pair_used_by_every_layer(case):
    overrides, training = SHARED_BIAS_CASES[case]
    model = make_model(untie_rel_bias=False, **overrides)
    us = [w for w in model.weights if w.path.endswith("/content_bias")]
    vs = [w for w in model.weights if w.path.endswith("/position_bias")]
    assert len(us) == 1 and len(vs) == 1
    u, v = us[0], vs[0]
    assert tuple(u.shape) == tuple(v.shape) == (2, 16)  # [N, H]
    assert {id(u), id(v)} <= {id(w) for w in model.weight_variables}

    # Reference: the untied model whose every layer holds the shared u, v.
    reference = build_model(preset_config("tiny", dropout=0.0, **overrides))
    weights = {_relative_path(w): w for w in model.weights}
    shared = {"content_bias": u, "position_bias": v}
    for w in reference.weights:
        name = w.path.rsplit("/", 1)[-1]
        w.assign(shared[name] if name in shared else weights[_relative_path(w)])
    for m in (model, reference):
        m.set_search_state(1.0, 3)
    ids = token_ids(5)
    rng = np.random.default_rng(7)
    mems = [tf.constant(rng.normal(size=(B, 3, D)), tf.float32) for _ in range(model.num_mems)]
    projection = tf.constant(rng.normal(size=(B, 5, D)), tf.float32)

    def forward(m, variables):
        with tf.GradientTape() as tape:
            hidden, _ = m(ids, mems, training=training)
            loss = tf.reduce_sum(hidden * projection)
        grads = tape.gradient(loss, variables)
        return hidden.numpy(), [np.zeros(x.shape) if g is None else tf.convert_to_tensor(g).numpy()
                                for x, g in zip(variables, grads)]

    layers = reference.attention_layers
    hidden, (grad_u, grad_v) = forward(model, [u, v])
    biases = [layer.content_bias for layer in layers] + [layer.position_bias for layer in layers]
    expected, per_layer = forward(reference, biases)
    np.testing.assert_allclose(hidden, expected, rtol=1e-5, atol=1e-5)
    # The gradient of the shared pair is the sum of what every layer sends it.
    np.testing.assert_allclose(grad_u, sum(per_layer[: len(layers)]), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grad_v, sum(per_layer[len(layers) :]), rtol=1e-4, atol=1e-6)
    computed = [np.abs(g).max() > 0 for g in per_layer[: len(layers)]]
    if "hard" in case:  # only the sampled candidates run
        assert any(computed)
    else:
        assert all(computed) and len(layers) >= 2


@pytest.mark.slow
def test_shared_rel_bias_round_trips_through_checkpoints(tmp_path):
    config = preset_config("tiny", dropout=0.0, untie_rel_bias=False, architecture="supernet")
    model = make_model(untie_rel_bias=False, architecture="supernet")
    ids = token_ids(5)
    expected = model(ids)[0].numpy()
    json_clone = TransformerXLLM.from_config(json.loads(json.dumps(model.get_config())))
    assert json_clone.untie_rel_bias is False and json_clone.get_config() == model.get_config()
    # As training.run.checkpoint saves a run: the flat list model.variables.
    path = tf.train.Checkpoint(variables=[v.value for v in model.variables]).write(
        str(tmp_path / "ckpt")
    )
    restored = build_model(config)
    assert len(restored.variables) == len(model.variables)
    tf.train.Checkpoint(variables=[v.value for v in restored.variables]).read(
        path
    ).assert_consumed()
    np.testing.assert_array_equal(restored(ids)[0].numpy(), expected)
    model.save_weights(tmp_path / "model.weights.h5")
    loaded = build_model(config)
    loaded.load_weights(tmp_path / "model.weights.h5")
    np.testing.assert_array_equal(loaded(ids)[0].numpy(), expected)


def test_shared_rel_bias_only_with_attention():
    assert make_model(untie_rel_bias=False, architecture="ffif").content_bias is None
    untied = make_model(architecture="transformer_xl")
    assert untied.content_bias is None and untied.position_bias is None
    assert sum(w.path.endswith("/content_bias") for w in untied.weights) == 2


@pytest.mark.slow
def test_shared_rel_bias_in_traced_hard_search_with_mixed_precision():
    config = preset_config(
        "tiny", architecture="supernet", search_mode="hard", untie_rel_bias=False
    )
    model = build_model(config, dtype="mixed_bfloat16")
    assert model.content_bias.dtype == "float32"
    ids = token_ids(5)

    @tf.function
    def step(i):
        model.set_search_state(1.0, i)
        with tf.GradientTape() as tape:
            hidden, _ = model(ids, model.initial_mems(B), training=True)
            loss = tf.reduce_mean(model.token_nll(hidden, ids))
        return hidden, tape.gradient(loss, [model.content_bias, model.position_bias])

    for i in range(3):
        hidden, grads = step(tf.constant(i, tf.int64))
        assert hidden.dtype == tf.bfloat16
        assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
