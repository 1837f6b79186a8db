"""--optimizer=muon and --optimizer=lion against their definitions.

Muon is checked against a float64 NumPy transcription of its update: Nesterov
momentum, the Newton-Schulz quintic with Keras' coefficients, the most nearly
square matricisation of a rank-3 attention kernel, Moonlight's
0.2 sqrt(max(A, B)) scale, decoupled decay, and the AdamW step of every
weight that is not a hidden matrix. Which weights are hidden matrices is
checked on the real tiny models of both families, by an independent rule
over their names; Lion against the transcription of its paper's update.
Both go through the trainer (a step where only decay can move a weight) and
through train.py; exact resume and mirrored replicas are in test_resume.py
and test_distributed.py.
"""

import json
import math
import re
import types

import numpy as np
import pytest

from tests.helpers.optimizers import check_resumes_from_slots, run_steps
from tests.helpers.trainers import EXTRA_LOSS_FLAGS, family_config, first_batches, make_trainer

LR, WD, STEPS = 2e-2, 0.1, 3
# Not Keras' defaults, so that a flag not passed on would show.
BETA_1, BETA_2, EPS = 0.8, 0.95, 1e-6
NS_COEFFICIENTS, NS_STEPS, MOMENTUM, RMS_RATE = (3.4445, -4.7750, 2.0315), 5, 0.95, 0.2

# One small weight of each kind: (shape, role), role "muon" with the 2-D shape it is
# orthogonalised as (worked out by hand, not by the code under test), else "adam".
_KINDS = [
    ((6, 4), "muon", (6, 4), True),        # a dense kernel, more rows than columns
    ((4, 2, 3), "muon", (4, 6), True),     # a query kernel [D, N, H] -> [D, N*H]
    ((2, 3, 4), "muon", (6, 4), True),     # an output kernel [N, H, D] -> [N*H, D]
    ((5, 4), "adam", None, True),          # an embedding table: Adam, decayed
    ((2, 3), "adam", None, False),         # a relative bias: Adam, not decayed
    ((4,), "adam", None, False),           # a bias
]


def _config(**fields):
    """What the registry's factories read of a TrainConfig."""
    values = dict(beta_1=BETA_1, beta_2=BETA_2, epsilon=EPS, weight_decay=WD, clip_norm=0.0,
                  muon_rms_rate=None, muon_ns_bfloat16=None)
    values.update(fields)
    return types.SimpleNamespace(**values)


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    start = [rng.normal(size=shape).astype(np.float32) for shape, *_ in _KINDS]
    grads = [[rng.normal(size=shape).astype(np.float32) for shape, *_ in _KINDS]
             for _ in range(STEPS)]
    return start, grads


def _newton_schulz(x):
    a, b, c = NS_COEFFICIENTS
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(NS_STEPS):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if tall else x


def _muon_step(g, m, shape2d, lr, rms_rate=RMS_RATE):
    """(update to subtract, new momentum) of a hidden matrix."""
    m = MOMENTUM * m + g
    o = _newton_schulz((g + MOMENTUM * m).reshape(shape2d))
    return lr * rms_rate * math.sqrt(max(shape2d)) * o.reshape(g.shape), m


def _adam_step(g, m, v, t, lr):
    m = BETA_1 * m + (1 - BETA_1) * g
    v = BETA_2 * v + (1 - BETA_2) * g * g
    alpha = lr * math.sqrt(1 - BETA_2**t) / (1 - BETA_1**t)
    return alpha * m / (np.sqrt(v) + EPS), m, v


def _reference_muon(start, grads, kinds=_KINDS, rms_rate=RMS_RATE):
    """Per step: the weights after it (float64), as Keras orders it: decay, then the step."""
    w = [x.astype(np.float64) for x in start]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    history = []
    for t, step_grads in enumerate(grads, start=1):
        for i, ((_, role, shape2d, decayed), g) in enumerate(zip(kinds, step_grads)):
            g = g.astype(np.float64)
            if decayed:
                w[i] = w[i] - LR * WD * w[i]
            if role == "muon":
                update, m[i] = _muon_step(g, m[i], shape2d, LR, rms_rate)
            else:
                update, m[i], v[i] = _adam_step(g, m[i], v[i], t, LR)
            w[i] = w[i] - update
        history.append([x.copy() for x in w])
    return history


