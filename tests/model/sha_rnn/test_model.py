"""Tests for the SHA-RNN: model/sha_rnn/model.py and its sha_rnn_{block,attention,config}.py.

Numbers are checked against slow NumPy references written from the formulas
of the reference code (smerity/sha-rnn model.py): an LSTM recurrence step by
step, attention with explicit loops over query and key positions, the Boom
chunk sum, in float64 against the float32 model.
"""

import dataclasses
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.sha_rnn.attention import SingleHeadAttention
from model.sha_rnn.block import Boom
from model.sha_rnn.config import ShaRnnConfig
from model.sha_rnn.model import ShaRnnLM, build_sha_rnn
from model.sha_rnn.presets import PRESETS, sha_rnn_preset

B, V, D, F = 2, 16, 8, 16
EPS = 1e-12
TOL = dict(atol=2e-5, rtol=2e-5)


def tiny_config(**overrides):
    values = dict(
        vocab_size=V, d_model=D, num_layers=3, boom_dim=F, mem_len=32, dropout=0.0,
        dropout_input=0.0, dropout_hidden=0.0, attn_dropout=0.0, tie_weights=False,
        cutoffs=(4, 8),
    )  # fmt: skip
    values.update(overrides)
    return ShaRnnConfig(**values)


def randomize(layer, seed=0):
    """Large random weights (gates and attention far from their zero start)."""
    rng = np.random.default_rng(seed)
    for weight in layer.trainable_weights:
        value = rng.normal(0.0, 0.4, weight.shape)
        if weight.path.endswith("gamma"):
            value += 1.0
        weight.assign(value.astype("float32"))


def make_model(seed=0, dtype=None, **overrides):
    model = build_sha_rnn(tiny_config(**overrides), dtype=dtype)
    randomize(model, seed)
    return model


def token_ids(length, seed=0, batch=B):
    return tf.constant(np.random.default_rng(seed).integers(0, V, (batch, length)), tf.int32)


def random_state(model, mem_len, seed=1):
    rng = np.random.default_rng(seed)
    return [
        tf.constant(rng.normal(size=s.shape), tf.float32)
        for s in model.initial_state(B, mem_len=mem_len)
    ]


# ------------------------------------------------------------ NumPy reference


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_layer_norm(x, norm):
    gamma, beta = norm.gamma.numpy(), norm.beta.numpy()
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def np_dense(x, dense):
    return x @ dense.kernel.numpy() + dense.bias.numpy()


def np_lstm(x, h, c, cell):
    """Step-by-step LSTM, gates i, f, c, o (the Keras layout)."""
    kernel, recurrent, bias = cell.kernel.numpy(), cell.recurrent_kernel.numpy(), cell.bias.numpy()
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent + bias  # [B, 4D]
        i, f, g, o = np.split(z, 4, axis=-1)
        c = np_sigmoid(f) * c + np_sigmoid(i) * np.tanh(g)
        h = np_sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, axis=1), h, c


