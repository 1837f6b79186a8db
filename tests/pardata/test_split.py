"""One text file: valid and test split off its end, recorded in meta.json."""

import os
import subprocess
import sys

import pytest

import data_utils
from data_utils import BuildConfig, DataError
from pardata import build
from pardata.split import DEFAULT_FRACTION, split_file

LINES = [f"line {i} says {'ab ' * (i % 4)}something" for i in range(1, 401)]


def _write(tmp_path, lines=LINES, last_newline=False):
    path = tmp_path / "all.txt"
    path.write_text("\n".join(lines) + ("\n" if last_newline else ""), encoding="utf-8")
    return path


def _config(tmp_path, path, **overrides):
    values = dict(train_file=str(path), output_dir=str(tmp_path / "out"), batch_size=2,
                  eval_batch_size=2, seq_len=4)
    values.update(overrides)
    return BuildConfig.for_dataset("text", **values)


@pytest.mark.parametrize("last_newline", [False, True])
def test_split_file_cuts_at_line_ends(tmp_path, last_newline):
    path = _write(tmp_path, last_newline=last_newline)
    sources, info = split_file(str(path), 0.05)
    data = path.read_bytes()
    pieces = {s: data[src.start:src.stop] for s, src in sources.items()}
    assert b"".join(pieces.values()) == data
    # 400 lines: 20 each for valid and test, the last ones, in order.
    assert info == {"file": str(path), "fraction": 0.05, "lines": {
        "train": [1, 360], "valid": [361, 380], "test": [381, 400]}}
    expected = {"train": LINES[:360], "valid": LINES[360:380], "test": LINES[380:]}
    for split, lines in expected.items():
        assert pieces[split].decode().splitlines() == lines


def test_one_file_builds_and_meta_records_the_split(tmp_path):
    path = _write(tmp_path)
    meta = data_utils.build_dataset(_config(tmp_path, path))
    assert DEFAULT_FRACTION == 0.05
    assert meta["split"] == {"file": str(path), "fraction": 0.05, "lines": {
        "train": [1, 360], "valid": [361, 380], "test": [381, 400]}}
    assert [meta["splits"][s]["lines"] for s in build.SPLITS] == [360, 20, 20]
    assert sum(meta["splits"][s]["bytes"] for s in build.SPLITS) == os.path.getsize(path)
    assert data_utils.load_meta(str(tmp_path / "out"))["split"] == meta["split"]
    # The same command again is up to date; another fraction is another build.
    assert data_utils.build_dataset(_config(tmp_path, path))["up_to_date"]
    with pytest.raises(DataError, match="already holds a different build .*differs in raw files"):
        data_utils.build_dataset(_config(tmp_path, path, split_fraction=0.1))
    meta = data_utils.build_dataset(_config(tmp_path, path, split_fraction=0.1, overwrite=True))
    assert meta["split"]["lines"] == {"train": [1, 320], "valid": [321, 360],
                                      "test": [361, 400]}


def test_builds_from_three_files_have_no_split(tmp_path):
    path = _write(tmp_path)
    meta = data_utils.build_dataset(_config(tmp_path, path, valid_file=str(path),
                                            test_file=str(path)))
    assert "split" not in meta


def test_errors_leave_nothing(tmp_path):
    for overrides, message in (
            (dict(valid_file="v.txt"), "--valid_file and --test_file go together"),
            (dict(split_fraction=0.5), r"--split_fraction must be in \(0, 0.5\)"),
            (dict(split_fraction=0.0), r"--split_fraction must be in \(0, 0.5\)"),
            (dict(valid_file="v.txt", test_file="t.txt", split_fraction=0.1),
             "--split_fraction applies to a --train_file without"),
            (dict(train_file=""), "--dataset=text needs --train_file")):
        with pytest.raises(DataError, match=message):
            _config(tmp_path, "all.txt", **overrides)
    short = _write(tmp_path, LINES[:2])
    with pytest.raises(DataError, match=f"^--train_file={short} has 2 line\\(s\\), too few to "
                                        "split off valid and test"):
        data_utils.build_dataset(_config(tmp_path, short))
    assert sorted(os.listdir(tmp_path)) == ["all.txt"]


def test_cli_error_is_one_line(tmp_path, project_root):
    short = _write(tmp_path, LINES[:2])
    done = subprocess.run([sys.executable, "build_data.py", "--dataset=text",
                           f"--train_file={short}", f"--output_dir={tmp_path / 'out'}"],
                          cwd=project_root, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"error: --train_file={short} has 2 line(s), too few to split off valid and test (1 "
        "line(s) each, --split_fraction=0.05) and keep one to train on; give a longer text, "
        "or the splits as --valid_file and --test_file"]
    assert sorted(os.listdir(tmp_path)) == ["all.txt"]
