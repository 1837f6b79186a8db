"""Adaptive span against a fixed span of the same maximum: tokens/s and memory.

Reads a finished adaptive-span run (its config.json, and the learned spans
metrics.json records at the end of training, training/plugins/span_report/plugin.py)
and measures, in this process, the trainer's own training step
(bench/bench_train.py's Case: forward, backward, clipping, Adam, memory
threaded from step to step; Zipf-distributed ids, no input pipeline) for:
  * "adaptive span (learned)": the run's model with the run's learned spans:
    memory older than ceil(max_h z_h + R) is dropped before attention;
  * "fixed span": the same model with plain relative attention over the whole
    memory (mem_len keys, the adaptive model's maximum span when mem_len =
    span_max), the span every head would have without adaptive span;
  * "adaptive span (maximum)": the adaptive model with every span at span_max,
    to separate the cost of the span machinery (mask, renormalisation) from
    what the learned spans save.
Tokens/s are sampled round-robin (bench_train.sample_interleaved), so load from
other processes hits every network alike; ratios are medians of per-round
ratios. Memory: the CPU allocator's peak bytes during one steady-state step
(`tf.config.experimental.get_memory_info("CPU:0")["peak"]` after
`reset_memory_stats`), every network measured the same way in this process.
The statistics see the allocator's large allocations only (256 KiB and more
on this TensorFlow; smaller ones are pooled), which is where the attention's
[B, N, T, K] tensors land at any realistic size.

Usage (from the project root):
    python -m bench.bench_span --run_dir=runs/wt2_bytes_span
    python -m bench.bench_span --run_dir=runs/wt2_bytes_span --rounds=9 --batch_size=8
Results: bench/results/bench_span.json and a Markdown table on stdout.
"""

import dataclasses
import json
import pathlib
import statistics
import sys
import tempfile

from bench import common

common.keep_cpu_allocator_stats()  # before TensorFlow starts

import tensorflow as tf  # noqa: E402

from bench import bench_train  # noqa: E402  (sets the TensorFlow log level)

LEARNED, FIXED, MAXIMUM = "adaptive span (learned)", "fixed span", "adaptive span (maximum)"


class SpanBenchError(RuntimeError):
    """A user-fixable problem with --run_dir."""


def read_run(run_dir):
    """(TrainConfig, learned spans per layer in tokens) of a finished adaptive-span run."""
    from training.setup.config import CONFIG_FILE, TrainConfig

    run_dir = pathlib.Path(run_dir)
    if not (run_dir / CONFIG_FILE).exists():
        raise SpanBenchError(f"--run_dir={run_dir} has no {CONFIG_FILE}: pass the directory of a "
                             "training run (train.py --attention=adaptive_span --model_dir=...)")
    config = TrainConfig.load(str(run_dir))
    if getattr(config.model, "attention", None) != "adaptive_span":
        raise SpanBenchError(f"--run_dir={run_dir} is not an adaptive-span run (its config has "
                             "no attention=adaptive_span)")
    metrics_path = run_dir / "metrics.json"
    spans = None
    if metrics_path.exists():
        spans = json.loads(metrics_path.read_text()).get("spans")
    if not spans:
        raise SpanBenchError(f"{metrics_path} has no learned spans: the run has not finished "
                             f"(resume it to the end), then run this again")
    return config, [list(map(float, layer)) for layer in spans["per_layer"]]


def kept_memory(spans, span_ramp, mem_len):
    """Memory positions an adaptive-span layer keeps: min(M, ceil(max_h z_h + R)) (rounded up
    to a multiple of `TRIM_MULTIPLE`)."""
    from model.layers.adaptive_span import memory_keep_length

    return int(memory_keep_length(spans, span_ramp, mem_len))


def set_spans(model, spans):
    """Assigns spans in tokens (one list per attention layer) to the model's span variables."""
    layers = model.attention_layers
    if len(layers) != len(spans):
        raise SpanBenchError(f"the run has spans for {len(spans)} layers but its model has "
                             f"{len(layers)} attention layers")
    for layer, layer_spans in zip(layers, spans):
        layer.span.assign([s / layer.span_max for s in layer_spans])


def peak_bytes(case):
    """CPU allocator peak during one steady-state step of `case`."""
    return common.cpu_peak_bytes(tf, lambda: case.run(1))


