"""The PAR search's temperature schedule: `tau_at` anneals the Gumbel-softmax
temperature of the supernet (Mandava et al. 2020, arXiv 2009.04534) from
`tau_start` to `tau_end`, exponentially by default, and holds `tau_end`
afterwards. Its names, `TAU_SCHEDULES` (the choices of --tau_schedule), live
in config.py, which does not load TensorFlow.
"""

import tensorflow as tf

from training.optimizers.schedules import is_python_number
from training.plugins.par_search.config import TAU_SCHEDULES

__all__ = ["TAU_SCHEDULES", "tau_at"]


def tau_at(step, tau_start, tau_end, anneal_steps, kind="exponential"):
    """Gumbel-softmax temperature at `step`, annealed from `tau_start` to `tau_end`.

    exponential: `tau_start * (tau_end / tau_start) ** (step / anneal_steps)`;
    linear: `tau_start + (tau_end - tau_start) * step / anneal_steps`.
    Exactly `tau_start` at step 0 and exactly `tau_end` from `anneal_steps` on
    (the annealing never overshoots or restarts).

    Args:
        step: training step, a Python/NumPy number or a TF tensor/variable.
        tau_start: temperature at step 0 (> 0).
        tau_end: temperature from `anneal_steps` on (> 0).
        anneal_steps: annealing length (>= 0; 0 means `tau_end` at every step).
        kind: "exponential" or "linear".

    Returns:
        A Python float for a Python/NumPy step, else a float32 scalar tensor.

    Raises:
        ValueError: unknown kind or non-positive temperatures.
    """
    if kind not in TAU_SCHEDULES:
        raise ValueError(f"unknown tau schedule {kind!r}; expected one of {TAU_SCHEDULES}")
    if not (tau_start > 0 and tau_end > 0):
        raise ValueError(f"tau_start and tau_end must be > 0, got {tau_start} and {tau_end}")
    if anneal_steps < 0:
        raise ValueError(f"anneal_steps must be >= 0, got {anneal_steps}")
    if is_python_number(step):
        if step >= anneal_steps:
            return float(tau_end)
        frac = max(float(step), 0.0) / anneal_steps
        if kind == "exponential":
            return float(tau_start * (tau_end / tau_start) ** frac)
        return float(tau_start + (tau_end - tau_start) * frac)
    step = tf.cast(step, tf.float32)
    frac = tf.clip_by_value(step / max(float(anneal_steps), 1.0), 0.0, 1.0)
    start = tf.constant(tau_start, tf.float32)
    if kind == "exponential":
        # pow(x, 0) is exactly 1, so step 0 gives tau_start bit for bit.
        tau = start * tf.pow(tf.constant(tau_end / tau_start, tf.float32), frac)
    else:
        tau = start + (tau_end - tau_start) * frac
    return tf.where(step >= float(anneal_steps), tf.constant(tau_end, tf.float32), tau)
