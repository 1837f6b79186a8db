"""evaluate.py, generate.py and export.py: a damaged latest checkpoint, a full disk, Ctrl-C.

All cases run in one child process (tests/helpers/faults.py) on a copy of
the reference run whose newest checkpoint (ckpt-30) has a truncated data
file and whose best checkpoint a truncated index; the full disk is a 1 MB
tmpfs filled before the child starts.
"""

import json
import os
import shutil

import pytest

from tests.helpers.faults import fill_disk, leftovers, run_child, small_tmpfs


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory):
    """A 1 MB tmpfs, full (skipped where mounting is not allowed)."""
    with small_tmpfs(tmp_path_factory.mktemp("full_disk"), "1m") as path:
        fill_disk(path)
        yield path


@pytest.fixture(scope="module")
def serving_cases(reference_run, full_disk, tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_faults")
    run = root / "run"
    shutil.copytree(reference_run, run, ignore=shutil.ignore_patterns("logs"))
    best = next((run / "best").glob("ckpt-*.index"))
    for damaged in (run / "ckpt-30.data-00000-of-00001", best):
        with open(damaged, "r+b") as f:
            f.truncate(os.path.getsize(damaged) // 2)
    out = root / "out"
    out.mkdir()
    model = [f"--model_dir={run}"]
    stop = "serving.evaluation.StreamEvaluator.evaluate"
    cases = [
        {"name": "evaluate_latest", "script": "evaluate.py",
         "args": [*model, "--checkpoint=latest", f"--output={out}/eval.json"]},
        {"name": "evaluate_best", "script": "evaluate.py",
         "args": [*model, f"--output={out}/best.json"]},
        {"name": "generate_latest", "script": "generate.py",
         "args": [*model, "--checkpoint=latest", "--num_tokens=5", "--seed=1"]},
        {"name": "export_latest", "script": "export.py",
         "args": [*model, "--checkpoint=latest", f"--output={out}/latest.keras"]},
        {"name": "export_full_disk", "script": "export.py",
         "args": [*model, "--format=saved_model", f"--output={full_disk}/saved"]},
        {"name": "export_sigint", "script": "export.py",
         "args": [*model, "--format=saved_model", f"--output={out}/saved"],
         "faults": [{"at": "call", "target": "tensorflow.saved_model.save",
                     "signal": "SIGINT"}]},
        {"name": "export_sigterm", "script": "export.py",
         "args": [*model, "--format=saved_model", f"--output={out}/saved"],
         "faults": [{"at": "call", "target": "tensorflow.saved_model.save",
                     "signal": "SIGTERM"}]},
        {"name": "evaluate_sigint", "script": "evaluate.py",
         "args": [*model, f"--output={out}/interrupted.json"],
         "faults": [{"at": "call", "target": stop, "signal": "SIGINT"}]},
        {"name": "evaluate_sigterm", "script": "evaluate.py",
         "args": [*model, f"--output={out}/interrupted.json"],
         "faults": [{"at": "call", "target": stop, "signal": "SIGTERM"}]},
    ]
    code, results, err = run_child(cases)
    assert code == 0, err[-3000:]
    return dict(run=run, out=out, disk=full_disk, results=results)


@pytest.mark.slow
def test_latest_falls_back_past_a_damaged_checkpoint_with_a_warning(serving_cases):
    run, out, results = serving_cases["run"], serving_cases["out"], serving_cases["results"]
    warning = f"skipping ckpt-30: {run}/ckpt-30.data-00000-of-00001 is damaged"
    for name in ("evaluate_latest", "generate_latest", "export_latest"):
        code, err = results[name]
        assert code == 0, (name, err[-2000:])
        assert warning in err, (name, err[-2000:])
    result = json.loads((out / "eval.json").read_text())
    assert result["checkpoint"] == f"{run}/ckpt-25" and result["step"] == 25
    assert (out / "latest.keras").is_file()
    # A damaged best checkpoint: the newest good one, with a warning naming the file.
    code, err = results["evaluate_best"]
    assert code == 0, err[-2000:]
    best = next((run / "best").glob("ckpt-*.index"))
    assert f"the best checkpoint is damaged: {best} is damaged" in err, err[-2000:]
    assert json.loads((out / "best.json").read_text())["checkpoint"] == f"{run}/ckpt-25"


@pytest.mark.slow
def test_export_on_a_full_disk_is_one_line_and_leaves_nothing(serving_cases):
    code, err = serving_cases["results"]["export_full_disk"]
    disk = serving_cases["disk"]
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot write {disk}/saved: No space left on device"), line
    assert "Traceback" not in err
    assert sorted(os.listdir(disk)) == ["filler"]


@pytest.mark.slow
def test_interrupted_export_and_evaluation_write_nothing(serving_cases):
    results, out = serving_cases["results"], serving_cases["out"]
    expected = {"export_sigint": (130, f"interrupted: nothing was written to {out}/saved"),
                "export_sigterm": (143, f"interrupted: nothing was written to {out}/saved"),
                "evaluate_sigint": (130, "interrupted: no result was written"),
                "evaluate_sigterm": (143, "interrupted: no result was written")}
    for name, (status, line) in expected.items():
        code, err = results[name]
        assert code == status, (name, err[-2000:])
        assert err.strip().splitlines()[-1] == line, name
        assert "Traceback" not in err, name
    assert sorted(os.listdir(out)) == ["best.json", "eval.json", "latest.keras", "latest.md"]
    assert not leftovers(out)
