"""Numerical tests of model/layers/adaptive_softmax.py against float64 NumPy references."""

import fractions
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.layers.adaptive_softmax import AdaptiveEmbedding, AdaptiveSoftmax, tail_dims

V, D = 23, 8
# (cutoffs, proj_factor): full softmax, one tail, three tails (the last tail
# hits the d_i = max(1, ...) floor: 8 // 2**3 = 1).
CONFIGS = [((), 4.0), ((6,), 2.0), ((4, 9, 15), 2.0)]


def _layer(cutoffs, proj_factor=2.0, seed=0, **kwargs):
    layer = AdaptiveSoftmax(
        V,
        D,
        cutoffs=cutoffs,
        proj_factor=proj_factor,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=seed),
        **kwargs,
    )
    # Non-zero biases so that a missing bias term would show.
    rng = np.random.default_rng(seed + 1)
    for b in [layer.head_bias] + list(layer.tail_biases):
        b.assign(rng.normal(size=b.shape).astype("float32"))
    return layer


def _np(v):
    return np.asarray(v, dtype=np.float64)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _ref_token_logp(layer, h, w):
    """log p(w | h) for one token, straight from the paper's formula."""
    cutoffs = layer.cutoffs
    c0 = cutoffs[0] if cutoffs else V
    head = _log_softmax(h @ _np(layer.head_kernel) + _np(layer.head_bias))
    if w < c0:
        return head[w]
    i = sum(w >= c for c in cutoffs)  # 1-based tail index
    lo = cutoffs[i - 1]
    proj = h @ _np(layer.tail_projections[i - 1])
    tail = _log_softmax(
        proj @ _np(layer.tail_kernels[i - 1]) + _np(layer.tail_biases[i - 1])
    )
    return head[c0 + i - 1] + tail[w - lo]


def _ref_log_probs(layer, hidden):
    """[N, D] -> [N, V] by a double loop over tokens and words."""
    hidden = _np(hidden)
    return np.array(
        [[_ref_token_logp(layer, h, w) for w in range(V)] for h in hidden]
    )


def _hidden(n, seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=(n, D)), tf.float32)


def test_tail_dims_formula():
    assert tail_dims(128, 3) == (32, 8, 2)
    assert tail_dims(128, 3, proj_factor=2.5) == (51, 20, 8)
    assert tail_dims(10, 3, proj_factor=4.0) == (2, 1, 1)
    assert tail_dims(64, 2, proj_factor=1.0) == (64, 64)
    assert tail_dims(64, 0) == ()
    assert tail_dims(64, 2, proj_dims=(7, 3)) == (7, 3)
    layer = AdaptiveSoftmax(1000, 64, cutoffs=(10, 100, 500), proj_factor=3.0)
    assert layer.tail_dims == (21, 7, 2)
    assert tuple(layer.tail_kernels[0].shape) == (21, 90)
    assert tuple(layer.head_kernel.shape) == (64, 13)


def _exact_tail_dims(d_model, num_tails, factor):
    """d_i = max(1, floor(d_model / factor**i)), in exact rational arithmetic."""
    factor = fractions.Fraction(factor)
    return tuple(max(1, math.floor(fractions.Fraction(d_model) / factor**i))
                 for i in range(1, num_tails + 1))


def test_tail_dims_against_exact_arithmetic():
    for d_model in (1, 2, 7, 64, 100, 128, 410, 1024):
        for factor in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 8.0):
            for k in range(6):
                assert tail_dims(d_model, k, factor) == _exact_tail_dims(d_model, k, factor), (
                    d_model, factor, k)


def test_optimal_cuts_prices_the_dims_the_layer_builds():
    # The solver calls model.config_base.tail_dims, the layers' formula.
    from pardata import cutoffs as optimal_cuts

    counts = np.arange(V, 0, -1)
    cases = [((6,), 2.0, ()), ((4, 9, 15), 2.0, ()), ((4, 9, 15), 1.5, ()),
             ((4, 9), 4.0, (5, 3))]
    for cutoffs, factor, proj_dims in cases:
        layer = AdaptiveSoftmax(V, D, cutoffs=cutoffs, proj_factor=factor, proj_dims=proj_dims)
        built = tuple(int(kernel.shape[0]) for kernel in layer.tail_kernels)
        result = optimal_cuts.cutoff_cost(counts, cutoffs, D, factor, proj_dims)
        assert result.tail_dims == layer.tail_dims == built, (cutoffs, factor, proj_dims)
    assert built == (5, 3)


