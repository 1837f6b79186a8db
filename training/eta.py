"""The training ETA: the steps still to train plus the evaluations still planned.

The run loop evaluates the valid split every `eval_interval` steps and at the last
step (once when both fall together), then the test split once at the end. It logs a
step's line (with the ETA) before that step's evaluation, so the ETA at `step` counts the
evaluations at steps `step` to `total_steps`. Pure arithmetic, no clock.
"""


def planned_evaluations(step, total_steps, eval_interval):
    """The valid evaluations a run still makes at steps `step` to `total_steps`.

    Args:
        step: steps done (that step's own evaluation, if any, still to come).
        total_steps: the run's last step.
        eval_interval: evaluate every this many steps (0: only at the last step).
    """
    if step > total_steps:
        return 0
    first = max(step, 1)
    count = total_steps // eval_interval - (first - 1) // eval_interval if eval_interval else 0
    if not eval_interval or total_steps % eval_interval:
        count += 1  # the last step's own evaluation
    return count


def eta_seconds(step, total_steps, eval_interval, step_seconds, valid_seconds, test_seconds):
    """Wall seconds left: the steps still to train at `step_seconds` each, the valid
    evaluations still planned at `valid_seconds` each and the final test evaluation."""
    if step > total_steps:
        return 0.0
    return (step_seconds * (total_steps - step)
            + valid_seconds * planned_evaluations(step, total_steps, eval_interval)
            + test_seconds)
