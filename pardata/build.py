"""Building a dataset: raw text -> tokenizer -> ranked ids -> shards + meta.json.

Nothing is written until every split has been tokenized and checked; files
are written under temporary names, meta.json last, and everything this build
created is removed if it fails or is interrupted.
"""

import dataclasses
import json
import os
import re

from absl import logging
import numpy as np

from pardata import downloads, tokenizers
from pardata import meta as meta_lib
from pardata import split as split_lib
from pardata.errors import DataError
from pardata.text import (
    Heartbeat,
    Progress,
    SplitSource,
    count_words_lines,
    decode_utf8,
    iter_chunks,
)
from runstore import run_dir

SPLITS = ("train", "valid", "test")
DATASETS = tuple(downloads.SOURCES) + ("text",)
META_FILE = meta_lib.META_FILE
COUNTS_FILE = "unigram_counts.txt"
# Defaults per dataset (flags override them). WikiText-2 is the default
# training run; WikiText-103 and enwik8/text8 follow Transformer-XL base
# (train batch 60 x 150 and 22 x 512, evaluation batch 10).
DATASET_DEFAULTS = {
    "wikitext2": dict(tokenizer="sentencepiece", vocab_size=12000, sp_symbols=("<unk>",),
                      batch_size=32, eval_batch_size=32, seq_len=32, shards=1),
    "wikitext2_raw": dict(tokenizer="sentencepiece", vocab_size=12000, batch_size=32,
                          eval_batch_size=32, seq_len=32, shards=1),
    "wikitext103": dict(tokenizer="word", sp_symbols=("<unk>",), batch_size=60,
                        eval_batch_size=10, seq_len=150, shards=8),
    "wikitext103_raw": dict(tokenizer="sentencepiece", vocab_size=32000, batch_size=60,
                            eval_batch_size=10, seq_len=150, shards=8),
    "enwik8": dict(tokenizer="byte", batch_size=22, eval_batch_size=10, seq_len=512, shards=4),
    "text8": dict(tokenizer="byte", batch_size=22, eval_batch_size=10, seq_len=512, shards=4),
    "text": dict(tokenizer="word", batch_size=32, eval_batch_size=32, seq_len=32, shards=1),
}
_BUILD_FILE = (r"((train|valid|test)-(\d{5}-of-\d{5}\.tfrecord|tail\.txt)|meta\.json|"
               r"unigram_counts\.txt|tokenizer-[\w.-]+)")
