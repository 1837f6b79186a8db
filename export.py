r"""Exports a trained model with its tokenizer: a `.keras` file or a TensorFlow SavedModel.

Usage:
    python3 export.py --model_dir=runs/search --output=runs/search/lm.keras
    python3 export.py --model_dir=runs/search --output=lm.keras --dtype=float16
    python3 export.py --model_dir=runs/search --format=saved_model --output=runs/search/saved
    python3 export.py --model=pretrained/wt2_base.keras --format=saved_model --output=wt2_saved

The export alone is enough to generate and evaluate: no run directory, no
built data. Both formats carry the tokenizer, with the frequency ranking the
model's ids follow (the raw sentencepiece ids of a text differ from the
model's ids), and the run's generation settings (seq_len, eval_mem_len):

- `.keras` (serving/packaged.py): the model, its tokenizer files as Keras
  assets and the run's config. `python3 generate.py --model=lm.keras
  --prompt=... --seed=1` draws, token for token, what `generate.py
  --model_dir=<run> --seed=1` draws from the exported checkpoint (float32
  storage; --dtype=float16/bfloat16 rounds the weights, halving the file).
  `python3 evaluate.py --model=lm.keras --split=test` evaluates the model's
  dataset from its raw text. In Python: `serving.packaged.load_package(path)`,
  or `keras.saving.load_model(path)` after `import serving.packaged`.
- SavedModel (serving/export.py): signatures `generate` (a prompt string and
  the sampling settings in, the texts and token ids out: the same tokens as
  generate.py for the same seed), `tokenize`, `detokenize` and `serve` (one
  segment of ids with the model's state), loadable without the project's
  code (`import tensorflow_text` first for a sentencepiece tokenizer); the
  tokenizer files are also in `output/tokenizer/`.

Each export carries its model card (serving/card.py: Markdown made from the
run's files: data, model, parameters, training, valid and test figures, source,
intended use): a `.keras` file holds it (`par.load(path).card`) with a copy
beside it (`lm.keras` -> `lm.md`); a SavedModel holds it as `output/README.md`.

tests/serving/test_self_contained.py checks, for both model families and the
word, sentencepiece and byte tokenizers, that with the run directory and its
data deleted, generate.py --model and the SavedModel's generate signature
reproduce generate.py --model_dir token for token in a clean process.

The output (and its card) is written to a temporary path and renamed at the end. Errors a
user can cause (a full disk too) end in one line `error: ...` on stderr and
exit status 1; Ctrl-C / SIGTERM end in one line `interrupted: ...` and status
130 / 143, with nothing written.
"""

import os
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags, logging

import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from serving import model_flags

model_flags.define(flags.FLAGS, model_purpose="to write its SavedModel")
flags.DEFINE_enum("format", "keras", ["keras", "saved_model"], "keras: one .keras file; "
                  "saved_model: a TensorFlow SavedModel directory for serving.")
flags.DEFINE_string("output", None, "Output path (a .keras file or a SavedModel directory).")
flags.DEFINE_enum("dtype", "float32", ["float32", "float16", "bfloat16"], "keras: storage "
                  "dtype of the weights (float16/bfloat16 halve the file and round the "
                  "weights; the loaded model computes in float32).")
flags.DEFINE_integer("mem_len", None, "saved_model: memory positions kept in the new state; "
                     "default: the run's eval_mem_len (its mem_len if that is 0).")
flags.DEFINE_boolean("overwrite", False, "Replace an existing output.")

FLAGS = flags.FLAGS


def _flag_problem():
    """The first flag error, or None (checked before TensorFlow is imported)."""
    problem = model_flags.problem(FLAGS)
    if problem:
        return problem
    if not FLAGS.output:
        return "--output is required: the .keras file or SavedModel directory to write"
    if FLAGS.format == "keras" and not FLAGS.output.endswith(".keras"):
        return f"--output={FLAGS.output} must end in .keras for --format=keras"
    if FLAGS.format == "saved_model" and FLAGS["dtype"].present:
        return "--dtype applies to --format=keras only"
    if FLAGS.mem_len is not None and FLAGS.mem_len < 0:
        return f"--mem_len={FLAGS.mem_len} must be >= 0"
    return None


def _export():
    from serving import export
    from serving.generation import load

    run = load(FLAGS.model_dir or None, FLAGS.model or None, FLAGS.checkpoint)
    if FLAGS.format == "keras":
        path = export.export_keras(run, FLAGS.output, overwrite=FLAGS.overwrite,
                                   dtype=FLAGS.dtype)
    else:
        path = export.export_saved_model(run, FLAGS.output, mem_len=FLAGS.mem_len,
                                         overwrite=FLAGS.overwrite)
    logging.info("exported %s (%s) to %s", FLAGS.model_dir or FLAGS.model, run.checkpoint_path,
                 path)
    print(path)


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags", file=sys.stderr)
        return 1
    problem = _flag_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    import data_utils
    from serving.generation import GenerationError
    from training.run import interrupt

    status, line = interrupt.run_guarded(
        _export, (GenerationError, data_utils.DataError),
        f"interrupted: nothing was written to {FLAGS.output}")
    if line:
        print(line, file=sys.stderr)
    return status


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
