"""Tests for model/transformer_xl/stochastic_block.py against the sub-layers called directly."""

import json

import numpy as np
import pytest
import tensorflow as tf

from model.layers.adaptive_span import AdaptiveSpanAttention
from model.transformer_xl import blocks
from model.transformer_xl.config import ModelConfig
from model.transformer_xl.stochastic_block import StochasticBlock, gumbel_noise

D, N, H, F = 8, 2, 4, 16
B, T, M = 2, 5, 3


def block_config(**overrides):
    """The ModelConfig a block of these sizes reads (vocab_size is not used by a block);
    no dropout unless asked."""
    return ModelConfig(**{"vocab_size": 16, "d_model": D, "num_heads": N, "d_head": H,
                          "d_ffn": F, "dropout": 0.0, **overrides})


def randomize(layer, seed=0, scale=0.4):
    """Large random weights so candidates differ clearly; arch logits kept."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        if weight.path.endswith("arch_logits") or weight.path.endswith("span"):
            continue
        value = rng.normal(0.0, scale, weight.shape)
        if weight.path.endswith("gamma"):
            value = 1.0 + value
        weight.assign(value.astype("float32"))


def make_block(seed=0, block_index=1, dtype=None, **overrides):
    block = StochasticBlock(block_config(seed=seed, **overrides), block_index=block_index,
                            dtype=dtype)
    block.build((None, None, D))
    randomize(block, seed)
    return block


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(42)
    x = tf.constant(rng.normal(size=(B, T, D)), tf.float32)
    mem = tf.constant(rng.normal(size=(B, M, D)), tf.float32)
    return x, mem


def candidates(block, x, mem, training):
    """f_k(x) per candidate, calling the sub-layers directly."""
    return [
        block.attention_layer(x, mem, training=training).numpy(),
        block.dense_layer(x, training=training).numpy(),
        x.numpy(),
    ]


@pytest.mark.parametrize("hard_gradient", ["all", "chosen"])
@pytest.mark.slow
def test_hard_sample_equals_the_chosen_candidate_exactly(inputs, hard_gradient):
    x, mem = inputs
    block = make_block(search_mode="hard", hard_gradient=hard_gradient)
    outputs = candidates(block, x, mem, training=True)
    seen = set()
    for step in range(40):
        weights = block.mixing_weights(1.0, step, training=True).numpy()
        choice = int(np.argmax(weights))
        y = block(x, mem, tau=1.0, step=step, training=True).numpy()
        np.testing.assert_array_equal(y, outputs[choice])
        seen.add(choice)
    assert seen == {0, 1, 2}, "uniform logits should sample every candidate within 40 steps"


def test_soft_weights_sum_to_one_and_mix_the_candidates(inputs):
    x, mem = inputs
    block = make_block(search_mode="soft")
    block.arch_logits.assign([0.5, -0.3, 0.1])
    outputs = candidates(block, x, mem, training=True)
    for step, tau in [(0, 1.0), (7, 0.3)]:
        weights = block.mixing_weights(tau, step, training=True).numpy()
        assert weights.sum() == pytest.approx(1.0, abs=1e-6)
        noise = gumbel_noise(block.seed, block.block_index, step, 3).numpy()
        logits = (np.array([0.5, -0.3, 0.1]) + noise) / tau
        expected_w = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        np.testing.assert_allclose(weights, expected_w, rtol=1e-5)
        y = block(x, mem, tau=tau, step=step, training=True).numpy()
        expected = sum(w * f for w, f in zip(expected_w, outputs))
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "search_mode,hard_gradient", [("soft", "all"), ("hard", "all"), ("hard", "chosen")]
)
def test_gradients_reach_the_architecture_logits(inputs, search_mode, hard_gradient):
    x, mem = inputs
    block = make_block(search_mode=search_mode, hard_gradient=hard_gradient)
    target = tf.constant(np.random.default_rng(1).normal(size=(B, T, D)), tf.float32)
    for step in range(3):
        with tf.GradientTape() as tape:
            y = block(x, mem, tau=1.0, step=step, training=True)
            loss = tf.reduce_sum(y * target)
        grad = tape.gradient(loss, block.arch_logits)
        assert grad is not None and np.abs(grad.numpy()).sum() > 1e-4


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "xla"])
@pytest.mark.slow
def test_hard_gradient_all_is_the_straight_through_gumbel_softmax_gradient(inputs, jit):
    """Every candidate's output reaches alpha; only the chosen one's weights train
    (also compiled with XLA, which mixes with a one-hot weight instead of switching)."""
    x, mem = inputs
    block = make_block(search_mode="hard", hard_gradient="all", hard_rows=1.0)
    target = tf.constant(np.random.default_rng(1).normal(size=(B, T, D)), tf.float32)
    outputs = candidates(block, x, mem, training=True)
    tau = 0.7
    attention_vars = block.attention_layer.trainable_variables
    dense_vars = block.dense_layer.trainable_variables

    def value_and_grads(step):
        with tf.GradientTape() as tape:
            y = block(x, mem, tau=tau, step=step, training=True)
            loss = tf.reduce_sum(y * target)
        return y, tape.gradient(loss, [block.arch_logits] + attention_vars + dense_vars)

    if jit:
        value_and_grads = tf.function(value_and_grads, jit_compile=True)
    for step in range(6):
        y, grads = value_and_grads(tf.constant(step) if jit else step)
        k = int(np.argmax(block.mixing_weights(tau, step, training=True).numpy()))
        np.testing.assert_allclose(y.numpy(), outputs[k], rtol=1e-5, atol=1e-6)
        # d loss / d w_j = <f_j, target> for every j (the soft mixture's
        # gradient, taken at the hard sample); d w_j / d alpha_i = w_j (delta_ij - w_i) / tau.
        w = block.mixing_weights(tau, step, training=True).numpy()
        k = int(np.argmax(w))
        dloss_dw = np.array([np.sum(f * target.numpy()) for f in outputs])
        jacobian = (np.diag(w) - np.outer(w, w)) / tau  # [j, i] = d w_j / d alpha_i
        np.testing.assert_allclose(grads[0].numpy(), dloss_dw @ jacobian, rtol=1e-4, atol=1e-6)
        # The candidates' weights: the chosen one's get d loss / d f_k = target,
        # the other's get no gradient at all.
        attention_grads = grads[1:1 + len(attention_vars)]
        dense_grads = grads[1 + len(attention_vars):]
        for index, (variables, got) in enumerate(
            [(attention_vars, attention_grads), (dense_vars, dense_grads)]
        ):
            if index != k:
                assert all(g is None or not np.any(g.numpy()) for g in got)
                continue
            layer = block.attention_layer if index == 0 else block.dense_layer
            with tf.GradientTape() as direct:
                f = layer(x, mem, training=True) if index == 0 else layer(x, training=True)
                direct_loss = tf.reduce_sum(f * target)
            for g, ref in zip(got, direct.gradient(direct_loss, variables)):
                np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_hard_rows_estimate_the_other_candidates_on_a_random_subset_of_rows():
    """hard_rows < 1: the unchosen candidates' terms come from n of the B rows, scaled B / n.

    The subset is not replicated here: the gradient must equal the hand formula
    for one of the C(B, n) subsets, and the subsets must vary with the step.
    """
    import itertools

    rows, batch = 0.5, 4
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(batch, T, D)), tf.float32)
    mem = tf.constant(rng.normal(size=(batch, M, D)), tf.float32)
    target = rng.normal(size=(batch, T, D)).astype("float32")
    block = make_block(search_mode="hard", hard_gradient="all", hard_rows=rows)
    outputs = candidates(block, x, mem, training=True)
    n, tau, used = 2, 0.7, set()
    subsets = list(itertools.combinations(range(batch), n))
    for step in range(8):
        with tf.GradientTape() as tape:
            y = block(x, mem, tau=tau, step=step, training=True)
            loss = tf.reduce_sum(y * target)
        grads = tape.gradient(loss, [block.arch_logits] + block.dense_layer.trainable_variables)
        w = block.mixing_weights(tau, step, training=True).numpy()
        k = int(np.argmax(w))
        np.testing.assert_array_equal(y.numpy(), outputs[k])  # the value: f_k on every row
        jacobian = (np.diag(w) - np.outer(w, w)) / tau
        matches = []
        for subset in subsets:
            s_ = list(subset)
            dloss_dw = np.array([
                np.sum(f * target) if j == k else batch / n * np.sum(f[s_] * target[s_])
                for j, f in enumerate(outputs)])
            if np.allclose(grads[0].numpy(), dloss_dw @ jacobian, rtol=1e-4, atol=1e-6):
                matches.append(subset)
        assert len(matches) == 1, (step, matches)
        used.add(matches[0])
        if k != 1:  # the dense candidate was not chosen: its weights get no gradient
            assert all(g is None or not np.any(g.numpy()) for g in grads[1:])
    assert len(used) > 1, "the row subset should change with the step"


def test_hard_gradient_chosen_is_straight_through_on_the_sampled_weight(inputs):
    x, mem = inputs
    block = make_block(search_mode="hard", hard_gradient="chosen")
    target = tf.constant(np.random.default_rng(1).normal(size=(B, T, D)), tf.float32)
    outputs = candidates(block, x, mem, training=True)
    step = 3
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(block(x, mem, tau=0.7, step=step, training=True) * target)
    grad = tape.gradient(loss, block.arch_logits).numpy()
    # d loss / d alpha = (d loss / d w_k) * d w_k / d alpha, d loss / d w_k = <f_k, target>,
    # d w_k / d alpha_j = w_k (delta_kj - w_j) / tau.
    w = block.mixing_weights(0.7, step, training=True).numpy()
    k = int(np.argmax(w))
    dw = w[k] * ((np.arange(3) == k) - w) / 0.7
    np.testing.assert_allclose(grad, np.sum(outputs[k] * target.numpy()) * dw, rtol=1e-4)


@pytest.mark.parametrize("eval_mode", ["argmax", "expected"])
def test_evaluation_is_deterministic_and_noise_free(inputs, eval_mode):
    x, mem = inputs
    block = make_block(eval_mode=eval_mode, search_mode="hard")
    logits = np.array([-0.2, 0.9, 0.3], np.float32)
    block.arch_logits.assign(logits)
    first = block(x, mem, tau=0.5, step=1, training=False).numpy()
    second = block(x, mem, tau=2.0, step=99, training=False).numpy()
    np.testing.assert_array_equal(first, second)
    outputs = candidates(block, x, mem, training=False)
    if eval_mode == "argmax":
        np.testing.assert_array_equal(first, outputs[1])
    else:
        probs = np.exp(logits) / np.exp(logits).sum()
        np.testing.assert_allclose(
            first, sum(p * f for p, f in zip(probs, outputs)), rtol=1e-5, atol=1e-5
        )


def test_noise_is_a_function_of_seed_block_and_step():
    same = gumbel_noise(3, 1, 5, 3).numpy()
    np.testing.assert_array_equal(same, gumbel_noise(3, 1, tf.constant(5, tf.int64), 3).numpy())
    assert not np.allclose(same, gumbel_noise(3, 1, 6, 3).numpy())
    assert not np.allclose(same, gumbel_noise(3, 2, 5, 3).numpy())
    assert not np.allclose(same, gumbel_noise(4, 1, 5, 3).numpy())
    # Two separately built blocks with the same (seed, block_index) sample alike.
    first, second = make_block(seed=3, search_mode="hard"), make_block(seed=3, search_mode="hard")
    for step in range(5):
        np.testing.assert_array_equal(
            first.mixing_weights(1.0, step, True).numpy(),
            second.mixing_weights(1.0, step, True).numpy(),
        )


@pytest.mark.slow
def test_noise_is_gumbel_and_sampling_follows_softmax():
    steps = tf.range(1500, dtype=tf.int64)

    def draw(step):
        return gumbel_noise(0, 0, step, 3)

    sample = tf.function(lambda: tf.map_fn(draw, steps, fn_output_signature=tf.float32))
    noise = sample().numpy()
    assert np.all(np.isfinite(noise))
    assert noise.mean() == pytest.approx(0.5772, abs=0.05)  # Euler-Mascheroni constant
    assert noise.var() == pytest.approx(np.pi**2 / 6, abs=0.2)
    # Gumbel-max trick: argmax(alpha + g) ~ softmax(alpha).
    probs = np.array([0.6, 0.3, 0.1])
    counts = np.bincount(np.argmax(np.log(probs) + noise, axis=1), minlength=3) / len(noise)
    np.testing.assert_allclose(counts, probs, atol=0.04)


def graph_op_types(block, x, mem, training):
    fn = tf.function(
        lambda x, mem: block(x, mem, tau=1.0, step=tf.constant(2, tf.int64), training=training)
    )
    return {op.type for op in fn.get_concrete_function(x, mem).graph.get_operations()}


@pytest.mark.slow
def test_hard_search_and_argmax_eval_compute_one_candidate_in_a_case(inputs):
    x, mem = inputs
    hard = make_block(search_mode="hard", eval_mode="argmax")
    assert graph_op_types(hard, x, mem, True) & {"Case", "StatelessCase"}
    assert graph_op_types(hard, x, mem, False) & {"Case", "StatelessCase"}
    soft = make_block(search_mode="soft", eval_mode="expected")
    assert not graph_op_types(soft, x, mem, True) & {"Case", "StatelessCase"}
    # The graph of hard search gives the same value as eager.
    fn = tf.function(
        lambda x, mem: hard(x, mem, tau=1.0, step=tf.constant(2, tf.int64), training=True)
    )
    eager = hard(x, mem, tau=1.0, step=2, training=True).numpy()
    np.testing.assert_allclose(fn(x, mem).numpy(), eager, atol=1e-6)


@pytest.mark.slow
def test_adaptive_span_candidate_and_mixed_precision(inputs):
    x, mem = inputs
    block = StochasticBlock(block_config(
        attention="adaptive_span", span_max=8, span_ramp=2, span_init=0.5, search_mode="hard",
    ), dtype="mixed_bfloat16")  # fmt: skip
    block.build((None, None, D))
    assert isinstance(block.attention_layer, AdaptiveSpanAttention)
    assert block.arch_logits.dtype == "float32"

    @tf.function
    def step(x, mem, i):
        with tf.GradientTape() as tape:
            y = block(x, mem, tau=1.0, step=i, training=True)
            loss = tf.reduce_mean(tf.cast(y, tf.float32) ** 2)
        return y, tape.gradient(loss, block.arch_logits)

    for i in range(3):
        y, grad = step(x, mem, tf.constant(i, tf.int64))
        assert y.dtype == tf.bfloat16 and y.shape == (B, T, D)
        assert grad.dtype == tf.float32 and np.all(np.isfinite(grad.numpy()))
    expected = 0.5 * 8 * block.model_config.span_loss_coef
    assert float(block.attention_layer.span_loss()) == pytest.approx(expected)


def test_config_round_trip(inputs):
    x, mem = inputs
    block = make_block(
        search_mode="hard", hard_gradient="chosen", hard_rows=0.5, eval_mode="expected", seed=5,
        block_index=3, clamp_len=2)
    block.arch_logits.assign([0.1, 0.2, -0.4])
    config = json.loads(json.dumps(block.get_config()))
    clone = StochasticBlock.from_config(config)
    clone.build((None, None, D))
    clone.set_weights(block.get_weights())
    assert clone.get_config() == block.get_config()
    for training in (False, True):
        np.testing.assert_array_equal(
            clone(x, mem, tau=1.0, step=4, training=training).numpy(),
            block(x, mem, tau=1.0, step=4, training=training).numpy(),
        )


def test_invalid_modes_are_named():
    with pytest.raises(ValueError, match="search_mode"):
        StochasticBlock(block_config(search_mode="gumbel"))
    with pytest.raises(ValueError, match="hard_gradient"):
        StochasticBlock(block_config(hard_gradient="some"))
    for rows in (0.0, 1.5):
        with pytest.raises(ValueError, match="hard_rows"):
            StochasticBlock(block_config(hard_rows=rows))
    with pytest.raises(ValueError, match="eval_mode"):
        StochasticBlock(block_config(eval_mode="sample"))
    with pytest.raises(ValueError, match="attention"):
        StochasticBlock(block_config(attention="linear"))
    # The candidates' order is the checkpoints' (arch_logits columns).
    assert blocks.names()[:3] == ("attention", "dense", "identity")
    assert blocks.letters()[:3] == "afi"