def np_boom(x, boom):
    u = np_dense(x, boom.inner_dense)
    u = u * np_sigmoid(1.702 * u)  # [B, T, F]
    out = np.zeros(x.shape)
    for k in range(boom.boom_dim // boom.d_model):  # sum the D-wide chunks
        out += u[..., k * boom.d_model : (k + 1) * boom.d_model]
    return out


def np_attention(attn, query, keys):
    """Single-head attention with loops over batch rows, queries and keys."""
    d = attn.d_model
    projected = np_layer_norm(np_dense(query, attn.query_dense), attn.query_norm)
    cf = np_sigmoid(attn.s_v.numpy()) @ attn.overparam_dense.kernel.numpy()
    cf = cf + attn.overparam_dense.bias.numpy()
    value_gate = np_sigmoid(cf[d:]) * np.tanh(cf[:d])
    s_q, s_k = np_sigmoid(attn.s_q.numpy()), np_sigmoid(attn.s_k.numpy())
    batch, qlen, klen = query.shape[0], query.shape[1], keys.shape[1]
    mlen = klen - qlen
    out = np.zeros(query.shape)
    for b in range(batch):
        for i in range(qlen):
            q = s_q * projected[b, i]
            visible = range(mlen + i + 1)  # the whole memory, then positions <= i
            scores = np.array([q @ (s_k * keys[b, j]) / math.sqrt(d) for j in visible])
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
            for j, w in zip(visible, weights):
                out[b, i] += w * value_gate * keys[b, j]
    return out


def np_block(block, x, h0, c0, memory, mem_len):
    h = np_layer_norm(x, block.start_norm)
    h, h_t, c_t = np_lstm(h, h0, c0, block.lstm.cell)
    new_memory = None
    if block.use_attention:
        mh = np_layer_norm(h, block.memory_norm)
        h = np_layer_norm(h, block.mid_norm)
        keys = np.concatenate([memory, mh], axis=1)
        h = np_attention(block.attention, h, keys) + h
        new_memory = keys[:, max(0, keys.shape[1] - mem_len) :]  # the last mem_len
    h = np_layer_norm(h, block.ff_norm) + np_boom(np_layer_norm(h, block.ff_input_norm), block.boom)
    return h, h_t, c_t, new_memory


def np_model(model, ids, state, mem_len):
    """Hidden and new state of the model, in float64."""
    if model.embedding is None:
        table = model.softmax.head_kernel.numpy().T  # tied full softmax: [V, D]
    else:
        table = model.embedding.embeddings.numpy()
    x = table[np.asarray(ids)]
    state = [np.asarray(s, np.float64) for s in state]
    memories = iter(state[2 * model.num_layers :])
    lstm_state, new_memories = [], []
    for i, block in enumerate(model.blocks):
        memory = next(memories) if i in model.attention_block_indices else None
        x, h, c, new_memory = np_block(block, x, state[2 * i], state[2 * i + 1], memory, mem_len)
        lstm_state += [h, c]
        if new_memory is not None:
            new_memories.append(new_memory)
    return x, lstm_state + new_memories


def assert_states_close(actual, expected, **tol):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert tuple(a.shape) == e.shape
        np.testing.assert_allclose(np.asarray(a, np.float64), e, **(tol or TOL))


# -------------------------------------------------------------------- layers


def test_boom_matches_its_formula():
    boom = Boom(D, 3 * D, seed=3)
    boom.build((None, None, D))
    randomize(boom)
    x = np.random.default_rng(0).normal(size=(B, 4, D)).astype("float32")
    np.testing.assert_allclose(boom(x).numpy(), np_boom(x.astype(np.float64), boom), **TOL)


def test_single_head_attention_matches_explicit_loops():
    attn = SingleHeadAttention(D, seed=5)
    attn.build((None, None, D))
    randomize(attn)
    rng = np.random.default_rng(1)
    query = rng.normal(size=(B, 4, D)).astype("float32")
    keys = rng.normal(size=(B, 7, D)).astype("float32")  # 3 memory positions + 4 current
    expected = np_attention(attn, query.astype(np.float64), keys.astype(np.float64))
    np.testing.assert_allclose(attn(query, keys).numpy(), expected, **TOL)
    # Causality: changing a later current position leaves earlier queries alone.
    changed = keys.copy()
    changed[:, -1] += 5.0
    out = attn(query, changed).numpy()
    np.testing.assert_allclose(out[:, :-1], expected[:, :-1], **TOL)
    assert not np.allclose(out[:, -1], expected[:, -1], atol=1e-3)
    # A key mask removes positions: row 0 without its memory position 1, row 1
    # without 0 and 2, as if those keys were not there.
    key_mask = np.ones((B, 7), bool)
    key_mask[0, 1] = key_mask[1, 0] = key_mask[1, 2] = False
    masked = attn(query, keys, key_mask=tf.constant(key_mask)).numpy()
    for row in range(B):
        kept = keys[row : row + 1, key_mask[row]].astype(np.float64)
        np.testing.assert_allclose(masked[row : row + 1], np_attention(
            attn, query[row : row + 1].astype(np.float64), kept), **TOL)


MODEL_CASES = {
    "sha_rnn": dict(),  # attention in block 1 of 3, untied, adaptive softmax
    "all_attention_tied": dict(attention_layers=(0, 1, 2), tie_weights=True, cutoffs=()),
    "plain_lstm": dict(attention_layers=()),
}


@pytest.mark.parametrize("case", sorted(MODEL_CASES))
def test_model_matches_numpy_reference(case):
    model = make_model(**MODEL_CASES[case])
    ids = token_ids(5)
    state = random_state(model, mem_len=3)
    hidden, new_state = model(ids, state=state, mem_len=6)
    expected_hidden, expected_state = np_model(model, ids, state, mem_len=6)
    np.testing.assert_allclose(hidden.numpy(), expected_hidden, **TOL)
    assert_states_close(new_state, expected_state)
    assert [s.shape[1] for s in new_state[2 * model.num_layers :]] == [6] * len(
        model.attention_block_indices
    )


def test_two_segments_with_carried_state_equal_one_pass():
    model = make_model()
    ids = token_ids(9)
    full, full_state = model(ids, mem_len=9)
    first, state = model(ids[:, :4], mem_len=9)
    second, state = model(ids[:, 4:], state=state, mem_len=9)
    np.testing.assert_allclose(tf.concat([first, second], 1).numpy(), full.numpy(), **TOL)
    assert_states_close(state, [s.numpy() for s in full_state])
    # The memory is the memory input LN_mem(h) of every position so far.
    assert state[-1].shape == (B, 9, D)


def test_empty_memory_equals_no_memory():
    """The zero memory of initial_state is empty, as the reference's first memory.

    From `initial_state(B)` (M = 32 zero positions) the first segments give
    what a model fed no memory at all gives (memories of length 0 growing
    segment by segment), for the first segment and the next ones.
    """
    model = make_model(attention_layers=(0, 1))
    ids = token_ids(9)
    empty = model.initial_state(B)
    assert empty[-1].shape == (B, 32, D) and not np.any(empty[-1].numpy())
    none = model.initial_state(B, mem_len=0)
    for start, stop in ((0, 5), (5, 9)):
        hidden, empty = model(ids[:, start:stop], state=empty, mem_len=32)
        expected, none = model(ids[:, start:stop], state=none, mem_len=32)
        np.testing.assert_allclose(hidden.numpy(), expected.numpy(), **TOL)
        lstm = 2 * model.num_layers
        assert_states_close(empty[:lstm], [s.numpy() for s in none[:lstm]])
        for full, grown in zip(empty[lstm:], none[lstm:]):  # [B, 32, D] and [B, stop, D]
            np.testing.assert_allclose(full[:, -stop:].numpy(), grown.numpy(), **TOL)
            assert not np.any(full[:, :-stop].numpy())
    # Not vacuous: a memory of small non-zero vectors is attended to.
    small = model.initial_state(B)
    small[-1] = tf.fill(small[-1].shape, 1e-3)
    hidden, _ = model(ids[:, :5], state=small, mem_len=32)
    first, _ = model(ids[:, :5], state=model.initial_state(B, mem_len=0), mem_len=32)
    assert not np.allclose(hidden.numpy(), first.numpy(), atol=1e-4)


@pytest.mark.slow
def test_small_mem_len_keeps_the_truncated_tail():
    model = make_model()
    ids = token_ids(9)
    state = model.initial_state(B, mem_len=0)
    expected_state = [s.numpy().astype(np.float64) for s in state]
    long_state = state
    for start in range(0, 9, 3):
        segment = ids[:, start : start + 3]
        hidden, state = model(segment, state=state, mem_len=4)
        expected_hidden, expected_state = np_model(model, segment, expected_state, mem_len=4)
        np.testing.assert_allclose(hidden.numpy(), expected_hidden, **TOL)
        assert_states_close(state, expected_state)
        if start == 0:  # one segment: the truncated memory is the tail of the full one
            _, long_state = model(segment, state=long_state, mem_len=100)
            np.testing.assert_allclose(state[-1].numpy(), long_state[-1].numpy()[:, -4:], **TOL)
    assert state[-1].shape == (B, 4, D)
    # Attention reached the memory: with less memory the last segment differs.
    full, _ = model(ids, mem_len=100)
    assert not np.allclose(hidden.numpy(), full[:, 6:].numpy(), atol=1e-4)


def test_plain_lstm_state_is_only_h_and_c():
    model = make_model(attention_layers=(), num_layers=2)
    assert model.num_states == 4
    state = model.initial_state(B)
    assert [tuple(s.shape) for s in state] == [(B, D)] * 4
    assert [s.name for s in model.state_signature()] == [
        "block_0_h", "block_0_c", "block_1_h", "block_1_c",
    ]  # fmt: skip
    hidden, new_state = model(token_ids(3), state=state)
    assert len(new_state) == 4 and hidden.shape == (B, 3, D)
    assert not any(hasattr(block, "attention") for block in model.blocks)


def test_initial_state_order_and_mem_len():
    model = make_model(attention_layers=(0, 2), mem_len=7)
    state = model.initial_state(3)
    shapes = [tuple(s.shape) for s in state]
    assert shapes == [(3, D)] * 6 + [(3, 7, D)] * 2
    assert not any(np.any(s.numpy()) for s in state)
    assert model.initial_state(3, mem_len=0)[-1].shape == (3, 0, D)
    names = [s.name for s in model.state_signature()]
    assert names[-2:] == ["block_0_memory", "block_2_memory"]
    # mem_len=0 keeps no memory; None: the config's 7.
    _, new_state = model(token_ids(5), mem_len=0)
    assert new_state[-1].shape == (B, 0, D)
    _, new_state = model(token_ids(5), state=new_state)
    assert new_state[-1].shape == (B, 5, D)
    with pytest.raises(ValueError, match="state of 7 tensors"):
        model(token_ids(5), state=new_state[:-1])
    with pytest.raises(ValueError, match="mem_len"):
        model(token_ids(5), mem_len=-1)


@pytest.mark.slow
def test_state_signature_matches_and_tf_function_traces_once():
    model = make_model()
    signature = model.state_signature()
    state = model.initial_state(B, mem_len=3)
    assert len(signature) == len(state) == model.num_states
    for spec, tensor in zip(signature, state):
        assert spec.dtype == tensor.dtype and spec.shape.is_compatible_with(tensor.shape)
        assert spec.shape[0] is None
    assert [spec.shape.as_list() for spec in signature[-1:]] == [[None, None, D]]

    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), signature])
    def step(ids, state):
        traces.append(1)
        return model(ids, state=state, mem_len=6)

    for mem_len, length in ((0, 4), (3, 2), (6, 5)):
        ids = token_ids(length, seed=mem_len)
        state = random_state(model, mem_len, seed=mem_len)
        hidden, new_state = step(ids, state)
        eager_hidden, eager_state = model(ids, state=state, mem_len=6)
        np.testing.assert_allclose(hidden.numpy(), eager_hidden.numpy(), **TOL)
        assert_states_close(new_state, [s.numpy() for s in eager_state])
    assert len(traces) == 1

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def first_step(ids):  # state None inside a graph: zero states, empty memory
        return model(ids)

    hidden, new_state = first_step(token_ids(3))
    np.testing.assert_allclose(hidden.numpy(), model(token_ids(3))[0].numpy(), **TOL)
    assert new_state[-1].shape == (B, 3, D)


