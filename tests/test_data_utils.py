"""Tokenizers, frequency ranking, context batching and reading records back.

References are recomputed independently: Counter-based vocabularies, explicit
index formulas for where every id of the stream must land.
"""

import collections
import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import data_utils
from data_utils import DataError
from pardata.build import encode_split
from pardata.text import SplitSource
from pardata.tokenizers import load_tokenizer_files


def _reference_word_ids(text):
    """Word stream of WikiText-style text, ranked by (-count, first position)."""
    stream = []
    for line in text.split("\n")[:-1]:
        stream.extend(line.split())
        stream.append("<eos>")
    counts = collections.Counter(stream)
    first = {}
    for k, w in enumerate(stream):
        first.setdefault(w, k)
    vocab = sorted(counts, key=lambda w: (-counts[w], first[w]))
    if "<unk>" not in counts:
        vocab.append("<unk>")
    index = {w: i for i, w in enumerate(vocab)}
    return np.array([index[w] for w in stream]), vocab


@pytest.fixture(scope="module")
def built(tmp_path_factory, wikitext2_root):
    """Word-level build with train = WikiText-2 valid, valid = test, 3 shards."""
    wt2 = wikitext2_root / "wikitext-2"
    out = tmp_path_factory.mktemp("built") / "wt2"
    config = data_utils.BuildConfig(
        dataset="text", output_dir=str(out), train_file=str(wt2 / "wiki.valid.tokens"),
        valid_file=str(wt2 / "wiki.test.tokens"), test_file=str(wt2 / "wiki.valid.tokens"),
        tokenizer="word", batch_size=8, eval_batch_size=4, seq_len=128, shards=3)
    meta = data_utils.build_dataset(config)
    return out, meta, wt2


def _all_batches(ds):
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
    return np.stack(xs), np.stack(ys)


def test_rank_by_frequency_matches_brute_force():
    rng = np.random.default_rng(0)
    ids = rng.zipf(1.5, size=5000) % 40  # ids 0..39; some never occur
    ids[ids == 7] = 8
    order = data_utils.rank_by_frequency(ids, 41)
    counts = collections.Counter(ids.tolist())
    first = {}
    for k, i in enumerate(ids.tolist()):
        first.setdefault(i, k)
    expected = sorted(range(41), key=lambda i: (-counts[i], first.get(i, 10**9), i))
    assert order.tolist() == expected
    assert order[-2:].tolist() == [7, 40]  # unseen, in base order


