"""meta.json and the integrity of a built directory, without TensorFlow.

A build is complete when `meta.json` is there (it is written last) and every
shard it lists has the recorded size and sha256, as has each split's tail file
(`{split}-tail.txt`: the ids after the last record, which evaluation scores
too). `verify_built` checks that for every split;
`records.make_dataset(verify=True)` runs the same per-split check
(`check_shards`) before reading.

The tail keys of a split (`tail_file`, `tail_bytes`, `tail_sha256`) are
optional: a format 2 build made before they existed trains as before, and
reading its whole id stream (`records.read_stream`, for evaluation) asks for
a rebuild with --overwrite. Nothing here imports TensorFlow, so
build_data.py can tell in a fraction of a second whether an existing build is
intact.
"""

import hashlib
import json
import os
import time

from absl import logging

from pardata.errors import DataError

# 2: rows share their boundary ids (format 1 cut disjoint rows, so one
# transition per row boundary was never trained); format 1 builds must be rebuilt.
FORMAT_VERSION = 2
META_FILE = "meta.json"
_META_KEYS = ("format_version", "dataset", "tokenizer", "vocab_size", "reserved_ids",
              "batch_size", "seq_len", "splits", "unigram_counts_file")
_SPLIT_KEYS = ("ids", "records", "dropped_ids", "words", "bytes", "batch_size",
               "shards", "shard_records", "shard_bytes", "shard_sha256")
# Optional (builds made before the tail was stored lack them), all or none.
TAIL_KEYS = ("tail_file", "tail_bytes", "tail_sha256")


def tail_name(split: str) -> str:
    """`{split}-tail.txt`: the ids of a split after its last record, one per line."""
    return f"{split}-tail.txt"


def rebuild_hint(dataset: str | None = None) -> str:
    """The fix quoted by every error about a damaged build."""
    return ("rebuild it with the command that built it plus --overwrite "
            f"(./create_tfrecords.sh {dataset or '<dataset>'} ... --overwrite)")


def file_sha256(path: str) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def load_meta(data_dir: str) -> dict:
    """Reads and checks `data_dir/meta.json`.

    Raises:
        DataError: missing, unreadable or incomplete meta.json.
    """
    path = os.path.join(data_dir, META_FILE)
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise DataError(f"{data_dir} is a file, not a built data directory: give the directory "
                        "./create_tfrecords.sh or build_data.py wrote (it holds meta.json)")
    if not os.path.isfile(path):
        raise DataError(f"{os.path.abspath(path)} not found: {data_dir} holds no complete "
                        f"build; run ./create_tfrecords.sh or build_data.py "
                        f"--output_dir={data_dir}")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path} ({e}); {rebuild_hint()}") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path} is not a JSON object; {rebuild_hint()}")
    hint = rebuild_hint(meta.get("dataset"))
    missing = [k for k in _META_KEYS if k not in meta]
    for split, info in meta.get("splits", {}).items():
        missing += [f"splits.{split}.{k}" for k in _SPLIT_KEYS if k not in info]
    if missing:
        raise DataError(f"{path} is incomplete (missing {', '.join(missing)}); {hint}")
    if meta["format_version"] != FORMAT_VERSION:
        raise DataError(f"{path} has format_version {meta['format_version']}, this code "
                        f"reads {FORMAT_VERSION} (the record layout changed); {hint}")
    return meta


def split_info(meta: dict, split: str) -> dict:
    """meta["splits"][split], or a DataError listing the splits there are."""
    if split not in meta["splits"]:
        raise DataError(f"unknown split {split!r}; this build has {sorted(meta['splits'])}")
    return meta["splits"][split]


