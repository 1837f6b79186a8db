"""Schedules planned at the first start; warm-ups capped by the run length;
derivations from untrained architecture logits flagged.

- A run stopped at step 10 of 20 and resumed with --max_steps=40 takes steps
  11-20 with the learning rate and temperature of the uninterrupted 20-step
  run (the cosine and tau horizons stay at 20), then holds min_lr and tau_end.
- A run planned for 20 steps (--plan_steps) and stopped at 10 is the first 10 steps of
  the 20-step run, and resumed to 20 it is that run, loss for loss.
- base_model.sh's warm-ups (1,000 lr, 2,000 architecture steps) on a 40-step
  run are capped at 10% and 20% (4 and 8 steps), so the short run searches.
- A derivation from untrained logits says so: WARNING, first line of
  architecture.txt, "untrained": true in architecture.json and metrics.json.
"""

import json
import logging
import math

import numpy as np
import pytest

from tests.helpers.trainers import StopAfter, Stopped, family_config

PEAK, FLOOR = 3e-3, 1e-5
# A supernet of 2 blocks, not the tiny preset's 4, where only schedules and the
# untrained flag are checked: they do not depend on depth, and every block adds
# tracing time. (The short search keeps 4: its architecture must visibly move.)
_TWO_BLOCKS = dict(model_num_blocks=2)


def _log(model_dir):
    from training.run.loop import read_training_log

    return {row["step"]: row for row in read_training_log(f"{model_dir}/training_log.log")}


@pytest.mark.slow
def test_resume_with_more_steps_keeps_lr_and_tau(tiny_config_factory, tmp_path):
    from training.run.checkpoint import saved_horizon
    from training.run.loop import train

    common = dict(max_steps=20, warmup_steps=2, min_lr=FLOOR, learning_rate=PEAK,
                  log_interval=1, checkpoint_interval=10, eval_max_records=2, sample_tokens=0,
                  arch_warmup_steps=2, **_TWO_BLOCKS)
    reference = tiny_config_factory(tmp_path / "reference", **common)
    train(reference)
    resumed = tiny_config_factory(tmp_path / "resumed", **common)
    with pytest.raises(Stopped):
        train(resumed, callbacks=[StopAfter(11)])  # dies after the checkpoint at 10
    assert saved_horizon(resumed.model_dir) == 20
    longer = resumed.replace(max_steps=40)
    metrics = train(longer)
    assert metrics["step"] == 40 and saved_horizon(resumed.model_dir) == 20

    want, got = _log(reference.model_dir), _log(resumed.model_dir)
    assert sorted(got) == list(range(1, 41))
    for step in range(11, 21):  # the steps the uninterrupted run also took
        assert got[step]["lr"] == want[step]["lr"], step
        assert got[step]["tau"] == want[step]["tau"], step
    # lr logged at step s is the rate of step index s - 1 (cosine over 2..20).
    progress = (15 - 1 - 2) / 18
    assert got[15]["lr"] == pytest.approx(
        FLOOR + (PEAK - FLOOR) * 0.5 * (1 + math.cos(math.pi * progress)), rel=1e-5)
    assert got[15]["tau"] == pytest.approx(0.1 ** (14 / 20), rel=1e-5)
    for step in range(22, 41):  # past the planned end: the floors, no jump
        assert got[step]["lr"] == pytest.approx(FLOOR, rel=1e-5)
        assert got[step]["tau"] == pytest.approx(0.1, rel=1e-5)


@pytest.mark.slow
def test_a_run_planned_longer_is_the_beginning_of_that_run(tiny_config_factory, tmp_path):
    """--plan_steps=20 with --max_steps=10: steps 1-10 of the 20-step run (its warm-ups,
    learning rate, temperature and losses), and resumed with --max_steps=20 the rest."""
    from training.run.checkpoint import saved_horizon
    from training.run.loop import train

    common = dict(warmup_steps=4, min_lr=FLOOR, learning_rate=PEAK, log_interval=1,
                  checkpoint_interval=10, eval_max_records=2, sample_tokens=0,
                  arch_warmup_steps=4, **_TWO_BLOCKS)
    reference = tiny_config_factory(tmp_path / "reference", max_steps=20, **common)
    want_metrics = train(reference)
    begun = tiny_config_factory(tmp_path / "begun", max_steps=10, plan_steps=20, **common)
    first = train(begun)
    assert first["step"] == 10 and first["planned_steps"] == 20
    assert saved_horizon(begun.model_dir) == 20
    metrics = train(begun.replace(max_steps=20, plan_steps=0))
    assert metrics["step"] == 20

    want, got = _log(reference.model_dir), _log(begun.model_dir)
    assert sorted(got) == sorted(want) == list(range(1, 21))
    for step in range(1, 21):
        for key in ("lr", "tau", "loss"):
            assert got[step][key] == want[step][key], (step, key)
    assert metrics["last"]["valid"]["nll"] == want_metrics["last"]["valid"]["nll"]