@pytest.mark.parametrize("cutoffs,proj_factor", CONFIGS)
def test_log_probs_match_reference_and_sum_to_one(cutoffs, proj_factor):
    layer = _layer(cutoffs, proj_factor)
    hidden = _hidden(6)
    logp = layer.log_probs(tf.reshape(hidden, [2, 3, D])).numpy()
    assert logp.shape == (2, 3, V) and logp.dtype == np.float32
    np.testing.assert_allclose(np.exp(logp).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        logp.reshape(6, V), _ref_log_probs(layer, hidden), atol=1e-4
    )
    # call() is log_probs, so the layer works as a plain Keras output layer.
    np.testing.assert_allclose(layer(hidden).numpy(), logp.reshape(6, V), atol=1e-6)


@pytest.mark.parametrize("cutoffs,proj_factor", CONFIGS)
@pytest.mark.slow
def test_nll_equals_minus_log_prob_at_every_target(cutoffs, proj_factor):
    layer = _layer(cutoffs, proj_factor)
    # Every id of the vocabulary, shuffled, so head and each tail are hit
    # in mixed order; leading shape [B, T] = [V, 2].
    rng = np.random.default_rng(3)
    targets = np.stack([rng.permutation(V), rng.permutation(V)], axis=1)
    hidden = _hidden(2 * V, seed=4)
    nll = layer.nll(tf.reshape(hidden, [V, 2, D]), targets).numpy()
    assert nll.shape == (V, 2) and nll.dtype == np.float32
    ref = _ref_log_probs(layer, hidden)
    expected = -ref[np.arange(2 * V), targets.reshape(-1)].reshape(V, 2)
    np.testing.assert_allclose(nll, expected, atol=1e-4)
    logp = layer.log_probs(hidden).numpy()
    np.testing.assert_allclose(
        nll.reshape(-1), -logp[np.arange(2 * V), targets.reshape(-1)], atol=1e-5
    )


def test_full_softmax_by_hand():
    layer = _layer(())
    assert len(layer.weights) == 2  # one Dense D -> V with bias
    hidden = _hidden(5)
    targets = np.array([0, 22, 7, 7, 13])
    logits = _np(hidden) @ _np(layer.head_kernel) + _np(layer.head_bias)
    expected = np.log(np.exp(logits).sum(-1)) - logits[np.arange(5), targets]
    np.testing.assert_allclose(layer.nll(hidden, targets).numpy(), expected, atol=1e-5)


def test_padding_gives_zero_and_leaves_others_alone():
    layer = _layer((4, 9, 15))
    hidden = _hidden(6)
    targets = tf.constant([1, 20, 5, 11, 0, 16])
    padded = tf.constant([1, -1, 5, -100, 0, -1])
    full = layer.nll(hidden, targets).numpy()
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        nll = layer.nll(hidden, padded)
        total = tf.reduce_sum(nll)
    grad = tape.gradient(total, hidden).numpy()
    nll = nll.numpy()
    keep = padded.numpy() >= 0
    np.testing.assert_array_equal(nll[~keep], 0.0)
    np.testing.assert_allclose(nll[keep], full[keep], atol=1e-6)
    np.testing.assert_array_equal(grad[~keep], 0.0)
    assert np.all(np.abs(grad[keep]).sum(-1) > 0)


def test_bad_targets_raise():
    layer = _layer((4, 9))
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocab_size"):
        layer.nll(_hidden(2), tf.constant([3, V]))
    with pytest.raises(ValueError, match="targets"):
        layer.nll(_hidden(4), tf.constant([3, 1, 2]))


def _grads(layer, fn):
    with tf.GradientTape() as tape:
        loss = fn()
    return tape.gradient(loss, layer.trainable_variables)


