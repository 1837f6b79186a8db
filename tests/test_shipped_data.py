"""WikiText-2 shipped in datasets/wikitext-2: its README, offline use, damage, the quick start."""

import dataclasses
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import sys

import pytest

import data_utils
from data_utils import SOURCES, DataError, ensure_raw_files
from pardata import downloads

SHIPPED = downloads.SHIPPED_ROOT
SPLITS = ("train", "valid", "test")


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(directory):
    return [f for _, _, fs in os.walk(directory) for f in fs if ".part-" in f]


def test_readme_matches_the_files_and_the_checksum_table(project_root):
    """The attribution README states what the files are; the code checks the same."""
    directory = project_root / "datasets" / "wikitext-2"
    readme = (directory / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA 3.0" in readme and "Merity" in readme and "arXiv:1609.07843" in readme
    rows = re.findall(r"^\| `(wiki\.(\w+)\.tokens)\.xz` \| (\d+) \| `([0-9a-f]{64})` \|",
                      readme, flags=re.M)
    assert [r[1] for r in rows] == list(SPLITS)
    compressed = []
    for name, split, size, digest in rows:
        data = lzma.decompress((directory / f"{name}.xz").read_bytes())
        assert (len(data), hashlib.sha256(data).hexdigest()) == (int(size), digest)
        assert SOURCES["wikitext2"].file_checksums[name] == f"sha256:{digest}"
        compressed.append(f"{(directory / f'{name}.xz').stat().st_size:,}")
    assert f"({' + '.join(compressed)} bytes)" in readme
    assert sorted(os.listdir(directory)) == sorted(["README.md"] + [f"{r[0]}.xz" for r in rows])


def test_used_offline_when_data_dir_is_empty(tmp_path, monkeypatch, wikitext2_root):
    def no_network(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(downloads, "download", no_network)
    raw = tmp_path / "raw"
    found = ensure_raw_files("wikitext2", str(raw))
    for split in SPLITS:
        path = raw / "wikitext-2" / f"wiki.{split}.tokens"
        assert found[split].path == str(path)
        assert path.read_bytes() == (wikitext2_root / "wikitext-2" / path.name).read_bytes()
    assert _leftovers(raw) == []
    # Present files are used as they are (checked, not unpacked again).
    mtime = (raw / "wikitext-2" / "wiki.valid.tokens").stat().st_mtime_ns
    ensure_raw_files("wikitext2", str(raw), download_missing=False)
    assert (raw / "wikitext-2" / "wiki.valid.tokens").stat().st_mtime_ns == mtime


def _only_valid_missing(tmp_path, wikitext2_root):
    raw = tmp_path / "raw"
    (raw / "wikitext-2").mkdir(parents=True)
    for split in ("train", "test"):
        name = f"wiki.{split}.tokens"
        os.symlink(wikitext2_root / "wikitext-2" / name, raw / "wikitext-2" / name)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    return raw, shipped, {"wikitext2": dataclasses.replace(SOURCES["wikitext2"],
                                                          shipped=str(shipped), urls=())}


def test_damaged_shipped_copy_leaves_nothing(tmp_path, wikitext2_root):
    raw, shipped, sources = _only_valid_missing(tmp_path, wikitext2_root)
    with open(os.path.join(SHIPPED, "wikitext-2", "wiki.valid.tokens.xz"), "rb") as f:
        good = f.read()
    target = raw / "wikitext-2" / "wiki.valid.tokens"
    (shipped / "wiki.valid.tokens.xz").write_bytes(good[:len(good) // 2])
    with pytest.raises(DataError, match=r"cannot decompress .*wiki.valid.tokens.xz .*the copy "
                                        r"shipped with the project is damaged: restore it"):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert not target.exists() and _leftovers(raw) == []
    # Valid xz, wrong content: the checksum catches it.
    (shipped / "wiki.valid.tokens.xz").write_bytes(lzma.compress(b"not wikitext\n"))
    with pytest.raises(DataError, match=r"wiki.valid.tokens.xz \(decompressed\) has sha256:.*, "
                                        "expected sha256:f0737ed3"):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert not target.exists() and _leftovers(raw) == []


def test_python_without_lzma(tmp_path, wikitext2_root, monkeypatch):
    raw, shipped, sources = _only_valid_missing(tmp_path, wikitext2_root)
    shutil.copy(os.path.join(SHIPPED, "wikitext-2", "wiki.valid.tokens.xz"), shipped)
    monkeypatch.setitem(sys.modules, "lzma", None)  # `import lzma` raises ImportError
    with pytest.raises(DataError, match=r"this Python has no lzma module .*unpack it by hand "
                                        r"\(xz -dc .*wiki.valid.tokens.xz > "):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert sorted(os.listdir(raw / "wikitext-2")) == ["wiki.test.tokens", "wiki.train.tokens"]


def _fresh_copy(src, dst):
    """The project as a fresh clone has it: no builds, runs, logs, caches or virtual
    environment (the README's install puts `.venv` inside the clone: gigabytes)."""
    skip_top = {".git", "data", "runs", "logs", "checkpoints", "models", ".pytest_cache",
                ".venv", "venv"}
    shutil.copytree(src, dst, ignore=lambda d, names: [
        n for n in names if n in ("__pycache__", ".ipynb_checkpoints")
        or (os.path.samefile(d, src) and n in skip_top)])


@pytest.mark.slow
def test_quick_start_data_step_offline(tmp_path, project_root):
    """`./create_tfrecords.sh` from a fresh copy: no DATA_DIR, no network, WikiText-2 built.

    Then: another (empty) DATA_DIR finds it up to date without fetching
    anything, and a corrupted shard is reported (exit 1), not rebuilt.
    """
    clone = tmp_path / "clone"
    _fresh_copy(project_root, clone)
    dead = "http://127.0.0.1:9"  # every download would fail: connection refused
    env = {k: v for k, v in os.environ.items() if k != "DATA_DIR"}
    env.update(http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead, HTTPS_PROXY=dead,
               no_proxy="", NO_PROXY="")

    def run(*args, **extra):
        return subprocess.run(["./create_tfrecords.sh", *args], cwd=clone, capture_output=True,
                              text=True, timeout=600, env=dict(env, **extra))

    result = run("--tokenizer=word")  # the quick start's data step (word: 3 s, not 20)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "decompressing" in result.stderr and "downloading" not in result.stderr
    assert "wikitext2 (word, vocab 33278, seq_len 32)" in result.stdout
    assert "2088628" in result.stdout and "built in" in result.stdout
    raw = clone / "data" / "raw" / "wikitext-2"
    for split in SPLITS:
        name = f"wiki.{split}.tokens"
        assert f"sha256:{_sha256(raw / name)}" == SOURCES["wikitext2"].file_checksums[name]
    assert _leftovers(clone / "data") == []
    out = clone / "data" / "wikitext2"
    meta = data_utils.verify_built(str(out))
    assert [meta["splits"][s]["ids"] for s in SPLITS] == [2088628, 217646, 245569]

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    result = run("--tokenizer=word", DATA_DIR=str(empty))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"in {out}: up to date" in result.stdout
    assert os.listdir(empty) == [] and "decompressing" not in result.stderr

    shard = out / meta["splits"]["valid"]["shards"][0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    result = run("--tokenizer=word")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {out} holds this build but it is damaged: shard {shard} is corrupted (sha256 "
        "differs from meta.json); rebuild it with the command that built it plus --overwrite "
        "(./create_tfrecords.sh wikitext2 ... --overwrite)")
    assert shard.read_bytes() == bytes(data)  # reported, not rebuilt
