"""Damaged checkpoints and a full disk, for real: the run directory lives on a 16 MB tmpfs.

One run goes through, in one child process: an interruption at step 12; a
truncated newest checkpoint (its data file); a corrupted newest index; a disk
that fills up when ckpt-15 is written; the resume once space is freed; a
disk that fills up when metrics.json is written (the run had finished
before: the old file must survive); the rerun once space is freed; and every
checkpoint damaged. The run still ends with the uninterrupted run's weights.
"""

import json
import os

import pytest

from tests.helpers.faults import (
    STEPS,
    assert_same_checkpoint,
    leftovers,
    run_child,
    run_flags,
    small_tmpfs,
)


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    """A 16 MB tmpfs mounted for this module (skipped where mounting is not allowed)."""
    with small_tmpfs(tmp_path_factory.mktemp("small_disk"), "16m") as path:
        yield path


@pytest.fixture(scope="module")
def damaged_run(word_data, reference_run, small_disk, tmp_path_factory):
    notes = tmp_path_factory.mktemp("damage_notes")
    run = small_disk / "run"
    flags = run_flags(word_data, run)
    filler = str(small_disk / "filler")

    def record(name):
        return {"record": str(run), "to": str(notes / f"{name}.json")}

    # The finished run started again with another logging interval: not the same command
    # (which would be answered from its files, nothing read or written), so it evaluates
    # and writes metrics.json again (all_damaged: another interval again).
    again = [*flags, "--log_interval=5"]

    cases = [
        {"name": "first", "args": flags,
         "faults": [{"at": "step", "step": 12, "signal": "SIGINT"}]},
        {"name": "truncated_data", "args": flags, "before": [
            {"truncate": str(run / "ckpt-12.data-00000-of-00001")}],
         "faults": [{"at": "step", "step": 14, "signal": "SIGINT"}]},
        {"name": "corrupted_index", "args": flags, "before": [
            {"corrupt": str(run / "ckpt-14.index")}],
         "faults": [{"at": "save", "step": 15, "fill": str(small_disk)}]},
        {"name": "space_freed", "args": flags, "before": [record("disk_full"),
                                                          {"remove": filler}]},
        {"name": "metrics_disk_full", "args": again, "before": [
            {"copy": str(run / "metrics.json"), "to": str(notes / "copy_metrics_before.json")}],
         "faults": [{"at": "write", "name": "metrics.json", "fill": str(small_disk)}]},
        {"name": "metrics_space_freed", "args": again, "before": [
            record("metrics_full"), {"copy": str(run / "metrics.json"),
                                     "to": str(notes / "copy_metrics_after_failure.json")},
            {"remove": filler}]},
        {"name": "all_damaged", "args": [*flags, "--log_interval=4"], "before": [
            # The finished run's last checkpoint, kept for the comparison.
            {"copy": str(run / "ckpt-30.index"), "to": str(notes / "ckpt-30.index")},
            {"copy": str(run / "ckpt-30.data-00000-of-00001"),
             "to": str(notes / "ckpt-30.data-00000-of-00001")},
            {"corrupt": str(run / "ckpt-25.index")},
            {"truncate": str(run / "ckpt-30.data-00000-of-00001")}, record("all_damaged")]},
    ]
    code, results, err = run_child(cases)
    assert code == 0, err[-3000:]
    listings = {p.stem: json.loads(p.read_text()) for p in notes.glob("*.json")
                if not p.stem.startswith("copy_")}
    return dict(run=run, results=results, notes=notes, listings=listings, disk=small_disk)


def _last_line(results, name):
    return results[name][1].strip().splitlines()[-1]


@pytest.mark.slow
def test_damaged_newest_checkpoint_is_named_and_the_run_resumes_from_the_previous(damaged_run):
    results, run = damaged_run["results"], damaged_run["run"]
    assert results["first"][0] == 130
    code, err = results["truncated_data"]
    assert code == 130, err[-2000:]
    assert (f"{run}/ckpt-12.data-00000-of-00001 is damaged" in err
            and "resuming from the newest good checkpoint, ckpt-10" in err), err[-2000:]
    assert f"resuming {run} at step 10" in err
    code, err = results["corrupted_index"]
    assert f"{run}/ckpt-14.index is damaged" in err, err[-2000:]
    assert f"resuming {run} at step 10" in err
    # Set aside, not deleted.
    listing = damaged_run["listings"]["disk_full"]
    assert {"ckpt-12.index.damaged", "ckpt-12.data-00000-of-00001.damaged",
            "ckpt-14.index.damaged"} <= set(listing)


@pytest.mark.slow
def test_full_disk_at_a_checkpoint_stops_with_one_line_and_keeps_the_last_good_one(damaged_run):
    results, run = damaged_run["results"], damaged_run["run"]
    code, err = results["corrupted_index"]
    assert code == 1
    line = _last_line(results, "corrupted_index")
    assert line.startswith(f"error: cannot write {run}/ckpt-15: No space left on device"), line
    assert "run the same command again to resume" in line and "Traceback" not in err
    listing = damaged_run["listings"]["disk_full"]
    assert "ckpt-10.index" in listing and "ckpt-10.data-00000-of-00001" in listing
    assert not [n for n in listing if n.startswith("ckpt-15")], listing
    assert not [n for n in listing if ".tmp" in n or "_temp" in n], listing
    assert ".lock" not in listing  # released
    code, err = results["space_freed"]
    assert code == 0, err[-2000:]
    assert f"resuming {run} at step 10" in err


@pytest.mark.slow
def test_full_disk_at_metrics_keeps_the_old_file_and_a_rerun_writes_it(damaged_run,
                                                                       reference_run):
    results, run, notes = damaged_run["results"], damaged_run["run"], damaged_run["notes"]
    code, err = results["metrics_disk_full"]
    assert code == 1
    line = _last_line(results, "metrics_disk_full")
    assert line.startswith(f"error: cannot write {run}/metrics.json: No space left on device")
    before = (notes / "copy_metrics_before.json").read_bytes()
    assert (notes / "copy_metrics_after_failure.json").read_bytes() == before
    assert not [n for n in damaged_run["listings"]["metrics_full"] if ".tmp" in n]
    code, err = results["metrics_space_freed"]
    assert code == 0, err[-2000:]
    assert (run / "metrics.json").read_bytes() == before
    assert json.loads(before) == json.loads((reference_run / "metrics.json").read_text())
    assert_same_checkpoint(notes / f"ckpt-{STEPS}", reference_run / f"ckpt-{STEPS}")


@pytest.mark.slow
def test_every_checkpoint_damaged_is_one_clear_error_and_nothing_is_touched(damaged_run):
    results, run = damaged_run["results"], damaged_run["run"]
    code, err = results["all_damaged"]
    assert code == 1
    line = _last_line(results, "all_damaged")
    assert line.startswith(f"error: --model_dir={run}: every checkpoint is damaged (")
    assert "ckpt-30.data-00000-of-00001 is damaged" in line and "ckpt-25.index is damaged" in line
    assert line.endswith("pass --overwrite to start over (or restore the files)")
    names = set(os.listdir(run))
    assert {"ckpt-25.index", "ckpt-30.index", "ckpt-30.data-00000-of-00001"} <= names
    assert not leftovers(run)
