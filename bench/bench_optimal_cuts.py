"""Benchmark of optimal_cuts.py: solver time and predicted softmax speed-up.

Times `optimal_cutoffs` (median of --repeats runs) on the WikiText-2 word
counts (whitespace tokens plus one <eos> per line of wiki.train.tokens,
N = 33,278) for K = 1..4 tails and on a synthetic Zipf vocabulary the size of
WikiText-103's (N = 267,735, K = 4), plus WikiText-2 rows with
`logit_cost=60` (the CPU fit of bench/bench_adaptive_softmax.py; K = 2, 3,
d = 128), then prints a Markdown table for the README. The predicted speed-up
is the cost model's, 1 / relative cost, under that row's logit cost s; the
measured speed-up of the layer itself is another benchmark's job.

Usage (from the repository root):
    python -m bench.bench_optimal_cuts [--repeats=5] [--quadratic | --noquadratic]
"""

import argparse
import os
import sys

from absl import logging
import numpy as np

from bench import common
from pardata import cutoffs as optimal_cuts


def parse_bool(text):
    """absl's spellings of a boolean flag's value (--quadratic=false)."""
    value = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}.get(
        text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir",
                        default=str(common.WIKITEXT2_DIR),
                        help="Directory holding wiki.train.tokens; the copy in datasets/ "
                        "when it has none.")
    parser.add_argument("--repeats", type=int, default=5,
                        help="Timed runs per row (the median is shown).")
    parser.add_argument("--quadratic", type=parse_bool, nargs="?", const=True, default=True,
                        help="Also time the plain O(K N^2) DP once on WikiText-2 with K = 2, "
                        "for comparison (--noquadratic: not).")
    parser.add_argument("--noquadratic", dest="quadratic", action="store_false",
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)

WIKITEXT103_TYPES = 267_735
WIKITEXT103_TOKENS = 103_227_021


def zipf_counts(size, tokens, exponent=1.0):
    """Deterministic Zipf counts (rank r gets tokens / (r^s * H)), min 1."""
    weights = 1.0 / np.arange(1, size + 1) ** exponent
    return np.maximum(1, np.round(tokens * weights / weights.sum()))


def timed(repeats, *args, **kwargs):
    """(result, median seconds) of optimal_cutoffs over `repeats` runs."""
    results = []

    def solve():
        results.append(optimal_cuts.optimal_cutoffs(*args, **kwargs))

    seconds = common.median_time(solve, repeats)
    return results[-1], seconds


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.set_verbosity(logging.WARNING)  # One info line per solve.
    wt2 = common.wikitext2_train_counts(args.data_dir)
    zipf = zipf_counts(WIKITEXT103_TYPES, WIKITEXT103_TOKENS)
    rows = []
    for name, counts, tails, widths, logit_cost in (
            ("WikiText-2 words", wt2, (1, 2, 3, 4), (128, 512), 0.0),
            ("Zipf s=1 (WikiText-103 size)", zipf, (4,), (128, 512), 0.0),
            ("WikiText-2 words", wt2, (2, 3), (128,), 60.0)):
        for d_model in widths:
            for num_tails in tails:
                result, seconds = timed(args.repeats, counts, num_tails,
                                        d_model, logit_cost=logit_cost)
                rows.append((name, counts.size, num_tails, d_model, logit_cost,
                             result, seconds, f"median of {args.repeats}"))
    if args.quadratic:
        result, seconds = timed(1, wt2, 2, 128, method="quadratic")
        rows.append(("WikiText-2 words", wt2.size, 2, 128, 0.0, result,
                     seconds, "1 run, plain DP"))

    command = common.command_line("bench.bench_optimal_cuts", [f"--repeats={args.repeats}"] + (
        [] if args.quadratic else ["--noquadratic"]))
    print(f"command: {command}")
    print(f"machine: {os.cpu_count()} CPUs, load average {common.loadavg()[0]:.2f}, "
          f"numpy {np.__version__}\n")
    print(common.markdown_table(
        ["counts", "N", "K", "d_model", "logit cost s", "cutoffs", "relative cost",
         "predicted speed-up", "method", "solver time"],
        [[name, f"{size:,}", num_tails, d_model, f"{logit_cost:g}",
          ",".join(map(str, result.cutoffs)), f"{result.relative_cost:.4f}",
          f"{result.speedup:.1f}x", result.method, f"{seconds * 1000:,.0f} ms ({note})"]
         for name, size, num_tails, d_model, logit_cost, result, seconds, note in rows],
        "lrrrrlrrlr"))


if __name__ == "__main__":
    main()
