"""Context batching, TFRecord shards, meta.json, and reading them back.

Sizes: B batch (rows), T segment length, R records of a split, L ids.

A split's id stream is cut into B rows of R*T + 1 ids, R = (L - 1) // (B*T)
(as many records as the stream fills): row b holds stream ids
[b*R*T, b*R*T + R*T], so consecutive rows share one boundary id (the last id
of row b is the first of row b+1). Record t holds columns [t*T, t*T + T] of
every row, so row b of record t+1 continues row b of record t (the last
column of one record is the first of the next: inputs [:, :T], targets
[:, 1:]). Every transition of the kept prefix [0, B*R*T] is thus trained
exactly once, including those across row boundaries. The L - (B*R*T + 1) ids
after it are dropped; they are one contiguous tail of the stream, fewer than
B*T, counted in meta as `dropped_ids`. (Cutting disjoint rows of L // B ids
instead would never train the B - 1 transitions between rows.)

Training never sees the tail, but evaluation scores every transition of a
split, so the build stores it in `{split}-tail.txt` (one id per line, in
stream order; a text file so it needs neither pickle nor TensorFlow), listed
in meta.json with its size and sha256. `read_stream` gives a split's whole
id stream back: the records row by row, then the tail.
"""

import json
import os

import numpy as np
import tensorflow as tf

from pardata import tokenizers
from pardata.errors import DataError
from pardata.meta import (  # noqa: F401
    FORMAT_VERSION,
    META_FILE,
    check_shards,
    file_sha256,
    load_meta,
    rebuild_hint,
    split_info,
    tail_name,
    tail_path,
    verify_built,
)
from pardata.text import Progress
from runstore import run_dir

# meta.json reading and the shard checks live in pardata.meta (no TensorFlow)
# and are re-exported above, where they have always been importable from.
COUNTS_FILE = "unigram_counts.txt"
SPLITS = ("train", "valid", "test")


def batchify(ids: np.ndarray, batch_size: int, seq_len: int) -> tuple[np.ndarray, int, int]:
    """Cuts a stream into B rows for context batching (see the module docstring).

    Args:
        ids: int array [L].
        batch_size: B.
        seq_len: T.

    Returns:
        (rows [B, R*T + 1], a read-only view of ids in which row b starts at
        id b*R*T, so consecutive rows share one boundary id; R records with
        R = (L - 1) // (B*T), possibly 0; dropped ids L - (B*R*T + 1), or L
        when R is 0).
    """
    if batch_size < 1 or seq_len < 1:
        raise DataError(f"--batch_size ({batch_size}) and --seq_len ({seq_len}) must be >= 1")
    ids = np.ascontiguousarray(ids)
    records = max(len(ids) - 1, 0) // (batch_size * seq_len)
    if not records:
        return ids[:0].reshape(batch_size, 0), 0, len(ids)
    span = records * seq_len  # stream ids between the first ids of two rows
    # A strided view, not a copy: rows overlap by one id.
    rows = np.lib.stride_tricks.as_strided(
        ids, shape=(batch_size, span + 1), strides=(span * ids.strides[0], ids.strides[0]),
        writeable=False)
    return rows, records, len(ids) - (batch_size * span + 1)


def shard_name(split: str, index: int, count: int) -> str:
    """`{split}-{index:05d}-of-{count:05d}.tfrecord`."""
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def serialize_record(ids: np.ndarray) -> bytes:
    """One tf.train.Example with int64 feature `ids` (row-major [B, T+1])."""
    feature = tf.train.Feature(int64_list=tf.train.Int64List(value=ids.ravel().tolist()))
    return tf.train.Example(
        features=tf.train.Features(feature={"ids": feature})).SerializeToString()



