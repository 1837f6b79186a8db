"""Benchmark: building WikiText-2 (word, sentencepiece 12k) and reading it back.

Each run is a fresh process (so peak RSS is per build); build time excludes the
TensorFlow import, which is reported separately. Prints medians, the ratio to
the data-pipeline budgets (word < 30 s, sentencepiece 12k < 90 s, RSS < 2 GB) and
the command line.

    python -m bench.bench_data --runs=3      # from the project root
"""

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

from bench import common

BUDGET_SECONDS = {"word": 30.0, "sentencepiece": 90.0}
BUDGET_RSS_MB = 2048.0


def child(args) -> None:
    """One build (and, for word, a read of the train split) in this process."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.perf_counter()
    import data_utils  # noqa: F401  (TensorFlow import, timed apart)
    from pardata import records  # noqa: F401
    import_seconds = time.perf_counter() - start
    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    config = data_utils.BuildConfig.for_dataset(
        "wikitext2", data_dir=args.data_dir, output_dir=args.out, tokenizer=args.tokenizer,
        overwrite=True)
    start = time.perf_counter()
    meta = data_utils.build_dataset(config)
    build_seconds = time.perf_counter() - start
    result = {"import_s": import_seconds, "build_s": build_seconds,
              "rss_import_mb": rss_after_import,
              "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "ids": sum(s["ids"] for s in meta["splits"].values()),
              "vocab": meta["vocab_size"]}
    if args.read:
        ds = data_utils.make_dataset(args.out, "train")
        start = time.perf_counter()
        batches = sum(1 for _ in ds)
        seconds = time.perf_counter() - start
        tokens = batches * meta["batch_size"] * meta["seq_len"]
        result.update(read_s=seconds, read_tokens_per_s=tokens / seconds,
                      read_batches_per_s=batches / seconds)
    common.report_to_parent(result)


def run(tokenizer: str, args, out: str, read: bool) -> dict:
    """One build in a fresh process (so that its peak RSS is that build's)."""
    try:
        return common.run_child("bench.bench_data", [
            "--child", f"--tokenizer={tokenizer}", f"--data_dir={args.data_dir}",
            f"--out={out}"] + (["--read"] if read else []))
    except RuntimeError as error:
        raise SystemExit(f"child failed: {error}") from None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=str(common.ROOT / "data" / "raw"),
                        help="raw files; WikiText-2 is unpacked there from datasets/ if absent")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokenizers", default="word,sentencepiece")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    print("command: " + common.command_line("bench.bench_data", argv))
    print(f"machine: {os.cpu_count()} CPUs, load average {common.loadavg()[0]:.1f}")
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tokenizer in args.tokenizers.split(","):
            results = [run(tokenizer, args, os.path.join(tmp, tokenizer), read=tokenizer == "word")
                       for _ in range(args.runs)]
            m = {k: statistics.median(r[k] for r in results) for k in results[0]}
            medians[tokenizer] = m
            print(f"{tokenizer:>13}: build {m['build_s']:6.1f} s median of {args.runs} "
                  f"({', '.join(format(r['build_s'], '.1f') for r in results)}), "
                  f"{m['build_s'] / BUDGET_SECONDS[tokenizer]:.2f} x budget "
                  f"{BUDGET_SECONDS[tokenizer]:.0f} s; peak RSS {m['rss_mb']:.0f} MB "
                  f"({m['rss_mb'] / BUDGET_RSS_MB:.2f} x 2 GB; {m['rss_import_mb']:.0f} MB after "
                  f"importing TensorFlow {m['import_s']:.1f} s); {int(m['ids'])} ids, "
                  f"vocab {int(m['vocab'])}")
            if "read_s" in m:
                print(f"{'':>13}  read train: {m['read_tokens_per_s'] / 1e6:.2f} M tokens/s, "
                      f"{m['read_batches_per_s']:.0f} batches/s ({m['read_s']:.2f} s)")
    if len(medians) == 2:
        ratio = medians["sentencepiece"]["build_s"] / medians["word"]["build_s"]
        print(f"sentencepiece / word build time: {ratio:.1f} x")


if __name__ == "__main__":
    main()
