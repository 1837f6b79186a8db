"""When a PAR search has decided: the stability rule of `--stop_rule=stable`.

The search's answer is the most probable candidate of every block. It can be
read long before the probabilities saturate (docs/freezing.md,
docs/results/par_pipeline.md), so the search may stop once that answer no
longer moves. The rule looks at `SAMPLES + 1` samples of the probabilities
softmax(alpha), one every `sample_interval(window)` steps after the
architecture warm-up, spanning the last `--stop_window` steps (rounded down to
a multiple of `SAMPLES`). A block is decided when, over those samples,

- its most probable candidate is the same in every sample;
- its lead (best probability minus the runner-up's) is at least
  `--stop_min_lead` in the last sample, which rules out untrained, uniform
  logits;
- the guard against a late turn: the lead in the last sample is at most
  `--stop_tolerance` below the largest lead of the window. A runner-up that
  gains on the best candidate within the window is how a turn starts (a late
  turn of the 20-epoch search: docs/freezing.md).

The search is decided when every block is decided at the same sample.
Nothing is decided before a whole window of samples after the warm-up
exists. The samples live in the checkpoints (`StopState`), so a resumed
search decides at the same step.
"""

import numpy as np
import tensorflow as tf

#: intervals between the first and the last sample of a window
SAMPLES = 10


def sample_interval(window):
    """Steps between two samples of a `window`-step window (at least 1)."""
    return max(1, window // SAMPLES)


def leads(probabilities):
    """[..., C] probabilities -> [...] best minus runner-up (the best alone when C == 1)."""
    ordered = np.sort(np.asarray(probabilities, np.float64), axis=-1)
    if ordered.shape[-1] == 1:
        return ordered[..., -1]
    return ordered[..., -1] - ordered[..., -2]


def decisions(samples, min_lead, tolerance):
    """Which blocks a window of probability samples has decided.

    Args:
        samples: float [SAMPLES + 1, num_blocks, C], oldest first.
        min_lead: the lead the last sample must have.
        tolerance: how far the last lead may lie below the window's largest.

    Returns:
        A list, per block, of (decided, best candidate index, reason), the
        reason '' when decided and otherwise what is missing.
    """
    samples = np.asarray(samples, np.float64)
    best = np.argmax(samples, axis=-1)  # [K, B]
    lead = leads(samples)  # [K, B]
    out = []
    for block in range(samples.shape[1]):
        choice = int(best[-1, block])
        if np.any(best[:, block] != choice):
            out.append((False, choice, "its most probable candidate changed within the window"))
        elif lead[-1, block] < min_lead:
            out.append((False, choice, f"lead {lead[-1, block]:.3f} < {min_lead:g}"))
        elif lead[-1, block] < lead[:, block].max() - tolerance:
            out.append((False, choice, f"lead fell from {lead[:, block].max():.3f} to "
                                       f"{lead[-1, block]:.3f} (a turn may be starting)"))
        else:
            out.append((True, choice, ""))
    return out


class StopState(tf.Module):
    """The stability rule's samples, saved in the checkpoints.

    samples: ring buffer [SAMPLES + 1, num_blocks, C] of probabilities,
        written at slot `count % (SAMPLES + 1)`.
    count: samples taken so far.
    decided_step: the step the search was decided at (-1: not yet).
    """

    def __init__(self, num_blocks, num_candidates):
        super().__init__(name="stop_state")
        self.samples = tf.Variable(tf.zeros([SAMPLES + 1, num_blocks, num_candidates], tf.float64),
                                   trainable=False, name="samples")
        self.count = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="count")
        self.decided_step = tf.Variable(tf.constant(-1, tf.int64), trainable=False,
                                        name="decided_step")

    def window(self):
        """The last SAMPLES + 1 samples, oldest first, or None before there are that many."""
        count = int(self.count.numpy())
        if count < SAMPLES + 1:
            return None
        ring = self.samples.numpy()
        start = count % (SAMPLES + 1)
        return np.concatenate([ring[start:], ring[:start]])

    def add(self, probabilities):
        slot = int(self.count.numpy()) % (SAMPLES + 1)
        self.samples[slot].assign(np.asarray(probabilities, np.float64))
        self.count.assign_add(1)


class StabilityRule:
    """`--stop_rule=stable` on the host: `observe` after every step."""

    def __init__(self, state, warmup_steps, window, min_lead, tolerance):
        self.state = state
        self.warmup_steps = warmup_steps
        self.interval = sample_interval(window)
        self.min_lead = min_lead
        self.tolerance = tolerance
        self.last = None  # the last decisions, for the log

    @property
    def decided_step(self):
        step = int(self.state.decided_step.numpy())
        return None if step < 0 else step

    def observe(self, step, probabilities_fn):
        """Takes a sample at the sampling steps after the warm-up and applies the rule.

        `probabilities_fn()` gives the [num_blocks, C] probabilities (read only
        when a sample is due). Returns True when the search is decided at `step`.
        """
        if self.decided_step is not None:
            return True
        if step < self.warmup_steps or (step - self.warmup_steps) % self.interval:
            return False
        self.state.add(probabilities_fn())
        window = self.state.window()
        if window is None:
            return False
        self.last = decisions(window, self.min_lead, self.tolerance)
        if all(decided for decided, _, _ in self.last):
            self.state.decided_step.assign(step)
            return True
        return False