def test_word_tokenizer_on_wikitext_valid(wikitext2_root):
    text = (wikitext2_root / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8")
    ref_ids, ref_vocab = _reference_word_ids(text)
    tok = data_utils.WordTokenizer.train([text])
    tok.set_order(data_utils.rank_by_frequency(tok.encode_base(text), tok.base_vocab_size))
    ids = tok.encode_array(text)
    assert len(ids) == 217646  # WikiText paper count (words + one <eos> per line)
    np.testing.assert_array_equal(ids, ref_ids)
    assert [tok.id_to_token(i) for i in range(len(ref_vocab))] == ref_vocab
    assert tok.eos_id == ref_vocab.index("<eos>")
    lines = text.split("\n")[:-1]
    assert tok.decode(ids) == "\n".join(" ".join(line.split()) for line in lines) + "\n"
    assert tok.encode("the zzzunseen\nthe") == [tok.encode("the")[0], tok.reserved_ids()["<unk>"],
                                               tok.eos_id, tok.encode("the")[0]]


def test_word_tokenizer_limits():
    text = "a a a b b c\nd\n"
    tok = data_utils.WordTokenizer.train([text], min_count=2)
    assert sorted(tok.words) == ["<eos>", "<unk>", "a", "b"]
    tok = data_utils.WordTokenizer.train([text], max_vocab=3)
    assert sorted(tok.words) == ["<eos>", "<unk>", "a"]
    with pytest.raises(DataError, match="--vocab_size=9 is larger than the 6 distinct"):
        data_utils.WordTokenizer.train([text], max_vocab=9)
    lower = data_utils.WordTokenizer.train(["The the THE\n"], lowercase=True)
    assert lower.encode("ThE") == lower.encode("the")


@pytest.mark.slow
def test_sentencepiece_permutation_round_trip(wikitext2_root, tmp_path):
    text = (wikitext2_root / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8")
    tok = data_utils.SentencePieceTokenizer.train(text.split("\n"), 500, symbols=("<unk>",))
    base = tok.encode_base(text)
    tok.set_order(data_utils.rank_by_frequency(base, tok.base_vocab_size))
    ids = tok.encode_array(text)
    np.testing.assert_array_equal(tok.order[ids], base)  # a permutation, applied
    counts = np.bincount(ids, minlength=tok.vocab_size)
    assert np.all(np.diff(counts) <= 0)  # ranked ids are frequency sorted
    assert tok.id_to_token(int(np.argmax(counts))) == tok._sp.id_to_piece(
        int(np.argmax(np.bincount(base)))
    )
    lines = text.split("\n")[:-1]
    assert tok.decode(ids) == "\n".join(" ".join(line.split()) for line in lines) + "\n"
    unk = tok.encode("<unk>")  # WikiText's <unk> stays one piece
    assert len(unk) == 1 and tok.id_to_token(unk[0]) == "\u2581<unk>"
    assert tok.encode("a <unk> b").count(unk[0]) == 1
    assert ids[np.flatnonzero(ids == tok.eos_id)].size == len(lines)
    info = tok.save(str(tmp_path))
    again = load_tokenizer_files(str(tmp_path), info)
    np.testing.assert_array_equal(again.encode_array(text[:5000]), tok.encode_array(text[:5000]))


def test_byte_tokenizer_round_trip():
    data = bytes(range(256)) + "héllo\nwörld\n".encode() + b"\xff\xfe"
    tok = data_utils.ByteTokenizer()
    base = tok.encode_bytes_base(data)
    np.testing.assert_array_equal(base, np.frombuffer(data, np.uint8))
    tok.set_order(data_utils.rank_by_frequency(base, 256))
    assert tok.decode_bytes(tok.encode_bytes(data)) == data
    assert tok.id_to_token(0) == "l" and tok.eos_id is None
    eos = data_utils.ByteTokenizer(eos=True)
    ids = eos.encode("a\nb\n")
    assert ids == [97, 256, 98, 256] and eos.vocab_size == 257
    assert eos.decode(ids) == "a\nb\n"


def test_eos_rules():
    tok = data_utils.WordTokenizer.train(["a b\nc\n"])
    assert tok.decode(tok.encode("a b\nc")) == "a b\nc"
    assert len(tok.encode("a b\nc")) == 4 and len(tok.encode("a b\nc\n")) == 5
    assert tok.encode("\n\n") == [tok.eos_id, tok.eos_id]


def test_batchify_against_loops():
    ids = np.arange(103)
    rows, records, dropped = data_utils.batchify(ids, 4, 5)
    # R = (103 - 1) // (4 * 5) = 5 records, rows of 26 sharing boundaries, tail 103 - 101
    assert (records, dropped, rows.shape) == (5, 2, (4, 26))
    for b in range(4):
        for t in range(records):
            window = rows[b, t * 5:t * 5 + 6]
            assert window.tolist() == list(range(b * 25 + t * 5, b * 25 + t * 5 + 6))
    assert data_utils.batchify(np.arange(11), 2, 5)[1:] == (1, 0)  # 11 ids: exactly one record
    assert data_utils.batchify(np.arange(10), 2, 5)[1:] == (0, 10)
    with pytest.raises(DataError, match="--seq_len"):
        data_utils.batchify(ids, 4, 0)


def _records_of(directory, stream, batch, seq_len, shards=2):
    """(inputs, targets, records, dropped) of a synthetic stream, written and read back."""
    from pardata import records
    rows, count, dropped = data_utils.batchify(stream, batch, seq_len)
    info = records.write_split(str(directory), "train", rows, count, seq_len, shards, [])
    info.update(ids=len(stream), records=count, dropped_ids=dropped, batch_size=batch)
    meta = {"seq_len": seq_len, "splits": {"train": info}}
    xs, ys = _all_batches(data_utils.make_dataset(str(directory), "train", meta=meta))
    return xs, ys, count, dropped


@pytest.mark.parametrize("length,batch,seq_len",
                         [(103, 4, 5), (97, 4, 4), (61, 3, 4), (13, 3, 4), (40, 1, 7), (50, 7, 1)])
def test_records_train_every_transition_of_the_kept_prefix_once(tmp_path, length, batch, seq_len):
    # Distinct ids, so a pair (input, target) names one position of the stream.
    stream = np.random.default_rng(length).permutation(length)
    xs, ys, records, dropped = _records_of(tmp_path, stream, batch, seq_len)
    kept = length - dropped
    trained = collections.Counter(zip(xs.reshape(-1).tolist(), ys.reshape(-1).tolist()))
    expected = collections.Counter(zip(stream[:kept - 1].tolist(), stream[1:kept].tolist()))
    assert trained == expected  # every transition of the kept prefix, each exactly once
    assert kept == batch * records * seq_len + 1 and xs.shape == (records, batch, seq_len)
    assert records == (length - 1) // (batch * seq_len)  # as many records as the stream fills


def test_old_format_version_asks_for_a_rebuild(built, tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    meta = dict(built[1], format_version=1)  # disjoint rows, before the shared boundary ids
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"old/meta.json has format_version 1, .*record "
                                        r"layout.*--overwrite"):
        data_utils.load_meta(str(d))
    with pytest.raises(DataError, match=r"old/meta.json has format_version 1, .*record "
                                        r"layout.*--overwrite"):
        data_utils.make_dataset(str(d), "train")


def test_records_round_trip(built):
    out, meta, wt2 = built
    for split, fname in (("train", "wiki.valid.tokens"), ("valid", "wiki.test.tokens")):
        text = (wt2 / fname).read_text(encoding="utf-8")
        _, ref_vocab = _reference_word_ids((wt2 / "wiki.valid.tokens").read_text(encoding="utf-8"))
        index = {w: i for i, w in enumerate(ref_vocab)}
        stream = np.array([index.get(w, index["<unk>"]) for line in text.split("\n")[:-1]
                           for w in line.split() + ["<eos>"]])
        info = meta["splits"][split]
        xs, ys = _all_batches(data_utils.make_dataset(str(out), split))
        B, T = info["batch_size"], meta["seq_len"]
        R = info["records"]
        assert xs.shape == (R, B, T) and xs.dtype == np.int32 and len(info["shards"]) == 3
        assert info["dropped_ids"] == len(stream) - (B * R * T + 1)
        for t in range(R):
            for b in range(B):
                start = b * R * T + t * T
                np.testing.assert_array_equal(xs[t, b], stream[start:start + T])
                np.testing.assert_array_equal(ys[t, b], stream[start + 1:start + T + 1])
        # targets are inputs shifted by one; record t+1 continues record t
        np.testing.assert_array_equal(ys[:, :, :-1], xs[:, :, 1:])
        np.testing.assert_array_equal(ys[:-1, :, -1], xs[1:, :, 0])
        # row b ends with the id row b+1 starts with; the last row ends the kept prefix
        np.testing.assert_array_equal(ys[-1, :-1, -1], xs[0, 1:, 0])
        # row by row, the inputs and then the last target are the stream minus its tail
        inputs = xs.transpose(1, 0, 2).reshape(-1)
        np.testing.assert_array_equal(np.append(inputs, ys[-1, -1, -1]), stream[:B * R * T + 1])


def test_meta_and_counts(built, wikitext2_root):
    out, meta, wt2 = built
    text = (wt2 / "wiki.valid.tokens").read_bytes()
    train = meta["splits"]["train"]
    assert train["words"] == 217646 and train["bytes"] == len(text)
    assert train["lines"] == 3760 and meta["batch_size"] == 8
    assert meta["splits"]["test"]["batch_size"] == 4 and meta["seq_len"] == 128
    counts = data_utils.unigram_counts(str(out))
    ref, vocab = _reference_word_ids(text.decode())
    np.testing.assert_array_equal(counts, np.bincount(ref, minlength=len(vocab)))
    assert np.all(np.diff(counts) <= 0) and counts.sum() == train["ids"]
    assert meta["reserved_ids"] == {"<eos>": vocab.index("<eos>"), "<unk>": vocab.index("<unk>")}
    loaded_meta, tok = data_utils.load_built(str(out))
    assert loaded_meta == meta and tok.vocab_size == meta["vocab_size"] == len(vocab)


def test_replica_rows_fixed_and_disjoint(built):
    out, meta, _ = built
    assert data_utils.replica_rows(8, 4, 3) == (6, 8)
    with pytest.raises(DataError, match="not divisible by 3 replicas"):
        data_utils.replica_rows(8, 3, 0)
    full, _ = _all_batches(data_utils.make_dataset(str(out), "train"))
    parts = []
    for r in range(4):
        x, _ = _all_batches(data_utils.make_dataset(str(out), "train", num_replicas=4,
                                                    replica_id=r))
        assert x.shape[1] == 2
        parts.append(x)
        # the same rows of the global batch at every step
        np.testing.assert_array_equal(x, full[:, 2 * r:2 * r + 2])
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), full)


