"""The stability rule that ends a PAR search (`--stop_rule=stable`,
training/plugins/par_search/stopping.py), on synthetic probability histories.

The rule is replayed by a brute-force reading of its definition (every block's
most probable candidate the same over the last window of samples, a lead of
at least `min_lead` at the end, not more than `tolerance` below the window's
largest lead) and the two must agree step for step.
"""

import numpy as np
import pytest
import tensorflow as tf

from training.plugins.par_search import stopping

MIN_LEAD, TOLERANCE = 0.1, 0.05


def _probs(*rows):
    return np.array(rows, np.float64)


def _window(block_rows):
    """[SAMPLES + 1, num_blocks, C] from per-block lists of SAMPLES + 1 rows."""
    return np.stack([np.array(rows, np.float64) for rows in block_rows], axis=1)


def test_a_block_with_a_steady_lead_is_decided_and_uniform_logits_are_not():
    k = stopping.SAMPLES + 1
    steady = [[0.7, 0.2, 0.1]] * k
    uniform = [[1 / 3, 1 / 3, 1 / 3]] * k
    out = stopping.decisions(_window([steady, uniform]), MIN_LEAD, TOLERANCE)
    assert out[0] == (True, 0, "")
    assert out[1][0] is False and "lead 0.000 < 0.1" in out[1][2]


def test_a_change_of_the_most_probable_candidate_within_the_window_is_not_decided():
    k = stopping.SAMPLES + 1
    rows = [[0.6, 0.3, 0.1]] * k
    rows[3] = [0.3, 0.6, 0.1]
    decided, choice, why = stopping.decisions(_window([rows]), MIN_LEAD, TOLERANCE)[0]
    assert not decided and choice == 0 and "changed" in why


def test_the_guard_refuses_a_shrinking_lead_and_accepts_noise_within_the_tolerance():
    k = stopping.SAMPLES + 1
    # The runner-up gains steadily: lead 0.6 -> 0.2, still ahead (a turn in the making).
    turning = [[0.8 - 0.02 * i, 0.2 + 0.02 * i, 0.0] for i in range(k)]
    decided, _, why = stopping.decisions(_window([turning]), MIN_LEAD, TOLERANCE)[0]
    assert not decided and "fell from 0.600 to 0.200" in why
    # Noise: the lead moves by 0.04 at most (0.01 of probability moving to the runner-up).
    noisy = [[0.7 + (0.01 if i % 2 else -0.01), 0.3 - (0.01 if i % 2 else -0.01), 0.0]
             for i in range(k)]
    assert stopping.decisions(_window([noisy]), MIN_LEAD, TOLERANCE)[0][0]


def _brute_force_decided_step(history, warmup, window, tolerance=TOLERANCE):
    """The first step at which every block is decided, by the rule's definition."""
    interval = stopping.sample_interval(window)
    sampled = [(s, p) for s, p in history if s >= warmup and (s - warmup) % interval == 0]
    for end in range(stopping.SAMPLES, len(sampled)):
        probs = np.stack([p for _, p in sampled[end - stopping.SAMPLES:end + 1]])
        ok = True
        for block in range(probs.shape[1]):
            best = probs[:, block].argmax(axis=-1)
            top2 = np.sort(probs[:, block], axis=-1)[:, -2:]
            lead = top2[:, 1] - top2[:, 0]
            ok &= bool((best == best[-1]).all() and lead[-1] >= MIN_LEAD
                       and lead[-1] >= lead.max() - tolerance)
        if ok:
            return sampled[end][0]
    return None


def _replay(history, warmup, window, state=None):
    state = state or stopping.StopState(history[0][1].shape[0], history[0][1].shape[1])
    rule = stopping.StabilityRule(state, warmup, window, MIN_LEAD, TOLERANCE)
    reads = []
    for step, probs in history:
        def read(probs=probs, step=step):
            reads.append(step)
            return probs
        if rule.observe(step, read):
            return step, reads
    return None, reads


def _history(steps, fn):
    return [(s, fn(s)) for s in range(1, steps + 1)]


