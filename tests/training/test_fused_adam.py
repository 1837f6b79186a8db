"""FusedAdam / FusedAdamW against a NumPy Adam and against Keras' own update."""

import re

import numpy as np
import pytest

SHAPES = [(5, 3), (7,), (4, 2, 3)]
SPARSE_ROWS = [0, 3, 3]  # rows of the first weight in its IndexedSlices gradient
STEPS = 6


def _grads(rng, steps):
    return [[rng.normal(size=s).astype(np.float32) for s in SHAPES] for _ in range(steps)]


def _numpy_adam(weights, grads, lr, beta_1, beta_2, epsilon, decay=0.0):
    """Adam (Kingma & Ba, Algorithm 1 with the efficient bias correction),
    optionally with decoupled decay w -= lr * decay * w first (AdamW)."""
    weights = [w.astype(np.float64) for w in weights]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t, step_grads in enumerate(grads, start=1):
        alpha = lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        for i, g in enumerate(step_grads):
            weights[i] -= lr * decay * weights[i]
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            weights[i] -= alpha * m[i] / (np.sqrt(v[i]) + epsilon)
    return weights, m, v


def _run(optimizer, rng_seed, jit=False, sparse_first=False):
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(rng_seed)
    start = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    grads = _grads(rng, STEPS)
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer.build(variables)

    def apply(step_grads):
        step_grads = list(step_grads)
        if sparse_first:  # an embedding-style gradient: some rows, one of them twice
            dense = step_grads[0]
            rows = tf.constant(SPARSE_ROWS)
            step_grads[0] = tf.IndexedSlices(tf.gather(dense, rows), rows,
                                             tf.shape(dense, out_type=tf.int64))
        optimizer.apply(step_grads, variables)

    step = tf.function(apply, jit_compile=jit)
    for step_grads in grads:
        step([tf.constant(g) for g in step_grads])
    if sparse_first:  # what the optimizer saw: the rows summed, the others zero
        for step_grads in grads:
            seen = np.zeros_like(step_grads[0])
            np.add.at(seen, SPARSE_ROWS, step_grads[0][SPARSE_ROWS])
            step_grads[0] = seen
    return start, grads, variables


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_fused_adam_matches_numpy_adam(jit):
    from training.optimizers.fused_adam import FusedAdam

    optimizer = FusedAdam(learning_rate=0.01, beta_1=0.8, beta_2=0.95, epsilon=1e-6)
    start, grads, variables = _run(optimizer, 0, jit=jit, sparse_first=not jit)
    want, m, v = _numpy_adam(start, grads, 0.01, 0.8, 0.95, 1e-6)
    for got, expected in zip(variables, want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=2e-5, atol=2e-6)
    for i in range(len(SHAPES)):  # Keras' slots hold the moments
        np.testing.assert_allclose(optimizer._momentums[i].numpy(), m[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(optimizer._velocities[i].numpy(), v[i], rtol=1e-5, atol=1e-6)
    assert int(optimizer.iterations.numpy()) == STEPS


def test_fused_adam_equals_keras_adam_and_keeps_its_variables():
    import keras

    from training.optimizers.fused_adam import FusedAdam

    fused, plain = FusedAdam(learning_rate=3e-3), keras.optimizers.Adam(learning_rate=3e-3)
    _, _, fused_vars = _run(fused, 1)
    _, _, plain_vars = _run(plain, 1)
    for a, b in zip(fused_vars, plain_vars):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    # Same slot variables, so checkpoints of either restore into the other.
    def names(optimizer):  # Keras numbers a second optimizer of a name adam_1, ...
        return [v.path.split("/", 1)[1] for v in optimizer.variables]

    assert names(fused) == names(plain)
    # Named "adam" as Keras' Adam (Keras adds _<n> to repeated names in a session).
    assert re.sub(r"_\d+$", "", fused.name) == re.sub(r"_\d+$", "", plain.name) == "adam"


def test_fused_adamw_decays_like_adamw():
    from training.optimizers.fused_adam import FusedAdamW

    optimizer = FusedAdamW(learning_rate=0.02, weight_decay=0.3, beta_1=0.9, beta_2=0.99,
                           epsilon=1e-7)
    start, grads, variables = _run(optimizer, 2)
    want, _, _ = _numpy_adam(start, grads, 0.02, 0.9, 0.99, 1e-7, decay=0.3)
    for got, expected in zip(variables, want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=2e-5, atol=2e-6)


def test_amsgrad_falls_back_to_keras_update():
    import keras

    from training.optimizers.fused_adam import FusedAdam

    fused = FusedAdam(learning_rate=0.01, amsgrad=True)
    plain = keras.optimizers.Adam(learning_rate=0.01, amsgrad=True)
    _, _, a = _run(fused, 3)
    _, _, b = _run(plain, 3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_the_update_is_the_fused_kernel():
    """The override is really used: the traced update holds ResourceApplyAdam ops."""
    import keras
    import tensorflow as tf

    from training.optimizers.fused_adam import FusedAdam

    variables = [keras.Variable(np.ones(s, np.float32)) for s in SHAPES]
    optimizer = FusedAdam(learning_rate=0.1)
    optimizer.build(variables)
    apply = tf.function(lambda grads: optimizer.apply(grads, variables))
    grads = [tf.ones(s) for s in SHAPES]
    graph = apply.get_concrete_function(grads).graph
    fused = [op for op in graph.get_operations() if op.type == "ResourceApplyAdam"]
    assert len(fused) == len(SHAPES)