def write_split(directory: str, split: str, rows: np.ndarray, records: int, seq_len: int,
                shards: int, created: list) -> dict:
    """Writes the records of one split in time order into shard files.

    Each shard is written under a temporary name and renamed when complete
    (`run_dir.atomic_output`: a failed write removes its temporary and raises
    `run_dir.WriteError`, or the TensorFlow error of the writer).

    Args:
        directory: output directory.
        split: split name.
        rows: [B, R*T + 1] from batchify (rows share their boundary ids).
        records: R >= 1.
        seq_len: T.
        shards: wanted number of files (at most R are written).
        created: the path of every file it writes is appended before the file can
            exist (for cleanup; a failed write removes its own temporary).

    Returns:
        The shard part of meta["splits"][split].
    """
    count = min(shards, records)
    sizes = [records // count + (i < records % count) for i in range(count)]
    info = {"shards": [], "shard_records": sizes, "shard_bytes": [], "shard_sha256": []}
    progress = Progress(f"writing {split}", records, unit="records")
    t = 0
    for i, size in enumerate(sizes):
        name = shard_name(split, i, count)
        final = os.path.join(directory, name)
        created.append(final)
        with run_dir.atomic_output(final) as temp:
            with tf.io.TFRecordWriter(temp) as writer:
                for _ in range(size):
                    writer.write(serialize_record(rows[:, t * seq_len:(t + 1) * seq_len + 1]))
                    t += 1
                    progress.update(t)
            info["shard_bytes"].append(os.path.getsize(temp))
            info["shard_sha256"].append(file_sha256(temp))
        info["shards"].append(name)
    progress.finish(f"{records} records in {count} shard(s)")
    return info


def write_tail(directory: str, split: str, tail: np.ndarray, created: list) -> dict:
    """Writes the ids after the last record of a split, one per line (maybe none).

    Written under a temporary name and renamed when complete
    (`run_dir.atomic_output`; a failed write raises `run_dir.WriteError`).

    Args:
        directory: output directory.
        split: split name.
        tail: int array [dropped_ids], the stream after the kept prefix.
        created: the path of every file it writes is appended before the file can
            exist (for cleanup; a failed write removes its own temporary).

    Returns:
        The tail part of meta["splits"][split] (tail_file, tail_bytes, tail_sha256).
    """
    name = tail_name(split)
    final = os.path.join(directory, name)
    created.append(final)
    with run_dir.atomic_output(final) as temp:
        with open(temp, "w", encoding="ascii") as f:
            f.write("".join(f"{int(i)}\n" for i in tail))
        info = {"tail_file": name, "tail_bytes": os.path.getsize(temp),
                "tail_sha256": file_sha256(temp)}
    return info


def read_tail(data_dir: str, split: str, meta: dict | None = None,
              verify: bool = True) -> np.ndarray:
    """The ids of a split after its last record, int32 [dropped_ids].

    Raises:
        DataError: a build without tail files (rebuild with --overwrite), or a
            missing, modified or unreadable tail file.
    """
    meta = load_meta(data_dir) if meta is None else meta
    info = split_info(meta, split)
    dataset = meta.get("dataset")
    path = tail_path(data_dir, split, info, dataset)
    check_shards(data_dir, split, info, verify, dataset=dataset)  # the tail's size and sha256
    try:
        with open(path, encoding="ascii") as f:
            tail = np.array([int(x) for x in f.read().split()], dtype=np.int64)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read tail file {path} ({e}); {rebuild_hint(dataset)}") from None
    if tail.size != info["dropped_ids"] or (tail.size and not (
            0 <= tail.min() and tail.max() < meta["vocab_size"])):
        raise DataError(f"tail file {path} holds {tail.size} ids, meta.json expects "
                        f"{info['dropped_ids']} ids in [0, {meta['vocab_size']}); "
                        f"{rebuild_hint(dataset)}")
    return tail.astype(np.int32)


def read_stream(data_dir: str, split: str, meta: dict | None = None,
                verify: bool = True) -> np.ndarray:
    """A split's whole id stream: its records read back row by row, then its tail.

    The records hold rows [B, R*T + 1] that share their boundary ids, so the
    stream is row 0, then every other row without its first id, then the
    tail. Equals the tokenizer's encoding of the split's text.

    Args:
        data_dir: built directory.
        split: split name.
        meta: meta.json contents (read if None).
        verify: check the sha256 of the shards and of the tail first.

    Returns:
        int32 [L], L = meta["splits"][split]["ids"].

    Raises:
        DataError: a build without tail files (rebuild with --overwrite),
            damaged files, or records that do not chain into one stream.
    """
    meta = load_meta(data_dir) if meta is None else meta
    info = split_info(meta, split)
    tail = read_tail(data_dir, split, meta, verify)
    batch, seq_len, records = info["batch_size"], meta["seq_len"], info["records"]
    rows = np.zeros([batch, records * seq_len + 1], np.int32)  # [B, R*T + 1]
    t = -1
    for t, (inputs, targets) in enumerate(make_dataset(data_dir, split, meta=meta,
                                                      verify=False)):
        rows[:, t * seq_len:(t + 1) * seq_len] = inputs.numpy()
        rows[:, (t + 1) * seq_len] = targets.numpy()[:, -1]
    fix = rebuild_hint(meta.get("dataset"))
    if t + 1 != records:
        raise DataError(f"split {split} of {data_dir} has {t + 1} records, meta.json says "
                        f"{records}; {fix}")
    if not np.array_equal(rows[:-1, -1], rows[1:, 0]):
        raise DataError(f"the records of split {split} in {data_dir} do not chain into one "
                        f"stream (a row does not end with the id the next one starts with); "
                        f"{fix}")
    stream = np.concatenate([rows[0], rows[1:, 1:].reshape(-1), tail])
    if stream.size != info["ids"]:
        raise DataError(f"split {split} of {data_dir} reads back as {stream.size} ids, "
                        f"meta.json says {info['ids']}; {fix}")
    return stream


def write_json(path: str, obj: dict, created: list) -> None:
    """Writes JSON atomically (`run_dir.atomic_output`: temporary name, then rename)."""
    created.append(path)
    with run_dir.atomic_output(path) as temp:
        with open(temp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, ensure_ascii=False)
            f.write("\n")


def load_tokenizer(data_dir: str, meta: dict | None = None) -> tokenizers.Tokenizer:
    """The tokenizer saved next to the data, checked against meta.json."""
    meta = load_meta(data_dir) if meta is None else meta
    tok = tokenizers.load_tokenizer_files(data_dir, meta["tokenizer"])
    if tok.vocab_size != meta["vocab_size"]:
        files = ", ".join(meta["tokenizer"].get("files", []))
        raise DataError(f"{os.path.join(data_dir, META_FILE)} says vocab_size "
                        f"{meta['vocab_size']} but the tokenizer files ({files}) hold "
                        f"{tok.vocab_size} ids; {rebuild_hint(meta.get('dataset'))}")
    return tok


def load_built(data_dir: str) -> tuple[dict, tokenizers.Tokenizer]:
    """(meta, tokenizer) of a built directory."""
    meta = load_meta(data_dir)
    return meta, load_tokenizer(data_dir, meta)


def unigram_counts(data_dir: str, meta: dict | None = None) -> np.ndarray:
    """Training counts by id, int64 [V] (descending by construction)."""
    meta = load_meta(data_dir) if meta is None else meta
    path = os.path.join(data_dir, meta["unigram_counts_file"])
    try:
        counts = np.atleast_1d(np.loadtxt(path, dtype=np.int64))
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path} ({e}); "
                        f"{rebuild_hint(meta.get('dataset'))}") from None
    if counts.shape != (meta["vocab_size"],):
        raise DataError(f"{path} has {counts.size} counts but vocab_size is "
                        f"{meta['vocab_size']}; {rebuild_hint(meta.get('dataset'))}")
    return counts


