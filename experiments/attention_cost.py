"""Where PAR's trade can pay: an attention block's cost against a dense block's, by memory.

PAR replaces attention blocks by dense (feed-forward) or identity blocks. That saves time
only where an attention block costs more than the dense block it becomes. This measures
that cost at the wt2_base width (d_model 128, 4 heads, d_ffn 512, segment 32, batch 32)
for several memory lengths M: at each M, networks of different attention/dense/identity
counts take interleaved training steps in this process (the trainer's own step,
experiments/cost_sweep.sample_throughput), and the time per token is fitted as

    time = fixed + n_attention * t_attention + n_dense * t_dense

(experiments/block_times.fit_block_times, relative to `afafaf` at that M), beside the
same fit of the project's one FLOPs model (model/transformer_xl/flops.py). The answer is
the ratio t_attention / t_dense: below 1 an attention block is the cheaper one and
trading it for a dense block slows the network down; above 1 the trade saves time.
Nothing is trained and no quality is measured.

Usage (from the project root; one core, about 2 minutes per memory length):
    taskset -c 1 python -m experiments.attention_cost --mem_lens=16,64,128,256 \
        --out=bench/results/attention_cost.json
Results: --out (JSON: command, cpus, points, rows: one per memory length with measured and
FLOPs block times, tokens/s of every point), written whole or not at all, and a Markdown
table on stdout. Exit status 0 done, 1 the write failed, 2 bad flags (one `error:` line,
nothing measured).
"""

import argparse
import os
import sys

from bench import common  # no TensorFlow
from experiments import block_times
from runstore import run_dir
from training.setup.config import PRECISIONS

MODULE = "experiments.attention_cost"
# Attention/dense/identity counts that separate the three unknowns (a+f=6 alone would be
# collinear with the fixed part).
POINTS = ("afafaf", "aaaaaf", "afffff", "aaaiii", "fffiii")
BATCH, SEQ_LEN = 32, 32


class UsageError(ValueError):
    """Bad flags: one line naming the flag and the fix."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _ints(flag, text):
    try:
        values = [int(item) for item in str(text).split(",") if item.strip()]
    except ValueError:
        raise UsageError(f"{flag}={text}: give comma-separated integers, e.g. 16,64,128")
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag}={text}: give comma-separated integers >= 1, e.g. 16,64,128")
    return values


def parse_args(argv):
    """Parsed flags; UsageError naming the flag otherwise."""
    parser = _Parser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    parser.add_argument("--mem_lens", default="16,64,128,256",
                        help="memory lengths M to measure (the wt2_base preset's is 16)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds per memory length")
    parser.add_argument("--sample_seconds", type=float, default=1.0,
                        help="length of one sample of one network")
    parser.add_argument("--precision", default="float32", choices=PRECISIONS)
    parser.add_argument("--out", default="", help="JSON file to write (default: none)")
    args = parser.parse_args(argv)
    args.mem_lens = _ints("--mem_lens", args.mem_lens)
    if args.rounds < 2:
        raise UsageError(f"--rounds={args.rounds}: give at least 2 (medians of paired rounds)")
    if not args.sample_seconds > 0:
        raise UsageError(f"--sample_seconds={args.sample_seconds}: give a length > 0")
    return args


def models_at(mem_len):
    """Point name -> the wt2_base ModelConfig with that architecture and memory."""
    from model.transformer_xl.presets import preset_config

    return {arch: preset_config("wt2_base", architecture=arch, mem_len=mem_len, seed=0)
            for arch in POINTS}


def row_at(mem_len, args):
    """Measured and FLOPs block times at one memory length (imports TensorFlow)."""
    from experiments import cost_sweep

    models = models_at(mem_len)
    measured = cost_sweep.measured_networks(models, block_times.REFERENCE, BATCH, SEQ_LEN,
                                            args.precision, args.rounds, args.sample_seconds)
    flops = block_times.relative_flops(models, SEQ_LEN, BATCH)
    networks = {name: (name, measured["networks"][name]["tokens_per_sec"], flops[name])
                for name in models}
    costs = block_times.block_costs(networks)

    def ratio(fit):
        return fit["attention"] / fit["dense"] if fit else None

    return dict(mem_len=mem_len, block_times=costs,
                attention_over_dense=dict(measured=ratio(costs["measured"]),
                                          flops=ratio(costs["flops"])),
                tokens_per_sec={n: measured["networks"][n]["tokens_per_sec"] for n in models},
                vs_afafaf={n: measured["networks"][n]["vs_reference"] for n in models},
                relative_flops=flops, loadavg=[measured["loadavg_start"],
                                               measured["loadavg_end"]])


def table(rows):
    """Markdown: one line per memory length."""
    lines = ["| memory M | t_attention / t_dense measured | FLOPs model | "
             + " | ".join(f"`{p}` tokens/s" for p in POINTS) + " |",
             "|---:|---:|---:|" + "---:|" * len(POINTS)]
    for row in rows:
        ratios = row["attention_over_dense"]
        cells = [f"{ratios[k]:.2f}" if ratios[k] is not None else "n/a"
                 for k in ("measured", "flops")]
        speeds = [f"{row['tokens_per_sec'][p]:,.0f}" for p in POINTS]
        lines.append(f"| {row['mem_len']} | " + " | ".join(cells + speeds) + " |")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)

    rows = []
    for mem_len in args.mem_lens:
        print(f"memory {mem_len}: {len(POINTS)} networks, {args.rounds} rounds", flush=True)
        rows.append(row_at(mem_len, args))
    print(table(rows))
    if args.out:
        result = dict(command=common.command_line(MODULE, argv),
                      cpus=sorted(os.sched_getaffinity(0)), points=list(POINTS),
                      batch_size=BATCH, seq_len=SEQ_LEN, precision=args.precision, rows=rows)
        try:
            run_dir.atomic_write_json(args.out, result, sort_keys=False)
        except (OSError, run_dir.WriteError) as error:
            print(f"error: {args.out}: {error}", file=sys.stderr)
            return 1
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
