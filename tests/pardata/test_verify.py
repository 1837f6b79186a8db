"""verify_built: every shard's size and sha256 against meta.json, before training."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import data_utils
from data_utils import DataError

TEXT = "".join(f"line {i} has some words {'x' * (i % 3)} and more words\n" for i in range(80))
FLAGS = dict(tokenizer="word", batch_size=2, eval_batch_size=1, seq_len=4, shards=2)
FIX = (r"rebuild it with the command that built it plus --overwrite "
       r"\(./create_tfrecords.sh text ... --overwrite\)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny word-level build, two shards per split."""
    root = tmp_path_factory.mktemp("verify")
    files = {}
    for split in ("train", "valid", "test"):
        files[f"{split}_file"] = str(root / f"{split}.txt")
        (root / f"{split}.txt").write_text(TEXT if split == "train" else TEXT[:900])
    config = data_utils.BuildConfig.for_dataset("text", output_dir=str(root / "out"),
                                                **files, **FLAGS)
    return root / "out", data_utils.build_dataset(config), files


def _copy(built, tmp_path):
    return shutil.copytree(built[0], tmp_path / "copy")


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def test_every_split_and_shard_is_checked(built, tmp_path):
    d = _copy(built, tmp_path)
    meta = json.loads((d / "meta.json").read_text())
    assert data_utils.verify_built(str(d)) == meta
    assert all(len(meta["splits"][s]["shards"]) == 2 for s in meta["splits"])
    for split in ("train", "valid", "test"):
        shard = d / meta["splits"][split]["shards"][-1]
        good = shard.read_bytes()
        _flip(shard)
        assert shard.stat().st_size == len(good)  # same size: only the sha256 can tell
        with pytest.raises(DataError, match=f"^shard {shard} is corrupted \\(sha256 differs "
                                            f"from meta.json\\); {FIX}$"):
            data_utils.verify_built(str(d), meta)
        others = tuple(s for s in meta["splits"] if s != split)
        assert data_utils.verify_built(str(d), meta, splits=others) == meta
        shard.write_bytes(good)
    assert data_utils.verify_built(str(d), meta) == meta


def test_truncated_missing_and_no_meta(built, tmp_path):
    d = _copy(built, tmp_path)
    shard = d / built[1]["splits"]["test"]["shards"][0]
    shard.write_bytes(shard.read_bytes()[:-3])
    with pytest.raises(DataError, match=f"^shard {shard} is truncated or modified .*; {FIX}$"):
        data_utils.verify_built(str(d))
    shard.unlink()
    with pytest.raises(DataError, match=f"^shard {shard} is missing .*; {FIX}$"):
        data_utils.verify_built(str(d))
    (d / "meta.json").unlink()
    with pytest.raises(DataError, match="meta.json not found"):
        data_utils.verify_built(str(d))
    with pytest.raises(DataError, match="unknown split 'dev'"):
        data_utils.verify_built(str(built[0]), splits=("dev",))


def test_checks_need_no_tensorflow(project_root):
    """build_data.py judges an existing build without the seconds TensorFlow costs."""
    script = ("import sys, pardata.meta, pardata.build, pardata.downloads\n"
              "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], cwd=project_root,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def _cli(built, project_root, *extra):
    flags = [f"--{k}={v}" for k, v in dict(built[2], **FLAGS).items()]
    return subprocess.run([sys.executable, "build_data.py", "--dataset=text",
                           f"--output_dir={built[0]}", *flags, *extra], cwd=project_root,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_build_data_reports_a_corrupted_build(built, project_root, tmp_path):
    """Re-running the build on a damaged build: exit 1 and the fix, nothing rebuilt."""
    result = _cli(built, project_root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"in {built[0]}: up to date" in result.stdout
    shard = built[0] / built[1]["splits"]["valid"]["shards"][1]
    good = shard.read_bytes()
    try:
        _flip(shard)
        damaged = shard.read_bytes()
        result = _cli(built, project_root)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.strip().splitlines()[-1] == (
            f"error: {built[0]} holds this build but it is damaged: shard {shard} is corrupted "
            "(sha256 differs from meta.json); rebuild it with the command that built it plus "
            "--overwrite (./create_tfrecords.sh text ... --overwrite)")
        assert shard.read_bytes() == damaged
    finally:
        shard.write_bytes(good)
    # The troubleshooting page quotes both messages as printed.
    page = (project_root / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    message = result.stderr.strip().splitlines()[-1].replace(str(shard), "F").replace(
        str(built[0]), "D").replace("create_tfrecords.sh text", "create_tfrecords.sh DATASET")
    assert f"| `{message}` |" in page
    in_train = "error: --data_dir=D: " + message.split(" damaged: ", 1)[1]
    assert f"| `{in_train}` |" in page


@pytest.mark.slow
def test_train_refuses_a_corrupt_valid_shard_before_step_1(built, project_root, tmp_path):
    d = _copy(built, tmp_path)
    shard = d / built[1]["splits"]["valid"]["shards"][0]
    _flip(shard)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", f"--data_dir={d}", f"--model_dir={run_dir}",
         "--preset=tiny", "--max_steps=2"], cwd=project_root, capture_output=True, text=True,
        timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --data_dir={d}: shard {shard} is corrupted (sha256 differs from meta.json); "
        "rebuild it with the command that built it plus --overwrite (./create_tfrecords.sh text "
        "... --overwrite)")
    assert not run_dir.exists()  # nothing written, no step spent
