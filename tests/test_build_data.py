"""Building datasets: bad input, atomic output, the CLI and create_tfrecords.sh."""

import collections
import errno
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import data_utils
from data_utils import BuildConfig, DataError
from pardata import build, records
from pardata.text import Heartbeat

TEXT = "".join(f"line {i} has some words {'x' * (i % 3)} and more words\n" for i in range(60))


def _files(tmp_path, train=TEXT, valid=TEXT[:600], test=TEXT[:600]):
    paths = {}
    for split, content in (("train", train), ("valid", valid), ("test", test)):
        path = tmp_path / f"{split}.txt"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        paths[f"{split}_file"] = str(path)
    return paths


def _config(tmp_path, out="out", files=None, **overrides):
    values = dict(files or _files(tmp_path), output_dir=str(tmp_path / out), tokenizer="word",
                  batch_size=2, eval_batch_size=1, seq_len=4)
    values.update(overrides)
    return BuildConfig.for_dataset("text", **values)


def _listing(directory):
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def test_config_errors_name_the_flag(tmp_path):
    for bad, flag in ((dict(batch_size=0), "--batch_size"), (dict(seq_len=0), "--seq_len"),
                      (dict(eval_batch_size=-1), "--eval_batch_size"),
                      (dict(tokenizer="sentencepiece", vocab_size=0), "--vocab_size"),
                      (dict(tokenizer="byte", lowercase=True), "--lowercase"),
                      (dict(train_file=""), "--train_file")):
        with pytest.raises(DataError, match=flag):
            _config(tmp_path, **bad)
    with pytest.raises(DataError, match="--dataset"):
        BuildConfig.for_dataset("wikitext3")


def test_missing_and_empty_input(tmp_path):
    config = _config(tmp_path, valid_file=str(tmp_path / "nope.txt"))
    with pytest.raises(DataError, match=f"{tmp_path / 'nope.txt'} does not exist; check "
                                        f"--valid_file"):
        data_utils.build_dataset(config)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="empty.txt is empty; check --test_file"):
        data_utils.build_dataset(_config(tmp_path, test_file=str(tmp_path / "empty.txt")))
    assert _listing(tmp_path / "out") == []


def test_output_dir_and_input_must_be_what_they_say(tmp_path, monkeypatch):
    """A file as --output_dir, a directory as --train_file: one error before any work."""
    notes = tmp_path / "notes.md"
    notes.write_text("mine")
    monkeypatch.setattr(build, "train_tokenizer", None)  # any work would fail
    for output_dir, problem in ((notes, "is an existing file, not a directory"),
                                (notes / "out", f"cannot be created \\({notes} is a file\\)")):
        with pytest.raises(DataError, match=f"^--output_dir={output_dir} {problem}; choose a "
                                            r"directory for the build \(default: data/text\)$"):
            data_utils.build_dataset(_config(tmp_path, out=str(output_dir)))
    assert notes.read_text() == "mine"
    (tmp_path / "texts").mkdir()
    with pytest.raises(DataError, match=f"^input file {tmp_path / 'texts'} is a directory, not "
                                        "a text file; pass the text file itself to "
                                        "--train_file$"):
        data_utils.build_dataset(_config(tmp_path, train_file=str(tmp_path / "texts")))
    assert _listing(tmp_path) == ["notes.md", "test.txt", "texts", "train.txt", "valid.txt"]


def test_non_utf8_input(tmp_path):
    bad = TEXT.encode()[:200] + b"caf\xe9 latin-1\n" + TEXT.encode()[200:]
    for tokenizer, extra in (("word", {}), ("sentencepiece", dict(vocab_size=40))):
        config = _config(tmp_path, files=_files(tmp_path, train=bad), tokenizer=tokenizer,
                         **extra)
        line = bad[:203].count(b"\n") + 1  # the byte after "caf"
        with pytest.raises(
            DataError, match=rf"train.txt is not valid UTF-8 \(line {line}, byte 203"
        ):
            data_utils.build_dataset(config)
    meta = data_utils.build_dataset(_config(tmp_path, files=_files(tmp_path, train=bad),
                                            tokenizer="byte"))
    assert meta["splits"]["train"]["ids"] == len(bad) and meta["vocab_size"] == 256