def test_gradients_match_full_log_probs_path():
    """The partitioned nll path has the gradients of the dense log_probs path."""
    layer = _layer((4, 9, 15))
    hidden = _hidden(12, seed=7)
    targets = tf.constant([0, 3, 4, 8, 9, 14, 15, 22, -1, 2, 18, 6])
    mask = tf.cast(targets >= 0, tf.float32)
    safe = tf.maximum(targets, 0)

    def dense_loss():
        picked = tf.gather(layer.log_probs(hidden), safe, batch_dims=1)
        return -tf.reduce_sum(picked * mask)

    nll_grads = _grads(layer, lambda: tf.reduce_sum(layer.nll(hidden, targets)))
    ref_grads = _grads(layer, dense_loss)
    for var, g, r in zip(layer.trainable_variables, nll_grads, ref_grads):
        g = tf.convert_to_tensor(g).numpy()
        assert np.abs(g).max() > 0, var.path
        np.testing.assert_allclose(g, tf.convert_to_tensor(r).numpy(), atol=1e-5)


def test_tails_without_targets_get_zero_gradient():
    layer = _layer((4, 9, 15))
    targets = tf.constant([0, 1, 3, 10, 2])  # head and tail 2 only

    @tf.function
    def grads(hidden):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer.nll(hidden, targets))
        return tape.gradient(loss, layer.trainable_variables)

    by_path = dict(zip([v.path for v in layer.trainable_variables], grads(_hidden(5))))
    for path, g in by_path.items():
        assert g is not None, path
        g = tf.convert_to_tensor(g).numpy()
        assert np.all(np.isfinite(g)), path
        if "tail_2" in path or "head" in path:
            assert np.abs(g).max() > 0, path
        else:
            np.testing.assert_array_equal(g, 0.0, err_msg=path)


def _ref_tied_embedding(layer, ids):
    rows = []
    for w in ids:
        if not layer.cutoffs or w < layer.cutoffs[0]:
            rows.append(_np(layer.head_kernel)[:, w])
            continue
        i = sum(w >= c for c in layer.cutoffs) - 1
        column = _np(layer.tail_kernels[i])[:, w - layer.cutoffs[i]]
        rows.append(_np(layer.tail_projections[i]) @ column)
    return np.array(rows)


@pytest.mark.parametrize("cutoffs", [(), (4, 9, 15)])
def test_tied_embedding_matches_formula_and_shares_gradients(cutoffs):
    layer = _layer(cutoffs, tie_embedding=True)
    ids = np.array([[0, 3, 4, 22], [9, 15, 8, 3]])
    emb = layer.embed(ids).numpy()
    assert emb.shape == (2, 4, D)
    np.testing.assert_allclose(
        emb.reshape(-1, D), _ref_tied_embedding(layer, ids.reshape(-1)), atol=1e-5
    )
    hidden = _hidden(8)
    weights = tf.constant(np.random.default_rng(2).normal(size=(2, 4, D)), tf.float32)
    targets = tf.constant([1, 21, 5, 12, 0, 16, 4, 9])

    def embed_loss():
        return tf.reduce_sum(layer.embed(ids) * weights)

    def nll_loss():
        return tf.reduce_sum(layer.nll(hidden, targets))

    both = _grads(layer, lambda: embed_loss() + nll_loss())
    from_embed = _grads(layer, embed_loss)
    from_nll = _grads(layer, nll_loss)
    for var, g, e, n in zip(layer.trainable_variables, both, from_embed, from_nll):
        n = tf.convert_to_tensor(n).numpy()
        if "bias" not in var.path:
            e = tf.convert_to_tensor(e).numpy()
            assert np.abs(e).max() > 0, var.path
            n = n + e
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), n, atol=1e-5)


def test_embed_requires_tying():
    with pytest.raises(ValueError, match="tie_embedding"):
        _layer((4,)).embed([1, 2])


