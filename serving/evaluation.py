"""Evaluation of a trained run of any model family (evaluate.py's library).

A split of the run's data (its whole id stream, `serving.sources.split_ids`)
or a text file tokenized with the run's tokenizer is scored by the one stream
evaluator that training also uses (`evaluation.stream.StreamEvaluator`: every
transition once, the batched records and then the tail continuing row B-1,
see evaluation/stream.py), with the evaluation's own batch size B, segment
length T and memory length M. With the data's eval batch, its seq_len and the
run's eval_mem_len, the result is the figure `Trainer.evaluate` wrote to
metrics.json for the same checkpoint (both include the tail).

Perplexity `exp(total NLL / tokens)`, word perplexity `exp(total NLL /
words)` and bits per byte `total NLL / ln 2 / bytes` come from
`runstore.metrics.lm_metrics`. Words (whitespace words plus one per line; without
the line ends for a `--nosp_eos` build) and UTF-8 bytes (without the newlines for
such a build) are meta.json's for a split and are counted by the build's own
code (`pardata.build.encode_split`) for a text file; they are exact because
the whole text is scored.
"""

import os
import time

from evaluation.stream import StreamEvaluator, check_settings
from model.families import family_of
from pardata.meta import load_meta
from runstore import run_dir
from runstore.metrics import lm_metrics
from serving.errors import EvaluationError
from serving.sources import split_ids, text_file_ids

# --------------------------------------------------------------------- runs


def evaluate_run(run, *, split=None, text_file=None, data_dir=None, seq_len=None,
                 mem_len=None, batch_size=None, progress_interval=10.0):
    """Evaluates a loaded run on a split of its data or on a text file.

    Args:
        run: a `serving.generation.Run` (load it with the evaluation's
            `model_overrides`, e.g. clamp_len, same_length).
        split: "valid", "test" or "train" of the run's data; or
        text_file: a text file, tokenized with the run's tokenizer.
        data_dir: the build to read the split from; None: the run's data_dir.
        seq_len: T; None: the run's seq_len.
        mem_len: M; None: the run's eval_mem_len, as training evaluated (0 too).
        batch_size: B; None: the split's batch size in the data (a text
            file: the data's eval batch size).
        progress_interval: seconds between progress lines.

    Returns:
        JSON-ready dict: nll, perplexity, bits_per_token, word_perplexity,
        bits_per_byte, total_nll, tokens, words, bytes, ids, parts (batched,
        tail), settings, source, model_dir, checkpoint, step, model_family,
        seconds.

    Raises:
        EvaluationError, DataError: a problem the user can fix.
    """
    if (split is None) == (text_file is None):
        raise EvaluationError("give one of --split or --text_file")
    config = run.config
    seq_len = config.seq_len if seq_len is None else seq_len
    mem_len = config.eval_mem_len if mem_len is None else mem_len
    check_settings(seq_len, mem_len, 1 if batch_size is None else batch_size)
    if split is not None:
        ids, info = split_ids(run, split, data_dir)
        words, num_bytes = info["words"], info["bytes"]
        batch_size = info["batch_size"] if batch_size is None else batch_size
        source = {"split": split}
        if run.package is None:
            source["data_dir"] = data_dir or config.data_dir
        else:
            source["text"] = f"raw {run.meta.get('dataset')} {split}"
        label = f"evaluating {split}"
    else:
        ids, stats = text_file_ids(run.tokenizer, text_file)
        words, num_bytes = stats["words"], stats["bytes"]
        if batch_size is None:
            meta = run.meta if run.meta is not None else load_meta(run.data_dir)
            batch_size = meta.get("eval_batch_size", meta["batch_size"])
        source = {"text_file": os.fspath(text_file)}
        label = f"evaluating {os.path.basename(text_file)}"
    start = time.monotonic()
    result = StreamEvaluator(run.model, mem_len).evaluate(
        ids, batch_size, seq_len, label=label, progress_interval=progress_interval)
    metrics = lm_metrics(result.total_nll, result.tokens, words=words, num_bytes=num_bytes)
    settings = {"seq_len": int(seq_len), "mem_len": int(mem_len), "batch_size": int(batch_size)}
    for name in family_of(config.model).evaluation_settings:
        settings[name] = getattr(config.model, name)
    return dict(
        metrics, total_nll=result.total_nll, tokens=result.tokens, ids=int(len(ids)),
        words=int(words), bytes=int(num_bytes), parts=result.parts(), settings=settings,
        source=source, model_family=config.model_family,
        seconds=round(time.monotonic() - start, 3), **_model_source(run))


def _model_source(run):
    """What was evaluated: model_dir, checkpoint, step (and model, for a package)."""
    if run.package is None:
        return {"model_dir": run.model_dir or os.fspath(run.config.model_dir),
                "checkpoint": run.checkpoint_path,
                "step": run_dir.checkpoint_step(run.checkpoint_path)}
    source = run.package.source
    return {"model": os.fspath(run.checkpoint_path), "model_dir": source.get("run"),
            "checkpoint": source.get("checkpoint"), "step": source.get("step"),
            "storage_dtype": run.package.storage_dtype}


def default_output(model_dir, split=None, text_file=None):
    """`<model_dir>/eval_<split>.json`, or `eval_text_<file stem>.json` for a text file."""
    if split is not None:
        return os.path.join(model_dir, f"eval_{split}.json")
    stem = os.path.splitext(os.path.basename(os.fspath(text_file)))[0]
    return os.path.join(model_dir, f"eval_text_{stem}.json")


def check_output(path):
    """Raises EvaluationError unless `path` can be written (checked before evaluating)."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not path or os.path.isdir(path):
        raise EvaluationError(f"--output={path} must be a file name (a .json file)")
    if not os.path.isdir(parent):
        raise EvaluationError(f"--output={path}: directory {parent} does not exist")
    problem = run_dir.unwritable(path)  # read-only, no permission
    if problem:
        raise _write_error(path, problem)
    return path


def _write_error(path, error):
    cause, fix = run_dir.reason_and_fix(error, path)
    return EvaluationError(f"--output={path}: cannot write {os.path.abspath(path)}: {cause}; "
                           f"{fix}; nothing was written")


def write_result(path, result):
    """Writes the result as JSON atomically (runstore.run_dir: temporary name, fsync, rename).

    Raises:
        EvaluationError: the file cannot be written.
    """
    path = check_output(path)
    try:
        run_dir.atomic_write_json(path, result)
    except run_dir.WriteError as error:
        raise _write_error(path, error.reason) from None
    return path