def _make_muon(variables, config=None):
    from training.optimizers import get_optimizer

    spec = get_optimizer("muon")
    matrices = [x for x, kind in zip(variables, _KINDS) if kind[1] == "muon"]
    not_decayed = [x for x, kind in zip(variables, _KINDS) if not kind[3]]
    return spec.make(LR, config or _config(), not_decayed, matrices)


def test_matrix_shape_is_the_most_nearly_square_split():
    from training.optimizers.muon import matrix_shape

    assert matrix_shape((128, 4, 32)) == (128, 128)  # wt2_base's query kernel
    assert matrix_shape((4, 32, 128)) == (128, 128)  # and its output kernel
    assert matrix_shape((4, 2, 3)) == (4, 6) and matrix_shape((2, 3, 4)) == (6, 4)
    assert matrix_shape((6, 4)) == (6, 4) and matrix_shape((2, 2, 2, 8)) == (8, 8)
    with pytest.raises(ValueError, match="rank >= 2"):
        matrix_shape((5,))


def _check_steps(optimizer, variables, grads, want, jit=False):
    """Applies `grads` step by step (compiled; with XLA if `jit`) and checks every weight
    against `want` (per step, the reference's weights) after every step."""
    import tensorflow as tf

    optimizer.build(variables)
    apply = tf.function(lambda g: optimizer.apply(g, variables), jit_compile=jit)
    for step, step_grads in enumerate(grads):
        apply([tf.constant(g) for g in step_grads])
        for i, x in enumerate(variables):
            np.testing.assert_allclose(x.numpy(), want[step][i], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{_KINDS[i][:2]} after step {step + 1}")


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_muon_matches_its_definition(jit):
    import keras

    from training.optimizers.muon import RoleMuon

    start, grads = _problem()
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer = _make_muon(variables)
    assert type(optimizer) is RoleMuon
    want = _reference_muon(start, grads)
    _check_steps(optimizer, variables, grads, want, jit)
    # Adam's second moments exist exactly for the weights that are not matrices.
    velocities = [optimizer.adam_velocities[optimizer._get_variable_index(x)] for x in variables]
    assert [v is None for v in velocities] == [kind[1] == "muon" for kind in _KINDS]

    # Not vacuous: a rank-3 kernel's first step is neither Adam's nor Muon's on
    # another matricisation or with the scale of its first two axes.
    g, w0 = grads[0][1].astype(np.float64), start[1].astype(np.float64)
    got = w0 - LR * WD * w0 - want[0][1]
    adam, _, _ = _adam_step(g, 0.0, 0.0, 1, LR)
    other, _ = _muon_step(g, 0.0, (8, 3), LR)
    unscaled = got / math.sqrt(6) * math.sqrt(4)
    for wrong in (adam, other, unscaled):
        assert np.abs(got - wrong).max() > 100 * 1e-6  # 100x the tolerance above
    # And the decay shows: the embedding's Adam step alone is not what it took.
    assert np.abs(want[0][3] - (start[3] - _adam_step(
        grads[0][3].astype(np.float64), 0.0, 0.0, 1, LR)[0])).max() > 100 * 1e-6


def test_muon_rms_rate_scales_the_matrices_step_only():
    """--muon_rms_rate reaches the optimizer from the config; the definition with that rate."""
    import keras

    start, grads = _problem(2)
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer = _make_muon(variables, _config(muon_rms_rate=0.5))
    assert optimizer.rms_rate == 0.5
    want = _reference_muon(start, grads, rms_rate=0.5)
    default = _reference_muon(start, grads)
    _check_steps(optimizer, variables, grads, want)
    # The matrices moved otherwise than at the default rate; the Adam weights did not.
    for i, (_, role, *_) in enumerate(_KINDS):
        moved = np.abs(want[-1][i] - default[-1][i]).max()
        assert (moved > 1e-3) if role == "muon" else (moved == 0), (i, role, moved)


def test_newton_schulz_in_bfloat16_is_the_definition_to_bfloat16_rounding():
    """--muon_ns_bfloat16=1: the matrices' steps are the float64 definition's to bfloat16's
    rounding (and not float32's, so bfloat16 is used); the Adam weights' are unchanged."""
    import keras
    import tensorflow as tf

    start, grads = _problem(4)
    want = _reference_muon(start, grads)
    got = {}
    for flag in (None, 1.0):
        variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
        optimizer = _make_muon(variables, _config(muon_ns_bfloat16=flag))
        assert optimizer.ns_bfloat16 is (flag == 1.0)
        optimizer.build(variables)
        apply = tf.function(lambda g: optimizer.apply(g, variables))
        for step_grads in grads:
            apply([tf.constant(g) for g in step_grads])
        got[flag] = [x.numpy() for x in variables]
    for i, (_, role, *_) in enumerate(_KINDS):
        if role == "muon":
            # Relative to how far the three steps moved the matrix: bfloat16 keeps 8 bits
            # of each product, and the iteration's 15 products lose a few percent at most.
            moved = np.abs(want[-1][i] - start[i]).max()
            error = np.abs(got[1.0][i] - want[-1][i]).max() / moved
            assert 1e-4 < error < 0.05, (i, error)
            assert np.abs(got[None][i] - want[-1][i]).max() / moved < 1e-4
        else:
            assert np.abs(got[1.0][i] - got[None][i]).max() == 0, i


def test_muon_ns_bfloat16_is_a_switch():
    from training.optimizers import MUON_NS_BFLOAT16

    assert MUON_NS_BFLOAT16.problem(0.0) is None and MUON_NS_BFLOAT16.problem(1.0) is None
    assert MUON_NS_BFLOAT16.problem(0.5) == "must be one of 0, 1"


def test_two_d_matrices_step_as_keras_muon():
    """On rank-2 weights with one decay the changes to Keras' Muon change nothing."""
    import keras

    from training.optimizers.muon import RoleMuon

    rng = np.random.default_rng(3)
    start = [rng.normal(size=s).astype(np.float32) for s in ((6, 4), (3, 5), (7,))]
    grads = [[rng.normal(size=w.shape).astype(np.float32) for w in start] for _ in range(4)]
    common = dict(learning_rate=LR, adam_beta_1=BETA_1, adam_beta_2=BETA_2, epsilon=EPS)
    ours = RoleMuon(matrices=["w0", "w1"], weight_decay=WD, **common)
    theirs = keras.optimizers.Muon(weight_decay=WD, adam_weight_decay=WD, **common)
    for (a,), (b,) in zip(run_steps(ours, start, grads), run_steps(theirs, start, grads)):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_config_round_trip_registered_name_and_errors():
    import keras

    from training.optimizers import get_optimizer
    from training.optimizers.muon import RoleMuon

    optimizer = RoleMuon(learning_rate=3e-3, matrices=["a/kernel", "b/kernel"],
                         weight_decay=0.05, adam_beta_1=BETA_1)
    blob = json.loads(json.dumps(keras.optimizers.serialize(optimizer)))
    assert blob["registered_name"] == "par>RoleMuon"
    again = keras.optimizers.deserialize(blob)
    assert type(again) is RoleMuon and again.get_config() == optimizer.get_config()
    assert again.matrices == ("a/kernel", "b/kernel")
    assert (again.weight_decay, again.adam_weight_decay, again.adam_beta_1) == (0.05, 0.05, BETA_1)
    assert RoleMuon().weight_decay is None  # Keras' Muon: 0.004
    with pytest.raises(ValueError, match="not \\['exclude_layers'\\]"):
        RoleMuon(exclude_layers=["softmax"])
    with pytest.raises(ValueError, match="not among the optimizer's variables.*'c/kernel'"):
        RoleMuon(matrices=["c/kernel"]).build([keras.Variable(np.ones((2, 2)), name="d")])
    with pytest.raises(ValueError, match="rank >= 2: \\['e'\\]"):
        RoleMuon(matrices=["e"]).build([keras.Variable(np.ones(2), name="e")])
    with pytest.raises(ValueError, match="needs the model's hidden matrices"):
        get_optimizer("muon").make(1e-3, _config())


def test_muon_resumes_from_its_checkpointed_slots(tmp_path):
    from training.optimizers.muon import RoleMuon

    start, grads = _problem(1)
    grads = grads * 2  # 6 steps, restarted after 3
    check_resumes_from_slots(lambda: RoleMuon(learning_rate=LR, matrices=["w0", "w1", "w2"],
                                              weight_decay=WD), start, grads, tmp_path)


def test_lion_matches_its_definition():
    import keras

    from training.optimizers import DECOUPLED, get_optimizer

    spec = get_optimizer("lion")
    assert spec.decay == DECOUPLED and not spec.takes_matrices
    rng = np.random.default_rng(2)
    start = [rng.normal(size=s).astype(np.float32) for s in ((5, 4), (2, 3, 4), (4,))]
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer = spec.make(LR, _config(beta_2=0.99), [variables[2]])
    assert type(optimizer) is keras.optimizers.Lion
    grads = [[rng.normal(size=w.shape).astype(np.float32) for w in start] for _ in range(STEPS)]
    grads[0][0][0, 0] = 0.0  # sign(0) = 0: no step
    optimizer.build(variables)
    w = [x.astype(np.float64) for x in start]
    m = [np.zeros_like(x) for x in w]
    for step_grads in grads:
        optimizer.apply(step_grads, variables)
        for i, g in enumerate(step_grads):
            if i != 2:  # the bias is not decayed
                w[i] = w[i] - LR * WD * w[i]
            w[i] = w[i] - LR * np.sign(BETA_1 * m[i] + (1 - BETA_1) * g)
            m[i] = 0.99 * m[i] + (1 - 0.99) * g
        for got, want in zip(variables, w):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="--beta_1=0 makes --optimizer=lion sign descent"):
        spec.make(LR, _config(beta_1=0.0))


