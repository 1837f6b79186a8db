r"""Trains a language model of any family: a PAR Transformer-XL supernet, a fixed
architecture, or SHA-RNN / LSTM (`--model_family`).

Flags become one frozen, validated `TrainConfig` (training/setup/config.py), which
is written to `model_dir/config.json` and handed to `training.run.loop.train`.
Running again with the same flags resumes from the last checkpoint; Ctrl-C or
SIGTERM writes one at the current step first (docs/faults.md).

Usage:
    python3 train.py --data_dir=data/wikitext2 --model_dir=runs/search
    python3 train.py --data_dir=data/wikitext2 --model_dir=runs/derived \
        --architecture=runs/search          # train the derived architecture
    python3 train.py --flagfile=my_run.flags

The flags and the config they make are training/setup/flags.py. Model flags are
generated from the fields of every family's config (model/families.py; their help text
lives next to the field) and default to
the values of `--preset` (default: the family's own); a flag of another
family is refused. `vocab_size` always comes from the data, and so do
`--seq_len` and `--batch_size` unless given (then they must match the data).
"""

import os
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import app, flags, logging

import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from training.setup import flags as training_flags
from training.setup.config import ConfigError
from training.setup.finished import finished_command
from training.setup.flags import config_from_flags, config_summary, define_flags


def main(argv):
    """Exit status: 0 done (or done earlier), 1 an error the user can fix (one `error: ...`
    line), 130/143 interrupted by SIGINT/SIGTERM after writing a checkpoint (one
    `interrupted at step N: ...` line; docs/faults.md)."""
    from pardata.errors import DataError
    from runstore.run_dir import WriteError
    from serving.errors import GenerationError

    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are --flags",
              file=sys.stderr)
        return 1
    try:
        config, overwrite = config_from_flags(flags.FLAGS)  # no TensorFlow yet
        done = finished_command(config, overwrite)
        if done is not None:
            return _finished_earlier(config, *done, flags.FLAGS.export)
    except ExportInterrupted as stop:
        print(stop, file=sys.stderr)
        return stop.exit_code
    except (ConfigError, DataError, WriteError, GenerationError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return _train(config, overwrite)


def _train(config, overwrite):
    """Trains (or resumes) the command's runs, exports, prints the summary; exit status."""
    from pardata.errors import DataError
    from runstore.run_dir import WriteError
    from serving.errors import GenerationError
    from training.report.summary import closing_summary, run_summary
    from training.run.loop import NonFiniteError, TrainingInterrupted, train

    try:
        export_path = _check_export(flags.FLAGS.export, overwrite)
        _check_logdir(config)
        logging.info("%s", config_summary(config))
        _log_plan(config, export_path)
        results = train(config, overwrite=overwrite, command=sys.argv)
        final = results.get("final_model_dir", config.model_dir)
        exported = _export(final, export_path, overwrite) if export_path else None
    except (TrainingInterrupted, ExportInterrupted) as stop:
        print(stop, file=sys.stderr)
        return stop.exit_code
    except (ConfigError, DataError, NonFiniteError, WriteError, GenerationError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(run_summary(config, results))
    closing = closing_summary(results, exported)
    if closing:
        print(closing)
    return 0


def _finished_earlier(config, results, final_model_dir, export_path):
    """A command that finished earlier: its summary from the files, nothing trained or
    rewritten; only a missing --export package is written. Exit status 0."""
    from training.report.summary import closing_summary, run_summary

    exported = None
    if export_path:
        exported = export_path
        if not os.path.exists(export_path):
            exported = _export(final_model_dir, _check_export(export_path, False), False)
    print(run_summary(config, results))
    closing = closing_summary(results, exported)
    if closing:
        print(closing)
    print(f"this command had finished: {config.model_dir} holds its results (metrics.json); "
          "nothing was trained or rewritten. To train again from scratch, pass --overwrite "
          "(it discards the run) or choose another --model_dir")
    return 0


def _log_plan(config, export_path):
    """The command's later stages (the plug-ins' `plan_lines`) and its export, up front."""
    import data_utils
    from training import plugins

    records = data_utils.load_meta(config.data_dir)["splits"]["train"]["records"]
    for line in plugins.plan_lines(config, records):
        logging.info("%s", line)
    if export_path:
        logging.info("at the end, the final network's best checkpoint is exported to %s",
                     export_path)


def _check_export(path, overwrite):
    """--export checked before any work: a .keras name in an existing directory."""
    if not path:
        return ""
    if not path.endswith(".keras"):
        raise ConfigError(f"--export={path} must end in .keras (a Keras package file)")
    from serving.export import ExportError, check_output

    try:
        return check_output(path, overwrite, name=f"--export={path}",
                            overwrite_fix="pass --overwrite")
    except ExportError as error:
        raise ConfigError(str(error)) from None


def _check_logdir(config):
    """A --logdir that cannot be written (read-only, no permission), found before training:
    TensorFlow's event writer would only fail at its first flush, steps later."""
    from runstore import run_dir
    from training.run.loop import default_logdir

    logdir = config.logdir or default_logdir(config.model_dir)
    problem = run_dir.unwritable(logdir)
    if problem:
        cause, fix = run_dir.reason_and_fix(problem, logdir)
        raise ConfigError(f"cannot write {os.path.abspath(logdir)} (--logdir): {cause}; {fix}; "
                          "nothing was written")


class ExportInterrupted(Exception):
    """SIGINT/SIGTERM during --export: the package's temporary file was removed."""

    def __init__(self, path, exit_code):
        self.exit_code = exit_code
        super().__init__(f"interrupted: nothing was written to {path}; the training is "
                         "complete: run the same command to export")


def _export(model_dir, path, overwrite):
    """Exports the best checkpoint of `model_dir` (the run that ended the command); returns
    the path."""
    from serving import export, runs
    from training.run import interrupt

    try:
        with interrupt.signals_as_interrupts():  # SIGTERM too removes the temporary file
            path = export.export_keras(runs.load_run(model_dir, checkpoint="best"), path,
                                       overwrite=overwrite)
    except KeyboardInterrupt as stop:
        raise ExportInterrupted(path, interrupt.interrupt_exit_code(stop)) from None
    logging.info("exported %s (best checkpoint) to %s", model_dir, path)
    return path


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags()
    # The flags are defined in training/setup/flags.py: --helpshort lists them as train.py's.
    flags.adopt_module_key_flags(training_flags)
    app.run(main)
