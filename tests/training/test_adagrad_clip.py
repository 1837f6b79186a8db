"""AdagradClip against a NumPy transcription of the adaptive-span reference's Adagrad.

The transcription follows `AdagradWithGradClip.step` of
facebookresearch/adaptive-span (`adagrad_with_grad_clip.py`) statement by
statement, in float64: per tensor, the learning rate is scaled by
`c / (||g|| + 1e-10)` when `||g|| > c`, the accumulator sums the unclipped
squares, and epsilon (1e-10) is added after the square root.
"""

import json

import numpy as np
import pytest

from tests.helpers.optimizers import run_steps

LR, CLIP, EPS = 0.07, 0.03, 1e-10
STEPS = 6
TINY = ["--preset=tiny"]


def _reference_adagrad(weights, grads, lr=LR, grad_clip=CLIP, eps=EPS):
    """Per step: (weights, accumulators) after it, float64 lists."""
    weights = [w.astype(np.float64) for w in weights]
    sums = [np.zeros_like(w) for w in weights]
    history = []
    for step_grads in grads:
        for i, grad in enumerate(step_grads):
            grad = grad.astype(np.float64)
            clr = lr
            if grad_clip > 0:
                norm = np.sqrt(np.sum(grad * grad))
                if norm > grad_clip:
                    clr *= grad_clip / (norm + 1e-10)
            sums[i] = sums[i] + grad * grad
            std = np.sqrt(sums[i]) + eps
            weights[i] = weights[i] - clr * grad / std
        history.append(([w.copy() for w in weights], [s.copy() for s in sums]))
    return history


def _problem(seed=0):
    """Tensors whose gradient norms lie far above, near and below the clip."""
    rng = np.random.default_rng(seed)
    start = [np.zeros(7, np.float32), (0.1 * rng.normal(size=(3, 4))).astype(np.float32),
             (0.02 * rng.normal(size=(16, 8))).astype(np.float32),
             rng.normal(size=(5,)).astype(np.float32)]
    scales = [1.0, 0.01, 0.1, 0.002]  # norms ~2.6, ~0.035, ~1.1, ~0.004 against c = 0.03
    grads = [[(s * rng.normal(size=w.shape)).astype(np.float32) for w, s in zip(start, scales)]
             for _ in range(STEPS)]
    return start, grads


def _run(optimizer, start, grads, jit=False):
    return run_steps(optimizer, start, grads, ("_accumulators",), jit)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_matches_the_reference_step_by_step(jit):
    from training.optimizers.adagrad_clip import AdagradClip

    start, grads = _problem()
    optimizer = AdagradClip(learning_rate=LR, tensor_clip_norm=CLIP, epsilon=EPS)
    got = _run(optimizer, start, grads, jit=jit)
    want = _reference_adagrad(start, grads)
    for step, ((w_got, a_got), (w_want, a_want)) in enumerate(zip(got, want)):
        for i in range(len(start)):
            np.testing.assert_allclose(w_got[i], w_want[i], rtol=2e-5, atol=1e-7,
                                       err_msg=f"weight {i} after step {step + 1}")
            np.testing.assert_allclose(a_got[i], a_want[i], rtol=1e-5, atol=1e-12)
    # Both sides of the throttle happened: some tensors' norms above c, some below.
    norms = [np.linalg.norm(g) for g in grads[0]]
    assert max(norms) > CLIP > min(norms)
    # The accumulator holds the unclipped squares (not the throttled step's).
    np.testing.assert_allclose(got[0][1][0], grads[0][0].astype(np.float64) ** 2, rtol=1e-6)
    assert int(optimizer.iterations.numpy()) == STEPS


def test_the_throttle_is_not_a_global_clip_before_adagrad():
    """Clipping the gradients first (what --clip_norm does) gives another result:
    the accumulator of clipped squares cancels the clip."""
    from training.optimizers.adagrad_clip import AdagradClip

    start, grads = _problem(1)
    throttled = _run(AdagradClip(learning_rate=LR, tensor_clip_norm=CLIP), start, grads)[-1][0]
    clipped = [[g * min(1.0, CLIP / np.linalg.norm(g)) for g in step] for step in grads]
    preclipped = _run(AdagradClip(learning_rate=LR), start, clipped)[-1][0]
    # The big-gradient tensor 0 moves far less with the throttle.
    moved = [np.linalg.norm(w - s) for w, s in zip((throttled[0], preclipped[0]), (start[0],) * 2)]
    assert moved[0] < 0.2 * moved[1], moved
    # With c = 0 it is plain Adagrad, epsilon after the square root.
    plain = _run(AdagradClip(learning_rate=LR), start, grads)[-1][0]
    want = _reference_adagrad(start, grads, grad_clip=0.0)[-1][0]
    for got, expected in zip(plain, want):
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-7)