# Independent of model/interface.py: the hidden matrices are kernels outside the
# vocabulary-sized layers (the embedding and the adaptive softmax).
_MATRIX_LEAF = re.compile(r"^(query|key|value|position|output|recurrent)?_?kernel$")
_VOCABULARY_LAYER = re.compile(r"(^|/)(embedding|softmax)/")


def _role_split(model):
    from model.interface import is_hidden_matrix_by_role

    matrices = [v for v in model.weight_decay_variables() if is_hidden_matrix_by_role(v)]
    paths = {v.path for v in matrices}
    return paths, {v.path for v in model.variable_groups()["weights"]} - paths


def test_role_rule_wants_a_decayed_body_weight_of_rank_two_or_more():
    from model.interface import is_hidden_matrix_by_role

    def rule(name, shape):
        return is_hidden_matrix_by_role(types.SimpleNamespace(name=name, shape=shape))

    assert rule("kernel", (4, 4)) and rule("query_kernel", (4, 2, 2))
    assert not rule("kernel", (4,))  # a vector named like a kernel
    assert not rule("content_bias", (2, 3)) and not rule("key_positions", (16, 4))
    for leaf in ("embeddings", "head_embeddings", "tail_2_embeddings", "head_kernel",
                 "tail_1_projection", "tail_1_kernel"):
        assert not rule(leaf, (8, 4)), leaf


