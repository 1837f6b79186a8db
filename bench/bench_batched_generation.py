"""Many prompts at once: a list of prompts decoded as one batch against one prompt at a time.

Loads the pretrained package (`pretrained/wt2_base.keras`, or --model) and
continues P prompts (default 16) cut from the shipped WikiText-2 test split
(datasets/wikitext-2: the first lines of text, each cut to a length drawn
between --min_words and --max_words words, so the batch mixes prompts shorter
and longer than the model's memory) for --num_tokens new tokens each, with
the default sampler (temperature 1) and seeds seed + i, two ways:
  * one at a time: `lm.generate(prompt_i, seed=seed + i)` for each prompt;
  * batched: `lm.generate(prompts, seed=seed)`, one call
    (`samplers.decoding.decode_prompts`: each prompt runs alone until the
    memory is full, then the rows run together).
Before timing, both give the same texts (checked: the batch must equal one at
a time). The two are timed in interleaved rounds (--rounds, the order
alternating), after one untimed call each (tracing); per case the median over
rounds of the call's wall time; the speed-up is the median of the per-round
ratios one-at-a-time / batched. A float32 matmul timed every round is a load
indicator.

Usage (from the project root):
    python -m bench.bench_batched_generation              # about 3 minutes on 2 loaded cores
    python -m bench.bench_batched_generation --quick      # smoke check
    python -m bench.bench_batched_generation --prompts=32 --num_tokens=50
Results: bench/results/bench_batched_generation.json and a Markdown table on stdout.
"""

import argparse
import lzma
import os
import random
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common  # noqa: E402

# The shipped copy (xz), so the bench needs no build.
TEST_SPLIT = common.ROOT / "datasets" / "wikitext-2" / "wiki.test.tokens.xz"


def prompts_from_test_split(count, min_words, max_words, seed):
    """`count` prompts: the first lines of text of the test split (no headings), each cut
    to a random number of words in [min_words, max_words]."""
    rng = random.Random(seed)
    with lzma.open(TEST_SPLIT, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    lines = [line for line in lines if line and not line.startswith("=")
             and len(line.split()) >= max_words]
    if len(lines) < count:
        raise SystemExit(f"error: the test split has {len(lines)} lines of at least "
                         f"--max_words={max_words} words, fewer than --prompts={count}")
    return [" ".join(line.split()[:rng.randint(min_words, max_words)])
            for line in lines[:count]]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke check: 4 prompts, 8 tokens, 1 round")
    parser.add_argument("--model", default=str(common.ROOT / "pretrained" / "wt2_base.keras"),
                        help="a .keras package written by export.py")
    parser.add_argument("--prompts", type=int, default=None, help="prompts (default 16)")
    parser.add_argument("--num_tokens", type=int, default=None,
                        help="new tokens per prompt (default 100)")
    parser.add_argument("--min_words", type=int, default=2)
    parser.add_argument("--max_words", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(common.results_path("bench_batched_generation")))
    args = parser.parse_args(argv)
    common.fill_defaults(args, args.quick, prompts=(4, 16), num_tokens=(8, 100), rounds=(1, 5))
    for name in ("prompts", "num_tokens", "rounds", "min_words"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be >= 1")
    if args.max_words < args.min_words:
        parser.error(f"--max_words={args.max_words} must be >= --min_words={args.min_words}")
    return args


def main(argv=None):
    args, command = common.start("bench.bench_batched_generation", parse_args, argv)
    t0 = time.perf_counter()
    import tensorflow as tf

    from bench.bench_train import peak_sampler
    import par

    lm = par.load(args.model)
    prompts = prompts_from_test_split(args.prompts, args.min_words, args.max_words, args.seed)
    lengths = [len(lm.tokenizer.encode(p)) for p in prompts]
    options = dict(num_tokens=args.num_tokens)

    def one_at_a_time():
        return [lm.generate(p, seed=args.seed + i, **options) for i, p in enumerate(prompts)]

    def batched():
        return lm.generate(prompts, seed=args.seed, **options)

    alone, together = one_at_a_time(), batched()  # tracing, and the equality check
    if alone != together:
        raise SystemExit("error: the batch does not equal the prompts one at a time")
    peaks, sample_peak = peak_sampler(512 if args.quick else 2048, (tf.float32,))
    load_start = common.loadavg()
    samples = common.interleaved_rounds(
        {"one at a time": lambda: common.time_call(one_at_a_time),
         "batched": lambda: common.time_call(batched)},
        args.rounds, order="rotate", before_round=sample_peak)
    load_end = common.loadavg()
    seconds = {name: [float(t) for t in times] for name, times in samples.items()}
    speedup = common.paired_ratio(seconds["one at a time"], seconds["batched"])
    tokens = args.prompts * args.num_tokens
    rows = [dict(case=name, seconds=statistics.median(times),
                 tokens_per_sec=tokens / statistics.median(times), round_seconds=times)
            for name, times in seconds.items()]
    table = common.markdown_table(
        ["case", "prompts", "new tokens each", "median s", "tokens/s"],
        [[r["case"], args.prompts, args.num_tokens, f"{r['seconds']:.2f}",
          f"{r['tokens_per_sec']:,.0f}"] for r in rows], "lrrrr")
    table += (f"\n\nBatched / one at a time: **{speedup:.1f}x** (median of {args.rounds} "
              f"per-round ratios). Prompts of {min(lengths)} to {max(lengths)} tokens from the "
              f"test split; the same texts both ways (checked). Command: `{command}`")
    warnings = [w for w in [common.load_warning("float32 matmul", peaks["float32"], load_start,
                                                load_end)] if w]
    print(f"\n{table}\n\n" + "\n".join(warnings))
    common.write_results(args.out, command, dict(
        model=os.path.relpath(args.model, common.ROOT), prompts=prompts, prompt_tokens=lengths,
        num_tokens=args.num_tokens, rounds=args.rounds, sampler="sample (temperature 1)",
        rows=rows, speedup=speedup, same_texts=True, matmul_gflops_samples=peaks["float32"],
        machine=common.machine_info(load_start, load_end), warnings=warnings, markdown=table,
        bench_seconds=time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
