"""Language-modeling metrics against hand computation."""

import math

import numpy as np
import pytest
import tensorflow as tf

from runstore.metrics import NllAccumulator, lm_metrics


def test_lm_metrics_hand_values():
    m = lm_metrics(total_nll=460.0, tokens=100, words=80, num_bytes=400)
    assert m["nll"] == pytest.approx(4.6)
    assert m["perplexity"] == pytest.approx(math.exp(4.6))
    assert m["bits_per_token"] == pytest.approx(4.6 / math.log(2))
    assert m["word_perplexity"] == pytest.approx(math.exp(460.0 / 80))
    assert m["bits_per_byte"] == pytest.approx(460.0 / math.log(2) / 400)
    assert set(lm_metrics(1.0, 1)) == {"nll", "perplexity", "bits_per_token"}


def test_perplexity_of_total_is_not_mean_of_batch_perplexities():
    # Batch A: 10 tokens, NLL sum 10 (mean 1); batch B: 30 tokens, sum 90 (mean 3).
    acc = NllAccumulator()
    acc.add(10.0, 10)
    acc.add(tf.constant(90.0), tf.constant(30))
    m = acc.result()
    assert m["nll"] == pytest.approx(2.5)
    assert m["perplexity"] == pytest.approx(math.exp(2.5))  # 12.18
    mean_of_ppl = (math.exp(1.0) + math.exp(3.0)) / 2  # 11.40, the wrong answer
    assert abs(m["perplexity"] - mean_of_ppl) > 0.5
    assert m["tokens"] == 40


def test_accumulator_is_float64_exact_where_float32_drifts():
    acc = NllAccumulator()
    f32 = np.float32(0.0)
    for _ in range(100_000):
        acc.add(np.float32(0.1), 1)
        f32 += np.float32(0.1)
    assert acc.total == pytest.approx(100_000 * float(np.float32(0.1)), rel=1e-12)
    assert abs(float(f32) - 10_000.0) > 1.0  # why float64 host sums matter
    assert acc.count == 100_000


def test_result_with_word_and_byte_counts_and_reset():
    acc = NllAccumulator()
    acc.add(np.float64(69.31471805599453), 50)
    m = acc.result(words=25, num_bytes=100)
    assert m["bits_per_byte"] == pytest.approx(1.0)
    assert m["word_perplexity"] == pytest.approx(math.exp(69.31471805599453 / 25))
    acc.reset()
    with pytest.raises(ValueError, match="before any token"):
        acc.result()


def test_bad_counts_and_overflow():
    with pytest.raises(ValueError, match="tokens"):
        lm_metrics(1.0, 0)
    with pytest.raises(ValueError, match="words"):
        lm_metrics(1.0, 1, words=0)
    with pytest.raises(ValueError, match="num_bytes"):
        lm_metrics(1.0, 1, num_bytes=-3)
    assert lm_metrics(1e6, 1)["perplexity"] == math.inf