def test_skip_and_repeat(built):
    out, meta, _ = built
    full, _ = _all_batches(data_utils.make_dataset(str(out), "valid"))
    R = len(full)
    for skip in (0, 1, R // 3 + 1, R - 1):  # shard boundaries fall at R//3 multiples
        x, _ = _all_batches(data_utils.make_dataset(str(out), "valid", skip_records=skip))
        np.testing.assert_array_equal(x, full[skip:])
    ds = data_utils.make_dataset(str(out), "valid", skip_records=R - 2, repeat=True)
    x = np.stack([a.numpy() for a, _ in ds.take(5)])
    np.testing.assert_array_equal(x, np.concatenate([full[R - 2:], full[:3]]))
    with pytest.raises(ValueError, match="skip_records"):
        data_utils.make_dataset(str(out), "valid", skip_records=R + 1)


def test_no_autotuning_thread(built):
    """The datasets run without tf.data's autotuning, whose thread dropping an iterator
    waited for (40-55 s at some epoch ends of a training run)."""
    out, _, _ = built
    for kwargs in ({}, {"prefetch": False}, {"repeat": True, "skip_records": 1}):
        ds = data_utils.make_dataset(str(out), "valid", **kwargs)
        assert ds.options().autotune.enabled is False


def _copy(built, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(built[0], dst)
    return dst


def test_missing_truncated_corrupted_shards(built, tmp_path):
    d = _copy(built, tmp_path)
    shard = d / built[1]["splits"]["train"]["shards"][1]
    data = shard.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(flipped))
    with pytest.raises(DataError, match=f"shard {shard} is corrupted"):
        data_utils.make_dataset(str(d), "train")
    shard.write_bytes(data[:-7])
    with pytest.raises(DataError, match=f"shard {shard} is truncated"):
        data_utils.make_dataset(str(d), "train")
    shard.unlink()
    with pytest.raises(DataError, match=f"shard {shard} is missing"):
        data_utils.make_dataset(str(d), "train")


def test_bad_meta(built, tmp_path):
    d = _copy(built, tmp_path)
    meta = json.loads((d / "meta.json").read_text())
    meta["vocab_size"] += 1
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="vocab_size .* but the tokenizer files"):
        data_utils.load_built(str(d))
    del meta["splits"]["valid"]["records"]
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="incomplete .*splits.valid.records"):
        data_utils.load_meta(str(d))
    (d / "meta.json").unlink()
    with pytest.raises(DataError, match="meta.json not found"):
        data_utils.make_dataset(str(d), "train")
    with pytest.raises(DataError, match="unknown split"):
        data_utils.make_dataset(str(built[0]), "dev")


