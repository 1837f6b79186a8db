"""Learning-rate schedules (training/optimizers/schedules.py) and the PAR search's tau annealing
(training/plugins/par_search/schedules.py) against hand-computed values."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.optimizers import schedules
from training.optimizers.schedules import WarmupCosineSchedule, make_lr_schedule
from training.plugins.par_search import schedules as tau_schedules
from training.plugins.par_search.schedules import tau_at


def lr(schedule, step):
    return float(schedule(tf.constant(step, tf.int64)))


def test_cosine_warmup_values():
    s = WarmupCosineSchedule(peak_lr=1e-3, warmup_steps=100, decay_steps=1100, min_lr=1e-5)
    assert lr(s, 0) == 0.0
    assert lr(s, 25) == pytest.approx(2.5e-4, rel=1e-6)
    assert lr(s, 99) == pytest.approx(9.9e-4, rel=1e-6)
    assert lr(s, 100) == pytest.approx(1e-3, rel=1e-6)


def test_cosine_mid_decay_matches_formula():
    s = WarmupCosineSchedule(peak_lr=1e-3, warmup_steps=100, decay_steps=1100, min_lr=1e-5)
    # Halfway through the cosine the rate is the mean of peak and floor.
    assert lr(s, 600) == pytest.approx((1e-3 + 1e-5) / 2, rel=1e-6)
    for step in (150, 350, 1000, 1099):
        p = (step - 100) / 1000
        expected = 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + math.cos(math.pi * p))
        assert lr(s, step) == pytest.approx(expected, rel=1e-5, abs=1e-10)


def test_cosine_clamped_after_end_never_rises():
    s = WarmupCosineSchedule(peak_lr=1e-3, warmup_steps=10, decay_steps=50, min_lr=2e-5)
    values = [lr(s, step) for step in range(10, 400)]
    assert all(b <= a for a, b in zip(values, values[1:])), "rate rose after the peak"
    assert lr(s, 50) == pytest.approx(2e-5, rel=1e-7)
    # A periodic cosine would be back at the peak at 90; ours stays at the floor.
    for step in (51, 90, 10_000, 10**7):
        assert lr(s, step) == pytest.approx(2e-5, rel=1e-7)


def test_no_warmup_starts_at_peak_and_zero_floor():
    s = WarmupCosineSchedule(peak_lr=0.5, warmup_steps=0, decay_steps=10)
    assert lr(s, 0) == pytest.approx(0.5)
    assert lr(s, 5) == pytest.approx(0.25, rel=1e-6)
    assert lr(s, 10) == 0.0


def test_linear_and_constant_kinds():
    lin = make_lr_schedule("linear", 1.0, 10, 110, 0.1)
    assert lr(lin, 5) == pytest.approx(0.5)
    assert lr(lin, 60) == pytest.approx(0.55, rel=1e-6)  # halfway from 1.0 to 0.1
    assert lr(lin, 500) == pytest.approx(0.1, rel=1e-6)
    const = make_lr_schedule("constant", 1.0, 10, 110, 0.1)
    # The SHA-RNN reference's warm-up counts the step being taken from 1:
    # lr * min(step, warmup) / warmup, here with step = index + 1.
    for index in range(20):
        assert lr(const, index) == pytest.approx(min(index + 1, 10) / 10, rel=1e-6), index
    assert lr(const, 9) == lr(const, 60) == lr(const, 10**6) == pytest.approx(1.0)
    assert isinstance(make_lr_schedule("cosine", 1.0, 1, 2), WarmupCosineSchedule)


def test_inverse_sqrt_matches_formula():
    s = make_lr_schedule("inverse_sqrt", 2e-3, 100, 100, 0.0)
    assert isinstance(s, schedules.WarmupInverseSqrtSchedule)
    assert lr(s, 0) == 0.0
    assert lr(s, 40) == pytest.approx(2e-3 * 40 / 100, rel=1e-6)
    assert lr(s, 100) == pytest.approx(2e-3, rel=1e-6)  # the peak ends the warmup
    for step in (101, 150, 400, 10_000, 10**7):
        assert lr(s, step) == pytest.approx(2e-3 * math.sqrt(100 / step), rel=1e-5), step
    # Transformer-XL's inv_sqrt factor (s / w^1.5 up to w, then 1 / sqrt(s)),
    # rescaled by sqrt(w) so that the peak is 2e-3.
    for step in (10, 99, 100, 2500):
        factor = step / 100**1.5 if step <= 100 else 1 / math.sqrt(step)
        assert lr(s, step) == pytest.approx(2e-3 * factor * math.sqrt(100), rel=1e-5), step
    values = [lr(s, step) for step in range(100, 2000)]
    assert all(b < a for a, b in zip(values, values[1:]))


def test_inverse_sqrt_floor_and_no_warmup():
    floored = make_lr_schedule("inverse_sqrt", 1.0, 4, 4, 0.1)
    assert lr(floored, 16) == pytest.approx(0.5)
    assert lr(floored, 400) == pytest.approx(0.1)  # sqrt(4/400) = 0.1
    assert lr(floored, 10**6) == pytest.approx(0.1)
    cold = make_lr_schedule("inverse_sqrt", 1.0, 0, 10)
    assert lr(cold, 0) == lr(cold, 1) == pytest.approx(1.0)
    assert lr(cold, 4) == pytest.approx(0.5) and lr(cold, 100) == pytest.approx(0.1)
    again = schedules.WarmupInverseSqrtSchedule.from_config(
        json.loads(json.dumps(floored.get_config())))
    assert lr(again, 16) == lr(floored, 16)


def test_every_schedule_kind_is_registered():
    for kind in schedules.LR_SCHEDULES:
        first = 1 if kind == "constant" else 0  # the step index 0 counts as step 1
        assert lr(make_lr_schedule(kind, 1.0, 10, 100), 5) == pytest.approx((5 + first) / 10)


def test_get_config_round_trip_through_keras_serialization():
    s = make_lr_schedule("cosine", 3e-4, 40, 400, 1e-6)
    config = s.get_config()
    assert config["peak_lr"] == 3e-4 and config["warmup_steps"] == 40
    assert config["decay_steps"] == 400 and config["min_lr"] == 1e-6
    again = WarmupCosineSchedule.from_config(json.loads(json.dumps(config)))
    restored = keras.optimizers.schedules.deserialize(
        json.loads(json.dumps(keras.optimizers.schedules.serialize(s)))
    )
    assert type(restored) is WarmupCosineSchedule
    for step in (0, 20, 40, 200, 399, 400, 1000):
        assert lr(again, step) == lr(s, step) == lr(restored, step)


def test_schedule_drives_an_optimizer():
    s = WarmupCosineSchedule(peak_lr=1.0, warmup_steps=2, decay_steps=4)
    var = tf.Variable(0.0)
    opt = keras.optimizers.SGD(learning_rate=s)
    seen = []
    for _ in range(6):
        before = float(var.numpy())
        opt.apply_gradients([(tf.constant(-1.0), var)])  # SGD: var += lr
        seen.append(float(var.numpy()) - before)
    np.testing.assert_allclose(seen, [0.0, 0.5, 1.0, 0.5, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(peak_lr=0.0, warmup_steps=1, decay_steps=2), "peak_lr"),
        (dict(peak_lr=1.0, warmup_steps=1, decay_steps=2, min_lr=2.0), "min_lr"),
        (dict(peak_lr=1.0, warmup_steps=-1, decay_steps=2), "warmup_steps"),
        (dict(peak_lr=1.0, warmup_steps=5, decay_steps=2), "decay_steps"),
        (dict(peak_lr=1.0, warmup_steps=1.5, decay_steps=2), "warmup_steps"),
    ],
)
def test_bad_schedule_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WarmupCosineSchedule(**kwargs)


def test_unknown_kind():
    with pytest.raises(ValueError, match="cosine"):
        make_lr_schedule("step", 1.0, 1, 2)


def test_tau_exponential_python():
    assert tau_at(0, 1.0, 0.1, 100) == 1.0
    assert tau_at(50, 1.0, 0.1, 100) == pytest.approx(0.1**0.5)
    assert tau_at(25, 2.0, 0.5, 100) == pytest.approx(2.0 * 0.25**0.25)
    assert tau_at(100, 1.0, 0.1, 100) == 0.1
    assert tau_at(10**6, 1.0, 0.1, 100) == 0.1
    assert isinstance(tau_at(3, 1.0, 0.1, 100), float)
    assert isinstance(tau_at(np.int64(3), 1.0, 0.1, 100), float)


def test_tau_linear_differs_from_exponential():
    assert tau_at(0, 1.0, 0.1, 100, kind="linear") == 1.0
    assert tau_at(50, 1.0, 0.1, 100, kind="linear") == pytest.approx(0.55)
    assert tau_at(50, 1.0, 0.1, 100) == pytest.approx(0.31623, rel=1e-4)
    assert tau_at(200, 1.0, 0.1, 100, kind="linear") == 0.1


def test_tau_tensor_matches_python_and_is_exact_at_ends():
    steps = [0, 1, 10, 50, 99, 100, 101, 5000]
    for kind in ("exponential", "linear"):
        got = tau_at(tf.constant(steps, tf.int64), 1.0, 0.1, 100, kind=kind)
        assert isinstance(got, tf.Tensor) and got.dtype == tf.float32
        want = [tau_at(s, 1.0, 0.1, 100, kind=kind) for s in steps]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
        assert got.numpy()[0] == np.float32(1.0)
        assert np.all(got.numpy()[5:] == np.float32(0.1))


def test_tau_inside_tf_function_with_variable_step():
    step = tf.Variable(0, dtype=tf.int64)
    fn = tf.function(lambda: tau_at(step, 1.0, 0.1, 10))
    assert float(fn()) == 1.0
    step.assign(5)
    assert float(fn()) == pytest.approx(0.1**0.5, rel=1e-6)
    step.assign(10)
    assert float(fn()) == pytest.approx(0.1, rel=1e-7)


def test_tau_zero_anneal_steps_and_errors():
    assert tau_at(0, 1.0, 0.1, 0) == 0.1
    assert float(tau_at(tf.constant(0), 1.0, 0.1, 0)) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="exponential"):
        tau_at(0, 1.0, 0.1, 10, kind="cosine")
    with pytest.raises(ValueError, match="> 0"):
        tau_at(0, 1.0, 0.0, 10)
    with pytest.raises(ValueError, match="anneal_steps"):
        tau_at(0, 1.0, 0.1, -1)
    assert tau_schedules.TAU_SCHEDULES == ("exponential", "linear")


def _wsd_by_hand(step, peak, warmup, total, floor, fraction):
    """Warm-up, the peak held, a linear decay over the last `fraction` of the rest."""
    if step < warmup:
        return peak * step / warmup
    if step >= total:
        return floor
    p = (step - warmup) / (total - warmup)
    if p <= 1 - fraction:
        return peak
    return floor + (peak - floor) * (1 - p) / fraction


@pytest.mark.parametrize("fraction", [0.2, 0.5, 1.0])
def test_wsd_matches_its_definition_at_every_step(fraction):
    s = make_lr_schedule("wsd", 2e-3, 10, 210, 1e-5, cooldown_fraction=fraction)
    assert isinstance(s, schedules.WarmupStableDecaySchedule)
    steps = np.arange(0, 260)
    got = np.array([float(v) for v in s(tf.constant(steps))])
    want = np.array([_wsd_by_hand(int(t), 2e-3, 10, 210, 1e-5, fraction) for t in steps])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-10)
    # The peak is held until the decay starts, and 1 is the linear schedule.
    assert got[10: 10 + int(200 * (1 - fraction)) + 1].min() == pytest.approx(2e-3)
    if fraction == 1.0:
        lin = make_lr_schedule("linear", 2e-3, 10, 210, 1e-5)
        np.testing.assert_allclose(got, [float(v) for v in lin(tf.constant(steps))], rtol=1e-6)


def test_wsd_round_trips_and_refuses_a_bad_fraction():
    s = make_lr_schedule("wsd", 1.0, 5, 105, 0.0, cooldown_fraction=0.3)
    back = keras.saving.deserialize_keras_object(
        json.loads(json.dumps(keras.saving.serialize_keras_object(s))))
    assert type(back) is type(s) and back.get_config() == s.get_config()
    assert back.get_config()["cooldown_fraction"] == 0.3
    for bad in (0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match="cooldown_fraction must be in"):
            make_lr_schedule("wsd", 1.0, 5, 105, 0.0, cooldown_fraction=bad)


def test_trainer_builds_wsd_from_the_flags(tiny_data, tmp_path):
    from tests.helpers.trainers import family_config, make_trainer
    from training.setup.config import ConfigError

    config = family_config(tiny_data, tmp_path / "run", "transformer_xl", "--lr_schedule=wsd",
                           "--lr_cooldown_fraction=0.25", "--max_steps=100",
                           "--warmup_steps=10", "--learning_rate=1e-3", "--min_lr=0")
    schedule = make_trainer(config).lr_schedule
    assert isinstance(schedule, schedules.WarmupStableDecaySchedule)
    # Held at the peak to 100 - 0.25 * 90 steps, then linear to 0 at step 100.
    assert lr(schedule, 77) == pytest.approx(1e-3)
    assert lr(schedule, 88) == pytest.approx(1e-3 * 12 / 22.5, rel=1e-5)
    with pytest.raises(ConfigError, match=r"--lr_cooldown_fraction=0\.0: must be in \(0, 1\]"):
        family_config(tiny_data, tmp_path / "bad", "transformer_xl", "--lr_cooldown_fraction=0")
