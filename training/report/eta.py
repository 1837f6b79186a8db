"""The training ETA: the steps still to train plus the evaluations still planned.

The run loop evaluates the valid split every `eval_interval` steps and at the last
step (once when both fall together), then the test split once at the end. It logs a
step's line (with the ETA) before that step's evaluation, so the ETA at `step` counts the
evaluations at steps `step` to `total_steps`. Pure arithmetic, no clock: the run loop
passes its readings of `time.perf_counter()`.

The seconds per step come from the recent logged intervals (`RecentRate`), not from the
whole run, so a pause (a suspended process, a laptop asleep) or a change of load stops
counting once it is that many intervals old.

`said_if_slow` speaks for a step that is usually instant but sometimes is not, so the
console is never silent for long.
"""

import collections
import contextlib
import threading
import time

from absl import logging

# Logged intervals the seconds per step are measured over (2,000 steps at the default
# --log_interval=100).
RECENT_INTERVALS = 20


class RecentRate:
    """Wall seconds per training step over the last `intervals` logged intervals.

    A reading is `(now, step, eval_seconds)`: the clock, the steps done, and the seconds
    spent evaluating so far, which are left out of the rate (the ETA adds the evaluations
    still planned on its own).

    Args:
        intervals: int >= 1, how many of the latest intervals the rate spans.
    """

    def __init__(self, intervals=RECENT_INTERVALS):
        if intervals < 1:
            raise ValueError(f"intervals must be >= 1, got {intervals}")
        self._readings = collections.deque(maxlen=intervals + 1)

    def start(self, now, step):
        """Forgets every reading; the clock starts at `step` (after the traced step)."""
        self._readings.clear()
        self._readings.append((now, step, 0.0))

    def seconds_per_step(self, now, step, eval_seconds):
        """Keeps this reading; the rate over the last `intervals` intervals up to it.

        Returns:
            float seconds per step, or None before the clock started or before a step
            was done since it did.
        """
        if not self._readings:
            return None
        if step > self._readings[-1][1]:
            self._readings.append((now, step, eval_seconds))
        then, first, evaluated = self._readings[0]
        if step <= first:
            return None
        return (now - then - (eval_seconds - evaluated)) / (step - first)


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


@contextlib.contextmanager
def said_if_slow(message, after=5.0):
    """Logs `message` if the block is still running after `after` seconds, then how long it
    took; says nothing when it is quicker (the usual case).

    Args:
        message: what the block does, e.g. "stopping the training input pipeline".
        after: seconds before the message is logged.
    """
    start = time.perf_counter()
    timer = threading.Timer(after, logging.info, ("%s (still running after %g s)",
                                                  message, after))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        seconds = time.perf_counter() - start
        if seconds >= after:
            logging.info("%s: done in %.1f s", message, seconds)