def test_read_stream_equals_the_tokenizers_encoding(built):
    out, meta, wt2 = built
    _, tok = data_utils.load_built(str(out))
    sources = {"train": "wiki.valid.tokens", "valid": "wiki.test.tokens",
               "test": "wiki.valid.tokens"}
    for split, fname in sources.items():
        info = meta["splits"][split]
        expected = np.array(tok.encode((wt2 / fname).read_text(encoding="utf-8")))
        stream = data_utils.read_stream(str(out), split)
        assert stream.dtype == np.int32 and stream.shape == (info["ids"],)
        np.testing.assert_array_equal(stream, expected)
        # The tail file holds exactly the ids after the kept prefix, one per line.
        assert 0 < info["dropped_ids"] < info["batch_size"] * meta["seq_len"]
        tail = (out / info["tail_file"]).read_text().split("\n")
        assert tail[-1] == "" and len(tail) - 1 == info["dropped_ids"]
        np.testing.assert_array_equal(np.array(tail[:-1], int),
                                      expected[len(expected) - info["dropped_ids"]:])


@pytest.mark.parametrize("tokenizer,extra,lines", [
    ("word", {}, 61), ("byte", {}, 37), ("sentencepiece", {"vocab_size": 30}, 48),
    ("word", {}, 44)])  # 44 lines: 337 ids = 3 records of 2 x 56 + 1 (2 of 3 x 56), no tail