def test_a_plan_shorter_than_the_run_is_refused(tiny_config_factory, tmp_path):
    from training.run.loop import train
    from training.setup.config import ConfigError

    config = tiny_config_factory(tmp_path / "run", max_steps=20, plan_steps=10)
    with pytest.raises(ConfigError, match=r"--plan_steps=10 .* at least 20"):
        train(config)
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.slow
def test_short_search_caps_warmups_and_trains_the_architecture(tiny_config_factory, tmp_path,
                                                               caplog):
    from training.plugins.par_search import derive
    from training.run.loop import train

    caplog.set_level(logging.INFO, logger="absl")
    # base_model.sh's warm-ups on a 40-step run: capped at 4 and 8 steps.
    config = tiny_config_factory(tmp_path / "short", max_steps=40, warmup_steps=1000,
                                 arch_warmup_steps=2000, learning_rate=PEAK, log_interval=1,
                                 eval_max_records=2, sample_tokens=0)
    metrics = train(config)
    messages = caplog.text
    assert ("learning-rate warm-up 4 steps (--warmup_steps=1000 capped: the run is too short "
            "for it, at most --warmup_fraction=0.1 of its steps warm up)") in messages
    assert "architecture warm-up 8 steps (--arch_warmup_steps=2000, at most 20% of the 40 " \
           "planned steps)" in messages
    log = _log(config.model_dir)
    assert log[3]["lr"] == pytest.approx(PEAK * 2 / 4, rel=1e-5)  # step index 2 of 4
    assert log[5]["lr"] == pytest.approx(PEAK, rel=1e-5)
    report = json.loads((tmp_path / "short" / derive.ARCHITECTURE_JSON).read_text())
    deviation = np.max(np.abs(np.asarray(report["probabilities"]) - 1 / 3))
    assert deviation > 1e-2, report["probabilities"]
    assert report["untrained"] is False and metrics["derivation"]["untrained"] is False
    text = (tmp_path / "short" / derive.ARCHITECTURE_TXT).read_text()
    assert text == metrics["architecture"] + "\n"
    assert "not a search result" not in messages


@pytest.mark.parametrize("value", ["1", "-0.1"])
def test_a_warm_up_fraction_outside_0_1_is_refused(tiny_data, tmp_path, value):
    from training.setup.config import ConfigError

    with pytest.raises(ConfigError, match=f"--arch_warmup_fraction={float(value)!r}: must be "
                       r"in \[0, 1\)"):
        family_config(tiny_data, tmp_path, "transformer_xl", f"--arch_warmup_fraction={value}")


@pytest.mark.slow
def test_the_architecture_warm_up_takes_the_given_fraction(tiny_config_factory, tmp_path,
                                                           caplog):
    """--arch_warmup_fraction=0.5: half of a 40-step run, the logits untouched until then."""
    from training.run.loop import train

    caplog.set_level(logging.INFO, logger="absl")
    config = tiny_config_factory(tmp_path / "half", max_steps=40, arch_warmup_steps=2000,
                                 arch_warmup_fraction=0.5, log_interval=1,
                                 eval_max_records=2, sample_tokens=0)
    train(config)
    assert "architecture warm-up 20 steps (--arch_warmup_steps=2000, at most 50% of the 40 " \
           "planned steps)" in caplog.text
    history = json.loads((tmp_path / "half" / "arch_history.json").read_text())["entries"]
    uniform = [e["step"] for e in history
               if np.allclose(np.asarray(e["probs"]), 1 / 3, rtol=0, atol=1e-7)]
    assert uniform and max(uniform) == 20, uniform  # the logits move from step 21 on
    assert max(e["step"] for e in history) == 40


@pytest.mark.slow
def test_untrained_derivation_is_flagged(tiny_config_factory, tmp_path, caplog):
    from training.plugins.par_search import derive
    from training.run.loop import train

    caplog.set_level(logging.INFO, logger="absl")
    config = tiny_config_factory(tmp_path / "untrained", max_steps=6, arch_learning_rate=1e-9,
                                 eval_max_records=2, sample_tokens=0, **_TWO_BLOCKS)
    metrics = train(config)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and "NOT a search result" in r.getMessage()]
    assert len(warnings) == 1 and "within" in warnings[0].getMessage()
    assert metrics["derivation"]["untrained"] is True
    on_disk = json.loads((tmp_path / "untrained" / "metrics.json").read_text())
    assert on_disk["derivation"]["untrained"] is True
    report = json.loads((tmp_path / "untrained" / derive.ARCHITECTURE_JSON).read_text())
    assert report["untrained"] is True and "uniform" in report["untrained_reason"]
    first, second = (tmp_path / "untrained" / derive.ARCHITECTURE_TXT).read_text().splitlines()
    assert first.startswith(derive.UNTRAINED_HEADER) and second == metrics["architecture"]
    # Still readable by --architecture=<run>, with a warning.
    caplog.clear()
    (tmp_path / "untrained" / derive.ARCHITECTURE_JSON).unlink()
    assert derive.read_architecture(tmp_path / "untrained") == metrics["architecture"]
    assert "untrained architecture logits" in caplog.text