def test_initialisation_follows_the_reference():
    d = 64
    config = tiny_config(d_model=d, boom_dim=2 * d, num_layers=2, cutoffs=(4, 8), seed=7)
    model = build_sha_rnn(config)
    stddev, bound = 0.1 / math.sqrt(d), 1.0 / math.sqrt(d)
    seen = {}
    for var in model.trainable_variables:
        name, value = var.path.rsplit("/", 1)[-1], var.numpy()
        if "lstm" in var.path:  # PyTorch's LSTM default, U(-1/sqrt(D), 1/sqrt(D))
            assert np.abs(value).max() <= bound and np.std(value) > 0.8 * bound / math.sqrt(3)
        elif name == "gamma":  # apex FusedLayerNorm is not re-initialised
            assert np.all(value == 1.0)
            continue
        elif name in ("beta", "s_q", "s_k", "s_v") or name.endswith("bias"):
            assert np.all(value == 0.0), var.path
            continue
        elif value.size >= 1024:  # Linear / Embedding: N(0, 0.1 / sqrt(D))
            assert 0.85 * stddev < np.std(value) < 1.15 * stddev, var.path
        # Each random weight has its own seed: no two start with the same values.
        key = tuple(np.round(value.ravel()[:4], 7))
        assert key not in seen, (var.path, seen.get(key))
        seen[key] = var.path
    same = build_sha_rnn(config)
    other = build_sha_rnn(config.replace(seed=8))
    first = model.trainable_variables[0].numpy()
    np.testing.assert_array_equal(same.trainable_variables[0].numpy(), first)
    assert not np.array_equal(other.trainable_variables[0].numpy(), first)


