r"""Fine-tunes a trained model on a text: build, train, export in one command.

    python3 finetune.py --from=pretrained/wt2_base.keras --text=my_text.txt \
        [--output=runs/NAME.keras] [--name=NAME] [train.py flags]

(./finetune.sh runs it from the repository root.) The text is built with the source
model's tokenizer and id order into data/<name> (valid and test split off its end,
--split_fraction), a run in runs/<name> starts from the source's weights and config
(train.py --init_weights) with --recipe=finetune (Adam at a constant 1e-3, valid every
200 steps, early stop after 3 evaluations without a new best), and the best
checkpoint is exported to --output (default runs/<name>.keras), a package carrying
the source's tokenizer. <name> defaults to <model>_<text> (file names without
extension). Running the same command again resumes, or says it had finished.

Every train.py flag is accepted and passed on (e.g. --max_steps, --learning_rate,
--eval_interval, --early_stop); a model flag may only repeat the source's, and
--tokenizer / --vocab_size only its tokenizer's. Errors end in one `error: ...`
line and exit status 1, with nothing written.
"""

import os
import shutil
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags

import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from training.setup import flags as training_flags

FLAGS = flags.FLAGS


def define_flags(fv=FLAGS):
    """train.py's flags and finetune.py's own (`define_own_flags`) on `fv`."""
    training_flags.define_flags(fv)
    return define_own_flags(fv)


def define_own_flags(fv=FLAGS):
    """finetune.py's own flags on `fv` (tools/flags_doc.py documents these; the rest are
    train.py's)."""
    group = "[fine-tuning] "
    flags.DEFINE_string("from", None, group + "The model to fine-tune: a .keras package "
                        "(e.g. pretrained/wt2_base.keras) or a run directory (its best "
                        "checkpoint).", flag_values=fv)
    flags.DEFINE_string("text", None, group + "The UTF-8 text file to fine-tune on; valid and "
                        "test are split off its end (--split_fraction).", flag_values=fv)
    flags.DEFINE_string("output", None, group + "The fine-tuned package (default "
                        "runs/<name>.keras; --export is the same).", flag_values=fv)
    flags.DEFINE_string("name", None, group + "Run name: runs/<name>, data/<name> (default "
                        "<model>_<text>, their file names without extension).", flag_values=fv)
    flags.DEFINE_float("split_fraction", None, group + "Share of the text's lines held out "
                       "for valid, and again for test (default 0.05).", flag_values=fv)
    flags.DEFINE_string("tokenizer", None, group + "Only the source's own tokenizer kind is "
                        "accepted (its tokenizer and ids are kept).", flag_values=fv)
    flags.DEFINE_integer("vocab_size", None, group + "Only the source's own vocabulary size "
                         "is accepted.", flag_values=fv)
    return fv


def _paths():
    """(Source, text path, paths dict) from the flags, checked; nothing is written."""
    from serving.export import ExportError, check_output
    from serving.start_from import read_source
    from training.finetune import run_paths, tokenizer_problem

    if not FLAGS["from"].value:
        raise ValueError("--from is required: the model to fine-tune (a .keras package, e.g. "
                         "pretrained/wt2_base.keras, or a run directory)")
    text = FLAGS.text
    if not text:
        raise ValueError("--text is required: the UTF-8 text file to fine-tune on")
    if not os.path.isfile(text) or os.path.getsize(text) == 0:
        why = "is empty" if os.path.isfile(text) else "is not a file"
        raise ValueError(f"--text={text} {why}: give a UTF-8 text file to fine-tune on")
    source = read_source(FLAGS["from"].value, "--from")
    problem = tokenizer_problem(source, FLAGS.tokenizer, FLAGS.vocab_size)
    if problem:
        raise ValueError(problem)
    if FLAGS.init_weights and os.path.abspath(FLAGS.init_weights) != os.path.abspath(
            FLAGS["from"].value):
        raise ValueError(f"--init_weights={FLAGS.init_weights} contradicts --from: drop "
                         "--init_weights (--from gives the weights)")
    paths = run_paths(FLAGS["from"].value, text, FLAGS.name or "")
    if FLAGS.output and FLAGS.export and FLAGS.output != FLAGS.export:
        raise ValueError("--output and --export name two packages: give one of them")
    paths["output"] = FLAGS.output or FLAGS.export or paths["output"]
    paths["model_dir"] = FLAGS.model_dir or paths["model_dir"]
    paths["data_dir"] = FLAGS.data_dir or paths["data_dir"]
    if not paths["output"].endswith(".keras"):
        raise ValueError(f"--output={paths['output']} must end in .keras (a Keras package)")
    finished = os.path.isfile(os.path.join(paths["model_dir"], "metrics.json"))
    default = not (FLAGS.output or FLAGS.export)  # runs/<name>.keras: runs/ is made
    parent = os.path.dirname(os.path.abspath(paths["output"]))
    if not finished and not FLAGS.overwrite and (os.path.isdir(parent) or not default):
        try:
            check_output(paths["output"], False, name=f"--output={paths['output']}",
                         overwrite_fix="pass --overwrite")
        except ExportError as error:
            raise ValueError(str(error)) from None
    return source, text, paths


def main(argv):
    """Exit status: train.py's (0 done, 1 an error the user can fix, 130/143 interrupted)."""
    from pardata.errors import DataError
    from runstore.errors import ConfigError
    from serving.errors import GenerationError
    from training.finetune import build_text

    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags",
              file=sys.stderr)
        return 1
    try:
        source, text, paths = _paths()
    except (ValueError, GenerationError, DataError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    data_dir = paths["data_dir"]
    fresh = not os.path.exists(data_dir)
    try:
        build_text(source, text, data_dir, batch_size=FLAGS.batch_size, seq_len=FLAGS.seq_len,
                   split_fraction=FLAGS.split_fraction, overwrite=FLAGS.overwrite)
        FLAGS.data_dir, FLAGS.model_dir = data_dir, paths["model_dir"]
        FLAGS.init_weights = os.path.abspath(FLAGS["from"].value)
        FLAGS.export = paths["output"]
        if not FLAGS["recipe"].present:  # --recipe= (empty) trains with the flags alone
            FLAGS.recipe = "finetune"
        training_flags.config_from_flags(FLAGS)  # every flag checked before training
    except (DataError, ConfigError) as error:
        if fresh and os.path.isdir(data_dir):
            shutil.rmtree(data_dir)  # nothing written
        where = f"--text={text}: " if isinstance(error, DataError) else ""
        print(f"error: {where}{error}", file=sys.stderr)
        return 1
    import train

    os.makedirs(os.path.dirname(os.path.abspath(paths["output"])), exist_ok=True)
    return train.main(["train.py"])


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags()  # --helpshort lists finetune.py's own flags; --helpfull train.py's too
    app.run(main)
