"""Learning-rate schedules.

Learning rate: a linear warmup from 0 (constant: from peak / warmup, the
SHA-RNN reference's count) to `peak_lr` over `warmup_steps`, then a
decay (cosine, linear, none, or the peak held then a linear decay over the last
steps: wsd) that reaches `min_lr` at `decay_steps` (the
total number of steps, warmup included) and stays there: a run that goes on
past its planned length never sees the learning rate rise again, unlike a
periodic cosine. Or, after the same warmup, the inverse square root decay of
Transformer-XL (`peak_lr * sqrt(warmup_steps / step)`, floored at `min_lr`),
which has no end.

A plug-in's own schedules live in its package (the PAR search's temperature:
training/plugins/par_search/schedules.py); `is_python_number` tells a step
given on the host from a tensor.
"""

import math

import keras
import numpy as np
import tensorflow as tf

from training.setup.plan import COOLDOWN_FRACTION, LR_SCHEDULES  # without TensorFlow: the flags


def _check_lr_args(peak_lr, warmup_steps, decay_steps, min_lr):
    if not (is_python_number(peak_lr) and math.isfinite(peak_lr) and peak_lr > 0):
        raise ValueError(f"peak_lr must be a finite number > 0, got {peak_lr!r}")
    if not (is_python_number(min_lr) and 0 <= min_lr <= peak_lr):
        raise ValueError(f"min_lr must be in [0, peak_lr={peak_lr}], got {min_lr!r}")
    for name, value in (("warmup_steps", warmup_steps), ("decay_steps", decay_steps)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if decay_steps < warmup_steps:
        raise ValueError(
            f"decay_steps ({decay_steps}) is the total number of steps and must be "
            f">= warmup_steps ({warmup_steps})"
        )


def is_python_number(value):
    """True for a Python or NumPy number that is not a bool (a step given on the host)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


class _WarmupDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Shared warmup and clamping; subclasses define the decay shape."""

    def __init__(self, peak_lr, warmup_steps, decay_steps, min_lr=0.0, name=None):
        _check_lr_args(peak_lr, warmup_steps, decay_steps, min_lr)
        self.peak_lr = float(peak_lr)
        self.warmup_steps = int(warmup_steps)
        self.decay_steps = int(decay_steps)
        self.min_lr = float(min_lr)
        self.name = name or type(self).__name__

    # Steps counted by the warm-up at the step index 0: 0 (the first step
    # trains at 0) or 1 (at peak / warmup_steps).
    _warmup_offset = 0

    def _decay(self, progress):
        """Decay factor: 1 at progress 0 (the peak), 0 at progress 1 (the floor)."""
        raise NotImplementedError

    def __call__(self, step):
        with tf.name_scope(self.name):
            step = tf.cast(step, tf.float32)
            peak = tf.constant(self.peak_lr, tf.float32)
            floor = tf.constant(self.min_lr, tf.float32)
            warmup = float(self.warmup_steps)
            # max(.., 1) keeps the division finite when there is no warmup or
            # no decay phase; the tf.where below never selects those branches.
            warm_lr = peak * (step + self._warmup_offset) / max(warmup, 1.0)
            span = max(float(self.decay_steps - self.warmup_steps), 1.0)
            progress = tf.clip_by_value((step - warmup) / span, 0.0, 1.0)
            decay_lr = floor + (peak - floor) * self._decay(progress)
            lr = tf.where(step < warmup, warm_lr, decay_lr)
            # Exactly the floor from decay_steps on, whatever the rounding of
            # the decay shape at progress 1.
            return tf.where(step >= float(self.decay_steps), floor, lr)

    def get_config(self):
        return {
            "peak_lr": self.peak_lr,
            "warmup_steps": self.warmup_steps,
            "decay_steps": self.decay_steps,
            "min_lr": self.min_lr,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package="par")
class WarmupCosineSchedule(_WarmupDecaySchedule):
    """Linear warmup to `peak_lr`, cosine decay to `min_lr`, then constant.

    `lr(s) = peak_lr * s / warmup_steps` for `s < warmup_steps`;
    `lr(s) = min_lr + (peak_lr - min_lr) * (1 + cos(pi * p)) / 2` with
    `p = (s - warmup_steps) / (decay_steps - warmup_steps)` until `decay_steps`;
    `lr(s) = min_lr` for `s >= decay_steps`.

    Args:
        peak_lr: learning rate at the end of warmup (> 0).
        warmup_steps: steps of linear warmup from 0 (0 = start at the peak).
        decay_steps: total steps, warmup included, at which `min_lr` is reached.
        min_lr: floor, held after `decay_steps` (0 <= min_lr <= peak_lr).
        name: name scope of the ops.
    """

    def _decay(self, progress):
        return 0.5 * (1.0 + tf.cos(math.pi * progress))


@keras.saving.register_keras_serializable(package="par")
class WarmupLinearSchedule(_WarmupDecaySchedule):
    """Linear warmup to `peak_lr`, linear decay to `min_lr` at `decay_steps`.

    Same arguments as `WarmupCosineSchedule`.
    """

    def _decay(self, progress):
        return 1.0 - progress


@keras.saving.register_keras_serializable(package="par")
class WarmupConstantSchedule(_WarmupDecaySchedule):
    """Linear warmup to `peak_lr`, then `peak_lr` until `decay_steps`, then `min_lr`.

    The SHA-RNN reference's schedule (main.py: `lr * min(step, warmup) /
    warmup` with steps counted from 1): the warm-up counts the step being
    taken, `lr(s) = peak_lr * (s + 1) / warmup_steps` for the step index
    `s < warmup_steps` (index 0 trains at peak / warmup, index warmup - 1 at
    the peak), unlike the other schedules whose warm-up starts at 0. With the
    default `min_lr` equal to `peak_lr` (see `make_lr_schedule`), the rate
    stays at the peak for good.
    """

    _warmup_offset = 1

    def _decay(self, progress):
        return tf.ones_like(progress)


@keras.saving.register_keras_serializable(package="par")
class WarmupInverseSqrtSchedule(_WarmupDecaySchedule):
    """Linear warmup to `peak_lr`, then inverse square root decay (Transformer-XL).

    `lr(s) = peak_lr * s / warmup_steps` for `s < warmup_steps`;
    `lr(s) = max(min_lr, peak_lr * sqrt(max(warmup_steps, 1) / max(s, 1)))`
    from `warmup_steps` on. This is the reference Transformer-XL's
    `--scheduler inv_sqrt` (its factor `s / warmup^1.5`, then `1 / sqrt(s)`)
    scaled so that the rate at the end of the warmup is `peak_lr`; with no
    warmup it is `peak_lr / sqrt(max(s, 1))`. The decay has no end:
    `decay_steps` only has to be >= `warmup_steps`.

    Same arguments as `WarmupCosineSchedule`.
    """

    def __call__(self, step):
        with tf.name_scope(self.name):
            step = tf.cast(step, tf.float32)
            peak = tf.constant(self.peak_lr, tf.float32)
            warmup = float(self.warmup_steps)
            warm_lr = peak * step / max(warmup, 1.0)
            decay_lr = peak * tf.sqrt(max(warmup, 1.0) / tf.maximum(step, 1.0))
            decay_lr = tf.maximum(decay_lr, tf.constant(self.min_lr, tf.float32))
            return tf.where(step < warmup, warm_lr, decay_lr)


@keras.saving.register_keras_serializable(package="par")
class WarmupStableDecaySchedule(_WarmupDecaySchedule):
    """Linear warmup to `peak_lr`, the peak held, then a linear decay to `min_lr` over the
    last `cooldown_fraction` of the steps after the warmup (warmup-stable-decay).

    With `p = (s - warmup_steps) / (decay_steps - warmup_steps)` and `f =
    cooldown_fraction`: `lr(s) = peak_lr` for `p <= 1 - f`, then `min_lr + (peak_lr -
    min_lr) * (1 - p) / f`, reaching `min_lr` at `decay_steps`; `f = 1` is
    `WarmupLinearSchedule`.

    Args:
        cooldown_fraction: in (0, 1], the share of the post-warmup steps spent decaying.
        (the others as `WarmupCosineSchedule`.)
    """

    def __init__(self, peak_lr, warmup_steps, decay_steps, min_lr=0.0,
                 cooldown_fraction=COOLDOWN_FRACTION, name=None):
        if not (is_python_number(cooldown_fraction) and 0 < cooldown_fraction <= 1):
            raise ValueError(f"cooldown_fraction must be in (0, 1], got {cooldown_fraction!r}")
        super().__init__(peak_lr, warmup_steps, decay_steps, min_lr, name)
        self.cooldown_fraction = float(cooldown_fraction)

    def _decay(self, progress):
        return tf.minimum(1.0, (1.0 - progress) / self.cooldown_fraction)

    def get_config(self):
        return {**super().get_config(), "cooldown_fraction": self.cooldown_fraction}


_SCHEDULE_CLASSES = {
    "cosine": WarmupCosineSchedule,
    "linear": WarmupLinearSchedule,
    "constant": WarmupConstantSchedule,
    "inverse_sqrt": WarmupInverseSqrtSchedule,
    "wsd": WarmupStableDecaySchedule,
}
assert tuple(_SCHEDULE_CLASSES) == LR_SCHEDULES, "a schedule name without a class, or the reverse"


def make_lr_schedule(kind, peak_lr, warmup_steps, decay_steps, min_lr=0.0,
                     cooldown_fraction=COOLDOWN_FRACTION):
    """Builds the learning-rate schedule named by `kind`.

    Args:
        kind: "cosine", "linear", "constant", "inverse_sqrt" or "wsd"; all
            start with a linear warmup.
        peak_lr: learning rate at the end of warmup.
        warmup_steps: warmup length in steps.
        decay_steps: total steps (warmup included) at which `min_lr` is
            reached (ignored by "inverse_sqrt", which decays for ever).
        min_lr: floor after the decay; ignored by "constant", which holds
            `peak_lr` after warmup.
        cooldown_fraction: "wsd" only: the share of the post-warmup steps over
            which it decays (it holds the peak before).

    Returns:
        A `keras.optimizers.schedules.LearningRateSchedule`.

    Raises:
        ValueError: unknown kind or inconsistent arguments.
    """
    if kind not in _SCHEDULE_CLASSES:
        raise ValueError(f"unknown learning-rate schedule {kind!r}; expected one of {LR_SCHEDULES}")
    if kind == "constant":
        min_lr = peak_lr
    if kind == "wsd":
        return WarmupStableDecaySchedule(peak_lr, warmup_steps, decay_steps, min_lr,
                                         cooldown_fraction)
    return _SCHEDULE_CLASSES[kind](peak_lr, warmup_steps, decay_steps, min_lr)