# ------------------------------------------------------- saving and training


@pytest.mark.slow
def test_get_config_json_round_trip():
    model = make_model(attention_layers=(0, 2), ar_coef=0.5, proj_dims=(3, 2))
    config = json.loads(json.dumps(model.get_config()))
    clone = ShaRnnLM.from_config(config)
    clone.build((None, None))
    clone.set_weights(model.get_weights())
    assert clone.get_config() == model.get_config()
    fields = {k: v for k, v in config.items() if k in ShaRnnConfig.__dataclass_fields__}
    assert ShaRnnConfig.from_dict(fields) == tiny_config(
        attention_layers=(0, 2), ar_coef=0.5, proj_dims=(3, 2)
    )
    ids, state = token_ids(4), random_state(model, 2)
    np.testing.assert_array_equal(
        clone(ids, state=state)[0].numpy(), model(ids, state=state)[0].numpy()
    )


def test_keras_save_and_load_give_identical_outputs(tmp_path):
    model = make_model(tie_weights=True, dropout=0.1)
    path = str(tmp_path / "sha_rnn.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ShaRnnLM) and loaded.family == "sha_rnn"
    ids, state = token_ids(4), random_state(model, 3)
    hidden, new_state = model(ids, state=state)
    loaded_hidden, loaded_state = loaded(ids, state=state)
    np.testing.assert_array_equal(loaded_hidden.numpy(), hidden.numpy())
    for a, b in zip(loaded_state, new_state):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(
        loaded.token_nll(loaded_hidden, ids).numpy(), model.token_nll(hidden, ids).numpy()
    )


@pytest.mark.slow
def test_gradient_step_changes_every_weight():
    config = tiny_config(
        dropout=0.1, dropout_input=0.1, dropout_hidden=0.1, attn_dropout=0.1, ar_coef=1.0
    )
    model = build_sha_rnn(config)  # the reference initialisation
    ids = token_ids(8)
    targets = tf.reshape(tf.range(B * 8) % V, [B, 8])  # every cluster of the softmax
    state = random_state(model, 3)
    before = [v.numpy().copy() for v in model.trainable_variables]
    eval_hidden, _ = model(ids, state=state)
    with tf.GradientTape() as tape:
        hidden, new_state = model(ids, state=state, training=True)
        loss = tf.reduce_mean(model.token_nll(hidden, targets))
        loss += tf.add_n(model.extra_losses(hidden))
    grads = tape.gradient(loss, model.trainable_variables)
    assert not np.allclose(hidden.numpy(), eval_hidden.numpy(), atol=1e-3)  # dropout is on
    for var, grad in zip(model.trainable_variables, grads):
        assert grad is not None, var.path
        grad = tf.convert_to_tensor(grad)
        assert np.all(np.isfinite(grad.numpy())), var.path
    keras.optimizers.SGD(learning_rate=0.1).apply_gradients(zip(grads, model.trainable_variables))
    unchanged = [
        v.path
        for v, old in zip(model.trainable_variables, before)
        if np.array_equal(v.numpy(), old)
    ]
    assert unchanged == []
    # The state is gradient-stopped.
    with tf.GradientTape() as tape:
        _, new_state = model(ids, state=state)
        total = tf.add_n([tf.reduce_sum(s) for s in new_state])
    assert all(g is None for g in tape.gradient(total, model.trainable_variables))


def test_extra_losses_and_weight_decay_variables():
    model = make_model(ar_coef=0.25)
    hidden = tf.random.normal([B, 3, D])
    (ar,) = model.extra_losses(hidden)
    np.testing.assert_allclose(ar.numpy(), 0.25 * np.mean(hidden.numpy() ** 2), rtol=1e-6)
    assert make_model(ar_coef=0.0).extra_losses(hidden) == []

    assert model.variable_groups()["weights"] == model.trainable_variables
    decay = {id(v) for v in model.weight_decay_variables()}
    assert len(decay) == len(model.weight_decay_variables())
    decayed = sorted(v.path.rsplit("/", 1)[-1] for v in model.trainable_variables if id(v) in decay)
    kept = {v.path.rsplit("/", 1)[-1] for v in model.trainable_variables if id(v) not in decay}
    assert kept == {
        "bias", "gamma", "beta", "s_q", "s_k", "s_v", "head_bias", "tail_1_bias", "tail_2_bias",
    }  # fmt: skip
    expected = ["embeddings", "head_kernel"] + ["kernel"] * (2 * 3 + 2) + ["recurrent_kernel"] * 3
    expected += ["tail_1_kernel", "tail_1_projection", "tail_2_kernel", "tail_2_projection"]
    assert decayed == sorted(expected)
    tied = make_model(tie_weights=True)
    assert "embeddings" not in {v.path.rsplit("/", 1)[-1] for v in tied.weight_decay_variables()}


@pytest.mark.slow
def test_mixed_bfloat16_builds_runs_and_stays_close():
    model = make_model(dtype="mixed_bfloat16")
    reference = make_model()  # same seed: same float32 weights
    assert model.compute_dtype == "bfloat16"
    assert all(spec.dtype == tf.bfloat16 for spec in model.state_signature())
    ids = token_ids(6)
    state = model.initial_state(B, mem_len=2)
    assert all(s.dtype == tf.bfloat16 for s in state)
    with tf.GradientTape() as tape:
        hidden, new_state = model(ids, state=state, training=True)
        nll = model.token_nll(hidden, ids)
        loss = tf.reduce_mean(nll)
    assert hidden.dtype == tf.bfloat16 and nll.dtype == tf.float32
    assert all(s.dtype == tf.bfloat16 for s in new_state)
    assert model.log_probs(hidden).dtype == tf.float32
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in grads)
    ref_hidden, _ = reference(ids, state=[tf.cast(s, tf.float32) for s in state])
    np.testing.assert_allclose(
        np.mean(nll.numpy()), np.mean(reference.token_nll(ref_hidden, ids).numpy()), rtol=0.03
    )