def replica_rows(batch_size: int, num_replicas: int, replica_id: int) -> tuple[int, int]:
    """Rows `[start, stop)` that replica `replica_id` always receives."""
    if num_replicas < 1 or not 0 <= replica_id < num_replicas:
        raise ValueError(f"replica_id must be in [0, {num_replicas}), got {replica_id}")
    if batch_size % num_replicas:
        raise DataError(f"batch size {batch_size} is not divisible by {num_replicas} "
                        "replicas; rebuild the data with --batch_size (or "
                        "--eval_batch_size) a multiple of the number of replicas")
    per = batch_size // num_replicas
    return replica_id * per, (replica_id + 1) * per


# The records parsed at once and the batches read ahead by `make_dataset` (fixed: see there).
PARSE_CALLS = 2
PREFETCH_BATCHES = 2


def make_dataset(data_dir: str, split: str, *, meta: dict | None = None, num_replicas: int = 1,
                 replica_id: int | None = None, skip_records: int = 0, repeat: bool = False,
                 prefetch: bool = True, verify: bool = True) -> tf.data.Dataset:
    """Batches of a split in exact stream order (never shuffled).

    With tf.distribute, either pass the global batches to
    `strategy.experimental_distribute_dataset` (it gives replica r the
    contiguous rows replica_rows(B, R, r)), or build one dataset per replica
    with `replica_id`.

    Args:
        data_dir: built directory.
        split: "train", "valid" or "test".
        meta: meta.json contents (read if None).
        num_replicas: R; the split's batch size must be divisible by it.
        replica_id: if given, yield only this replica's rows.
        skip_records: start at this record (resume mid-split); with repeat,
            later passes start at record 0.
        repeat: cycle forever.
        prefetch: prefetch batches.
        verify: check shard sha256 against meta.json first.

    Returns:
        Dataset of (inputs, targets), int32 [B, T] (or [B/R, T] with
        replica_id); targets are inputs shifted by one position.
    """
    meta = load_meta(data_dir) if meta is None else meta
    info = split_info(meta, split)
    batch, seq_len = info["batch_size"], meta["seq_len"]
    start, stop = 0, batch
    if replica_id is not None:
        start, stop = replica_rows(batch, num_replicas, replica_id)
    elif num_replicas != 1:
        replica_rows(batch, num_replicas, 0)
    paths = check_shards(data_dir, split, info, verify, dataset=meta.get("dataset"))
    total = info["records"]
    if not 0 <= skip_records <= total and not repeat:
        raise ValueError(f"skip_records must be in [0, {total}] for split {split}, "
                         f"got {skip_records}")
    features = {"ids": tf.io.FixedLenFeature([batch * (seq_len + 1)], tf.int64)}

    def parse(serialized):
        ids = tf.io.parse_single_example(serialized, features)["ids"]
        ids = tf.reshape(tf.cast(ids, tf.int32), [batch, seq_len + 1])[start:stop]
        return ids[:, :-1], ids[:, 1:]

    def records_from(first: int) -> tf.data.Dataset:
        # Open only the shards from the one holding `first` onwards.
        shard, offset = 0, first
        while shard < len(paths) - 1 and offset >= info["shard_records"][shard]:
            offset -= info["shard_records"][shard]
            shard += 1
        ds = tf.data.TFRecordDataset(paths[shard:]).skip(offset)
        return ds.apply(tf.data.experimental.assert_cardinality(total - first))

    first = skip_records % total if repeat else skip_records
    ds = records_from(first)
    if repeat:
        ds = ds.concatenate(records_from(0).repeat()) if first else ds.repeat()
    ds = ds.map(parse, num_parallel_calls=PARSE_CALLS, deterministic=True)
    if prefetch:
        ds = ds.prefetch(PREFETCH_BATCHES)
    # Fixed sizes, no autotuning: dropping an iterator waited for tf.data's autotuning
    # thread (40-55 s at three or four of a record run's ten epoch ends,
    # docs/results/speedrun.md#the-record-runs), and parsing a record costs microseconds against a
    # training step's tens of milliseconds, so there is nothing to tune.
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)
