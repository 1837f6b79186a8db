"""What an evaluation scores: the whole id stream of a split or of a text file.

- a split of a run directory's build (`split_ids`: its records read back row
  by row and the tail they leave out, `read_stream`), after
  checking that the build has the run's tokenizer (`check_same_tokenizer`);
- a split of a `.keras` package's dataset (`package_split_ids`): the raw text
  the project ships (or data/raw) tokenized with the package's tokenizer by the
  build's code, checked against the build's counts;
- a text file (`text_file_ids`), tokenized and counted by the build's code.

Each comes with its words and bytes, for word perplexity and bits per byte.
"""

import filecmp
import os
import tempfile

from pardata import downloads
from pardata.build import SPLITS, encode_split
from pardata.errors import DataError, NotUtf8Error
from pardata.meta import load_meta, split_info
from pardata.records import read_stream
from pardata.text import SplitSource
from serving.errors import EvaluationError

# Where create_tfrecords.sh puts raw files by default (DATA_DIR).
RAW_DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "data", "raw")


def text_file_ids(tokenizer, path):
    """Ids of a text file with the run's tokenizer, and its words and bytes.

    Counted by the build's own code (`pardata.build.encode_split`): words are
    whitespace words plus one per line, bytes the file's size (for a tokenizer
    without line ends, `--nosp_eos`: no word per line and no newline bytes).

    Returns:
        (int array [L], {"ids", "words", "lines", "bytes"}).

    Raises:
        EvaluationError: missing, empty or (for word/sentencepiece) non-UTF-8
            file, or fewer than 2 tokens.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise EvaluationError(f"--text_file={path} does not exist: give the path of a text file")
    if os.path.getsize(path) == 0:
        raise EvaluationError(f"--text_file={path} is empty: give a text of at least two "
                              "tokens")
    try:
        ids, stats = encode_split(tokenizer, SplitSource(path, flag="--text_file"), "text file")
    except NotUtf8Error as error:
        raise EvaluationError(
            f"--text_file={path} is not UTF-8 text (line {error.line}, byte {error.position}): "
            f"the run's {tokenizer.kind} tokenizer reads UTF-8; convert the file (e.g. iconv "
            f"-f latin1 -t utf-8 {path} > {path}.utf8)") from None
    except DataError as error:
        raise EvaluationError(f"--text_file={path}: {error}") from None
    if len(ids) < 2:
        raise EvaluationError(f"--text_file={path} is {len(ids)} token(s) for the run's "
                              f"{tokenizer.kind} tokenizer: at least 2 are needed to score a "
                              "transition")
    return ids, stats


def check_same_tokenizer(run, data_dir, meta):
    """Refuses a data directory whose tokenizer files differ from the run's."""
    if os.path.realpath(data_dir) == os.path.realpath(run.data_dir):
        return
    own = load_meta(run.data_dir)
    problem = None
    if meta["tokenizer"].get("kind") != own["tokenizer"].get("kind") \
            or meta["vocab_size"] != own["vocab_size"]:
        problem = (f"a {meta['tokenizer'].get('kind')} tokenizer of {meta['vocab_size']} ids, "
                   f"the run's is {own['tokenizer'].get('kind')} of {own['vocab_size']}")
    elif (theirs := meta["tokenizer"].get("line_ends", True)) \
            != (ours := own["tokenizer"].get("line_ends", True)):
        ends = {True: "with", False: "without"}
        problem = (f"its lines end {ends[theirs]} <eos>, the run's {ends[ours]} "
                   "(build_data.py --sp_eos / --nosp_eos)")
    else:
        for name in own["tokenizer"].get("files", []):
            theirs = os.path.join(data_dir, name)
            if not os.path.isfile(theirs) or not filecmp.cmp(
                    theirs, os.path.join(run.data_dir, name), shallow=False):
                problem = f"its {name} differs from {os.path.join(run.data_dir, name)}"
                break
    if problem:
        raise EvaluationError(
            f"--data_dir={data_dir} was not built with the run's tokenizer ({problem}): "
            "evaluate on the build the run was trained on, rebuild it with the run's tokenizer "
            "(build_data.py --sp_model for sentencepiece), or pass the raw text as --text_file")


