"""training.eta: the ETA counts the steps and every evaluation still planned, checked
against a step-by-step simulation of the run loop's schedule."""

import pytest

from training.eta import eta_seconds, planned_evaluations


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
