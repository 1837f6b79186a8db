r"""Exports a trained run as a `.keras` file or a TensorFlow SavedModel.

Usage:
    python3 export.py --model_dir=runs/search --format=keras --output=lm.keras
    python3 export.py --model_dir=runs/search --format=saved_model --output=lm_saved

`.keras` loads back with `keras.saving.load_model(path)` after importing the
family's module (`import model.transformer_xl.model` or `import model.sha_rnn.model`).
The SavedModel has a `serve` signature `(token_ids int32 [B, T], state_0, ...)
-> {"log_probs": [B, T, V], "new_state_0", ...}` over the model's state
(Transformer-XL memories [B, M, D]; SHA-RNN LSTM states and memory) and a copy
of the tokenizer in `output/tokenizer/` (see serving/export.py). The output is
written to a temporary path and renamed at the end. Errors a user can cause
(a full disk too) end in one line `error: ...` on stderr and exit status 1;
Ctrl-C / SIGTERM end in one line `interrupted: ...` and status 130 / 143,
with nothing written.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging

import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)

flags.DEFINE_string("model_dir", None, "Run directory written by train.py.")
flags.DEFINE_string("checkpoint", "best", "best, latest, or a checkpoint path (ckpt-<step> "
                    "prefix, absolute or inside --model_dir).")
flags.DEFINE_enum("format", "keras", ["keras", "saved_model"], "keras: one .keras file; "
                  "saved_model: a TensorFlow SavedModel directory for serving.")
flags.DEFINE_string("output", None, "Output path (a .keras file or a SavedModel directory).")
flags.DEFINE_integer("mem_len", None, "saved_model: memory positions kept in the new state; "
                     "default: the run's eval_mem_len (its mem_len if that is 0).")
flags.DEFINE_boolean("overwrite", False, "Replace an existing output.")

FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags", file=sys.stderr)
        return 1
    if not FLAGS.model_dir or not FLAGS.output:
        print("error: --model_dir and --output are required", file=sys.stderr)
        return 1
    if FLAGS.format == "keras" and not FLAGS.output.endswith(".keras"):
        print(f"error: --output={FLAGS.output} must end in .keras for --format=keras",
              file=sys.stderr)
        return 1
    if FLAGS.mem_len is not None and FLAGS.mem_len < 0:
        print(f"error: --mem_len={FLAGS.mem_len} must be >= 0", file=sys.stderr)
        return 1
    import data_utils
    from serving import export
    from serving.generation import GenerationError, load_run
    from training import interrupt

    try:
        with interrupt.signals_as_interrupts():
            run = load_run(FLAGS.model_dir, FLAGS.checkpoint)
            if FLAGS.format == "keras":
                path = export.export_keras(run, FLAGS.output, overwrite=FLAGS.overwrite)
            else:
                path = export.export_saved_model(run, FLAGS.output, mem_len=FLAGS.mem_len,
                                                 overwrite=FLAGS.overwrite)
    except (GenerationError, data_utils.DataError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as error:
        print(f"interrupted: nothing was written to {FLAGS.output}", file=sys.stderr)
        return interrupt.interrupt_exit_code(error)
    logging.info("exported %s (checkpoint %s) to %s", FLAGS.model_dir, run.checkpoint_path, path)
    print(path)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