@pytest.mark.parametrize("cutoffs", [(), (4, 9, 15)])
def test_adaptive_embedding_matches_formula(cutoffs):
    layer = AdaptiveEmbedding(V, D, cutoffs=cutoffs, proj_factor=2.0)
    ids = np.random.default_rng(0).permutation(V)
    emb = layer(ids.reshape(1, V)).numpy().reshape(V, D)
    for n, w in enumerate(ids):
        if not cutoffs or w < cutoffs[0]:
            expected = _np(layer.head_embeddings)[w]
        else:
            i = sum(w >= c for c in cutoffs) - 1
            row = _np(layer.tail_embeddings[i])[w - cutoffs[i]]
            expected = row @ _np(layer.tail_projections[i])
            assert row.shape == (layer.tail_dims[i],)
        np.testing.assert_allclose(emb[n], expected, atol=1e-6)
    assert len(layer.weights) == 1 + 2 * len(cutoffs)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"cutoffs": (5, 5)}, "increasing"),
        ({"cutoffs": (9, 4)}, "increasing"),
        ({"cutoffs": (0, 4)}, "cutoffs"),
        ({"cutoffs": (4, V)}, "cutoffs"),
        ({"cutoffs": (2.5,)}, "cutoffs"),
        ({"cutoffs": (4, 9), "proj_dims": (3,)}, "proj_dims"),
        ({"cutoffs": (4,), "proj_dims": (0,)}, "proj_dims"),
        ({"cutoffs": (4,), "proj_factor": 0.5}, "proj_factor"),
        ({"d_model": 0}, "d_model"),
        ({"vocab_size": 0}, "vocab_size"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    args = {"vocab_size": V, "d_model": D, **kwargs}
    for cls in (AdaptiveSoftmax, AdaptiveEmbedding):
        with pytest.raises(ValueError, match=field):
            cls(**args)


def test_config_json_round_trip():
    for layer in (
        AdaptiveSoftmax(V, D, cutoffs=(4, 9), proj_dims=(5, 2), tie_embedding=True),
        AdaptiveEmbedding(V, D, cutoffs=(4, 9), proj_factor=3.0),
    ):
        config = json.loads(json.dumps(layer.get_config()))
        clone = type(layer).from_config(config)
        assert clone.get_config() == layer.get_config()
        assert [tuple(v.shape) for v in clone.weights] == [
            tuple(v.shape) for v in layer.weights
        ]
        serialized = json.dumps(keras.saving.serialize_keras_object(layer))
        restored = keras.saving.deserialize_keras_object(json.loads(serialized))
        assert type(restored) is type(layer)
        assert restored.cutoffs == (4, 9)


def _tiny_lm(cutoffs, tie):
    ids = keras.Input(shape=(5,), dtype="int32")
    x = AdaptiveEmbedding(V, D, cutoffs=cutoffs, proj_factor=2.0, name="embedding")(ids)
    out = AdaptiveSoftmax(
        V, D, cutoffs=cutoffs, proj_factor=2.0, tie_embedding=tie, name="softmax"
    )(x)
    return keras.Model(ids, out)


def test_keras_save_load_gives_equal_outputs(tmp_path):
    model = _tiny_lm((4, 9, 15), tie=True)
    ids = np.random.default_rng(0).integers(0, V, size=(3, 5)).astype("int32")
    path = tmp_path / "lm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded.predict(ids, verbose=0), model.predict(ids, verbose=0))
    softmax, loaded_softmax = model.get_layer("softmax"), loaded.get_layer("softmax")
    np.testing.assert_array_equal(loaded_softmax.embed(ids), softmax.embed(ids))
    hidden = _hidden(5)
    np.testing.assert_array_equal(
        loaded_softmax.nll(hidden, ids[0]), softmax.nll(hidden, ids[0])
    )


@pytest.mark.slow
def test_fit_step_and_custom_nll_step():
    keras.utils.set_random_seed(0)
    model = _tiny_lm((4, 9), tie=False)
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    ids = np.random.default_rng(1).integers(0, V, size=(8, 6)).astype("int32")
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(ids[:, :5], ids[:, 1:], epochs=2, batch_size=8, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    for b, v in zip(before, model.trainable_variables):
        assert not np.allclose(b, v.numpy()), v.path

    # The training loop path: nll inside tf.function, loss goes down.
    layer = model.get_layer("softmax")
    hidden = _hidden(12, seed=5)
    targets = tf.constant(ids[:2].reshape(-1))
    optimizer = keras.optimizers.Adam(0.05)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(layer.nll(hidden, targets))
        grads = tape.gradient(loss, layer.trainable_variables)
        optimizer.apply(grads, layer.trainable_variables)
        return loss

    losses = [float(step()) for _ in range(5)]
    assert losses[-1] < losses[0]


def test_mixed_bfloat16_outputs_float32_and_close():
    ref = _layer((4, 9, 15), tie_embedding=True)
    layer = AdaptiveSoftmax(
        V, D, cutoffs=(4, 9, 15), proj_factor=2.0, tie_embedding=True,
        dtype="mixed_bfloat16",
    )
    for dst, src in zip(layer.weights, ref.weights):
        assert dst.dtype == "float32"
        dst.assign(src)
    hidden = _hidden(10)
    targets = tf.constant([0, 3, 4, 8, 9, 14, 15, 22, -1, 18])
    with tf.GradientTape() as tape:
        nll = layer.nll(tf.cast(hidden, tf.bfloat16), targets)
        loss = tf.reduce_sum(nll)
    grads = tape.gradient(loss, layer.trainable_variables)
    logp = layer(hidden)
    assert nll.dtype == tf.float32 and logp.dtype == tf.float32
    assert all(np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in grads)
    # Log-softmax in float32: normalised exactly despite bfloat16 logits.
    np.testing.assert_allclose(np.exp(logp.numpy()).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(nll.numpy(), ref.nll(hidden, targets).numpy(), atol=0.1)
    assert layer.embed([1, 20]).dtype == tf.bfloat16


def test_replica_context_matches_direct_call():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        layer = _layer((4, 9, 15))
    hidden = _hidden(8)
    targets = tf.constant([0, 3, 4, 8, 9, -1, 15, 22])

    @tf.function
    def replica_nll():
        return strategy.run(layer.nll, args=(hidden, targets))

    result = strategy.experimental_local_results(replica_nll())
    expected = layer.nll(hidden, targets).numpy()
    for per_replica in result:
        np.testing.assert_allclose(per_replica.numpy(), expected, atol=1e-6)


def _max_prefix_correlation(weights):
    """Largest |correlation| between the flattened prefixes of two distinct weights.

    A Keras 3 initializer object reused for several weights draws the same
    random stream each time, so the smaller weight's values are (a scaled
    copy of) the first values of the larger one: correlation 1.
    """
    flat = [np.asarray(w, np.float64).reshape(-1) for w in weights]
    worst = 0.0
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):
            n = min(flat[i].size, flat[j].size)
            if n < 8:  # too few values for a meaningful correlation
                continue
            worst = max(worst, abs(np.corrcoef(flat[i][:n], flat[j][:n])[0, 1]))
    return worst


_INITIALIZERS = pytest.mark.parametrize(
    "seed", [None, 7], ids=["default_initializers", "seeded_initializers"]
)


@_INITIALIZERS
def test_softmax_weights_get_their_own_random_streams(seed):
    kwargs = {} if seed is None else {"kernel_initializer": keras.initializers.GlorotUniform(seed)}
    layer = AdaptiveSoftmax(200, 32, cutoffs=(20, 60), proj_factor=2.0, **kwargs)
    kernels = [layer.head_kernel] + layer.tail_projections + layer.tail_kernels
    assert _max_prefix_correlation(kernels) < 0.5


@_INITIALIZERS
def test_embedding_weights_get_their_own_random_streams(seed):
    kwargs = {}
    if seed is not None:
        kwargs = {"kernel_initializer": keras.initializers.RandomNormal(seed=seed),
                  "embeddings_initializer": keras.initializers.RandomUniform(seed=seed)}
    embedding = AdaptiveEmbedding(200, 32, cutoffs=(20, 60), proj_factor=2.0, **kwargs)
    head = embedding.head_embeddings.numpy().reshape(-1)
    for table in embedding.tail_embeddings:
        table = table.numpy().reshape(-1)
        n = min(table.size, head.size)
        assert not np.allclose(table[:n], head[:n])  # not a copy of the head table's start
    assert _max_prefix_correlation(embedding.weights) < 0.5


def test_seeded_initializer_is_reproducible():
    def weights():
        init = keras.initializers.RandomNormal(seed=3)
        softmax = AdaptiveSoftmax(V, D, cutoffs=(4, 9), kernel_initializer=init)
        embedding = AdaptiveEmbedding(V, D, cutoffs=(4, 9), kernel_initializer=init,
                                      embeddings_initializer=keras.initializers.RandomNormal(seed=3))
        return [w.numpy() for w in softmax.weights + embedding.weights]

    for first, second in zip(weights(), weights()):
        np.testing.assert_array_equal(first, second)
