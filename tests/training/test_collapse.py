"""training/run/collapse.py: the warning when validation falls back to unigram level."""

import logging
import math

import numpy as np
import pytest


def test_unigram_entropy_against_the_sum():
    from training.run.collapse import unigram_entropy

    counts = np.array([50, 30, 15, 5, 0])
    p = counts[:4] / 100
    assert unigram_entropy(counts) == pytest.approx(-sum(x * math.log(x) for x in p))
    assert unigram_entropy([7]) == 0.0


def test_message_only_after_the_warm_up_and_at_unigram_level():
    from training.run.collapse import THRESHOLD, CollapseGuard

    guard = CollapseGuard(unigram_nll=3.0, warmup_steps=200, cause="lower --learning_rate")
    assert guard.message(200, 3.1) is None  # warm-up: not judged
    assert guard.message(250, THRESHOLD * 3.0 - 1e-3) is None  # learning
    assert guard.message(250, float("nan")) is None  # the non-finite policy's business
    text = guard.message(250, 2.95)
    assert text.startswith("step 250: validation loss 2.9500 nats/token is at unigram level")
    assert "unigram entropy is 3.0000" in text and text.endswith("lower --learning_rate")
    assert "\n" not in text


def test_warns_once_on_valid_only(caplog):
    from training.run.collapse import CollapseGuard

    caplog.set_level(logging.WARNING, logger="absl")
    guard = CollapseGuard(unigram_nll=3.0, warmup_steps=0, cause="cause")
    guard.on_evaluate("test", 10, {"nll": 3.0})
    assert not caplog.records
    guard.on_evaluate("valid", 10, {"nll": 3.0})
    guard.on_evaluate("valid", 20, {"nll": 3.0})
    assert len(caplog.records) == 1 and "step 10:" in caplog.records[0].getMessage()


@pytest.mark.parametrize("flags,cause", [
    (dict(optimizer="adagrad", clip_norm=0.03), "--clip_norm=0.03 clips the gradients before "
     "Adagrad"),
    (dict(optimizer="adagrad_clip", clip_norm=0.0, tensor_clip_norm=0.03),
     "lower --learning_rate=0.07"),
    (dict(optimizer="adam", clip_norm=0.25), "lower --learning_rate=0.07"),
])
def test_likely_cause_names_the_flags(tiny_data, tmp_path, flags, cause):
    from tests.training.conftest import tiny_config
    from training.run.collapse import likely_cause

    config = tiny_config(tiny_data, tmp_path, learning_rate=0.07, **flags)
    assert cause in likely_cause(config)


@pytest.mark.slow
def test_a_run_at_unigram_level_warns_in_one_line(tiny_data, tmp_path, caplog):
    """Two steps at a negligible learning rate: the model still predicts about uniformly,
    above the data's unigram entropy, so the run's evaluation warns."""
    from tests.training.conftest import tiny_config
    from training.run.loop import train

    caplog.set_level(logging.WARNING, logger="absl")
    config = tiny_config(tiny_data, tmp_path / "run", max_steps=2, learning_rate=1e-7,
                         eval_interval=2, eval_max_records=2, sample_tokens=0)
    train(config)
    lines = [r.getMessage() for r in caplog.records if "unigram level" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("step 2: validation loss ")
