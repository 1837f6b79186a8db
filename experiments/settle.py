"""Settle finished PAR searches that disagree by their supernets' own validation loss.

Every candidate architecture (the runs' derived architectures, then --extra's) is
scored as a sub-network of every search's supernet: each block frozen to the
architecture's letter, the supernet's weights as its search left them (its best
checkpoint, else its last), on the same first --eval_max_records valid records
(0: the whole valid split and its tail) with the run's evaluation memory
(training/plugins/par_search/settle.py). The pick is the architecture of the lowest
valid NLL averaged over the supernets (ties: the first listed); no network is trained.

Usage (from the project root):
    python -m experiments.settle --runs=runs/pipe_s0,runs/pipe_s1,runs/pipe_s2 \
        --extra=afafaf --eval_max_records=40
    python -m experiments.settle --runs=runs/pipe_s0,runs/pipe_s1 --out=docs/results/x.json
Results: --out (default <the runs' common parent>/settle.json: runs, architectures,
nll[architecture][run], mean_nll, pick, eval_max_records, tokens, derived, checkpoints,
command), written whole or not at all, and a Markdown table on stdout. Exit status 0
done, 1 an evaluation or the write failed (nothing written), 2 bad input (one `error:`
line; nothing evaluated or written).
"""

import argparse
import math
import os
import sys

from bench import common  # no TensorFlow
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from runstore import run_dir
from training.plugins.par_search import settle

MODULE = "experiments.settle"


class UsageError(ValueError):
    """Bad flags, found before any work: one line naming the flag and the fix."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors are a UsageError (one line, exit status 2)."""

    def error(self, message):
        raise UsageError(message)


def _names(text):
    return [item.strip() for item in str(text).split(",") if item.strip()]


def add_runs_flags(parser, runs_help, verb):
    """--runs (finished searches) and --extra (architectures to `verb` too)."""
    parser.add_argument("--runs", required=True, help="comma-separated directories of finished "
                        f"searches (supernets of one size, candidates and data){runs_help}")
    parser.add_argument("--extra", default="",
                        help=f"comma-separated architectures to {verb} too (a/f/i strings or "
                        "transformer_xl), after the runs' derived ones")


def runs_and_extra(args):
    """Splits --runs and --extra into lists; UsageError when --runs is empty."""
    args.runs, args.extra = _names(args.runs), _names(args.extra)
    if not args.runs:
        raise UsageError("--runs is empty: give the directories of finished searches, "
                         "e.g. --runs=runs/s0,runs/s1")
    return args


def parse_args(argv):
    """Parsed flags (runs and extra as lists); UsageError naming the flag otherwise."""
    parser = Parser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    add_runs_flags(parser, "", "score")
    parser.add_argument("--eval_max_records", type=int, default=0,
                        help="valid records scored, the same for every run (0: the whole "
                        "valid split and its tail)")
    parser.add_argument("--out", default="",
                        help=f"the JSON to write (default <the runs' parent>/"
                        f"{settle.SETTLE_FILE})")
    args = runs_and_extra(parser.parse_args(argv))
    if args.eval_max_records < 0:
        raise UsageError(f"--eval_max_records={args.eval_max_records} must be >= 0 "
                         "(0: the whole valid split)")
    return args


def output_path(out, runs):
    """The file to write: `out`, or settle.json in the runs' common parent; checked."""
    if not out:
        parents = [os.path.dirname(os.path.abspath(run)) for run in runs]
        out = os.path.join(os.path.commonpath(parents), settle.SETTLE_FILE)
    if os.path.isdir(out):
        raise UsageError(f"--out={out} is a directory: give a file name (a .json file)")
    problem = run_dir.unwritable(out)
    if problem:
        cause, fix = run_dir.reason_and_fix(problem, out)
        raise UsageError(f"--out={out}: cannot write it: {cause}; {fix}")
    return out


def _labels(runs):
    """Column names: each run's directory name, its path where two names are the same."""
    names = [os.path.basename(run) for run in runs]
    return {run: name if names.count(name) == 1 else run for run, name in zip(runs, names)}


def _cell(nll):
    return f"{nll:.4f} ({math.exp(nll):.2f})"


def markdown_table(result):
    """architecture x run valid NLL (perplexity), the mean, which runs derived it; the pick."""
    labels = _labels(result.runs)
    means, chosen = result.mean_nll, result.pick
    head = ["architecture", *(labels[run] for run in result.runs), "mean", "derived by"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arch in result.architectures:
        derived_by = ", ".join(labels[run] for run in result.runs
                               if result.derived[run] == arch) or "-"
        name = f"**{arch}** (pick)" if arch == chosen else arch
        cells = [name, *(_cell(result.nll[arch][run]) for run in result.runs),
                 _cell(means[arch]), derived_by]
        lines.append("| " + " | ".join(cells) + " |")
    records = (f"the first {result.eval_max_records} valid records" if result.eval_max_records
               else "the whole valid split")
    tokens = sorted(set(result.tokens.values()))
    lines.append(f"\nValid NLL per token (perplexity) of each supernet with every block frozen "
                 f"to the architecture, on {records} ({', '.join(map(str, tokens))} tokens); "
                 f"pick: {chosen}, mean NLL {means[chosen]:.4f} (perplexity "
                 f"{math.exp(means[chosen]):.2f}).")
    return "\n".join(lines)


def main(argv=None):
    """Exit status: 0 done, 1 an evaluation or the write failed, 2 bad input."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
        out = output_path(args.out, args.runs)
        plan = settle.plan(args.runs, extra=args.extra, eval_max_records=args.eval_max_records)
    except (UsageError, settle.SettleError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    command = common.command_line(MODULE, argv)
    print(f"command: {command}\n{len(plan.architectures)} architectures x {len(plan.runs)} "
          f"supernets: {', '.join(plan.architectures)}", flush=True)
    from evaluation.errors import EvaluationError
    from pardata.errors import DataError
    from runstore.checkpoints import CheckpointError

    try:
        result = settle.evaluate(plan)
    except (CheckpointError, DataError, EvaluationError) as error:
        print(f"error: {' '.join(str(error).split())} (nothing written)", file=sys.stderr)
        return 1
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        run_dir.atomic_write_json(out, dict(result.to_dict(), command=command))
    except (OSError, run_dir.WriteError) as error:
        print(f"error: cannot write {out}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print(f"\n{markdown_table(result)}\n\nwritten to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
