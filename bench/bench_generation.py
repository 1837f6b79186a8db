"""Generation tokens/s with the memory cache against recomputing the window.

Measures in one process, interleaved round by round so that load from other
processes hits every case alike, greedy text generation of random-weight
Transformer-XL models (`wt2_base` and `wt2_large`, built by the project's
family registry with a fixed architecture, `transformer_xl` = "af" repeated
by default) at batch 1 and batch 32, two ways:
  * cache: `serving.generation.Decoder` with mem_len = W - 1, as generate.py
    runs: the prompt once, then one forward of length 1 per new token over
    [memory; token];
  * recompute: what a model without a cache has to do, a forward over the
    last W tokens with no memory (the same `Decoder.forward` with mem_len 0
    and an empty state) for every new token.
Either way the newest position attends over W tokens (itself included).
Every step is the compiled forward, the log-probs of the next token, a greedy
argmax and the copy of the new tokens to the host (the next step needs them).
Timing starts in the steady state: the cache's memory is already full (a
prompt of W - 1 tokens ran first) and the recompute window is full. Each
round runs --steps steps of every case; per case, ms/step is the median over
rounds of the round's mean step time (at batch 1 the per-token latency),
tokens/s is batch / that, and the cache speed-up is the median over rounds
of the per-round ratio recompute / cache. A float32 matmul is timed every
round as a load indicator. Token ids are drawn from a Zipf law.

Before timing, each model checks once that the timed cached path gives the
same next-token log-probs as a recomputation over the whole context (2 rows
of 16 tokens, memory covering them; max |difference| <= --atol), and that
dropping the context changes them by far more than --atol (a check that
could not tell a broken cache from a working one would be worthless).

Usage (from the project root):
    python -m bench.bench_generation              # full run, about 2.5 minutes (2 loaded cores)
    python -m bench.bench_generation --quick      # smoke check, seconds
    python -m bench.bench_generation --window=512 --rounds=5
Results: bench/results/bench_generation.json and a Markdown table on stdout.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import common  # noqa: E402
from bench.bench_train import peak_sampler, zipf_ids  # noqa: E402
from model import families  # noqa: E402
from serving.generation import Decoder  # noqa: E402

METHODS = ("cache", "recompute")
CHECK_LEN = 16  # tokens of the equality check (at most the window)
CHECK_ROWS = 2


def build(preset, architecture):
    """(config, model, trainable parameters) of a transformer_xl preset, random weights."""
    config = families.get_family("transformer_xl").preset_config(preset,
                                                                 architecture=architecture)
    model = families.build_model(config)
    return config, model, sum(int(np.prod(v.shape)) for v in model.trainable_variables)


def greedy(log_probs):
    """int32 [B] argmax of [B, V] log-probs, copied to the host."""
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32).numpy()


def max_abs_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def check_cache_equals_recompute(model, cache, recompute, ids, atol):
    """Asserts that the cached path gives a recomputation's next-token log-probs.

    The prompt `ids[:, :P]` (P = half the length) runs in one cached forward,
    then the greedy tokens follow one forward of length 1 each; at every
    position the log-probs are compared with `recompute` over the whole
    context so far (no memory), and, as a control, with `recompute` over the
    last token only.

    Args:
        model: the built model both decoders run.
        cache: Decoder whose mem_len covers the context (>= length - 1).
        recompute: Decoder with mem_len 0.
        ids: int [R, L] token ids, L >= 2.
        atol: largest allowed |difference| of a log-prob.

    Returns:
        dict: rows, prompt_len, positions compared per row, max_abs_diff and
        no_context_max_abs_diff (the control).

    Raises:
        ValueError: the cache's memory does not cover the context.
        AssertionError: the cached log-probs differ by more than atol, or the
            context changes nothing (the check would not detect a broken cache).
    """
    rows, length = ids.shape
    if cache.mem_len < length - 1:
        raise ValueError(f"the check needs mem_len >= {length - 1}, got {cache.mem_len}")
    prompt_len = length // 2
    empty = model.initial_state(rows, 0)
    log_probs, state = cache.forward(ids[:, :prompt_len], empty)
    context = ids[:, :prompt_len]
    diffs, controls = [], []
    while True:
        reference, _ = recompute.forward(context, empty)
        diffs.append(max_abs_diff(log_probs, reference))
        controls.append(max_abs_diff(recompute.forward(context[:, -1:], empty)[0], reference))
        if context.shape[1] == length:
            break
        tokens = greedy(log_probs)
        context = np.concatenate([context, tokens[:, None]], axis=1)
        log_probs, state = cache.forward(tokens[:, None], state)
    result = dict(rows=rows, prompt_len=prompt_len, positions=len(diffs),
                  max_abs_diff=max(diffs), no_context_max_abs_diff=max(controls), atol=atol,
                  mem_len=cache.mem_len)
    if result["max_abs_diff"] > atol:
        raise AssertionError(
            f"cached next-token log-probs differ from a full recomputation by "
            f"{result['max_abs_diff']:.2e} > atol {atol:.0e} with mem_len={cache.mem_len} covering "
            f"{length} tokens: the cached path is broken, its timings would mean nothing")
    if result["no_context_max_abs_diff"] <= 10 * atol:
        raise AssertionError(
            f"dropping the context changes the log-probs by only "
            f"{result['no_context_max_abs_diff']:.2e}: the check cannot tell a broken cache "
            "from a working one on these weights")
    return result


class Stream:
    """`batch` rows generated greedily by one method, timed step by step.

    cache: the memory of the last W - 1 positions, one token per forward.
    recompute: the last W tokens, all of them per forward, no memory.
    """

    def __init__(self, name, method, model, decoder, ids):
        self.name, self.method, self.model, self.decoder = name, method, model, decoder
        batch, window = ids.shape
        self.batch = batch
        self.empty = model.initial_state(batch, 0)
        if method == "cache":  # prompt of W - 1 tokens: the memory starts full
            log_probs, self.state = decoder.forward(ids[:, :-1], self.empty)
            self.tokens = greedy(log_probs)
        else:
            self.context = ids

    def step(self):
        if self.method == "cache":
            log_probs, self.state = self.decoder.forward(self.tokens[:, None], self.state)
            self.tokens = greedy(log_probs)
        else:
            log_probs, _ = self.decoder.forward(self.context, self.empty)
            self.context = np.concatenate([self.context[:, 1:], greedy(log_probs)[:, None]], 1)

    def run(self, steps):
        """Runs `steps` steps; returns the seconds of each."""
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - start)
        return times


def prepare(args):
    """Builds each preset's model and decoders, runs the equality check, makes the streams.

    Returns:
        (models: preset -> dict of config, params, check, decoders; streams).
    """
    rng = np.random.default_rng(0)
    models, streams = {}, []
    for preset in args.presets:
        config, model, params = build(preset, args.architecture)
        decoders = dict(cache=Decoder(model, mem_len=args.window - 1),
                        recompute=Decoder(model, mem_len=0))
        check_ids = zipf_ids(rng, config.vocab_size, (CHECK_ROWS, min(CHECK_LEN, args.window)))
        check = check_cache_equals_recompute(model, decoders["cache"], decoders["recompute"],
                                             check_ids, args.atol)
        print(f"{preset}: {params:,} parameters, architecture "
              f"{config.resolved_architecture}; cache equals recomputation: max |diff| "
              f"{check['max_abs_diff']:.1e} <= {args.atol:.0e} over {check['positions']} "
              f"positions x {check['rows']} rows (without the context: "
              f"{check['no_context_max_abs_diff']:.2f})", flush=True)
        models[preset] = dict(config=config, params=params, check=check, decoders=decoders)
        for batch in args.batch_sizes:
            ids = zipf_ids(rng, config.vocab_size, (batch, args.window))
            for method in METHODS:
                streams.append(Stream(case_name(preset, batch, method), method, model,
                                      decoders[method], ids))
    return models, streams


def case_name(preset, batch, method):
    return f"{preset} batch {batch} {method}"


def measure(args, streams):
    """Samples the streams round-robin (rotating the order).

    Returns:
        dict name -> list per round of the step times (seconds), and "matmul"
        -> per-round float32 matmul GFLOP/s (a load indicator).
    """
    peaks, sample_peak = peak_sampler(args.matmul_n, (tf.float32,))
    for stream in streams:  # warm up
        stream.run(2)
    runs = {s.name: (lambda s=s: s.run(args.steps)) for s in streams}
    samples = common.interleaved_rounds(runs, args.rounds, order="rotate",
                                        before_round=sample_peak)
    return {"matmul": peaks["float32"], **samples}


def summarize(args, models, streams, samples):
    """(rows per case, pairs per preset and batch with the cache speed-up)."""
    rows, per_round = [], {}
    for s in streams:
        rounds = [statistics.mean(times) for times in samples[s.name]]  # s/step per round
        per_round[s.name] = rounds
        step_s = statistics.median(rounds)
        rows.append(dict(
            name=s.name, preset=s.name.split()[0], batch=s.batch, method=s.method,
            mem_len=s.decoder.mem_len, tokens_per_forward=1 if s.method == "cache" else args.window,
            step_ms=1e3 * step_s, tokens_per_sec=s.batch / step_s,
            step_ms_median_of_steps=1e3 * statistics.median(
                t for times in samples[s.name] for t in times),
            round_step_ms=[1e3 * x for x in rounds]))
    pairs = []
    for preset, info in models.items():
        for batch in args.batch_sizes:
            cache = per_round[case_name(preset, batch, "cache")]
            recompute = per_round[case_name(preset, batch, "recompute")]
            pairs.append(dict(
                preset=preset, architecture=info["config"].resolved_architecture,
                params=info["params"], batch=batch,
                cache_ms=1e3 * statistics.median(cache),
                recompute_ms=1e3 * statistics.median(recompute),
                cache_tokens_per_sec=batch / statistics.median(cache),
                recompute_tokens_per_sec=batch / statistics.median(recompute),
                speedup=common.paired_ratio(recompute, cache)))
    return rows, pairs


def markdown_table(pairs, args, command):
    table = common.markdown_table(
        ["model", "params", "batch", "cache ms/step", "recompute ms/step", "cache tokens/s",
         "recompute tokens/s", "cache speed-up"],
        [[f"{p['preset']} `{p['architecture']}`", f"{p['params']:,}", p["batch"],
          f"{p['cache_ms']:.1f}", f"{p['recompute_ms']:.1f}", f"{p['cache_tokens_per_sec']:,.0f}",
          f"{p['recompute_tokens_per_sec']:,.0f}", f"{p['speedup']:.1f}x"] for p in pairs],
        "lrrrrrrr")
    return table + "\n\n" + (
        f"Greedy generation, window W = {args.window} (cache: mem_len {args.window - 1} and one "
        f"token per forward; recompute: a forward over the last {args.window} tokens, no memory), "
        f"float32, {args.rounds} interleaved rounds of {args.steps} steps per case; ms/step "
        "(per-token latency at batch 1) and tokens/s are medians over rounds, the speed-up is "
        f"the median of per-round ratios. Command: `{command}`")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke check: window 16, 2 rounds of 2 steps")
    parser.add_argument("--presets", default="wt2_base,wt2_large",
                        help="comma-separated transformer_xl presets")
    parser.add_argument("--architecture", default="transformer_xl",
                        help="architecture of every model: transformer_xl, an a/f/i string, "
                             "or supernet (its argmax)")
    parser.add_argument("--batch_sizes", type=common.int_list, default=[1, 32],
                        help="comma-separated batch sizes (rows generated together)")
    parser.add_argument("--window", type=int, default=None,
                        help="tokens the newest position attends over, itself included "
                             "(default 128; quick 16)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9)")
    parser.add_argument("--steps", type=int, default=None,
                        help="generated tokens per case per round (default 16)")
    parser.add_argument("--atol", type=float, default=1e-4,
                        help="largest allowed |cached - recomputed| log-prob in the check")
    parser.add_argument("--matmul_n", type=int, default=None,
                        help="size of the matmul timed each round as a load indicator "
                             "(default 2048; quick 512)")
    parser.add_argument("--out", default=str(common.results_path("bench_generation")))
    args = parser.parse_args(argv)
    common.fill_defaults(args, args.quick, window=(16, 128), rounds=(2, 9), steps=(2, 16),
                         matmul_n=(512, 2048))
    args.presets = [p for p in args.presets.split(",") if p]
    if args.window < 2:
        parser.error(f"--window={args.window} must be >= 2 (the newest token and one before)")
    for name in ("rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be >= 1")
    if not args.presets or not args.batch_sizes or min(args.batch_sizes) < 1:
        parser.error("--presets and --batch_sizes need at least one entry (batch sizes >= 1)")
    return args


def main(argv=None):
    args, command = common.start("bench.bench_generation", parse_args, argv)
    t0 = time.perf_counter()
    try:
        models, streams = prepare(args)
    except ValueError as error:  # unknown preset or architecture
        raise SystemExit(f"error: {error}") from None
    load_start = common.loadavg()
    samples = measure(args, streams)
    load_end = common.loadavg()
    rows, pairs = summarize(args, models, streams, samples)
    table = markdown_table(pairs, args, command)
    gflops = samples["matmul"]
    warnings = [w for w in [common.load_warning("float32 matmul", gflops, load_start, load_end)]
                if w]
    if args.quick:
        warnings.append("(smoke check: small window and too few steps to measure anything)")
    print(f"\n{table}\n\n" + "\n".join(warnings))
    result = dict(
        window=args.window, rounds=args.rounds, steps_per_round=args.steps,
        batch_sizes=args.batch_sizes, architecture=args.architecture, precision="float32",
        decoding="greedy",
        models={preset: dict(params=info["params"],
                             architecture=info["config"].resolved_architecture,
                             config=info["config"].to_dict(), check=info["check"],
                             tracing_counts={m: d.tracing_counts()["forward"]
                                             for m, d in info["decoders"].items()})
                for preset, info in models.items()},
        machine=common.machine_info(load_start, load_end),
        matmul_gflops_samples=gflops, rows=rows, pairs=pairs, warnings=warnings, markdown=table,
        elapsed_s=time.perf_counter() - t0)
    out = common.write_results(args.out, command, result)
    print(f"\nresults written to {out}")
    return dict(command=command, **result)


if __name__ == "__main__":
    main()
