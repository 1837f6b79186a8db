"""Builds context-batched TFRecords + meta.json from a named dataset or text files.

Examples:
  python build_data.py --dataset=wikitext2          # the copy shipped in datasets/
  python build_data.py --dataset=enwik8            # downloads into data/raw
  python build_data.py --dataset=text --train_file=a.txt --valid_file=b.txt \
      --test_file=c.txt --tokenizer=sentencepiece --vocab_size=8000
  python build_data.py --dataset=text --train_file=all.txt   # valid, test: its last 5% each

Flags left unset take the dataset's default (pardata/build.py DATASET_DEFAULTS).
Errors a user can fix end in one `error: ...` line and exit status 1.
"""

import signal
import sys
import time

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags

from pardata import build  # no TensorFlow import until writing
from pardata.errors import DataError
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from pardata.split import DEFAULT_FRACTION

FLAGS = flags.FLAGS
_PER_DATASET = "default: per dataset"
flags.DEFINE_enum("dataset", "wikitext2", list(build.DATASETS), "Dataset to build.")
flags.DEFINE_string("data_dir", "data/raw", "Raw files (downloads land here).")
flags.DEFINE_string("output_dir", None, "Output directory (default: data/<dataset>).")
flags.DEFINE_string("train_file", None, "Training text for --dataset=text.")
flags.DEFINE_string("valid_file", None, "Validation text for --dataset=text.")
flags.DEFINE_string("test_file", None, "Test text for --dataset=text.")
flags.DEFINE_float("split_fraction", None, "--dataset=text with only --train_file: the share of "
                   "its lines split off its end for valid, and again for test (default "
                   f"{DEFAULT_FRACTION}).")
flags.DEFINE_enum("tokenizer", None, ["word", "sentencepiece", "byte"], f"Tokenizer "
                                                                        f"({_PER_DATASET}).")
flags.DEFINE_integer("vocab_size", None,
                     "sentencepiece: pieces; word: keep the most frequent (0 = all) "
                     f"({_PER_DATASET}).")
flags.DEFINE_integer("min_count", None, "word: words seen fewer times become <unk>.")
flags.DEFINE_string("sp_model", None, "Reuse this sentencepiece .model instead of training.")
flags.DEFINE_enum("sp_model_type", None, ["unigram", "bpe"], "sentencepiece model type.")
flags.DEFINE_list("sp_symbols", None, "Words kept as one sentencepiece piece "
                  f"({_PER_DATASET}: <unk> for WikiText word-level files).")
flags.DEFINE_boolean("lowercase", None, "Lowercase text (word, sentencepiece).")
flags.DEFINE_boolean("byte_eos", None, "byte: map newlines to an <eos> id (vocab 257).")
flags.DEFINE_boolean("sp_eos", None, "sentencepiece: an <eos> at every line end (default); "
                     "--nosp_eos joins lines without one, as the original PAR implementation "
                     "does.")
flags.DEFINE_integer("batch_size", None, f"Training rows B ({_PER_DATASET}).")
flags.DEFINE_integer("eval_batch_size", None, f"Rows for valid/test ({_PER_DATASET}).")
flags.DEFINE_integer("seq_len", None, f"Segment length T ({_PER_DATASET}).")
flags.DEFINE_integer("shards", None, f"TFRecord files per split ({_PER_DATASET}).")
flags.DEFINE_boolean("overwrite", False, "Replace a different build in --output_dir.")
flags.DEFINE_boolean("download", True, "Download missing raw files of named datasets.")

_CONFIG_FLAGS = ("data_dir", "output_dir", "train_file", "valid_file", "test_file",
                 "split_fraction",
                 "tokenizer", "vocab_size", "min_count", "sp_model", "sp_model_type",
                 "sp_symbols", "lowercase", "byte_eos", "sp_eos", "batch_size", "eval_batch_size",
                 "seq_len", "shards", "overwrite", "download")


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C (the partial build is removed) but exit status 143."""


def _interrupt(signum, frame):
    raise _Terminated


def summary(meta: dict, output_dir: str, seconds: float) -> str:
    """Human-readable table of what was built."""
    tok = meta["tokenizer"]["kind"]
    head = "up to date" if meta.get("up_to_date") else f"built in {seconds:.1f} s"
    lines = [f"{meta['dataset']} ({tok}, vocab {meta['vocab_size']}, seq_len "
             f"{meta['seq_len']}) in {output_dir}: {head}",
             f"  {'split':<6}{'batch':>6}{'ids':>12}{'records':>9}{'dropped':>9}"
             f"{'words':>12}{'bytes':>13}"]
    for split, s in meta["splits"].items():
        lines.append(f"  {split:<6}{s['batch_size']:>6}{s['ids']:>12}{s['records']:>9}"
                     f"{s['dropped_ids']:>9}{s['words']:>12}{s['bytes']:>13}")
    if "split" in meta:
        ranges = ", ".join(f"{split} {a}-{b}" for split, (a, b) in meta["split"]["lines"].items())
        lines.append(f"  lines of {meta['split']['file']}: {ranges} (--split_fraction="
                     f"{meta['split']['fraction']})")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    signal.signal(signal.SIGTERM, _interrupt)
    overrides = {name: FLAGS[name].value for name in _CONFIG_FLAGS if FLAGS[name].present}
    if FLAGS.output_dir is None:
        overrides.pop("output_dir", None)
    start = time.monotonic()
    try:
        config = build.BuildConfig.for_dataset(FLAGS.dataset, **overrides)
        meta = build.build_dataset(config)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:
        print("error: interrupted; the partial build was removed", file=sys.stderr)
        return 143 if isinstance(stop, _Terminated) else 130
    print(summary(meta, config.output_dir, time.monotonic() - start))
    return 0


if __name__ == "__main__":
    app.run(main)
