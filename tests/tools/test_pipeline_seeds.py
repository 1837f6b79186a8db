"""tools.pipeline_seeds: seeds.json's rows from the pipelines' run directories, against a
hand computation on planted logs."""

import json

import pytest

from tools import pipeline_seeds


def _training_log(path, rates):
    path.mkdir(parents=True, exist_ok=True)
    (path / "training_log.log").write_text("".join(
        f"step={100 * (i + 1)} loss=1.0 ppl=2.7 lr=1e-3 tokens_per_sec={rate}\n"
        for i, rate in enumerate(rates)))


def _plant(prefix, seed, test_ppl, architecture, minutes):
    """Seed `seed`'s pipeline: search at a median 500 tokens/s, a 1,200-step retrain
    (batch 4 x 5 tokens) at a median 1,000, a console log spanning `minutes`."""
    search, retrain = prefix.parent / f"{prefix.name}{seed}", \
        prefix.parent / f"{prefix.name}{seed}_retrain"
    # The first interval (tracing) is left out of the median.
    _training_log(search, [10, 400, 500, 900])
    _training_log(retrain, [10, 1000, 1000, 3000])
    (retrain / "metrics.json").write_text(json.dumps({
        "architecture": architecture, "planned_steps": 1200,
        "best": {"step": 1100, "test": {"perplexity": test_ppl}}}))
    (retrain / "config.json").write_text(json.dumps({"batch_size": 4, "seq_len": 5}))
    end_minute, end_second = divmod(minutes * 60, 60)
    (prefix.parent / f"{prefix.name}{seed}.console.log").write_text(
        "I1202 10:00:00.000000 1 train.py:1] start\n"
        "I1202 10:00:30.000000 1 host.py:1] step 1 valid: nll 1\n"
        f"I1202 10:{int(end_minute):02d}:{end_second:09.6f} 1 export.py:1] done\n")


def test_rows_and_spread_from_planted_runs(tmp_path):
    prefix = tmp_path / "pipe_s"
    _plant(prefix, 0, 40.0, "aaaiif", 3)
    _plant(prefix, 2, 41.0, "aaiiaf", 6)
    result = pipeline_seeds.summary(str(prefix), [0, 2], "cmd")
    rows = result["seeds"]
    assert [(r["seed"], r["architecture"], r["test_ppl"], r["wall_min"]) for r in rows] == [
        (0, "aaaiif", 40.0, 3.0), (2, "aaiiaf", 41.0, 6.0)]
    # 1,200 steps x 20 tokens at 500 and at 1,000 tokens/s: 48 + 24 s = 1.2 minutes.
    assert rows[0]["two_stages_at_these_speeds_min"] == pytest.approx(1.2)
    assert rows[0]["wall_ratio_at_equal_speed"] == pytest.approx(3 / 1.2, abs=1e-3)
    assert rows[1]["wall_ratio_at_equal_speed"] == pytest.approx(6 / 1.2, abs=1e-3)
    assert result["mean_test_ppl"] == pytest.approx(40.5)
    assert result["mean_over_best_percent"] == pytest.approx(1.25)
    assert result["max_wall_ratio_at_equal_speed"] == pytest.approx(5.0)
    assert result["command"] == "cmd"


def test_unfinished_or_missing_seed_is_one_clear_error(tmp_path, capsys):
    prefix = tmp_path / "pipe_s"
    _plant(prefix, 0, 40.0, "aaaiif", 3)
    assert pipeline_seeds.main([str(prefix), "--seeds=0,1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: seed 1: ") and "pipe_s1" in err and "missing" in err
    (tmp_path / "pipe_s0_retrain" / "metrics.json").write_text(json.dumps(
        {"architecture": "aaaiif", "planned_steps": 1200, "best": {"step": 100}}))
    assert pipeline_seeds.main([str(prefix), "--seeds=0"]) == 2
    assert "no test perplexity yet" in capsys.readouterr().err
    assert pipeline_seeds.main([str(prefix), "--seeds=zero"]) == 2
    assert "--seeds=zero" in capsys.readouterr().err


def test_writes_the_json(tmp_path):
    prefix = tmp_path / "pipe_s"
    _plant(prefix, 1, 42.0, "aaaiif", 2)
    out = tmp_path / "seeds.json"
    assert pipeline_seeds.main([str(prefix), "--seeds=1", f"--out={out}"]) == 0
    assert json.loads(out.read_text())["seeds"][0]["seed"] == 1
