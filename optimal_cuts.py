"""Exact optimal cutoffs for the adaptive softmax (Grave et al. 2017).

This is its command line; the solver, its cost model and the counts readers are
pardata/cutoffs.py.

Usage:
    python optimal_cuts.py --data_dir=data/wikitext2 --num_tails=3
    python optimal_cuts.py --counts_file=counts.txt --format=flags
"""

import dataclasses
import json
import sys

import tools.in_environment  # noqa: F401  (one line, not a traceback, outside the environment)

from absl import logging

from pardata.cutoffs import (
    METHODS,
    CutoffArgumentError,
    format_table,
    optimal_cutoffs,
    read_counts_file,
    read_data_dir_counts,
)
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)

FORMATS = ("table", "flags", "json")


def _define_flags():
    from absl import flags  # Only the CLI reads flags.

    flags.DEFINE_string("data_dir", None, "Built dataset directory (meta.json).")
    flags.DEFINE_string("counts_file", None,
                        "Counts file: `count` or `token count` per line.")
    flags.DEFINE_integer("num_tails", 2, "Number of tail clusters K.")
    flags.DEFINE_integer("d_model", 128, "Model width d.")
    flags.DEFINE_float("proj_factor", 4.0, "Tail i projects to d/proj_factor^i.")
    flags.DEFINE_list("proj_dims", [], "Explicit tail dims (overrides "
                      "proj_factor), e.g. 32,8,2.")
    flags.DEFINE_integer("min_head", 1, "Smallest allowed head size c_0.")
    flags.DEFINE_integer("min_matmul_cols", 0, "GPU model: products with "
                         "fewer output columns cost as much as this many.")
    flags.DEFINE_float("matmul_overhead", 0.0, "GPU model: fixed cost (in "
                       "multiply-adds) per matrix product.")
    flags.DEFINE_float("logit_cost", 0.0, "Extra cost per computed logit "
                       "(bias, exp, softmax gradient, memory traffic) in "
                       "multiply-add equivalents, >= 0. 0 = the plain "
                       "multiply-add model; ~60 fits this CPU, per "
                       "bench/bench_adaptive_softmax.py.")
    flags.DEFINE_enum("method", "auto", METHODS, "Solver (quadratic: slow "
                      "plain DP, for checking).")
    flags.DEFINE_enum("format", "table", FORMATS, "Output format; `flags` "
                      "prints --cutoffs=... for train.py.")
    return flags.FLAGS


def _run(flag_values):
    """Runs the CLI on parsed flags; returns the text to print."""
    if bool(flag_values.data_dir) == bool(flag_values.counts_file):
        raise ValueError("pass exactly one of --data_dir or --counts_file")
    try:
        proj_dims = tuple(int(dim) for dim in flag_values.proj_dims)
    except ValueError:
        raise ValueError(f"--proj_dims={','.join(flag_values.proj_dims)} must "
                         "be comma-separated integers, e.g. 32,8") from None
    if flag_values.counts_file:
        counts = read_counts_file(flag_values.counts_file)
        source = flag_values.counts_file
    else:
        counts = read_data_dir_counts(flag_values.data_dir)
        source = flag_values.data_dir
    if not counts.sum() > 0:
        raise ValueError(f"all counts in {source} are zero; nothing to model")
    result = optimal_cutoffs(
        counts, flag_values.num_tails, flag_values.d_model,
        proj_factor=flag_values.proj_factor, proj_dims=proj_dims,
        min_head=flag_values.min_head,
        min_matmul_cols=flag_values.min_matmul_cols,
        matmul_overhead=flag_values.matmul_overhead,
        logit_cost=flag_values.logit_cost, method=flag_values.method)
    if flag_values.format == "flags":
        return "--cutoffs=" + ",".join(map(str, result.cutoffs))
    if flag_values.format == "json":
        report = dataclasses.asdict(result)
        report.update(speedup=result.speedup, source=source,
                      logit_cost=flag_values.logit_cost)
        return json.dumps(report, indent=2)
    return f"{source}\n{format_table(result, flag_values.logit_cost)}"


def main(argv):
    from absl import flags

    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; all options are "
              "--flags", file=sys.stderr)
        return 1
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # The table names the method.
    try:
        print(_run(flags.FLAGS))
    except CutoffArgumentError as error:
        prefix = "--" if error.argument in flags.FLAGS else ""
        print(f"error: {prefix}{error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main)