def _raw_split_source(dataset, split, workdir):
    """SplitSource of a named dataset's raw split: the copy shipped with the project
    (decompressed into `workdir`), else the raw files in data/raw; None if neither."""
    source = downloads.shipped_split(dataset, split, workdir)
    if source is not None:
        return source
    spec = downloads.SOURCES[dataset]
    name, start, stop = spec.splits[split]
    path = os.path.join(RAW_DATA_DIR, spec.directory, name)
    if os.path.isfile(path):
        return SplitSource(path, start, stop, flag="--split")
    return None


def package_split_ids(run, split):
    """(whole id stream, split info) of a split of a `.keras` package's dataset.

    The split's raw text (the copy the project ships, e.g. WikiText-2, or the
    raw files in data/raw) is tokenized with the package's own tokenizer by
    the build's code, so the ids, words and bytes are those of the build the
    model was trained on (checked against its meta.json).

    Raises:
        EvaluationError: a dataset without known raw files, missing raw
            files, or text that does not give the build's ids.
    """
    meta = run.meta
    dataset = meta.get("dataset")
    built = meta.get("splits", {}).get(split, {})
    where = f"--model={run.checkpoint_path} was trained on a {dataset} build"
    if dataset not in downloads.SOURCES:
        raise EvaluationError(f"--split={split}: {where}, whose raw text the project does not "
                              "know: pass the text as --text_file")
    with tempfile.TemporaryDirectory() as workdir:
        source = _raw_split_source(dataset, split, workdir)
        if source is None:
            raise EvaluationError(
                f"--split={split}: {where} and its raw text is not here: get it with "
                f"./create_tfrecords.sh {dataset} (raw files in {RAW_DATA_DIR}), or pass the "
                "text as --text_file")
        ids, stats = encode_split(run.tokenizer, source, split)
    if built and (stats["ids"], stats["words"], stats["bytes"]) != (
            built.get("ids"), built.get("words"), built.get("bytes")):
        raise EvaluationError(
            f"--split={split}: the raw text gives {stats['ids']} ids, {stats['words']} words, "
            f"{stats['bytes']} bytes, the build the model was trained on had {built.get('ids')}, "
            f"{built.get('words')}, {built.get('bytes')}: the raw file differs; pass it as "
            "--text_file to evaluate it anyway")
    info = dict(stats, batch_size=built.get("batch_size", meta.get("eval_batch_size")))
    return ids, info


def split_ids(run, split, data_dir=None):
    """(whole id stream, meta.json's split info) of a split of the run's data.

    For a `.keras` package (`run.package`), see `package_split_ids`.

    Raises:
        EvaluationError / DataError: unknown split, missing data,
            a build without tail files (rebuild with --overwrite), another
            tokenizer.
    """
    if split not in SPLITS:
        raise EvaluationError(f"--split={split} must be one of {', '.join(SPLITS)}")
    if run.package is not None:
        if data_dir is not None:
            raise EvaluationError(
                "--data_dir selects the build of a run directory's split; with --model, "
                "--split reads the model's dataset from its raw text: drop --data_dir")
        return package_split_ids(run, split)
    data_dir = data_dir or run.config.data_dir
    try:
        meta = load_meta(data_dir)
    except DataError as error:
        raise EvaluationError(f"--split={split} reads the run's built data, --data_dir="
                              f"{data_dir} (default: data_dir of its config.json): {error}; "
                              "pass --data_dir=<the build> or --text_file") from None
    check_same_tokenizer(run, data_dir, meta)
    info = split_info(meta, split)
    return read_stream(data_dir, split, meta), info
