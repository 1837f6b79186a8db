"""Downloads of named datasets, served by a local HTTP server (no network)."""

import dataclasses
import errno
import functools
import hashlib
import http.server
import io
import os
import socket
import threading
import types
import zipfile

import numpy as np
import pytest

import data_utils
from data_utils import SOURCES, DataError, ensure_raw_files

FILES = {"train": b"a b c\nd e\n" * 50, "valid": b"a b\nc\n" * 20, "test": b"e d\n" * 30}


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """(directory served, base URL, list of requested paths); stopped after the test."""
    root = tmp_path / "served"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}", httpd.requests
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _zip(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted({m.rsplit("/", 1)[0] + "/" for m in members if "/" in m}):
            z.writestr(name, b"")  # directory entries, as in the real archives
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _wikitext_like(served, base, urls=None, corrupt_checksum=False):
    """A small wikitext-2-v1.zip served locally, and a table pointing to it."""
    archive = _zip({f"wikitext-2/wiki.{s}.tokens": data for s, data in FILES.items()})
    (served / "wikitext-2-v1.zip").write_bytes(archive)
    spec = dataclasses.replace(
        SOURCES["wikitext2"], urls=tuple(urls or [f"{base}/wikitext-2-v1.zip"]),
        archive_checksum=_sha256(b"other" if corrupt_checksum else archive),
        file_checksums=types.MappingProxyType(
            {f"wiki.{s}.tokens": _sha256(d) for s, d in FILES.items()}),
        shipped="")  # not the real files: nothing shipped
    return {"wikitext2": spec}


def _leftovers(directory):
    """Temporaries (run_dir.atomic_output's, and the `.part-<pid>` of older versions)."""
    return [f for _, _, fs in os.walk(directory) for f in fs if ".part-" in f or ".tmp-" in f]


def test_download_extract_reuse(tmp_path, server):
    served, base, requests = server
    # The first mirror is missing (404): the second one is used.
    sources = _wikitext_like(served, base, urls=[f"{base}/gone.zip", f"{base}/wikitext-2-v1.zip"])
    raw = tmp_path / "raw"
    found = ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert requests == ["/gone.zip", "/wikitext-2-v1.zip"]
    for split, data in FILES.items():
        assert found[split].path == str(raw / "wikitext-2" / f"wiki.{split}.tokens")
        assert open(found[split].path, "rb").read() == data
    assert (raw / "wikitext-2-v1.zip").exists() and _leftovers(raw) == []
    ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert len(requests) == 2  # present files are used, nothing downloaded again
    os.remove(found["valid"].path)
    ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert len(requests) == 2 and open(found["valid"].path, "rb").read() == FILES["valid"]


def test_checksum_mismatch_removes_download(tmp_path, server):
    served, base, _ = server
    sources = _wikitext_like(served, base, corrupt_checksum=True)
    raw = tmp_path / "raw"
    with pytest.raises(DataError, match="failed verification: .*checksum mismatch .*removed"):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert not (raw / "wikitext-2-v1.zip").exists() and _leftovers(raw) == []


def test_a_download_that_cannot_be_written_is_refused_before_the_network(
        tmp_path, server, monkeypatch):
    served, base, requests = server
    sources = _wikitext_like(served, base)
    raw = tmp_path / "raw"
    raw.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # no permission (even root)
    with pytest.raises(DataError) as e:
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert str(e.value) == (
        f"cannot write {raw / 'wikitext-2-v1.zip'} (the raw files: DATA_DIR or --data_dir): "
        f"Permission denied (EACCES); choose a place you can write, or fix the permissions of "
        f"{raw}")
    assert requests == [] and os.listdir(raw) == []


def test_a_failed_rename_leaves_neither_the_download_nor_a_temporary(
        tmp_path, server, monkeypatch):
    served, base, _ = server
    sources = _wikitext_like(served, base)
    raw = tmp_path / "raw"

    def replace(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(DataError, match=r"cannot write .*wikitext-2-v1\.zip \(the raw files: "
                                        r"DATA_DIR or --data_dir\): No space left on device "
                                        r"\(ENOSPC\); free some space$"):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert os.listdir(raw) == []


def test_no_network(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/wikitext-2-v1.zip"
    sources = {"wikitext2": dataclasses.replace(SOURCES["wikitext2"], urls=(url,), shipped="")}
    raw = tmp_path / "raw"
    with pytest.raises(DataError) as e:
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    message = str(e.value)
    assert "no network?" in message and url in message and "refused" in message
    assert f"by hand from {url} and put it at {raw / 'wikitext-2-v1.zip'}" in message
    assert _leftovers(raw) == []


def test_hand_placed_archive_and_bad_files(tmp_path, server):
    served, base, requests = server
    sources = _wikitext_like(served, base)
    raw = tmp_path / "raw"
    (raw / "wikitext-2").mkdir(parents=True)
    (raw / "wikitext-2" / "wikitext-2-v1.zip").write_bytes(
        (served / "wikitext-2-v1.zip").read_bytes())
    ensure_raw_files("wikitext2", str(raw), download_missing=False, sources=sources)
    assert requests == []
    (raw / "wikitext-2" / "wiki.test.tokens").write_bytes(b"edited\n")
    with pytest.raises(DataError, match="wiki.test.tokens has sha256:.* not the official file"):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    # An archive whose member does not match the known file checksum.
    os.remove(raw / "wikitext-2" / "wiki.test.tokens")
    bad = dict(sources["wikitext2"].file_checksums, **{"wiki.test.tokens": _sha256(b"x")})
    sources = {"wikitext2": dataclasses.replace(
        sources["wikitext2"], file_checksums=types.MappingProxyType(bad))}
    with pytest.raises(DataError, match="wiki.test.tokens extracted from .* expected sha256:"):
        ensure_raw_files("wikitext2", str(raw), sources=sources)
    assert not (raw / "wikitext-2" / "wiki.test.tokens").exists() and _leftovers(raw) == []


def test_missing_without_download(tmp_path):
    sources = {"wikitext2": dataclasses.replace(SOURCES["wikitext2"], shipped="")}
    with pytest.raises(DataError, match="wiki.train.tokens is missing; put the files there"):
        ensure_raw_files("wikitext2", str(tmp_path), download_missing=False, sources=sources)


def test_build_enwik8_like_from_download(tmp_path, server):
    """A named byte-level dataset: downloaded, split by byte ranges, built."""
    served, base, _ = server
    data = bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8))
    archive = _zip({"enwik8": data})
    (served / "enwik8.zip").write_bytes(archive)
    spec = dataclasses.replace(
        SOURCES["enwik8"], urls=(f"{base}/enwik8.zip",), archive_checksum=_sha256(archive),
        file_checksums=types.MappingProxyType(
            {"enwik8": "md5:" + hashlib.md5(data).hexdigest()}),
        splits=types.MappingProxyType({"train": ("enwik8", 0, 200), "valid": ("enwik8", 200, 250),
                                       "test": ("enwik8", 250, 300)}))
    config = data_utils.BuildConfig.for_dataset(
        "enwik8", data_dir=str(tmp_path / "raw"), output_dir=str(tmp_path / "out"),
        batch_size=2, eval_batch_size=1, seq_len=4, shards=2)
    meta = data_utils.build_dataset(config, sources={"enwik8": spec})
    assert [meta["splits"][s]["bytes"] for s in ("train", "valid", "test")] == [200, 50, 50]
    assert meta["tokenizer"]["kind"] == "byte" and meta["vocab_size"] == 256
    tok = data_utils.load_tokenizer(str(tmp_path / "out"))
    xs = [x.numpy() for x, _ in data_utils.make_dataset(str(tmp_path / "out"), "valid")]
    row = np.concatenate([x[0] for x in xs])
    assert tok.decode_bytes(row) == data[200:200 + len(row)]


def test_real_tables(wikitext2_root):
    lengths = {"sha256": 64, "md5": 32, "sha1": 40}
    for name, spec in SOURCES.items():
        checksums = [spec.archive_checksum, *spec.file_checksums.values()]
        for checksum in checksums:
            algorithm, _, hexdigest = checksum.partition(":")
            assert len(hexdigest) == lengths[algorithm], (name, checksum)
        assert sorted(spec.splits) == ["test", "train", "valid"]
        assert all(f in spec.members for f, _, _ in spec.splits.values())
        assert spec.urls and all(u.endswith(spec.archive) for u in spec.urls)
    # The WikiText-2 copy on this machine is the official one (checked, not downloaded).
    found = ensure_raw_files("wikitext2", str(wikitext2_root), download_missing=False)
    assert found["train"].size() == 10797148
    assert sorted(data_utils.DATASETS) == sorted(list(SOURCES) + ["text"])


def test_built_from_another_data_dir_is_up_to_date_without_download(tmp_path, server):
    """`DATA_DIR=x ./create_tfrecords.sh` then plain `./create_tfrecords.sh`: no download."""
    served, base, requests = server
    data = b"some words here\nand more words\n" * 40
    archive = _zip({"enwik8": data})
    (served / "enwik8.zip").write_bytes(archive)
    spec = dataclasses.replace(
        SOURCES["enwik8"], urls=(f"{base}/enwik8.zip",), archive_checksum=_sha256(archive),
        file_checksums=types.MappingProxyType({"enwik8": _sha256(data)}),
        splits=types.MappingProxyType({"train": ("enwik8", 0, 800), "valid": ("enwik8", 800, 1000),
                                       "test": ("enwik8", 1000, 1240)}))
    sources = {"enwik8": spec}

    def config(data_dir, **overrides):
        values = dict(data_dir=str(data_dir), output_dir=str(tmp_path / "out"), batch_size=2,
                      eval_batch_size=1, seq_len=4)
        return data_utils.BuildConfig.for_dataset("enwik8", **dict(values, **overrides))

    meta = data_utils.build_dataset(config(tmp_path / "first"), sources=sources)
    assert "up_to_date" not in meta and requests == ["/enwik8.zip"]
    elsewhere = tmp_path / "default_raw"
    again = data_utils.build_dataset(config(elsewhere), sources=sources)
    assert again["up_to_date"] and again["splits"] == meta["splits"]
    assert requests == ["/enwik8.zip"] and not elsewhere.exists()
    # Other settings are refused before anything is fetched, too.
    with pytest.raises(DataError, match="already holds a different build .*differs in seq_len"):
        data_utils.build_dataset(config(elsewhere, seq_len=3), sources=sources)
    assert requests == ["/enwik8.zip"] and not elsewhere.exists()
    # And --overwrite does fetch (the raw files are needed to rebuild).
    rebuilt = data_utils.build_dataset(config(elsewhere, seq_len=3, overwrite=True),
                                       sources=sources)
    assert rebuilt["seq_len"] == 3 and requests == ["/enwik8.zip"] * 2
