"""Peak memory and step time of gradient accumulation (--batch_split=K).

Each (round, K) runs in a fresh Python process, so that the process's peak
RSS belongs to that K alone. The process builds the trainer's real step
(`training.run.trainer.Trainer.train_step`: forward, backward, clipping,
optimizers, memory threaded from step to step) for a configuration where the
activations dominate memory, runs one step (tracing), resets TensorFlow's
allocator statistics, runs the timed steps and reports:
  * tf_peak: the CPU allocator's peak bytes during the timed steps
    (`tf.config.experimental.get_memory_info("CPU:0")["peak"]`, after
    `reset_memory_stats`): the tensors alive at once in a steady-state step;
  * rss_peak: the process's peak resident set (`resource.getrusage`,
    `ru_maxrss`), TensorFlow's import and the graph included;
  * step time (median of the timed steps).
Rounds interleave the K values (in a rotated order), and the table reports
the median over rounds of each figure.

Default configuration: wt2_base (PAR supernet, soft search: all three
candidates of every block computed) with d_model 256, 4 heads, d_ffn 1024,
seq_len = mem_len = 128, batch 32, float32; token ids drawn from a Zipf law.

Usage (from the project root):
    python -m bench.bench_batch_split                       # K = 1,2,4,8, 3 rounds
    python -m bench.bench_batch_split --splits=1,2 --rounds=1 --steps=2 --d_model=64
Results: bench/results/bench_batch_split.json and a Markdown table on stdout.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

from bench import common

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", default="1,2,4,8", help="comma list of K")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per K")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per process")
    parser.add_argument("--preset", default="wt2_base")
    parser.add_argument("--architecture", default="supernet")
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--d_ffn", type=int, default=None, help="default 4 * d_model")
    parser.add_argument("--seq_len", type=int, default=128, help="also the memory length")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--out", default=str(common.results_path("bench_batch_split")))
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.d_ffn = args.d_ffn or 4 * args.d_model
    return args


# ------------------------------------------------------------------- the child


def _rss_bytes():
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def child(args):
    """Measures one K in this (fresh) process; prints one JSON line."""
    common.keep_cpu_allocator_stats()  # before TensorFlow starts (its memory statistics)
    import resource

    import keras
    import numpy as np
    import tensorflow as tf

    from bench.bench_train import zipf_ids
    from model.transformer_xl.presets import preset_config
    from training.run.trainer import Trainer
    from training.setup.config import TrainConfig

    k = args.child
    model = preset_config(args.preset, architecture=args.architecture, d_model=args.d_model,
                          num_heads=args.num_heads, d_ffn=args.d_ffn, mem_len=args.seq_len)
    ids = zipf_ids(np.random.default_rng(0), model.vocab_size,
                   (args.steps + 1, args.batch_size, args.seq_len + 1))
    batches = [(tf.constant(b[:, :-1]), tf.constant(b[:, 1:])) for b in ids]
    with tempfile.TemporaryDirectory() as workdir:
        config = TrainConfig(
            data_dir="unused", model_dir=workdir, model=model, batch_size=args.batch_size,
            seq_len=args.seq_len, batch_split=k, precision=args.precision, max_steps=10**6,
            warmup_steps=100, search={"arch_warmup_steps": 10**6})
        meta = {"splits": {"train": {"records": 10**6, "batch_size": args.batch_size}}}
        try:
            trainer = Trainer(config, meta, tf.distribute.get_strategy())
            rss_built = _rss_bytes()
            start = time.perf_counter()
            trainer.train_step(*batches[0])  # trace
            first_s = time.perf_counter() - start
            first_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
            tf.config.experimental.reset_memory_stats("CPU:0")
            times = []
            for inputs, targets in batches[1:]:
                start = time.perf_counter()
                out = trainer.train_step(inputs, targets)
                times.append(time.perf_counter() - start)
            if not out["finite"]:
                raise RuntimeError(f"non-finite loss at K={k}")
            tf_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        finally:
            keras.mixed_precision.set_global_policy("float32")
    common.report_to_parent(dict(
        k=k, tf_peak=tf_peak, tf_peak_first_step=first_peak, rss_built=rss_built,
        rss_peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        first_step_s=first_s, step_s=statistics.median(times), steps_s=times,
        loss=out["loss"]))


# ------------------------------------------------------------------ the parent


def summarize(samples, args):
    rows = []
    for k, runs in samples.items():
        rows.append(dict(
            k=k, micro_batch_rows=args.batch_size // k,
            tf_peak=statistics.median(r["tf_peak"] for r in runs),
            rss_peak=statistics.median(r["rss_peak"] for r in runs),
            rss_built=statistics.median(r["rss_built"] for r in runs),
            step_s=statistics.median(r["step_s"] for r in runs),
            first_step_s=statistics.median(r["first_step_s"] for r in runs), runs=runs))
    base = rows[0]
    for row in rows:
        row["tf_peak_vs_1"] = row["tf_peak"] / base["tf_peak"]
        row["step_vs_1"] = row["step_s"] / base["step_s"]
    return rows


def markdown_table(rows, args, command):
    tokens = args.batch_size * args.seq_len
    table = common.markdown_table(
        ["K", "rows per micro-batch", "TF allocator peak", "vs K=1", "peak RSS", "ms/step",
         "tokens/s", "step time vs K=1"],
        [[r["k"], r["micro_batch_rows"], f"{r['tf_peak'] / 2**20:.0f} MiB",
          f"{r['tf_peak_vs_1']:.2f}", f"{r['rss_peak'] / 2**30:.2f} GiB",
          f"{1e3 * r['step_s']:.0f}", f"{tokens / r['step_s']:.0f}", f"{r['step_vs_1']:.2f}x"]
         for r in rows],
        "rrrrrrrr")
    return table + "\n\n" + (
        f"{args.preset} {args.architecture} d_model {args.d_model}, {args.num_heads} heads, "
        f"d_ffn {args.d_ffn}, seq_len = mem_len = {args.seq_len}, batch {args.batch_size}, "
        f"{args.precision}; medians of {args.rounds} fresh processes per K (interleaved), "
        f"{args.steps} timed steps each. Command: `{command}`")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.child is not None:
        child(args)
        return 0
    splits = [int(x) for x in args.splits.split(",") if x.strip()]
    bad = [k for k in splits if k < 1 or args.batch_size % k]
    if bad:
        raise SystemExit(f"--splits: {bad} do not divide --batch_size={args.batch_size}")
    started = time.time()

    def run(k):  # one K in a fresh process, whose peak RSS is that K's alone
        result = common.run_child("bench.bench_batch_split", [*argv, f"--child={k}"])
        print(f"K={k}: TF peak {result['tf_peak'] / 2**20:.0f} MiB, peak RSS "
              f"{result['rss_peak'] / 2**30:.2f} GiB, {1e3 * result['step_s']:.0f} ms/step",
              flush=True)
        return result

    samples = common.interleaved_rounds({k: (lambda k=k: run(k)) for k in splits}, args.rounds,
                                        order="rotate")
    rows = summarize(samples, args)
    command = common.command_line("bench.bench_batch_split", argv)
    table = markdown_table(rows, args, command)
    print(table)
    common.write_results(args.out, command, dict(
        rows=rows, args=vars(args), machine=common.machine_info(), wall_s=time.time() - started,
        table=table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