def test_read_stream_of_every_tokenizer(tmp_path, tokenizer, extra, lines):
    text = "".join(f"line {i} has words {'x' * (i % 3)} and more\n" for i in range(lines))
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(text, encoding="utf-8")
    config = data_utils.BuildConfig.for_dataset(
        "text", output_dir=str(tmp_path / "out"), tokenizer=tokenizer, batch_size=2,
        eval_batch_size=3, seq_len=56 if lines == 44 else 7, **extra,
        **{f"{s}_file": str(tmp_path / f"{s}.txt") for s in ("train", "valid", "test")})
    meta = data_utils.build_dataset(config)
    _, tok = data_utils.load_built(config.output_dir)
    expected = (tok.encode_bytes(text.encode()) if tokenizer == "byte"
                else np.array(tok.encode(text)))
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(data_utils.read_stream(config.output_dir, split),
                                      expected)
    if lines == 44:
        assert all(meta["splits"][s]["dropped_ids"] == 0 for s in meta["splits"])
        assert (tmp_path / "out" / "train-tail.txt").read_bytes() == b""


def test_tail_files_are_checked_like_the_shards(built, tmp_path):
    d = _copy(built, tmp_path)
    info = built[1]["splits"]["valid"]
    tail = d / info["tail_file"]
    good = tail.read_bytes()
    fix = r"rebuild it with the command that built it plus --overwrite"
    tail.write_bytes(good.replace(b"1", b"2", 1))
    with pytest.raises(DataError, match=f"tail file {tail} is corrupted .*; {fix}"):
        data_utils.verify_built(str(d))
    with pytest.raises(DataError, match=f"tail file {tail} is corrupted"):
        data_utils.make_dataset(str(d), "valid")
    with pytest.raises(DataError, match=f"tail file {tail} is corrupted"):
        data_utils.read_stream(str(d), "valid")
    tail.write_bytes(good[:-2])
    with pytest.raises(DataError, match=f"tail file {tail} is truncated or modified"):
        data_utils.verify_built(str(d))
    tail.unlink()
    with pytest.raises(DataError, match=f"tail file {tail} of split valid is missing; {fix}"):
        data_utils.verify_built(str(d))


def test_a_build_without_tails_trains_but_cannot_give_its_stream(built, tmp_path):
    d = _copy(built, tmp_path)
    meta = json.loads((d / "meta.json").read_text())
    for info in meta["splits"].values():  # as written before the tails were stored
        for key in ("tail_file", "tail_bytes", "tail_sha256"):
            del info[key]
    (d / "meta.json").write_text(json.dumps(meta))
    for split in meta["splits"]:
        (d / f"{split}-tail.txt").unlink()
    assert data_utils.verify_built(str(d)) == meta
    assert len(list(data_utils.make_dataset(str(d), "valid"))) == meta["splits"]["valid"]["records"]
    with pytest.raises(DataError, match=r"meta.json was built before the ids after the last "
                                        r"record were stored \(split valid has no tail_file\)"
                                        r".*rebuild it with .*--overwrite"):
        data_utils.read_stream(str(d), "valid")