def check_shards(data_dir: str, split: str, info: dict, verify: bool = True,
                 dataset: str | None = None) -> list[str]:
    """Paths of a split's shards after checking them (and its tail file) against meta.json.

    Args:
        data_dir: built directory.
        split: split name.
        info: meta["splits"][split].
        verify: also compare sha256 (reads every byte once); size is always
            checked.
        dataset: meta["dataset"], named in the fix of an error.

    Returns:
        Shard paths in time order.

    Raises:
        DataError: naming the first missing, truncated or corrupted shard (or
            tail file) and the fix (rebuild with --overwrite).
    """
    fix = rebuild_hint(dataset)
    _check_tail(data_dir, split, info, verify, fix)
    lists = [info[k] for k in ("shards", "shard_records", "shard_bytes", "shard_sha256")]
    if len({len(x) for x in lists}) != 1 or sum(info["shard_records"]) != info["records"]:
        raise DataError(f"{os.path.join(data_dir, META_FILE)}: the shard lists of split "
                        f"{split} disagree; {fix}")
    paths = []
    for name, size, digest in zip(info["shards"], info["shard_bytes"], info["shard_sha256"]):
        path = os.path.join(data_dir, name)
        if not os.path.isfile(path):
            raise DataError(f"shard {path} is missing ({len(info['shards'])} shards listed "
                            f"in meta.json for {split}); {fix}")
        actual = os.path.getsize(path)
        if actual != size:
            raise DataError(f"shard {path} is truncated or modified ({actual} bytes, "
                            f"expected {size}); {fix}")
        if verify and file_sha256(path) != digest:
            raise DataError(f"shard {path} is corrupted (sha256 differs from meta.json); {fix}")
        paths.append(path)
    return paths


def _check_tail(data_dir: str, split: str, info: dict, verify: bool, fix: str) -> None:
    """Size (and sha256) of the split's tail file, when meta.json lists one."""
    present = [k for k in TAIL_KEYS if k in info]
    if not present:
        return
    if len(present) != len(TAIL_KEYS):
        raise DataError(f"{os.path.join(data_dir, META_FILE)}: split {split} lists only "
                        f"{', '.join(present)} of its tail; {fix}")
    path = os.path.join(data_dir, info["tail_file"])
    if not os.path.isfile(path):
        raise DataError(f"tail file {path} of split {split} is missing; {fix}")
    actual = os.path.getsize(path)
    if actual != info["tail_bytes"]:
        raise DataError(f"tail file {path} is truncated or modified ({actual} bytes, "
                        f"expected {info['tail_bytes']}); {fix}")
    if verify and file_sha256(path) != info["tail_sha256"]:
        raise DataError(f"tail file {path} is corrupted (sha256 differs from meta.json); {fix}")


def tail_path(data_dir: str, split: str, info: dict, dataset: str | None = None) -> str:
    """Path of a split's tail file, or a DataError asking for a rebuild if the build has none.

    Args:
        data_dir: built directory.
        split: split name.
        info: meta["splits"][split].
        dataset: meta["dataset"], named in the fix.
    """
    if "tail_file" not in info:
        raise DataError(
            f"{os.path.join(data_dir, META_FILE)} was built before the ids after the last "
            f"record were stored (split {split} has no tail_file), so its whole id stream "
            f"cannot be read back; {rebuild_hint(dataset)}")
    return os.path.join(data_dir, info["tail_file"])


def verify_built(data_dir: str, meta: dict | None = None, splits=None) -> dict:
    """Checks size and sha256 of every shard and tail file of a build against its meta.json.

    Meant to run before training starts, so a damaged valid or test shard
    stops the run before any step is spent rather than at the first
    evaluation. Reads every shard once, cheap next to training (docs/data.md#checks).

    Args:
        data_dir: built directory.
        meta: its meta.json contents (read and checked if None).
        splits: names of the splits to check; None checks every split in meta.

    Returns:
        The meta.json contents.

    Raises:
        DataError: meta.json is missing or incomplete, or a shard is missing,
            truncated or corrupted; the message names the file and the fix.
    """
    meta = load_meta(data_dir) if meta is None else meta
    start, count, size = time.monotonic(), 0, 0
    for split in (list(meta["splits"]) if splits is None else splits):
        info = split_info(meta, split)
        check_shards(data_dir, split, info, verify=True, dataset=meta.get("dataset"))
        count += len(info["shards"])
        size += sum(info["shard_bytes"])
    logging.info("verified %d shards (%.1f MB) of %s in %.2f s", count, size / 1e6, data_dir,
                 time.monotonic() - start)
    return meta