def test_no_sample_and_no_stop_during_the_warm_up_nor_before_a_whole_window():
    decided = _probs([0.9, 0.05, 0.05], [0.1, 0.85, 0.05])  # decided from the first step
    warmup, window = 50, 40
    step, reads = _replay(_history(400, lambda s: decided), warmup, window)
    assert min(reads) == warmup  # nothing is read before the warm-up ends
    assert step == warmup + window == _brute_force_decided_step(
        _history(400, lambda s: decided), warmup, window)


def test_uniform_logits_never_stop_the_search():
    uniform = _probs([0.5, 0.5], [0.5, 0.5])
    assert _replay(_history(300, lambda s: uniform), 0, 20)[0] is None


def test_a_late_turn_delays_the_stop_until_the_new_choice_is_stable():
    # Block 0 is decided from the start; block 1 leads with candidate 0, but from step
    # 30 its runner-up gains, overtakes after step 90 and settles at step 150.
    def probs(step):
        b1 = 0.8 - 0.6 * min(max(step - 30, 0), 120) / 120
        return _probs([0.9, 0.1], [b1, 1 - b1])

    history = _history(600, probs)
    warmup, window = 10, 50
    step, _ = _replay(history, warmup, window)
    assert step == _brute_force_decided_step(history, warmup, window)
    # Without the guard the first window would already stop it, on the losing candidate.
    assert _brute_force_decided_step(history, warmup, window, tolerance=1.0) == warmup + window
    # It stops once the new choice has kept the lead for a whole window, and on it.
    assert step >= 90 + window - stopping.sample_interval(window)
    assert np.argmax(probs(step)[1]) == 1


def test_random_histories_agree_with_the_brute_force_reading():
    rng = np.random.default_rng(0)
    for trial in range(20):
        logits = rng.normal(size=(3, 3)) * 2
        drift = rng.normal(size=(3, 3)) * 0.02

        def probs(step, logits=logits, drift=drift):
            z = logits + drift * step + rng.normal(size=(3, 3)) * 0.05
            e = np.exp(z - z.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        history = _history(400, probs)
        assert _replay(history, 20, 60)[0] == _brute_force_decided_step(history, 20, 60), trial


def test_the_samples_resume_from_a_checkpoint_to_the_same_decision(tmp_path):
    def probs(step):  # block 0's lead shrinks from 0.9 to 0.2 until step 150, then holds
        b = 0.95 - 0.35 * min(step, 150) / 150
        return _probs([b, 1 - b], [0.8, 0.2])

    history = _history(800, probs)
    expected, _ = _replay(history, 5, 30)
    assert expected == _brute_force_decided_step(history, 5, 30) >= 150
    cut = 100  # the ring of samples is full and has wrapped around
    state = stopping.StopState(2, 2)
    assert _replay(history[:cut], 5, 30, state)[0] is None
    path = tf.train.Checkpoint(stop=state).write(str(tmp_path / "ckpt"))
    restored = stopping.StopState(2, 2)
    tf.train.Checkpoint(stop=restored).read(path).assert_consumed()
    assert _replay(history[cut:], 5, 30, restored)[0] == expected


@pytest.mark.parametrize("extra, message", [
    (("--architecture=afaf", "--then_retrain"),
     "--then_retrain=True belongs to the search stage, but the model does not search "
     "(--architecture=afaf)"),
    (("--architecture=afaf", "--stop_rule=stable"), "--stop_rule='stable' belongs to the search"),
    (("--stop_rule=stable", "--stop_window=5000"), "--stop_window=5000 is longer than the search"),
    (("--retrain_epochs=3",), "--retrain_epochs=3: sets the length of the --then_retrain stage"),
    (("--retrain_init=supernet",), "--retrain_init='supernet': sets how the --then_retrain"),
    (("--architecture=afaf", "--init_from=/no/such/run"),
     "--init_from=/no/such/run is not a run directory (no config.json)"),
    (("--init_from=/no/such/run",), "--init_from=/no/such/run gives a derived network its first "
     "weights, but this run searches"),
])
def test_contradicting_pipeline_options_are_one_error_before_any_work(tiny_data, tmp_path,
                                                                     extra, message):
    from runstore.errors import ConfigError
    from tests.helpers.trainers import family_config

    with pytest.raises(ConfigError) as raised:
        family_config(tiny_data, tmp_path / "run", "transformer_xl", "--num_blocks=4", *extra)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "run").exists()