def measure(model_config, spans, batch_size, seq_len, rounds, sample_seconds, precision):
    """Tokens/s (interleaved) and peak step memory of the three networks."""
    span_max = model_config.span_max
    configs = {LEARNED: model_config, MAXIMUM: model_config,
               FIXED: dataclasses.replace(model_config, attention="relative",
                                          span_positions="relative")}
    assigned = {LEARNED: spans, MAXIMUM: [[float(span_max)] * len(s) for s in spans]}
    with tempfile.TemporaryDirectory(prefix="bench_span_") as workdir:
        cases = []
        for name, config in configs.items():
            case = bench_train.Case(name, config, batch_size, seq_len, precision, workdir,
                                    use_trainer=True)
            if name in assigned:
                set_spans(case.trainer.model, assigned[name])
            cases.append(case)
        steps = bench_train.warm_up(cases, sample_seconds)
        peaks = {case.name: peak_bytes(case) for case in cases}
        samples = bench_train.sample_interleaved(cases, steps, rounds)
    tokens = batch_size * seq_len
    rows = []
    for case in cases:
        row_spans = assigned.get(case.name)
        rows.append(dict(
            name=case.name,
            tokens_per_sec=tokens / statistics.median(samples[case.name]),
            vs_fixed=common.paired_ratio(samples[FIXED], samples[case.name]),
            peak_bytes=peaks[case.name], peak_vs_fixed=peaks[case.name] / peaks[FIXED],
            mean_span=None if row_spans is None else statistics.fmean(
                s for layer in row_spans for s in layer),
            kept_memory=[model_config.mem_len] * len(spans) if row_spans is None else [
                kept_memory(s, model_config.span_ramp, model_config.mem_len) for s in row_spans],
            steps_per_sample=steps[case.name], samples_s=samples[case.name]))
    return rows


def markdown_table(rows, command, config, batch_size, seq_len):
    table = common.markdown_table(
        ["network", "mean span", "memory kept per layer", "tokens/s", "vs fixed",
         "peak step memory (MiB)", "vs fixed"],
        [[r["name"], "" if r["mean_span"] is None else f"{r['mean_span']:.0f}",
          ", ".join(map(str, r["kept_memory"])), f"{r['tokens_per_sec']:,.0f}",
          f"{r['vs_fixed']:.2f}x", f"{r['peak_bytes'] / 2**20:.1f}", f"{r['peak_vs_fixed']:.2f}x"]
         for r in rows],
        "lrlrrrr")
    model = config.model
    return table + "\n\n" + (
        f"d_model {model.d_model}, {model.num_blocks} blocks ({model.architecture}), "
        f"{model.num_heads} heads, span_max {model.span_max}, ramp {model.span_ramp}, "
        f"mem_len {model.mem_len}, batch {batch_size} x {seq_len}. Tokens/s: median over "
        "interleaved rounds of the trainer's step; vs fixed: median per-round ratio; peak "
        "step memory: the CPU allocator's peak during one step. "
        f"Command: `{command}`")


def parse_args(argv):
    parser = common.Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--run_dir", required=True, help="a finished adaptive-span training run")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="batch size (default: the run's)")
    parser.add_argument("--seq_len", type=int, default=None, help="segment length (default: the "
                                                                  "run's)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--sample_seconds", type=float, default=2.0, help="seconds per sample")
    parser.add_argument("--precision", default=None, choices=["float32", "mixed_bfloat16"],
                        help="default: the run's")
    parser.add_argument("--out", default=str(common.results_path("bench_span")),
                        help="results JSON")
    args = parser.parse_args(argv)
    for name in ("batch_size", "seq_len", "rounds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name}={value} must be >= 1")
    if args.sample_seconds <= 0:
        parser.error(f"--sample_seconds={args.sample_seconds} must be > 0")
    return args


def main(argv=None):
    args, command = common.start("bench.bench_span", parse_args, argv)
    try:
        config, spans = read_run(args.run_dir)
    except SpanBenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    batch_size = args.batch_size or config.batch_size
    seq_len = args.seq_len or config.seq_len
    precision = args.precision or config.precision
    load_start = common.loadavg()
    try:
        rows = measure(config.model, spans, batch_size, seq_len, args.rounds,
                       args.sample_seconds, precision)
    except RuntimeError as error:  # no allocator statistics (bench.common.cpu_peak_bytes)
        print(f"error: {error}", file=sys.stderr)
        return 1
    load_end = common.loadavg()
    table = markdown_table(rows, command, config, batch_size, seq_len)
    print(f"\n{table}\n", flush=True)
    result = dict(run_dir=str(args.run_dir), batch_size=batch_size,
                  seq_len=seq_len, precision=precision, rounds=args.rounds,
                  model=config.model.to_dict(), spans=spans,
                  machine=common.machine_info(load_start, load_end), rows=rows,
                  markdown=table)
    out = common.write_results(args.out, command, result)
    print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
