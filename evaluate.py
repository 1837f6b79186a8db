r"""Evaluates a trained run or an exported `.keras` file on a whole split or a text
file, every transition once.

Works for every model family. A split is read back whole (its records and
the tail the records leave out) and re-batched with the evaluation's own
--batch_size and --seq_len; the model's state is carried across segments
(serving/evaluation.py). Prints the token NLL, perplexity, word perplexity
and bits per byte, and writes them with the tokens scored and the settings
to a JSON file.

With `--model` (a `.keras` file written by export.py) no run directory or
built data is needed: `--split` tokenizes the raw text of the model's dataset
(the WikiText-2 copy in datasets/, or the raw files in data/raw) with the
model's own tokenizer, by the build's code, so the numbers are those of the
build it was trained on; the results are printed, and written as JSON only
with --output.

Usage:
    python3 evaluate.py --model=pretrained/wt2_base.keras --split=test
    python3 evaluate.py --model_dir=runs/search                      # valid, best checkpoint
    python3 evaluate.py --model_dir=runs/search --split=test --mem_len=64 --same_length
    python3 evaluate.py --model_dir=runs/search --text_file=article.txt --batch_size=1

Errors a user can cause end in one line `error: ...` on stderr and exit
status 1, and nothing is written; Ctrl-C / SIGTERM end in one line
`interrupted: ...` and status 130 / 143, with nothing written.
"""

import os
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags, logging

from model.config_base import flag_kind
from model.families import evaluation_settings  # no TensorFlow
from pardata.build import SPLITS  # no TensorFlow
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from serving import model_flags

model_flags.define(flags.FLAGS)
flags.DEFINE_enum("split", None, SPLITS, "Split of the run's data to evaluate, all of it "
                  "(the ids after the last record too); with --model, the split of the "
                  "model's dataset read from its raw text. Default valid unless --text_file.")
flags.DEFINE_string("text_file", None, "Text file to evaluate instead of a split, tokenized "
                    "with the run's tokenizer (UTF-8 for word and sentencepiece).")
flags.DEFINE_string("data_dir", None, "--model_dir only: built data to read --split from; "
                    "default: the run's data_dir (config.json). Must hold the run's tokenizer.")
flags.DEFINE_integer("seq_len", None, "Segment length T (>= 1); default: the run's seq_len.")
flags.DEFINE_integer("mem_len", None, "Memory positions carried between segments (>= 0); "
                     "default: the run's eval_mem_len, as training evaluated (0: no memory).")
flags.DEFINE_integer("batch_size", None, "Rows evaluated together (>= 1); default: the "
                     "split's batch size in the data (a text file: the data's eval batch size).")
# The families' evaluation settings (model/families.py), one flag each: config fields a
# trained run may be evaluated with another value of.
for _name, (_field, _owners) in evaluation_settings().items():
    getattr(flags, f"DEFINE_{flag_kind(_field)}")(
        _name, None, f"{', '.join(_owners)} only: {_field.metadata['help']} Default: the run's.")
flags.DEFINE_string("output", None, "JSON file of the results (written atomically); default: "
                    "<model_dir>/eval_<split>.json, or eval_text_<file name>.json for "
                    "--text_file; with --model, none unless given.")
flags.DEFINE_float("progress_interval", 10.0, "Seconds between progress lines (with an "
                   "ETA) on long evaluations.")

FLAGS = flags.FLAGS


class FlagError(ValueError):
    """A flag value or combination the user has to fix."""


def _check_flags():
    """Checks that need no TensorFlow (so these errors come at once)."""
    problem = model_flags.problem(FLAGS)
    if problem:
        raise FlagError(problem)
    if FLAGS.model and FLAGS.data_dir is not None:
        raise FlagError("--data_dir selects the build of a run directory's split; with --model, "
                        "--split reads the model's dataset from its raw text: drop --data_dir")
    if FLAGS.split is not None and FLAGS.text_file is not None:
        raise FlagError("give either --split or --text_file, not both")
    if FLAGS.text_file is not None and FLAGS.data_dir is not None:
        raise FlagError("--data_dir selects the build of --split; a --text_file needs none")
    for name, low in (("seq_len", 1), ("mem_len", 0), ("batch_size", 1)):
        value = getattr(FLAGS, name)
        if value is not None and value < low:
            raise FlagError(f"--{name}={value} must be >= {low}")
    if not FLAGS.progress_interval > 0:
        raise FlagError(f"--progress_interval={FLAGS.progress_interval} must be > 0")


def _format(result):
    settings = ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}"
                         for k, v in result["settings"].items())
    source = result["source"].get("split") or result["source"]["text_file"]
    step = "" if result["step"] is None else f", step {result['step']}"
    tail = result["parts"]["tail"]["tokens"]
    if "model" in result:  # a .keras package
        what = (f"{result['model']} (run {result['model_dir']}, {result['checkpoint']}{step}, "
                f"weights stored as {result['storage_dtype']})")
    else:
        what = f"{result['model_dir']} ({result['checkpoint']}{step})"
    return (f"{source} of {what}: "
            f"{result['tokens']} tokens ({tail} of them after the last full batch), "
            f"{result['words']} words, {result['bytes']} bytes\n"
            f"  nll {result['nll']:.4f}  perplexity {result['perplexity']:.3f}  "
            f"word perplexity {result['word_perplexity']:.3f}  "
            f"bits/byte {result['bits_per_byte']:.4f}\n"
            f"  {settings}")


def _evaluate():
    split = FLAGS.split
    if split is None and FLAGS.text_file is None:
        split = "valid"
    from serving import evaluation, generation

    overrides = {name: getattr(FLAGS, name) for name in evaluation_settings()
                 if getattr(FLAGS, name) is not None}
    run = generation.load(FLAGS.model_dir or None, FLAGS.model or None, FLAGS.checkpoint,
                          model_overrides=overrides)
    output = FLAGS.output
    if output is None and FLAGS.model_dir:
        output = evaluation.default_output(FLAGS.model_dir, split, FLAGS.text_file)
    if output is not None:
        evaluation.check_output(output)  # before the evaluation, which may take long
    result = evaluation.evaluate_run(
        run, split=split, text_file=FLAGS.text_file, data_dir=FLAGS.data_dir,
        seq_len=FLAGS.seq_len, mem_len=FLAGS.mem_len, batch_size=FLAGS.batch_size,
        progress_interval=FLAGS.progress_interval)
    print(_format(result))
    if output is not None:
        evaluation.write_result(output, result)
        print(f"wrote {output}")
    logging.info("evaluated in %.1f s", result["seconds"])


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags", file=sys.stderr)
        return 1
    try:
        _check_flags()
    except FlagError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    import data_utils
    from serving.evaluation import EvaluationError
    from serving.generation import GenerationError
    from training.run import interrupt

    status, line = interrupt.run_guarded(
        _evaluate, (FlagError, EvaluationError, GenerationError, data_utils.DataError),
        "interrupted: no result was written")
    if line:
        print(line, file=sys.stderr)
    return status


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
