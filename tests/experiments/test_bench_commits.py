"""experiments/bench_commits.py: speed of two trees in alternating worker processes."""

import json
import subprocess
import sys

import pytest

from bench.common import ROOT
from experiments import bench_commits as bc


def test_summarize_pairs_rounds():
    # A takes 2 s per step in every round, B 1 s then 4 s: B/A speed 2.0 and 0.5.
    samples = {"x": {"A": [2.0, 2.0, 2.0], "B": [1.0, 4.0, 1.0]}}
    (row,) = bc.summarize(["x"], samples, ["A", "B"])
    assert row["ratio"] == 2.0  # median of 2.0, 0.5, 2.0
    assert row["ratio_range"] == [0.5, 2.0]
    assert row["tokens_per_sec"] == {"A": 512.0, "B": 1024.0}


@pytest.mark.parametrize("argv, message", [
    (["--precisions=float64"], "--precisions"),
    (["--candidate_env=NOVALUE"], "--candidate_env"),
    (["--rounds=0"], "--rounds"),
    (["--check_steps=-1"], "--check_steps"),
    (["--sample_seconds=0"], "--sample_seconds"),
])
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as error:
        bc.parse_args(argv)
    assert error.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_writable_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bc.parse_args([f"--out={tmp_path}"])  # a directory
    assert "--out" in capsys.readouterr().err


def test_repeated_precisions_build_each_case_once():
    names = [spec[0] for spec in bc.case_specs(bc.parse_args(
        ["--precisions=float32,float32", "--only=soft search"]))]
    assert names == ["soft search float32"]


def test_unknown_case_is_named():
    with pytest.raises(SystemExit, match="matches no case"):
        bc.case_specs(bc.parse_args(["--only=nothing like this"]))


@pytest.mark.slow
def test_same_code_on_both_sides_gives_the_same_losses(tmp_path):
    """HEAD against the working tree (the same model code in CI's clean clone):
    the dropout-free losses of the two workers agree, and both sides are timed."""
    out = tmp_path / "commits.json"
    result = subprocess.run(
        [sys.executable, "-m", "experiments.bench_commits", "--quick", "--baseline=HEAD",
         f"--out={out}"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    (row,) = report["rows"]
    assert row["case"] == "transformer_xl afafaf float32"
    assert report["sides"][1] == "B working tree"
    for side in report["sides"]:
        assert len(row["seconds_per_step"][side]) == 2 and row["tokens_per_sec"][side] > 0
    diff = report["loss_check"]["max_relative_difference"][row["case"]]
    assert diff <= 1e-6, "identical model code gave different losses"
