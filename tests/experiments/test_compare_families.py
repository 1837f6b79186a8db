"""Helpers of experiments/compare_families.py: planning, timing from the training log,
resumable run status."""

import json

import pytest

from bench import common
from experiments import compare_families as cf


def test_step_times_and_plan():
    rows = [dict(step=5, tokens_per_sec=10.0), dict(step=10, tokens_per_sec=1000.0),
            dict(step=15, tokens_per_sec=500.0)]
    assert cf.step_seconds(rows, 100, skip=5) == [0.1, 0.2]
    assert cf.training_seconds(rows, 100) == pytest.approx(5 * 10 + 5 * 0.1 + 5 * 0.2)
    assert cf.plan_steps(10, 0.05) == 12000
    assert cf.plan_steps(0.001, 10.0) == 1


def test_run_status_and_killed_attempts(tmp_path):
    run = tmp_path / "compare_lstm"
    assert cf.run_status(run) == "new"
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert cf.run_status(run) == "foreign"
    common.write_json(run / cf.PLAN_FILE, dict(max_steps=100, attempts=[]))
    assert cf.run_status(run) == "planned"
    (run / "metrics.json").write_text(json.dumps(dict(step=40)))
    assert cf.run_status(run) == "planned"  # a resumed run that stopped early
    (run / "metrics.json").write_text(json.dumps(dict(step=100)))
    assert cf.run_status(run) == "finished"

    log = run / cf.LOG_FILE
    log.write_text("x")
    end = log.stat().st_mtime
    plan = dict(attempts=[dict(started=end - 30.0, seconds=None, returncode=None),
                          dict(started=end, seconds=5.0, returncode=0)])
    cf.close_killed_attempts(plan, log)
    assert plan["attempts"][0]["seconds"] == pytest.approx(30.0)
    assert plan["attempts"][0]["estimated"] and plan["attempts"][1]["seconds"] == 5.0