def test_sparse_gradient_of_an_embedding_is_throttled_densely():
    import keras
    import tensorflow as tf

    from training.optimizers.adagrad_clip import AdagradClip

    table = keras.Variable(np.ones((6, 3), np.float32), name="table")
    optimizer = AdagradClip(learning_rate=LR, tensor_clip_norm=CLIP)
    optimizer.build([table])
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant([1, 4]), tf.constant([6, 3]))
    optimizer.apply([sparse], [table])
    dense = np.zeros((6, 3), np.float32)
    dense[[1, 4]] = values
    want = _reference_adagrad([np.ones((6, 3), np.float32)], [[dense]])[0][0][0]
    np.testing.assert_allclose(table.numpy(), want, rtol=1e-5, atol=1e-7)


def test_config_round_trip_and_registered_name():
    import keras

    from training.optimizers.adagrad_clip import AdagradClip

    optimizer = AdagradClip(learning_rate=0.07, tensor_clip_norm=0.03, epsilon=1e-10)
    blob = json.loads(json.dumps(keras.optimizers.serialize(optimizer)))
    assert blob["registered_name"] == "par>AdagradClip"
    again = keras.optimizers.deserialize(blob)
    assert type(again) is AdagradClip
    for key in ("tensor_clip_norm", "epsilon", "initial_accumulator_value"):
        assert again.get_config()[key] == optimizer.get_config()[key], key
    with pytest.raises(ValueError, match="tensor_clip_norm must be >= 0"):
        AdagradClip(tensor_clip_norm=-1.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        AdagradClip(epsilon=0.0)


def test_resumes_from_its_checkpointed_slots(tmp_path):
    from tests.helpers.optimizers import check_resumes_from_slots
    from training.optimizers.adagrad_clip import AdagradClip

    start, grads = _problem(2)
    check_resumes_from_slots(lambda: AdagradClip(learning_rate=LR, tensor_clip_norm=CLIP),
                             start, grads, tmp_path)


@pytest.mark.parametrize("flags,pattern", [
    (["--optimizer=adam", "--tensor_clip_norm=0.03"],
     r"--tensor_clip_norm=0\.03: does not apply to --optimizer=adam: drop it or use "
     r"--optimizer=adagrad_clip"),
    (["--optimizer=adagrad", "--tensor_clip_norm=0.03"],
     r"--tensor_clip_norm=0\.03: does not apply to --optimizer=adagrad: drop it"),
    (["--optimizer=adagrad_clip", "--tensor_clip_norm=-1"],
     r"--tensor_clip_norm=-1\.0: must be >= 0"),
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


@pytest.mark.parametrize("optimizer", ["adagrad", "adagrad_clip"])
def test_global_clip_with_adagrad_warns_in_one_line(tiny_data, tmp_path, optimizer):
    from absl import flags as absl_flags
    from absl import logging

    import train as train_cli
    from training.optimizers import get_optimizer

    def config(*extra):
        fv = train_cli.define_flags(absl_flags.FlagValues())
        fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path}", *TINY,
            f"--optimizer={optimizer}", *extra])
        return train_cli.config_from_flags(fv)[0]

    seen = []
    real = logging.warning
    logging.warning = lambda msg, *args: seen.append(msg % args)
    try:
        get_optimizer(optimizer).make(0.07, config("--clip_norm=0.03"))
        assert len(seen) == 1 and "\n" not in seen[0]
        assert seen[0].startswith(f"--optimizer={optimizer} with --clip_norm=0.03: ")
        assert "--optimizer=adagrad_clip --tensor_clip_norm=C --clip_norm=0" in seen[0]
        get_optimizer(optimizer).make(0.07, config("--clip_norm=0"))
        assert len(seen) == 1  # no global clip: nothing to say
        get_optimizer("adam").make(1e-3, config("--clip_norm=0.03", "--optimizer=adam"))
        assert len(seen) == 1
    finally:
        logging.warning = real


def test_registry_builds_it_with_the_flag_values(tiny_data, tmp_path):
    from absl import flags as absl_flags

    import train as train_cli
    from training.optimizers import L2, get_optimizer
    from training.optimizers.adagrad_clip import AdagradClip

    fv = train_cli.define_flags(absl_flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path}", *TINY,
        "--optimizer=adagrad_clip", "--tensor_clip_norm=0.03", "--epsilon=1e-10",
        "--clip_norm=0"])
    config = train_cli.config_from_flags(fv)[0]
    spec = get_optimizer("adagrad_clip")
    assert spec.decay == L2
    optimizer = spec.make(0.07, config)
    assert type(optimizer) is AdagradClip
    assert (optimizer.tensor_clip_norm, optimizer.epsilon) == (0.03, 1e-10)
    # Without the flag: the reference experiments' 0.03.
    fv = train_cli.define_flags(absl_flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path}", *TINY,
        "--optimizer=adagrad_clip"])
    assert spec.make(0.07, train_cli.config_from_flags(fv)[0]).tensor_clip_norm == 0.03
