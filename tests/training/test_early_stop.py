"""--early_stop: a run ends after N evaluations in a row without a better valid loss,
counted from the checkpointed best step, so a resumed run stops where an uninterrupted
one does; the stop is by design (finished, not cut short)."""

import types

import pytest

from training.run.host import RunLoop
from training.setup.finished import _finished


def _loop(step, best_step, early_stop=3, eval_interval=10):
    loop = RunLoop.__new__(RunLoop)  # only what `_early_stop_due` reads
    loop.config = types.SimpleNamespace(early_stop=early_stop, eval_interval=eval_interval)
    loop.state = types.SimpleNamespace(best_step=types.SimpleNamespace(numpy=lambda: best_step))
    loop.step = step
    return loop


@pytest.mark.parametrize("step,best_step,due", [
    (20, 10, False), (30, 10, False), (40, 10, True), (50, 10, True),
    (40, 40, False), (10, -1, False),  # never evaluated: nothing to count
])
def test_early_stop_counts_the_evaluations_after_the_best(step, best_step, due):
    assert _loop(step, best_step)._early_stop_due() is due


def test_early_stop_off_never_stops():
    assert not _loop(1000, 10, early_stop=0)._early_stop_due()


def test_an_early_stopped_run_is_finished(tmp_path, monkeypatch):
    import json

    from training.setup import finished

    (tmp_path / "metrics.json").write_text(json.dumps(
        {"step": 40, "planned_steps": 100, "early_stopped": {"evaluations": 3,
                                                           "best_step": 10}}))
    progress = types.SimpleNamespace(finished=True, planned=100, step=40)
    monkeypatch.setattr(finished, "is_run_dir", lambda d: True)
    monkeypatch.setattr(finished, "run_progress", lambda d: progress)
    assert _finished(str(tmp_path))["early_stopped"]["best_step"] == 10
    (tmp_path / "metrics.json").write_text(json.dumps({"step": 40, "planned_steps": 100}))
    assert _finished(str(tmp_path)) is None  # cut short: resumable