# -------------------------------------------------------------------- config


def test_default_attention_layers_and_presets():
    assert ShaRnnConfig(vocab_size=V).resolved_attention_layers == (2,)  # 4 layers: block 2
    one_layer = ShaRnnConfig(vocab_size=V, num_layers=1, d_model=8, boom_dim=8)
    assert one_layer.resolved_attention_layers == (0,)
    assert ShaRnnConfig(vocab_size=V, attention_layers=[3, 1]).resolved_attention_layers == (1, 3)
    assert ShaRnnConfig(vocab_size=V, attention_layers=()).resolved_attention_layers == ()
    for name in PRESETS:
        config = sha_rnn_preset(name)
        assert ShaRnnConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
        assert (config.resolved_attention_layers == ()) == name.startswith("lstm")
    enwik8 = sha_rnn_preset("sha_rnn_enwik8")
    sizes = (enwik8.num_layers, enwik8.d_model, enwik8.boom_dim, enwik8.vocab_size)
    assert sizes == (4, 1024, 4096, 256)
    assert enwik8.cutoffs == () and enwik8.resolved_attention_layers == (2,)
    assert sha_rnn_preset("sha_rnn_wt2").cutoffs == (1000, 3845)
    for field in dataclasses.fields(ShaRnnConfig):
        assert field.metadata["help"], field.name


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(d_model=0), "d_model"),
        (dict(num_layers=0), "num_layers"),
        (dict(boom_dim=12), "boom_dim"),
        (dict(attention_layers=(3,)), "attention_layers"),
        (dict(attention_layers=(1, 1)), "attention_layers"),
        (dict(attention_layers=(0.5,)), "attention_layers"),
        (dict(mem_len=-1), "mem_len"),
        (dict(dropout_hidden=1.0), "dropout_hidden"),
        (dict(attn_dropout=-0.1), "attn_dropout"),
        (dict(ar_coef=-1.0), "ar_coef"),
        (dict(cutoffs=(8, 4)), "cutoffs"),
        (dict(cutoffs=(4, V)), "cutoffs"),
        (dict(proj_dims=(2,)), "proj_dims"),
        (dict(proj_factor=0.5), "proj_factor"),
        (dict(tie_weights=1), "tie_weights"),
        (dict(vocab_size=2.5), "vocab_size"),
    ],
)
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**overrides)


def test_invalid_arguments_fail_at_model_construction():
    with pytest.raises(ValueError, match="boom_dim"):
        ShaRnnLM(vocab_size=V, d_model=D, boom_dim=12)
    with pytest.raises(ValueError, match="unknown ShaRnnConfig field"):
        ShaRnnConfig.from_dict({"vocab_size": V, "num_heads": 2})
    with pytest.raises(ValueError, match="unknown SHA-RNN preset"):
        sha_rnn_preset("nope")
    with pytest.raises(TypeError, match="ShaRnnConfig"):
        build_sha_rnn({"vocab_size": V})