@pytest.mark.parametrize("family,flags", [
    ("transformer_xl", EXTRA_LOSS_FLAGS["transformer_xl"]),
    ("transformer_xl", ["--adaptive_input"]),
    ("sha_rnn", [])])
def test_hidden_matrices_are_chosen_by_role(tiny_data, tmp_path, family, flags):
    from model.families import build_model

    model = build_model(family_config(tiny_data, tmp_path, family, *flags).model)
    muon, adam = _role_split(model)
    for path in muon | adam:
        expected = bool(_MATRIX_LEAF.match(path.split("/")[-1])
                        and not _VOCABULARY_LAYER.search(path))
        assert (path in muon) == expected, path
    leaves = {p.split("/")[-1] for p in muon}
    assert not {p for p in muon if re.search(r"embedding|softmax", p)}
    assert any(p.startswith("softmax/") for p in adam)
    if family == "transformer_xl":
        assert {"query_kernel", "key_kernel", "value_kernel", "position_kernel",
                "output_kernel", "kernel"} == leaves
        assert any(p.endswith("/embeddings") or "embedding/" in p for p in adam)
        adam_leaves = {p.split("/")[-1] for p in adam}
        assert {"content_bias", "position_bias", "gamma", "beta", "bias"} <= adam_leaves
        assert ("span" in adam_leaves) == ("--adaptive_input" not in flags)
        if "--adaptive_input" in flags:
            assert {"embedding/tail_1_projection", "embedding/head_embeddings"} <= adam
        arch = {v.path for v in model.variable_groups()["arch"]}
        assert arch and not arch & (muon | adam)
    else:
        assert {"kernel", "recurrent_kernel"} == leaves
        assert {p.split("/")[-2] for p in muon} == {"lstm_cell", "query_dense",
                                                   "overparam_dense", "inner_dense"}
        assert {"s_q", "s_k", "s_v", "embeddings"} <= {p.split("/")[-1] for p in adam}