# A build's files, and the temporaries a killed build left: run_dir.atomic_output's
# (.<file>.tmp-<pid>-<hex>) and those of older versions (<file>.tmp, <file>.part-<pid>).
_OUR_FILES = re.compile(rf"^({_BUILD_FILE}(\.tmp|\.part-\d+)?|\.{_BUILD_FILE}\.tmp-\d+-[0-9a-f]+)$")


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """What to build; field names are the build_data.py flag names."""

    dataset: str
    output_dir: str
    data_dir: str = "data/raw"
    train_file: str = ""
    valid_file: str = ""
    test_file: str = ""
    split_fraction: float = split_lib.DEFAULT_FRACTION
    tokenizer: str = "word"
    vocab_size: int = 0
    min_count: int = 1
    sp_model: str = ""
    sp_model_type: str = "unigram"
    sp_symbols: tuple = ()
    lowercase: bool = False
    byte_eos: bool = False
    sp_eos: bool = True
    batch_size: int = 32
    eval_batch_size: int = 0
    seq_len: int = 32
    shards: int = 1
    overwrite: bool = False
    download: bool = True
    # Set by fine-tuning (serving/start_from.py): the sha256 of a trained model's tokenizer
    # files, which `build_dataset(tokenizer=...)` uses as it is (its ids, its order).
    tokenizer_from: str = ""

    def __post_init__(self):
        object.__setattr__(self, "sp_symbols", tuple(self.sp_symbols))
        checks = [
            (self.dataset in DATASETS, f"--dataset must be one of {', '.join(DATASETS)}"),
            (self.tokenizer in tokenizers.TOKENIZERS,
             f"--tokenizer must be one of {', '.join(tokenizers.TOKENIZERS)}"),
            (bool(self.output_dir), "--output_dir must not be empty"),
            (self.batch_size >= 1, "--batch_size must be >= 1"),
            (self.eval_batch_size >= 0, "--eval_batch_size must be >= 1 (0: --batch_size)"),
            (self.seq_len >= 1, "--seq_len must be >= 1"),
            (self.shards >= 1, "--shards must be >= 1"),
            (self.vocab_size >= 0, "--vocab_size must be >= 0"),
            (self.min_count >= 1, "--min_count must be >= 1"),
            (self.tokenizer != "sentencepiece" or self.sp_model or self.vocab_size > 0,
             "--tokenizer=sentencepiece needs --vocab_size > 0 or --sp_model"),
            (self.tokenizer != "byte" or self.vocab_size == 0,
             "--vocab_size does not apply to --tokenizer=byte (256, 257 with --byte_eos)"),
            (self.tokenizer != "byte" or not self.lowercase,
             "--lowercase does not apply to --tokenizer=byte"),
            (self.tokenizer == "byte" or not self.byte_eos,
             "--byte_eos needs --tokenizer=byte"),
            (self.tokenizer == "sentencepiece" or self.sp_eos,
             "--nosp_eos needs --tokenizer=sentencepiece"),
            (self.tokenizer == "sentencepiece" or not self.sp_model,
             "--sp_model needs --tokenizer=sentencepiece"),
            (self.dataset != "text" or bool(self.train_file),
             "--dataset=text needs --train_file (and --valid_file, --test_file, or they are "
             "split off its end)"),
            (bool(self.valid_file) == bool(self.test_file),
             "--valid_file and --test_file go together: give both, or neither to split them "
             "off the end of --train_file (--split_fraction)"),
            (0 < self.split_fraction < 0.5, "--split_fraction must be in (0, 0.5): the share "
             "of --train_file's lines in valid, and again in test"),
            (not (self.valid_file and self.test_file)
             or self.split_fraction == split_lib.DEFAULT_FRACTION,
             "--split_fraction applies to a --train_file without --valid_file/--test_file; "
             "drop it"),
            (self.dataset == "text" or not any(self.files()),
             "--train_file/--valid_file/--test_file need --dataset=text"),
        ]
        for ok, message in checks:
            if not ok:
                raise DataError(message)

    @classmethod
    def for_dataset(cls, dataset: str, **overrides) -> "BuildConfig":
        """Config with DATASET_DEFAULTS[dataset] under `overrides`."""
        if dataset not in DATASET_DEFAULTS:
            raise DataError(f"--dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
        values = dict(DATASET_DEFAULTS[dataset], output_dir=os.path.join("data", dataset))
        if overrides.get("tokenizer", values["tokenizer"]) != values["tokenizer"] or \
                overrides.get("sp_model"):
            values.pop("vocab_size", None)  # the default size was for another tokenizer
        values.update(overrides)
        return cls(dataset=dataset, **values)

    def files(self) -> tuple:
        return (self.train_file, self.valid_file, self.test_file)

    def batch_size_for(self, split: str) -> int:
        return self.batch_size if split == "train" else (self.eval_batch_size or self.batch_size)

    def settings(self) -> dict:
        """The fingerprint's part that needs no raw file (paths excluded)."""
        fields = dataclasses.asdict(self)
        # The split's byte ranges are in the fingerprint's sources.
        for key in ("output_dir", "data_dir", "overwrite", "download", "train_file",
                    "valid_file", "test_file", "split_fraction"):
            fields.pop(key)
        if not self.tokenizer_from:
            fields.pop("tokenizer_from")  # builds made before the field stay up to date
        fields["sp_symbols"] = list(self.sp_symbols)
        if self.sp_eos:
            fields.pop("sp_eos")  # the default: builds made before the flag stay up to date
        return fields

    def fingerprint(self, sources: dict) -> dict:
        """What makes two builds the same (paths of raw files excluded)."""
        return dict(self.settings(), sources={
            s: [os.path.basename(src.path), src.start, src.stop, src.size()]
            for s, src in sources.items()})


def split_off(config: BuildConfig) -> bool:
    """Whether valid and test are split off the end of --train_file."""
    return config.dataset == "text" and not config.valid_file


def resolve_sources(config: BuildConfig, sources=downloads.SOURCES) -> dict:
    """split -> SplitSource, downloading named datasets when absent."""
    return _resolve(config, sources)[0]


def _resolve(config: BuildConfig, sources) -> tuple[dict, dict | None]:
    """(split -> SplitSource, meta.json's "split" when one file was split, else None)."""
    split_info = None
    if split_off(config):
        found, split_info = split_lib.split_file(config.train_file, config.split_fraction)
    elif config.dataset == "text":
        found = {s: SplitSource(f, flag=f"--{s}_file") for s, f in zip(SPLITS, config.files())}
    else:
        found = downloads.ensure_raw_files(config.dataset, config.data_dir,
                                           download_missing=config.download, sources=sources)
    for source in found.values():
        source.size()  # missing or empty -> DataError now, before any work
    return found, split_info


def check_output_dir(config: BuildConfig) -> None:
    """Raises DataError unless --output_dir is a directory or can be created as one, on a
    file system this process may write (read-only and permissions are checked here; a full
    disk only when writing, which removes the partial build)."""
    wanted = os.path.abspath(config.output_dir)
    existing = wanted
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        problem = ("is an existing file, not a directory" if existing == wanted
                   else f"cannot be created ({existing} is a file)")
        raise DataError(f"--output_dir={config.output_dir} {problem}; choose a directory for "
                        f"the build (default: data/{config.dataset})")
    problem = run_dir.unwritable(wanted)  # read-only, no permission: found before the work
    if problem:
        raise _write_error(problem, wanted, wanted, "nothing was written")


def _write_error(error, path, output_dir, outcome) -> DataError:
    """The one line of a build that cannot be written: the path, the cause and the fix."""
    cause, fix = run_dir.reason_and_fix(error, path)
    where = "--output_dir" if path == output_dir else f"in --output_dir={output_dir}"
    return DataError(f"cannot write {path} ({where}): {cause}; {fix}; {outcome}")


def _texts(source: SplitSource):
    for offset, data in iter_chunks(source):
        yield decode_utf8(data, offset, source)


def _lines(source: SplitSource):
    for text in _texts(source):
        yield from text.split("\n")


def train_tokenizer(config: BuildConfig, train: SplitSource) -> tokenizers.Tokenizer:
    """The tokenizer in base order (ranking comes from the encoded stream)."""
    progress = Progress(f"training {config.tokenizer} tokenizer", train.size())
    detail = ""
    if config.tokenizer == "sentencepiece" and not config.sp_model:
        detail = f" ({config.vocab_size} pieces, {config.sp_model_type})"
    logging.info("training %s tokenizer%s on %s (%.1f MB)", config.tokenizer, detail,
                 train.describe(), train.size() / 1e6)
    if config.tokenizer == "word":
        tok = tokenizers.WordTokenizer.train(_texts(train), lowercase=config.lowercase,
                                             min_count=config.min_count,
                                             max_vocab=config.vocab_size)
    elif config.tokenizer == "sentencepiece" and config.sp_model:
        tok = tokenizers.SentencePieceTokenizer.from_file(config.sp_model, config.lowercase,
                                                          line_ends=config.sp_eos)
        if config.vocab_size and config.vocab_size != tok.vocab_size:
            raise DataError(f"--vocab_size={config.vocab_size} but --sp_model "
                            f"{config.sp_model} has {tok.vocab_size} pieces; drop --vocab_size")
    elif config.tokenizer == "sentencepiece":
        # One opaque call, most of a WikiText-2 build's time (bench/README.md#data-pipeline):
        # say it is alive.
        with Heartbeat(progress.label):
            tok = tokenizers.SentencePieceTokenizer.train(
                _lines(train), config.vocab_size, model_type=config.sp_model_type,
                lowercase=config.lowercase, symbols=config.sp_symbols,
                line_ends=config.sp_eos)
    else:
        tok = tokenizers.ByteTokenizer(eos=config.byte_eos)
    progress.finish(f"{tok.vocab_size} ids")
    return tok


def encode_split(tok: tokenizers.Tokenizer, source: SplitSource, split: str,
                 base: bool = False) -> tuple[np.ndarray, dict]:
    """Ids of a split and its source statistics.

    Returns:
        (int array [L] of ranked ids, or base ids if `base`;
         {"ids", "words", "lines", "bytes"}).
    """
    total = source.size()
    progress = Progress(f"tokenizing {split}", total)
    parts, words, lines, last = [], 0, 0, b""
    byte_level = isinstance(tok, tokenizers.ByteTokenizer)
    for offset, data in iter_chunks(source, align_lines=not byte_level):
        w, n = count_words_lines(data, at_end=offset + len(data) == total)
        words, lines, last = words + w, lines + n, data[-1:]
        if byte_level:
            ids = tok.encode_bytes_base(data)
        else:
            ids = tok.encode_base(decode_utf8(data, offset, source))
        parts.append(ids if base else tok.to_ranked(ids))
        progress.update(offset + len(data))
    ids = np.concatenate(parts) if parts else np.zeros([0], np.int64)
    progress.finish(f"{len(ids)} ids")
    # Words count one per line too (as <eos> does), so word-level perplexity
    # normalises by the usual WikiText token counts. A stream without line
    # ends models neither the line breaks nor their bytes (every line but an
    # open last one ends with a newline byte).
    if tok.line_ends:
        words, num_bytes = words + lines, total
    else:
        num_bytes = total - (lines - int(last not in (b"", b"\n")))
    return ids, {"ids": int(len(ids)), "words": words, "lines": lines, "bytes": num_bytes}


def _read_existing(config: BuildConfig) -> dict | None:
    """meta.json already in --output_dir (None if there is none or --overwrite)."""
    path = os.path.join(config.output_dir, META_FILE)
    if config.overwrite or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            existing = json.load(f)
        if not isinstance(existing, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise DataError(f"{path} is unreadable ({e}); pass --overwrite to replace the build "
                        "in --output_dir or choose another --output_dir") from None
    return existing


def _different_build(config: BuildConfig, existing: dict, wanted: dict) -> DataError:
    """The error for an --output_dir holding another build (`wanted`: fingerprint keys)."""
    have = existing.get("build") or {}
    keys = set(wanted) | set(have)  # a setting left at its default is absent on one side
    if "sources" not in wanted:
        keys.discard("sources")
    differ = [k.replace("sources", "raw files") for k in sorted(keys)
              if have.get(k) != wanted.get(k)]
    tok = existing.get("tokenizer", {}).get("kind")
    return DataError(
        f"--output_dir={config.output_dir} already holds a different build (dataset="
        f"{existing.get('dataset')}, tokenizer={tok}, batch_size={existing.get('batch_size')}, "
        f"seq_len={existing.get('seq_len')}; differs in {', '.join(differ)}); pass "
        "--overwrite to replace it or choose another --output_dir")


def _same_sources_named(existing: dict, spec: downloads.DatasetSource) -> bool:
    """Whether a build was made from `spec`'s raw files (names and byte ranges)."""
    built = (existing.get("build") or {}).get("sources") or {}
    return sorted(built) == sorted(spec.splits) and all(
        built[s][:3] == [f, start, stop] for s, (f, start, stop) in spec.splits.items())


def _up_to_date(config: BuildConfig) -> dict:
    """The existing build's meta after checking every shard (size and sha256).

    A damaged build is reported, never silently rebuilt: --overwrite rebuilds.
    """
    try:
        meta = meta_lib.verify_built(config.output_dir)
    except DataError as e:
        raise DataError(f"{config.output_dir} holds this build but it is damaged: {e}") from None
    logging.info("%s already holds this build; nothing to do", config.output_dir)
    if any("tail_file" not in info for info in meta["splits"].values()):
        logging.warning("%s was built before the ids after the last record were stored: "
                        "training works, evaluate.py needs them; pass --overwrite to rebuild",
                        config.output_dir)
    return dict(meta, up_to_date=True)


def _clear_output(directory: str) -> None:
    """Removes a previous (or incomplete) build's files; others are left alone."""
    os.makedirs(directory, exist_ok=True)
    meta_path = os.path.join(directory, META_FILE)
    if os.path.exists(meta_path):
        os.remove(meta_path)  # first, so an interrupted rebuild never looks complete
    ours = [f for f in os.listdir(directory) if _OUR_FILES.match(f)]
    if ours:
        logging.info("removing %d files of the previous build in %s", len(ours), directory)
    for name in ours:
        os.remove(os.path.join(directory, name))


def build_dataset(config: BuildConfig, *, sources=downloads.SOURCES, tokenizer=None,
                  source_model=None) -> dict:
    """Builds (or finds up to date) the dataset described by `config`.

    Args:
        config: the BuildConfig.
        sources: the named datasets' raw files (downloads.SOURCES).
        tokenizer: with `config.tokenizer_from`, a trained model's tokenizer, used as it
            is: no tokenizer is trained and the ids keep its order (no re-ranking by
            this text's frequencies), so they fit the model's embedding and softmax rows.
            A character it never saw becomes its unknown id (or its bytes).
        source_model: with `tokenizer`, a dict naming the model (meta.json's
            "source_model").

    Returns:
        The meta.json contents; meta["up_to_date"] is True if an identical
        build was already there and nothing was done.
    """
    check_output_dir(config)
    existing = _read_existing(config)
    if existing is not None:
        # Decided before the raw files are fetched: a build made from another
        # DATA_DIR is up to date without downloading or unpacking anything.
        if {k: v for k, v in (existing.get("build") or {}).items() if k != "sources"} \
                != config.settings():
            raise _different_build(config, existing, config.settings())
        if config.dataset in sources and _same_sources_named(existing, sources[config.dataset]) \
                and not downloads.raw_files_present(config.dataset, config.data_dir, sources):
            return _up_to_date(config)
    found, split_info = _resolve(config, sources)
    fingerprint = config.fingerprint(found)
    if existing is not None:
        if existing.get("build") != fingerprint:
            raise _different_build(config, existing, fingerprint)
        return _up_to_date(config)

    tok, ids, stats = _tokenize(config, found, tokenizer)
    # Imported here so that flag and input errors are reported without the
    # seconds it takes to import TensorFlow.
    logging.info("loading TensorFlow to write the shards")
    from pardata import records
    batched = {}
    for split in SPLITS:
        batch = config.batch_size_for(split)
        rows, count, dropped = records.batchify(ids[split], batch, config.seq_len)
        if count < 1:
            flag = "--batch_size" if split == "train" else "--eval_batch_size"
            raise DataError(
                f"split {split} ({found[split].describe()}) has {len(ids[split])} ids, too "
                f"few for one record of {batch} x {config.seq_len + 1} ids; lower {flag} "
                "or --seq_len")
        batched[split] = (rows, count, dropped)

    # Every check has passed: only now is a previous build replaced.
    output_dir = os.path.abspath(config.output_dir)
    made_below = run_dir.deepest_directory(output_dir)
    created = []
    try:
        _clear_output(config.output_dir)
        extra = {"source_model": source_model} if source_model else {}
        return _write(config, tok, ids, stats, batched, fingerprint, split_info, created, extra)
    except BaseException as error:
        for path in reversed(created):
            if os.path.exists(path):
                os.remove(path)
        run_dir.remove_empty_directories(output_dir, made_below)
        if isinstance(error, run_dir.WriteError):  # a file of records (atomic_output)
            raise _write_error(error.reason, os.path.abspath(error.path), output_dir,
                               "the partial build was removed") from None
        if isinstance(error, (OSError, records.tf.errors.OpError)):  # full, read-only, ...
            path = getattr(error, "filename", None) or (created[-1] if created else output_dir)
            raise _write_error(error, os.path.abspath(path), output_dir,
                               "the partial build was removed") from None
        raise


def _tokenize(config, found, tokenizer):
    """(tokenizer, split -> ranked ids, split -> statistics): a tokenizer trained on the
    train split and ranked by its frequencies, or `tokenizer` as it is (`tokenizer_from`)."""
    if config.tokenizer_from:
        if tokenizer is None:
            raise ValueError("BuildConfig.tokenizer_from needs build_dataset(tokenizer=...)")
        tok, ids, stats = tokenizer, {}, {}
    else:
        tok, stats = train_tokenizer(config, found["train"]), {}
        base_ids, stats["train"] = encode_split(tok, found["train"], "train", base=True)
        tok.set_order(tokenizers.rank_by_frequency(base_ids, tok.base_vocab_size))
        ids = {"train": tok.to_ranked(base_ids)}
        del base_ids
    for split in SPLITS:
        if split not in ids:
            ids[split], stats[split] = encode_split(tok, found[split], split)
    return tok, ids, stats


def _write(config, tok, ids, stats, batched, fingerprint, split_info, created,
           extra=None) -> dict:
    """Writes tokenizer, counts, shards, tails and (last) meta.json; returns meta.

    `ids` maps each split to its whole id stream; `split_info` (or None) says
    how one file was split; `extra` holds more meta.json keys.
    """
    from pardata import records
    tok_info = _save_tokenizer(tok, config, created)
    counts_path = os.path.join(config.output_dir, COUNTS_FILE)
    created.append(counts_path)
    np.savetxt(counts_path, np.bincount(ids["train"], minlength=tok.vocab_size), fmt="%d")
    splits = {}
    for split in SPLITS:
        rows, count, dropped = batched[split]
        shard_info = records.write_split(config.output_dir, split, rows, count,
                                         config.seq_len, config.shards, created)
        # The ids after the kept prefix [0, B*R*T], which evaluation scores too.
        stream = ids[split]
        tail_info = records.write_tail(config.output_dir, split, stream[len(stream) - dropped:],
                                       created)
        splits[split] = dict(stats[split], records=count, dropped_ids=dropped,
                             batch_size=config.batch_size_for(split), **shard_info, **tail_info)
    meta = {
        "format_version": meta_lib.FORMAT_VERSION, "dataset": config.dataset,
        "tokenizer": tok_info, "vocab_size": tok.vocab_size,
        "reserved_ids": tok.reserved_ids(), "eos_id": tok.eos_id,
        "batch_size": config.batch_size, "eval_batch_size": config.batch_size_for("valid"),
        "seq_len": config.seq_len, "splits": splits, "unigram_counts_file": COUNTS_FILE,
        "build": fingerprint,
    }
    if split_info:
        meta["split"] = split_info
    meta.update(extra or {})
    records.write_json(os.path.join(config.output_dir, META_FILE), meta, created)
    return meta


def _save_tokenizer(tok: tokenizers.Tokenizer, config: BuildConfig, created: list) -> dict:
    before = set(os.listdir(config.output_dir))
    try:
        info = tok.save(config.output_dir)
    finally:
        created.extend(os.path.join(config.output_dir, f)
                       for f in set(os.listdir(config.output_dir)) - before)
    if config.tokenizer == "sentencepiece":
        if config.sp_model:
            info.update(source_model=config.sp_model)
        else:
            info.update(model_type=config.sp_model_type, symbols=list(config.sp_symbols))
    if config.tokenizer == "word":
        info.update(min_count=config.min_count, max_vocab=config.vocab_size)
    return info