@pytest.mark.slow
def test_mirrored_strategy_gets_fixed_rows(built, project_root):
    """tf.distribute on two logical CPUs splits each batch into replica_rows."""
    script = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] *
        2)
        import data_utils
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        out = {str(built[0])!r}
        full = [x.numpy() for x, _ in data_utils.make_dataset(out, "train")]
        dist = strategy.experimental_distribute_dataset(
            data_utils.make_dataset(out, "train", num_replicas=2))
        for t, (x, y) in enumerate(dist):
            for r, part in enumerate(x.values):
                a, b = data_utils.replica_rows(8, 2, r)
                assert np.array_equal(part.numpy(), full[t][a:b]), (t, r)
        assert t == len(full) - 1
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=project_root,
                            capture_output=True, text=True, timeout=300)
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_sentencepiece_without_line_ends(tmp_path):
    """--nosp_eos: each line's pieces, joined without <eos>; words and bytes
    count no line breaks; the setting survives reloading; other tokenizers refuse it."""
    text = "".join(f"line {i} has words {'x' * (i % 3)} and more\n" + ("\n" if i % 5 == 0 else "")
                   for i in range(48))
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(text, encoding="utf-8")
    files = {f"{s}_file": str(tmp_path / f"{s}.txt") for s in ("train", "valid", "test")}
    config = data_utils.BuildConfig.for_dataset(
        "text", output_dir=str(tmp_path / "out"), tokenizer="sentencepiece", vocab_size=30,
        batch_size=2, eval_batch_size=3, seq_len=7, sp_eos=False, **files)
    meta = data_utils.build_dataset(config)
    _, tok = data_utils.load_built(config.output_dir)
    assert not tok.line_ends and meta["tokenizer"]["line_ends"] is False
    sp = tok._sp  # independent reference: sentencepiece on every line, concatenated
    base = [i for line in text.split("\n") for i in sp.encode(" ".join(line.split()))]
    expected = tok.to_ranked(np.array(base))
    assert tok.eos_id not in expected.tolist()
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(data_utils.read_stream(config.output_dir, split),
                                      expected)
    lines = text.count("\n")
    stats = meta["splits"]["valid"]
    assert stats["words"] == len(text.split()) and stats["lines"] == lines
    assert stats["bytes"] == len(text.encode()) - lines
    assert tok.decode(expected) == " ".join(text.split())
    # The default keeps one <eos> per line, and a build made before the flag
    # existed (no sp_eos in its fingerprint) is still up to date.
    with_eos = data_utils.BuildConfig.for_dataset(
        "text", output_dir=str(tmp_path / "eos"), tokenizer="sentencepiece", vocab_size=30,
        batch_size=2, eval_batch_size=3, seq_len=7, **files)
    assert "sp_eos" not in with_eos.settings() and "sp_eos" in config.settings()
    eos_meta = data_utils.build_dataset(with_eos)
    assert eos_meta["splits"]["valid"]["words"] == len(text.split()) + lines
    assert data_utils.build_dataset(with_eos)["up_to_date"]
    # Either way round, a build over the other names the setting that differs.
    over = dataclasses.replace(with_eos, output_dir=config.output_dir)
    with pytest.raises(DataError, match=r"differs in sp_eos\)"):
        data_utils.build_dataset(over)
    with pytest.raises(DataError, match=r"differs in sp_eos\)"):
        data_utils.build_dataset(dataclasses.replace(config, output_dir=with_eos.output_dir))
    # Evaluation refuses the other build for this run, naming the flag; an empty
    # generation prompt has no line start to begin from.
    from serving.evaluation import EvaluationError
    from serving.generation import GenerationError, encode_prompt
    from serving.sources import check_same_tokenizer
    with pytest.raises(EvaluationError, match=r"lines end without <eos>, the run's with "
                                              r"\(build_data.py --sp_eos / --nosp_eos\)"):
        check_same_tokenizer(types.SimpleNamespace(data_dir=with_eos.output_dir),
                              config.output_dir, meta)
    with pytest.raises(GenerationError, match="give a non-empty --prompt"):
        encode_prompt(tok, "  ")
    assert encode_prompt(tok, "line 3").ids == tuple(tok.encode("line 3"))
    # A last line without a newline: bytes lose only the newlines there are.
    open_end = tmp_path / "open.txt"
    open_end.write_text("hello world\nsecond line", encoding="utf-8")
    _, open_stats = encode_split(tok, SplitSource(str(open_end)), "open")
    assert open_stats["bytes"] == 22 and open_stats["words"] == 4
    with pytest.raises(DataError, match="--nosp_eos needs --tokenizer=sentencepiece"):
        data_utils.BuildConfig.for_dataset("text", output_dir=str(tmp_path / "w"),
                                           tokenizer="word", sp_eos=False, **files)


def test_missing_build_names_the_absolute_path_it_looked_at(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as error:
        data_utils.load_meta("data/x")
    assert str(error.value).startswith(f"{tmp_path}/data/x/meta.json not found: data/x holds "
                                       "no complete build")