def test_vocab_too_large(tmp_path):
    distinct = len(set(TEXT.split())) + 2  # with <eos> and <unk>
    with pytest.raises(DataError, match=f"--vocab_size=500 is larger than the {distinct} distinct"):
        data_utils.build_dataset(_config(tmp_path, vocab_size=500))
    with pytest.raises(DataError, match="--vocab_size=5000 is too large .* at most"):
        data_utils.build_dataset(_config(tmp_path, tokenizer="sentencepiece", vocab_size=5000))


def test_split_too_small(tmp_path):
    config = _config(tmp_path, files=_files(tmp_path, valid="two words\n"))
    with pytest.raises(DataError, match="split valid .* has 3 ids, too few for one record of "
                                        "1 x 5 ids; lower --eval_batch_size or --seq_len"):
        data_utils.build_dataset(config)
    assert _listing(tmp_path / "out") == []
    # A failing --overwrite leaves the previous build as it was.
    meta = data_utils.build_dataset(_config(tmp_path, out="old"))
    with pytest.raises(DataError, match="too few for one record"):
        data_utils.build_dataset(_config(tmp_path, out="old", seq_len=400, overwrite=True))
    assert data_utils.load_meta(str(tmp_path / "old")) == meta


def test_output_dir_refuses_other_build_and_rebuilds(tmp_path):
    meta = data_utils.build_dataset(_config(tmp_path))
    assert "up_to_date" not in meta
    shard = tmp_path / "out" / meta["splits"]["train"]["shards"][0]
    mtime = shard.stat().st_mtime_ns
    assert data_utils.build_dataset(_config(tmp_path))["up_to_date"]
    assert shard.stat().st_mtime_ns == mtime  # nothing rewritten
    # A damaged build is reported with the fix, not rebuilt behind the user's back.
    good = shard.read_bytes()
    shard.write_bytes(good[:10] + bytes([good[10] ^ 1]) + good[11:])
    with pytest.raises(DataError, match=f"{tmp_path / 'out'} holds this build but it is damaged: "
                                        f"shard {shard} is corrupted .*plus --overwrite "
                                        r"\(./create_tfrecords.sh text ... --overwrite\)"):
        data_utils.build_dataset(_config(tmp_path))
    assert shard.read_bytes() != good  # left as it was
    shard.unlink()
    with pytest.raises(DataError, match=f"shard {shard} is missing"):
        data_utils.build_dataset(_config(tmp_path))
    assert "up_to_date" not in data_utils.build_dataset(_config(tmp_path, overwrite=True))
    assert shard.read_bytes() == good and data_utils.build_dataset(_config(tmp_path))["up_to_date"]
    with pytest.raises(DataError, match="already holds a different build .*differs in seq_len"
                                        r"\); pass --overwrite"):
        data_utils.build_dataset(_config(tmp_path, seq_len=3))
    (tmp_path / "out" / "notes.txt").write_text("mine")
    meta = data_utils.build_dataset(_config(tmp_path, seq_len=3, overwrite=True))
    assert meta["seq_len"] == 3 and data_utils.load_meta(str(tmp_path / "out"))["seq_len"] == 3
    assert (tmp_path / "out" / "notes.txt").exists()  # files not ours are left alone


