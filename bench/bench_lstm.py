"""Training-step time of the SHA-RNN and the plain LSTM: ProjectedLSTM against Keras' LSTM loop.

The SHA-RNN's blocks use `model.sha_rnn.lstm.ProjectedLSTM`, which off GPUs
computes the input projection of all steps outside the recurrence. This
benchmark times the trainer's real step (`Trainer.train_step`: forward,
backward, clipping, the optimizer, state threaded between steps) of the
reference SHA-RNN configuration (2 layers, D 256, Boom 1024, full softmax
over 256 bytes, batch 8 x 128, SHA-RNN memory 512 so 640 positions are
attended, the presets' lamb_sharnn recipe) with the LSTM path chosen per
case:
  * projected: ProjectedLSTM's hoisted loop (the default off GPUs);
  * keras: Keras' own loop (the layer's fallback, forced per model).
The cases are sampled round-robin in one process (rotating order), so load
from other processes hits them alike; reported: median seconds per step and
the median of the per-round ratios keras / projected (> 1: projected is
faster). Threads: --threads sets TensorFlow's pools (the process should be
pinned with taskset to as many cores).

Usage (from the project root):
    taskset -c 0 python -m bench.bench_lstm --threads=1
    taskset -c 0,1 python -m bench.bench_lstm --threads=2 --out=bench/results/bench_lstm_2t.json
Results: bench/results/bench_lstm[_2t].json and a Markdown table on stdout.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

from bench import common


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1, help="TensorFlow intra- and inter-op "
                   "threads (0: TensorFlow's default)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=5, help="steps per sample")
    p.add_argument("--num_layers", type=int, default=2)
    p.add_argument("--mem_len", type=int, default=512, help="SHA-RNN memory (keys: + 128)")
    p.add_argument("--out", default=str(common.RESULTS / "bench_lstm.json"))
    return p.parse_args(argv)


def make_case(name, preset, overrides, path, workdir):
    from bench.bench_train import Case
    from model import families

    family = families.get_family("sha_rnn")
    config = family.preset_config(preset, **overrides)
    settings = dict(model_family="sha_rnn", preset=preset, **family.train_defaults[preset])
    case = Case(name, config, 8, 128, "float32", workdir, use_trainer=True,
                train_settings=settings)
    if path == "keras":
        for block in case.trainer.model.blocks:  # before the step is traced
            block.lstm._projected_applies = lambda mask: False
    return case


def main(argv=None):
    args, command = common.start("bench.bench_lstm", parse_args, argv)
    if args.threads:
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(
            args.threads)
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    models = {"SHA-RNN": ("sha_rnn_small", dict(num_layers=args.num_layers,
                                                 mem_len=args.mem_len)),
              "LSTM": ("lstm_small", dict(num_layers=args.num_layers))}
    load_start = common.loadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        cases = [make_case(f"{label} {path}", preset, overrides, path, workdir)
                 for label, (preset, overrides) in models.items()
                 for path in ("projected", "keras")]
        for case in cases:
            case.run(3)  # trace and warm up
        samples = common.interleaved_rounds(
            {case.name: (lambda case=case: case.run(args.steps)) for case in cases},
            args.rounds, order="rotate")
    load_end = common.loadavg()
    rows = []
    for label in models:
        projected, keras_loop = samples[f"{label} projected"], samples[f"{label} keras"]
        rows.append(dict(model=label, projected_s=statistics.median(projected),
                         keras_s=statistics.median(keras_loop),
                         keras_over_projected=common.paired_ratio(keras_loop, projected)))
    lines = [f"Seconds per training step, {args.threads or 'default'} thread(s); `{command}`",
             "", common.markdown_row(["model", "ProjectedLSTM s/step", "Keras LSTM s/step",
                                      "Keras / Projected"]),
             common.markdown_row(["---"] * 4)]
    lines += [common.markdown_row([r["model"], f"{r['projected_s']:.3f}", f"{r['keras_s']:.3f}",
                                   f"{r['keras_over_projected']:.2f}"]) for r in rows]
    table = "\n".join(lines)
    print(f"\n{table}")
    out = common.write_results(args.out, command, dict(
        step="training.run.trainer.Trainer.train_step", threads=args.threads, rounds=args.rounds,
        steps_per_sample=args.steps, samples=samples, rows=rows, markdown=table,
        machine=common.machine_info(load_start, load_end),
        elapsed_s=time.perf_counter() - t0))
    print(f"\nresults written to {out}")
    return rows


if __name__ == "__main__":
    sys.exit(main() and 0)
