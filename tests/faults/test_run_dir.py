"""runstore/run_dir.py: atomic writes, whole-line appends and temporaries, on a real full disk."""

import errno
import os
import subprocess

import pytest

from runstore import run_dir
from tests.helpers.faults import fill_disk, small_tmpfs


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KB tmpfs (skipped where mounting is not allowed)."""
    path = tmp_path / "disk"
    path.mkdir()
    with small_tmpfs(path, "256k"):
        yield path


def test_a_failed_atomic_write_keeps_the_old_file_and_names_the_path(tiny_disk):
    path = tiny_disk / "metrics.json"
    run_dir.atomic_write_json(path, {"old": 1})
    old = path.read_bytes()
    fill_disk(tiny_disk)
    with pytest.raises(run_dir.WriteError) as caught:
        run_dir.atomic_write_json(path, {"new": "x" * 100_000})
    assert str(caught.value).startswith(
        f"cannot write {path}: No space left on device (ENOSPC); the files written before are "
        "intact")
    assert caught.value.path == str(path)
    assert path.read_bytes() == old
    assert sorted(os.listdir(tiny_disk)) == ["filler", "metrics.json"]
    os.remove(tiny_disk / "filler")
    run_dir.atomic_write_json(path, {"new": 2})
    assert path.read_text() == '{\n  "new": 2\n}\n'


def test_a_failed_append_leaves_whole_lines(tiny_disk):
    from training.run.loop import read_training_log

    log = tiny_disk / "training_log.log"
    run_dir.append_line(log, "step=1 loss=2.5")
    fill_disk(tiny_disk)
    # The page the file already has still takes small appends; a long line
    # cannot fit, whatever part of it would.
    with pytest.raises(run_dir.WriteError, match="No space left on device"):
        for step in range(2, 10_000):
            run_dir.append_line(log, f"step={step} loss=2.5 " + "pad=1 " * 40)
    text = log.read_text()
    assert text.endswith("\n")
    rows = read_training_log(log)
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))


def test_the_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run(["true"], check=True)
    del dead
    (tmp_path / ".metrics.json.tmp-999999-0a1b2c3d").write_text("{")  # no such process
    (tmp_path / f".config.json.tmp-{os.getppid()}-0a1b2c3d").write_text("{")  # alive
    (tmp_path / "ckpt-20_temp").mkdir()
    (tmp_path / "ckpt-20_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (tmp_path / "checkpoint.tmp0123abcd").write_text("x")
    (tmp_path / "ckpt-15.index").write_bytes(b"keep")
    (tmp_path / "notes.tmp").write_text("the user's")
    removed = run_dir.remove_temporaries(tmp_path)
    assert sorted(removed) == [".metrics.json.tmp-999999-0a1b2c3d", "checkpoint.tmp0123abcd",
                               "ckpt-20_temp"]
    assert sorted(os.listdir(tmp_path)) == [f".config.json.tmp-{os.getppid()}-0a1b2c3d",
                                            "ckpt-15.index", "notes.tmp"]


def test_an_output_s_stale_temporaries_are_removed_and_no_other_file(tmp_path):
    """What an export killed mid-write left beside its output (serving/export.py)."""
    dead, alive = 999999, os.getppid()  # no such process; the test's parent
    for name in (f".lm.keras.tmp-{dead}-0a1b2c3d.keras", f".lm.keras.tmp-{alive}-0a1b2c3d.keras",
                 f".other.keras.tmp-{dead}-0a1b2c3d.keras", "lm.keras.tmp", "lm.keras"):
        (tmp_path / name).write_bytes(b"PK")
    (tmp_path / f".lm.keras.tmp-{dead}-1b2c3d4e").mkdir()  # a SavedModel's temporary
    removed = run_dir.remove_stale_temporaries(tmp_path / "lm.keras")
    assert sorted(removed) == [f".lm.keras.tmp-{dead}-0a1b2c3d.keras",
                               f".lm.keras.tmp-{dead}-1b2c3d4e"]
    assert sorted(os.listdir(tmp_path)) == [f".lm.keras.tmp-{alive}-0a1b2c3d.keras",
                                            f".other.keras.tmp-{dead}-0a1b2c3d.keras",
                                            "lm.keras", "lm.keras.tmp"]


def test_write_error_reason_names_the_errno():
    error = OSError(errno.EIO, os.strerror(errno.EIO))
    assert run_dir.reason(error) == "Input/output error (EIO)"
    assert str(run_dir.WriteError("a/b", "Input/output error (EIO)", "fix it")) == (
        "cannot write a/b: Input/output error (EIO); fix it")


def test_a_full_disk_under_tensorboard_is_a_write_error_naming_the_directory(tiny_disk):
    from training.report.tensorboard import TrainSummaries

    summaries = TrainSummaries(tiny_disk / "logs")
    summaries.scalars("train", 1, {"loss": 1.0})
    summaries.flush()
    fill_disk(tiny_disk)
    with pytest.raises(run_dir.WriteError) as caught:
        for step in range(2, 10_000):
            summaries.text(step, "sample", "x" * 2000)
            summaries.flush()
    assert str(caught.value).startswith(f"cannot write {tiny_disk / 'logs'} (TensorBoard "
                                        "events): No space left on device")