def test_deterministic(tmp_path):
    a = data_utils.build_dataset(_config(tmp_path, out="a", tokenizer="sentencepiece",
                                         vocab_size=30))
    b = data_utils.build_dataset(_config(tmp_path, out="b", tokenizer="sentencepiece",
                                         vocab_size=30))
    assert a == b
    for name in _listing(tmp_path / "a"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_failed_build_leaves_nothing(tmp_path, monkeypatch, error):
    data_utils.build_dataset(_config(tmp_path))  # an old build, replaced below
    real = records.write_split

    def failing(directory, split, *args):
        if split == "test":
            created = args[-1]
            open(os.path.join(directory, "test-00000-of-00001.tfrecord.tmp"), "w").close()
            created.append(os.path.join(directory, "test-00000-of-00001.tfrecord.tmp"))
            raise error("disk full")
        return real(directory, split, *args)

    monkeypatch.setattr(records, "write_split", failing)
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(error):
        data_utils.build_dataset(_config(tmp_path, seq_len=3, overwrite=True))
    assert _listing(tmp_path / "out") == ["notes.txt"]


@pytest.mark.parametrize("failing", ["shard", "meta"])
def test_a_failed_write_is_one_line_and_leaves_no_temporary(tmp_path, monkeypatch, failing):
    out = tmp_path / "out"
    if failing == "shard":  # the disk fills while the training shard is written
        def full(ids):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(records, "serialize_record", full)
        name = "train-00000-of-00001.tfrecord"
    else:  # the last rename fails
        real = os.replace

        def replace(src, dst):
            if str(dst).endswith("meta.json"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), src)
            return real(src, dst)

        monkeypatch.setattr(os, "replace", replace)
        name = "meta.json"
    with pytest.raises(DataError) as caught:
        data_utils.build_dataset(_config(tmp_path))
    assert str(caught.value) == (
        f"cannot write {out}/{name} (in --output_dir={out}): No space left on device (ENOSPC); "
        "free some space; the partial build was removed")
    assert not out.exists()  # no file, no temporary, and not the directory it made


def test_a_build_removes_the_temporaries_a_killed_build_left(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    left = [".train-00000-of-00001.tfrecord.tmp-4194304-0a1b2c3d",
            ".meta.json.tmp-4194304-0a1b2c3d", "valid-tail.txt.tmp"]
    for name in left + [".notes.txt.tmp-4194304-0a1b2c3d", "notes.txt"]:
        (out / name).write_text("x")
    data_utils.build_dataset(_config(tmp_path))
    names = _listing(out)
    assert not set(left) & set(names)
    assert [n for n in names if "notes" in n or n.startswith(".")] == [
        ".notes.txt.tmp-4194304-0a1b2c3d", "notes.txt"]  # not the build's: left alone


def _run(args, cwd, env=None):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **(env or {})))


def test_cli_errors_are_one_line(tmp_path, project_root):
    (tmp_path / "notes.md").write_text("mine")
    for flags, message in (
            (["--seq_len=0"], "error: --seq_len must be >= 1"),
            # An output of their own: the default data/<dataset> may hold the user's build.
            (["--dataset=text", f"--train_file={tmp_path}/none.txt", "--valid_file=a",
              "--test_file=b", f"--output_dir={tmp_path}/out"],
             f"error: input file {tmp_path}/none.txt does not exist"),
            (["--dataset=text", f"--train_file={tmp_path}", "--valid_file=a", "--test_file=b",
              f"--output_dir={tmp_path}/out"],
             f"error: input file {tmp_path} is a directory, not a text file; pass the text "
             "file itself to --train_file"),
            ([f"--output_dir={tmp_path}/notes.md"],
             f"error: --output_dir={tmp_path}/notes.md is an existing file, not a directory; "
             "choose a directory for the build (default: data/wikitext2)")):
        for command in ([sys.executable, "build_data.py"], ["./create_tfrecords.sh"]):
            result = _run([*command, *flags], project_root)
            assert result.returncode == 1
            assert result.stderr.strip().splitlines() == [result.stderr.strip()]
            assert result.stderr.startswith(message) and "Traceback" not in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["notes.md"]


