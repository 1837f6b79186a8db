"""Adaptive span: the project's training step against the reference's, tokens/s.

The project side trains `--preset=adaptive_span_small` (the adaptive-span
reference's enwik8_small recipe scaled down: learned key positions, PyTorch
initialisation, the reference's Adagrad) on a byte build of WikiText-2 with
batch 16 x 128, one intra-op and one inter-op thread, from a fresh model: 20
untimed steps, then 3 windows of 50 steps, tokens/s of the median window (the
trainer's own `train_step` on the real input pipeline, spans learning as they
do at the start of training). The reference side is a command that prints one
JSON line with `tokens_per_s` measured the same way (the adaptive-span
reference, run outside the repository: docs/results/adaptive_span_fidelity/
reference/README.md says how). Each round runs both, alternating which goes
first, each in a fresh process, so load from other processes hits both
alike; the ratio is the median of the per-round ratios.

Usage (from the project root, pinned to one core):
    taskset -c 1 python -m bench.bench_span_reference --data_dir=data/wt2_bytes16 \\
        --reference_command="cd /path/to/adaptive-span && python time_ref.py ..."
    python -m bench.bench_span_reference --data_dir=... --rounds=1   # project side only
Results: bench/results/bench_span_reference.json and a Markdown table on stdout.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common

WARMUP_STEPS, WINDOW_STEPS, WINDOWS = 20, 50, 3


def project_tokens_per_s(data_dir, extra=()):
    """Child: the project's tokens/s (median window) as a dict."""
    from training.run.strategy import configure_threads

    configure_threads(intra_op_threads=1, inter_op_threads=1)  # before TensorFlow runs
    from absl import flags

    import data_utils
    import train as train_cli
    from training.run.trainer import Trainer

    with tempfile.TemporaryDirectory() as model_dir:
        fv = train_cli.define_flags(flags.FlagValues())
        fv(["train.py", "--preset=adaptive_span_small", f"--data_dir={data_dir}",
            f"--model_dir={model_dir}", "--seed=1", *extra])
        config = train_cli.config_from_flags(fv)[0]
        meta = data_utils.load_meta(data_dir)
        import tensorflow as tf

        trainer = Trainer(config, meta, tf.distribute.get_strategy())
        batches = iter(data_utils.make_dataset(data_dir, "train", meta=meta))
        tokens = config.batch_size * config.seq_len
        for _ in range(WARMUP_STEPS):
            trainer.train_step(*next(batches))
        windows = []
        for _ in range(WINDOWS):
            start = time.perf_counter()
            for _ in range(WINDOW_STEPS):
                trainer.train_step(*next(batches))
            windows.append(tokens * WINDOW_STEPS / (time.perf_counter() - start))
        spans = [float(s.numpy().mean()) for s in trainer.model.spans]
    return {"system": "project", "tokens_per_s": statistics.median(windows),
            "tokens_per_s_windows": windows, "span_mean_after": spans,
            "extra_flags": list(extra)}


def _reference(command):
    out = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"error: --reference_command failed (exit {out.returncode}):\n"
                         f"{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True,
                        help="byte build with --batch_size=16 --seq_len=128")
    parser.add_argument("--reference_command", default="",
                        help="shell command printing the reference's JSON line (tokens_per_s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--extra", action="append", default=[],
                        help="extra train.py flag of the project side (repeatable)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    if argv is None and "--child" in sys.argv:
        args, command = parse_args(sys.argv[1:]), None
    else:
        args, command = common.start("bench.bench_span_reference", parse_args, argv)
    if not os.path.exists(os.path.join(args.data_dir, "meta.json")):
        raise SystemExit(f"error: --data_dir={args.data_dir} has no meta.json: build it with "
                         "./create_tfrecords.sh wikitext2 --tokenizer=byte --batch_size=16 "
                         "--eval_batch_size=16 --seq_len=128 --output_dir=...")
    if args.child:
        common.report_to_parent(project_tokens_per_s(args.data_dir, args.extra))
        return
    load_start = common.loadavg()
    rounds = []
    for r in range(args.rounds):
        sides = ["project", "reference"] if r % 2 == 0 else ["reference", "project"]
        row = {}
        for side in sides:
            if side == "project":
                row["project"] = common.run_child("bench.bench_span_reference", [
                    "--child", f"--data_dir={args.data_dir}",
                    *[f"--extra={e}" for e in args.extra]])
            elif args.reference_command:
                row["reference"] = _reference(args.reference_command)
        rounds.append(row)
        print(f"round {r + 1}: " + ", ".join(
            f"{k} {v['tokens_per_s']:.0f} tokens/s" for k, v in row.items()), file=sys.stderr)
    project = [row["project"]["tokens_per_s"] for row in rounds]
    result = {"rounds": rounds, "project_tokens_per_s": statistics.median(project),
              "machine": common.machine_info(load_start, common.loadavg())}
    lines = ["| side | tokens/s (median of rounds) |", "|---|---:|",
             f"| project (`adaptive_span_small`) | {result['project_tokens_per_s']:,.0f} |"]
    if args.reference_command:
        reference = [row["reference"]["tokens_per_s"] for row in rounds]
        result["reference_tokens_per_s"] = statistics.median(reference)
        result["ratio"] = statistics.median(p / q for p, q in zip(project, reference))
        lines.append(f"| reference (PyTorch) | {result['reference_tokens_per_s']:,.0f} |")
        lines.append(f"| ratio project / reference (median of per-round ratios) | "
                     f"{result['ratio']:.2f}x |")
    common.write_results(common.results_path("bench_span_reference"), command, result)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
