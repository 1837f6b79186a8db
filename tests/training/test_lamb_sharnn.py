"""LambSharnn against a NumPy transcription of the SHA-RNN reference's LAMB.

The transcription follows the reference optimizer (Smerity's pytorch-lamb
fork as main.py uses it) statement by statement, in float64: no bias
correction, coupled weight decay on every tensor, the weight norm clamped at
10, the trust ratio 1 when either norm is 0 and floored at min_trust.
"""

import json

import numpy as np
import pytest

from tests.helpers.optimizers import run_steps

LR, BETA_1, BETA_2, EPS, WD, MIN_TRUST, CLIP = 2e-2, 0.9, 0.999, 1e-6, 0.05, 0.25, 10.0
STEPS = 6
TINY = ["--model_family=sha_rnn", "--preset=sha_rnn_tiny"]


def _reference_lamb(weights, grads, lr=LR, wd=WD, min_trust=MIN_TRUST, clip=CLIP):
    """Per step: the weights and slots after it (lists of float64 arrays)."""
    weights = [w.astype(np.float64) for w in weights]
    exp_avg = [np.zeros_like(w) for w in weights]
    exp_avg_sq = [np.zeros_like(w) for w in weights]
    history = []
    for step_grads in grads:
        for i, grad in enumerate(step_grads):
            p = weights[i]
            exp_avg[i] = exp_avg[i] * BETA_1 + (1 - BETA_1) * grad
            exp_avg_sq[i] = exp_avg_sq[i] * BETA_2 + (1 - BETA_2) * grad * grad
            step_size = lr  # no bias correction
            weight_norm = np.sqrt(np.sum(p**2))
            if clip is not None:
                weight_norm = min(max(weight_norm, 0.0), clip)
            adam_step = exp_avg[i] / (np.sqrt(exp_avg_sq[i]) + EPS)
            if wd != 0:
                adam_step = adam_step + wd * p
            adam_norm = np.sqrt(np.sum(adam_step**2))
            trust_ratio = 1.0 if weight_norm == 0 or adam_norm == 0 else weight_norm / adam_norm
            if min_trust:
                trust_ratio = max(min_trust, trust_ratio)
            weights[i] = p - step_size * trust_ratio * adam_step
        history.append(([w.copy() for w in weights], [m.copy() for m in exp_avg],
                        [v.copy() for v in exp_avg_sq]))
    return history


def _problem(seed=0):
    """Tensors starting at zero, at small random values and one with norm > 10.

    The gradients' scale makes the raw trust ratio of the small tensors fall
    below the floor (as in the SHA-RNN) and that of the big one exceed it.
    """
    rng = np.random.default_rng(seed)
    start = [np.zeros(7, np.float32), np.zeros((3, 4), np.float32),
             (0.006 * rng.normal(size=(16, 8))).astype(np.float32),
             (0.1 * rng.normal(size=(5,))).astype(np.float32),
             (2.0 * rng.normal(size=(8, 8))).astype(np.float32)]  # norm about 16 > 10
    grads = [[rng.normal(size=w.shape).astype(np.float32) * 0.3 for w in start]
             for _ in range(STEPS)]
    return start, grads


def _run(optimizer, start, grads, jit=False):
    return run_steps(optimizer, start, grads, ("_momentums", "_velocities"), jit)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_matches_the_reference_formulas_step_by_step(jit):
    from training.optimizers.lamb_sharnn import LambSharnn

    start, grads = _problem()
    optimizer = LambSharnn(learning_rate=LR, beta_1=BETA_1, beta_2=BETA_2, epsilon=EPS,
                           weight_decay=WD, min_trust=MIN_TRUST, weight_norm_clip=CLIP)
    got = _run(optimizer, start, grads, jit=jit)
    want = _reference_lamb(start, grads)
    for step, ((w_got, m_got, v_got), (w_want, m_want, v_want)) in enumerate(zip(got, want)):
        for i in range(len(start)):
            np.testing.assert_allclose(w_got[i], w_want[i], rtol=2e-5, atol=1e-7,
                                       err_msg=f"weight {i} after step {step + 1}")
            np.testing.assert_allclose(m_got[i], m_want[i], rtol=1e-5, atol=1e-8)
            np.testing.assert_allclose(v_got[i], v_want[i], rtol=1e-5, atol=1e-9)
    # The cases the test is about did happen: the zero tensors moved (trust 1
    # at the first step), the floor and the clamp decided steps.
    assert all(np.abs(got[0][0][i]).max() > 0 for i in (0, 1))
    w = start[2].astype(np.float64)
    g = grads[0][2].astype(np.float64)
    first_step = (1 - BETA_1) * g / (np.sqrt((1 - BETA_2) * g * g) + EPS) + WD * w
    raw = np.linalg.norm(w) / np.linalg.norm(first_step)
    assert raw < MIN_TRUST  # the first step's raw ratio of the small matrix: floored
    assert np.linalg.norm(start[4]) > CLIP
    assert int(optimizer.iterations.numpy()) == STEPS


