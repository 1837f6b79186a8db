"""Helpers of bench/bench_families.py: parameter matching."""

import pytest

from bench import bench_families as bf


def test_closest_width_is_the_nearest_in_ratio():
    widths = list(range(1, 101))
    calls = []

    def count(w):
        calls.append(w)
        return w * w

    assert bf.closest_width(count, 50 * 50 + 10, widths) == (50, 2500)
    assert bf.closest_width(count, 51 * 51 - 10, widths) == (51, 2601)
    assert len(set(calls)) < 20  # bisection, not a scan
    assert bf.closest_width(count, 0.5, widths) == (1, 1)
    assert bf.closest_width(count, 10**6, widths) == (100, 10000)


def test_match_prefers_the_preset_depth_then_the_nearest_other():
    widths = list(range(8, 257, 8))

    def count(depth, width):
        return depth * width * width

    # 4 * 64^2 exactly: the preferred depth is kept.
    assert bf.match_depth_width(count, 4 * 64 * 64, 4, [1, 2, 3, 4, 5], widths, 0.1) == (
        4, 64, 4 * 64 * 64, True)
    # Tolerance 0: only depth 3 has a width with exactly 3 * 64^2; 5 and 2 are tried... 3 first.
    d, w, n, ok = bf.match_depth_width(count, 3 * 64 * 64, 4, [2, 3, 5], widths, 0.0)
    assert (d, w, n, ok) == (3, 64, 3 * 64 * 64, True)
    # Out of reach: the closest candidate, flagged.
    d, w, n, ok = bf.match_depth_width(count, 10**9, 4, [2, 3], widths, 0.1)
    assert not ok and w == 256 and d == 4


@pytest.mark.slow
def test_matched_configs_of_the_tiny_presets():
    target_count, matched = bf.matched_configs("tiny", "sha_rnn_tiny", "lstm_tiny")
    target = bf.target_config("tiny")
    assert matched["Transformer-XL"][2] == target
    for label, (family, _, config, (total, io), ok) in matched.items():
        assert ok, label
        assert abs(total / target_count - 1) <= 0.1, (label, total, target_count)
        assert 0 < io < total
        assert config.vocab_size == target.vocab_size and config.cutoffs == target.cutoffs
    assert matched["LSTM"][2].resolved_attention_layers == ()
    assert matched["SHA-RNN"][2].resolved_attention_layers != ()