@pytest.mark.slow
def test_create_tfrecords_wikitext2_train(tmp_path, project_root, wikitext2_root):
    """The user's command on real WikiText-2; then ranking and round trip on train."""
    out = tmp_path / "wt2"
    result = _run(["./create_tfrecords.sh", "wikitext2", "--tokenizer=word",
                   f"--output_dir={out}"], project_root, env={"DATA_DIR": str(wikitext2_root)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train" in result.stdout and "2088628" in result.stdout
    meta, tok = data_utils.load_built(str(out))
    train = meta["splits"]["train"]
    assert (train["ids"], train["words"], meta["vocab_size"]) == (2088628, 2088628, 33278)
    assert (meta["batch_size"], meta["seq_len"], train["batch_size"]) == (32, 32, 32)
    # Frequency ranking against a Counter over the raw words.
    text = (wikitext2_root / "wikitext-2" / "wiki.train.tokens").read_text(encoding="utf-8")
    words = text.replace("\n", " <eos> ").split()
    counter = collections.Counter(words)
    counts = data_utils.unigram_counts(str(out))
    assert sorted(counter.values(), reverse=True) == counts.tolist()
    ranked = [tok.id_to_token(i) for i in range(50)]
    assert [counter[w] for w in ranked] == counts[:50].tolist()
    assert ranked[:3] == ["the", ",", "."]
    # Records read row by row give back the stream (minus the dropped tail):
    # the inputs of all rows, then the last target (rows share boundary ids).
    stream = np.array(tok.encode(text))
    xs = np.stack([x.numpy() for x, _ in data_utils.make_dataset(str(out), "train")])
    ys_last = [y.numpy()[:, -1] for _, y in data_utils.make_dataset(
        str(out), "train", skip_records=train["records"] - 1)]
    kept = np.append(xs.transpose(1, 0, 2).reshape(-1), ys_last[0][-1])
    np.testing.assert_array_equal(kept, stream[:kept.size])
    np.testing.assert_array_equal(ys_last[0][:-1], xs[0, 1:, 0])  # row b ends where b+1 starts
    assert len(stream) - kept.size == train["dropped_ids"] < 32 * 32


def test_heartbeat_logs_while_a_silent_call_runs(caplog):
    caplog.set_level("INFO")
    # Until the third beat (however busy the machine), then: no beat came sooner than
    # `interval` after the one before (the n-th at least n intervals after the start).
    start = time.monotonic()
    with Heartbeat("training x", interval=0.05) as beat:
        while len(caplog.records) < 3 and time.monotonic() < start + 60:
            time.sleep(0.01)
    elapsed = time.monotonic() - start
    beats = [r.getMessage() for r in caplog.records]
    assert 3 <= len(beats) <= elapsed / 0.05 and all(
        re.fullmatch(r"training x: still running, \d s", b) for b in beats)
    assert not beat._thread.is_alive()  # stopped with the block
    time.sleep(0.12)
    assert len(caplog.records) == len(beats)
    with pytest.raises(KeyError), Heartbeat("y", interval=0.05) as failing:
        raise KeyError("x")
    assert not failing._thread.is_alive()


def test_build_progress_is_logged(tmp_path, caplog):
    caplog.set_level("INFO")
    data_utils.build_dataset(_config(tmp_path, tokenizer="sentencepiece", vocab_size=30))
    messages = [r.getMessage() for r in caplog.records]
    train_file = tmp_path / "train.txt"
    assert messages[0] == (f"training sentencepiece tokenizer (30 pieces, unigram) on "
                           f"{train_file} ({train_file.stat().st_size / 1e6:.1f} MB)")
    steps = ["training sentencepiece tokenizer: done in", "tokenizing train: done in",
             "tokenizing valid: done in", "tokenizing test: done in",
             "writing train: done in", "writing valid: done in", "writing test: done in"]
    found = [next(i for i, m in enumerate(messages) if m.startswith(step)) for step in steps]
    assert found == sorted(found)  # one line per stage and split, in order