def test_without_floor_clamp_decay_and_with_bias_correction_it_is_keras_lamb():
    import keras

    from training.optimizers.lamb_sharnn import LambSharnn

    start, grads = _problem(1)
    ours = LambSharnn(learning_rate=LR, epsilon=1e-7, weight_decay=0.0, min_trust=0.0,
                      weight_norm_clip=None, bias_correction=True)
    theirs = keras.optimizers.Lamb(learning_rate=LR, epsilon=1e-7)
    for (a, _, _), (b, _, _) in zip(_run(ours, start, grads), _run(theirs, start, grads)):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    # And the reference's options change the result (the test above is not vacuous).
    default = LambSharnn(learning_rate=LR, epsilon=1e-7)
    differ = _run(default, start, grads)[-1][0]
    assert not np.allclose(differ[0], _run(keras.optimizers.Lamb(learning_rate=LR), start,
                                           grads)[-1][0][0])


def test_config_round_trip_and_registered_name():
    import keras

    from training.optimizers.lamb_sharnn import LambSharnn

    optimizer = LambSharnn(learning_rate=3e-3, weight_decay=1.2e-6, min_trust=0.3,
                           weight_norm_clip=None)
    blob = json.loads(json.dumps(keras.optimizers.serialize(optimizer)))
    assert blob["registered_name"] == "par>LambSharnn"
    again = keras.optimizers.deserialize(blob)
    assert type(again) is LambSharnn
    for key in ("weight_decay", "min_trust", "weight_norm_clip", "bias_correction", "epsilon"):
        assert again.get_config()[key] == optimizer.get_config()[key], key
    assert again.weight_decay_rate == 1.2e-6 and again.weight_decay is None
    with pytest.raises(ValueError, match="min_trust must be >= 0"):
        LambSharnn(min_trust=-0.1)
    with pytest.raises(ValueError, match="weight_norm_clip must be > 0"):
        LambSharnn(weight_norm_clip=-1.0)


def test_resumes_from_its_checkpointed_slots(tmp_path):
    from tests.helpers.optimizers import check_resumes_from_slots
    from training.optimizers.lamb_sharnn import LambSharnn

    start, grads = _problem(2)
    check_resumes_from_slots(lambda: LambSharnn(learning_rate=LR, weight_decay=WD),
                             start, grads, tmp_path)


@pytest.mark.parametrize("flags,pattern", [
    (["--optimizer=adam", "--min_trust=0.25"],
     r"--min_trust=0\.25: does not apply to --optimizer=adam: drop it or use "
     r"--optimizer=lamb_sharnn"),
    (["--optimizer=lamb", "--weight_norm_clip=5"],
     r"--weight_norm_clip=5\.0: does not apply to --optimizer=lamb"),
    (["--optimizer=lamb_sharnn", "--min_trust=-0.1"], r"--min_trust=-0\.1: must be >= 0"),
    (["--optimizer=lamb_sharnn", "--weight_norm_clip=-1"],
     r"--weight_norm_clip=-1\.0: must be >= 0"),
    (["--warmup_fraction=0"], r"--warmup_fraction=0\.0: must be in \(0, 1\]"),
])
def test_option_errors_name_the_flag_and_the_fix(tiny_data, tmp_path, flags, pattern):
    from absl import flags as absl_flags

    import train as train_cli
    from training.setup.config import ConfigError

    fv = train_cli.define_flags(absl_flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path}", *TINY, *flags])
    with pytest.raises(ConfigError, match=pattern) as error:
        train_cli.config_from_flags(fv)
    assert "\n" not in str(error.value)


def test_registry_builds_it_with_the_flag_defaults(tiny_data, tmp_path):
    from absl import flags as absl_flags

    import train as train_cli
    from training.optimizers import IN_UPDATE, get_optimizer
    from training.optimizers.lamb_sharnn import LambSharnn

    fv = train_cli.define_flags(absl_flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path}", *TINY,
        "--optimizer=lamb_sharnn", "--weight_decay=1e-3", "--epsilon=1e-6"])
    config = train_cli.config_from_flags(fv)[0]
    spec = get_optimizer("lamb_sharnn")
    assert spec.decay == IN_UPDATE
    optimizer = spec.make(1e-3, config)
    assert type(optimizer) is LambSharnn
    assert (optimizer.min_trust, optimizer.weight_norm_clip, optimizer.weight_decay_rate,
            optimizer.epsilon, optimizer.bias_correction) == (0.25, 10.0, 1e-3, 1e-6, False)
    fv = train_cli.define_flags(absl_flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path}", *TINY,
        "--optimizer=lamb_sharnn", "--min_trust=0", "--weight_norm_clip=0"])
    optimizer = spec.make(1e-3, train_cli.config_from_flags(fv)[0])
    assert (optimizer.min_trust, optimizer.weight_norm_clip) == (0.0, None)