@pytest.mark.slow
@pytest.mark.parametrize("family,optimizer", [
    ("transformer_xl", "muon"), ("sha_rnn", "muon"), ("transformer_xl", "lion")])
def test_trainer_decays_by_role_then_trains_every_weight(tiny_data, tmp_path, family,
                                                         optimizer):
    """With the loss gated to 0 (gradient exactly 0: no Muon, Adam or Lion step) only
    the decoupled decay moves a weight, `w -= lr * wd * w`, and only those of
    `weight_decay_variables()`; with the loss back every weight trains."""
    import keras
    import tensorflow as tf

    from training.optimizers.muon import RoleMuon

    lr, wd = 1e-2, 0.5
    config = family_config(tiny_data, tmp_path, family, f"--optimizer={optimizer}",
                           f"--learning_rate={lr}", f"--weight_decay={wd}", "--warmup_steps=0",
                           "--clip_norm=1.0")
    trainer = make_trainer(config)
    weights_optimizer = trainer.optimizers["weights"]
    assert type(weights_optimizer) is {"muon": RoleMuon, "lion": keras.optimizers.Lion}[optimizer]
    assert trainer.groups[0].l2 == 0.0
    if optimizer == "muon":  # the trainer gave it the model's hidden matrices
        assert set(weights_optimizer.matrices) == _role_split(trainer.model)[0]
        assert (weights_optimizer.adam_beta_1, weights_optimizer.adam_beta_2,
                weights_optimizer.epsilon) == (config.beta_1, config.beta_2, config.epsilon)
    decayed = {v.path for v in trainer.model.weight_decay_variables()}

    gate = tf.Variable(0.0, trainable=False)
    token_nll, extra_losses = trainer.model.token_nll, trainer.model.extra_losses
    trainer.model.token_nll = lambda hidden, targets: gate * token_nll(hidden, targets)
    trainer.model.extra_losses = lambda hidden: [gate * x for x in extra_losses(hidden)]
    batches = first_batches(config, 4)
    trainable = trainer.model.trainable_variables
    before = {v.path: np.asarray(v, dtype=np.float64) for v in trainable}
    out = trainer.train_step(*batches[0])
    assert out["finite"] and out["loss"] == 0.0 and out["grad_norm"] == 0.0
    after = {v.path: np.asarray(v, dtype=np.float64) for v in trainable}
    moved = {p for p in before if not np.array_equal(before[p], after[p])}
    assert moved == decayed, (sorted(moved - decayed), sorted(decayed - moved))
    for path in decayed:
        np.testing.assert_allclose(after[path] - before[path], -lr * wd * before[path],
                                   rtol=1e-4, atol=1e-9, err_msg=path)

    gate.assign(1.0)
    outs = [trainer.train_step(*batch) for batch in batches[1:]]
    assert all(o["finite"] and o["loss"] > 0 for o in outs)
    final = {v.path: np.asarray(v, dtype=np.float64) for v in trainable}
    still = [p for p in before if p not in decayed and not p.endswith("/span")
             and np.array_equal(after[p], final[p])]
    assert not still, still


@pytest.mark.slow
def test_train_py_with_muon_trains_the_tiny_preset(tiny_data, tmp_path, run_python):
    from training.run.loop import read_training_log

    model_dir = tmp_path / "run"
    ran = run_python(["train.py", "--preset=tiny", "--optimizer=muon", "--weight_decay=0.01",
                      f"--data_dir={tiny_data}", f"--model_dir={model_dir}",
                      f"--logdir={tmp_path / 'logs'}", "--max_steps=20", "--log_interval=5",
                      "--learning_rate=3e-3", "--eval_interval=0", "--eval_max_records=4",
                      "--sample_tokens=0"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((model_dir / "config.json").read_text())["optimizer"] == "muon"
    losses = [row["loss"] for row in read_training_log(model_dir / "training_log.log")
              if "loss" in row]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.5, losses
