"""training.report.eta: the ETA counts the steps and every evaluation still planned, checked
against a step-by-step simulation of the run loop's schedule."""

import pytest

from training.report.eta import RecentRate, eta_seconds, planned_evaluations


def _simulated(step, total_steps, eval_interval):
    """The valid evaluations the loop makes from `step` on (it logs a step before
    evaluating it), one step at a time."""
    count = 0
    for s in range(max(step, 1), total_steps + 1):
        if s == total_steps or (eval_interval and s % eval_interval == 0):
            count += 1
    return count


@pytest.mark.parametrize("total_steps", [1, 7, 500, 3000, 3001])
@pytest.mark.parametrize("eval_interval", [0, 1, 3, 500, 4000])
def test_planned_evaluations_follow_the_loop(total_steps, eval_interval):
    for step in sorted({0, 1, total_steps // 2, total_steps - 1, total_steps, total_steps + 2}):
        assert planned_evaluations(step, total_steps, eval_interval) == _simulated(
            step, total_steps, eval_interval), (step, total_steps, eval_interval)


def test_the_quick_look_at_step_100():
    # 2,900 steps of 0.2 s, the valid evaluations at 500, ..., 3000 (six) of 30 s each,
    # then the test split's 35 s: 580 + 180 + 35 seconds.
    assert planned_evaluations(100, 3000, 500) == 6
    assert eta_seconds(100, 3000, 500, 0.2, 30.0, 35.0) == pytest.approx(795.0)
    # Logged at step 2,500 before its evaluation; at the last step only the evaluations
    # are left; past it nothing.
    assert eta_seconds(2500, 3000, 500, 0.2, 30.0, 35.0) == pytest.approx(100 + 60 + 35)
    assert eta_seconds(2501, 3000, 500, 0.2, 30.0, 35.0) == pytest.approx(99.8 + 30 + 35)
    assert eta_seconds(3000, 3000, 500, 0.2, 30.0, 35.0) == pytest.approx(30 + 35)
    assert eta_seconds(3001, 3000, 500, 0.2, 30.0, 35.0) == 0.0


def test_recent_rate_forgets_a_pause_once_it_is_old():
    rate = RecentRate(intervals=3)
    assert rate.seconds_per_step(5.0, 10, 0.0) is None  # the clock has not started
    rate.start(0.0, 0)
    assert rate.seconds_per_step(0.0, 0, 0.0) is None  # no step since
    now = 0.0
    for step in (100, 200, 300):  # 0.1 s a step
        now += 10.0
        assert rate.seconds_per_step(now, step, 0.0) == pytest.approx(0.1)
    now += 3600.0 + 10.0  # suspended for an hour inside the interval to step 400
    # Over the intervals to steps 200, 300 and 400:
    assert rate.seconds_per_step(now, 400, 0.0) == pytest.approx((10 + 10 + 3610) / 300)
    rates = []
    for step in (500, 600, 700, 800):
        now += 10.0
        rates.append(rate.seconds_per_step(now, step, 0.0))
    # Measured over the last 3 intervals: the pause weighs until it is 3 intervals old.
    assert rates[:2] == [pytest.approx((3610 + 20) / 300)] * 2
    assert rates[2:] == [pytest.approx(0.1), pytest.approx(0.1)]
    # A whole-run average (the old estimate) would still be 8.5x too slow here.
    assert now / 800 > 8 * rates[-1]


def test_recent_rate_leaves_out_evaluation_time():
    rate = RecentRate(intervals=2)
    rate.start(100.0, 50)
    assert rate.seconds_per_step(120.0, 150, 0.0) == pytest.approx(0.2)
    # 25 s of evaluation between step 150 and 250: 20 s of steps.
    assert rate.seconds_per_step(165.0, 250, 25.0) == pytest.approx(0.2)
    assert rate.seconds_per_step(185.0, 350, 25.0) == pytest.approx(0.2)
    # The same step again (logged twice) adds no reading.
    assert rate.seconds_per_step(185.0, 350, 25.0) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="intervals"):
        RecentRate(intervals=0)


def test_a_slow_step_is_said_and_a_quick_one_is_not(caplog):
    import time

    from training.report.eta import said_if_slow

    caplog.set_level("INFO")
    with said_if_slow("quick", after=5.0):
        pass
    with said_if_slow("stopping the pipeline", after=0.05):
        time.sleep(0.3)
    lines = [r.getMessage() for r in caplog.records]
    assert not any("quick" in line for line in lines)
    assert lines[0] == "stopping the pipeline (still running after 0.05 s)"
    assert lines[1].startswith("stopping the pipeline: done in 0.")
