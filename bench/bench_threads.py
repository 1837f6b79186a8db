"""CPU threading settings against TensorFlow's default, for wt2_base training steps.

TensorFlow fixes its thread pools when it starts, so every setting is its own
`python -m bench.bench_train` process; the settings are run in turn, `--repeats`
times in alternating order, so that load from other processes hits each alike.
Settings (each with the same cases, by default the soft search, the hard search
and the derived fixed network `aaafaf` in float32):
  * default: TensorFlow's own thread pools on every usable core;
  * intra/inter-op threads 1/1, 2/1, 1/2 (`tf.config.threading`);
  * mirrored 2: `--strategy=mirrored --num_cpu_replicas=2` (two logical CPU
    replicas, each half the batch);
  * one core: the default pools with the process pinned to one core (`taskset`),
    how the long runs of docs/results were made;
  * oneDNN, on both cores and on one: TF_ENABLE_ONEDNN_OPTS=1 in the process's
    environment. TensorFlow turns oneDNN on by itself only on CPUs with AVX-512
    VNNI, bfloat16 or AMX, so on an AVX2-only CPU the default runs without it.

Reports, per case, the median tokens/s of each setting over its processes and the
ratio to the default setting's median (a setting is worth an option when it gains
more than 10%).

Usage (from the project root, on an otherwise idle machine):
    python -m bench.bench_threads                 # about 20 minutes
    python -m bench.bench_threads --repeats 1 --rounds 2 --sample_seconds 0.2   # smoke
Results: bench/results/bench_threads.json and a Markdown table on stdout.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from bench import common

CASES = "wt2_base soft search float32,wt2_base hard search float32,wt2_base derived aaafaf float32"


ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def settings(cores):
    """name -> (bench_train flags, cores to pin to or None, environment additions)."""
    one = [cores[-1]]
    return {
        "default": ([], None, {}),
        "intra 1 / inter 1": (["--intra_op_threads", 1, "--inter_op_threads", 1], None, {}),
        "intra 2 / inter 1": (["--intra_op_threads", 2, "--inter_op_threads", 1], None, {}),
        "intra 1 / inter 2": (["--intra_op_threads", 1, "--inter_op_threads", 2], None, {}),
        "mirrored 2 CPU replicas": (["--num_cpu_replicas", 2], None, {}),
        f"one core ({one[0]})": ([], one, {}),
        "oneDNN on": ([], None, ONEDNN),
        f"oneDNN on, one core ({one[0]})": ([], one, ONEDNN),
    }


def run_setting(flags, pin, args, out, env=None):
    """Runs bench_train once with `flags`, pinned to `pin` if given, with `env` added to the
    environment; returns its result JSON."""
    argv = [sys.executable, "-m", "bench.bench_train", "--only", args.cases,
            "--rounds", args.rounds, "--sample_seconds", args.sample_seconds, "--out", out, *flags]
    proc = subprocess.run(list(map(str, argv)), cwd=common.ROOT, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})),
                          preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return common.read_json(out)


def summarize(results, names):
    """Rows: per case and setting, median tokens/s and the ratio to the default's."""
    cases = [row["name"] for row in results[names[0]][0]["rows"]]
    rows = []
    for case in cases:
        tps = {name: statistics.median(
            next(r["tokens_per_sec"] for r in run["rows"] if r["name"] == case)
            for run in results[name]) for name in names}
        for name in names:
            rows.append(dict(case=case, setting=name, tokens_per_sec=tps[name],
                             vs_default=tps[name] / tps[names[0]],
                             runs=[next(r["tokens_per_sec"] for r in run["rows"]
                                        if r["name"] == case) for run in results[name]]))
    return rows


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2,
                        help="processes per setting, in alternating order (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="bench_train rounds per process")
    parser.add_argument("--sample_seconds", type=float, default=1.0,
                        help="bench_train seconds per timed sample")
    parser.add_argument("--cases", default=CASES, help="bench_train --only cases")
    parser.add_argument("--settings", default="",
                        help="comma-separated substrings: run only the settings whose name has "
                        "one (the default setting always runs)")
    parser.add_argument("--out", default=str(common.results_path("bench_threads")))
    return parser.parse_args(argv)


def main(argv=None):
    args, command = common.start("bench.bench_threads", parse_args, argv)
    cores = sorted(os.sched_getaffinity(0))
    table = settings(cores)
    if args.settings:
        keep = [s.strip() for s in args.settings.split(",") if s.strip()]
        table = {name: value for name, value in table.items()
                 if name == "default" or any(k in name for k in keep)}
    names = list(table)
    results = {name: [] for name in names}
    load_start = common.loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            order = names if repeat % 2 == 0 else names[::-1]
            for name in order:
                flags, pin, env = table[name]
                out = os.path.join(tmp, "run.json")
                results[name].append(run_setting(flags, pin, args, out, env))
                tps = ", ".join(f"{r['name']} {r['tokens_per_sec']:.0f}"
                                for r in results[name][-1]["rows"])
                print(f"repeat {repeat + 1}/{args.repeats} {name}: {tps} tokens/s", flush=True)
    load_end = common.loadavg()
    rows = summarize(results, names)
    markdown = common.markdown_table(
        ["case", "setting", "tokens/s", "vs default", "per process"],
        [[r["case"], r["setting"], f"{r['tokens_per_sec']:.0f}", f"{r['vs_default']:.2f}x",
          " / ".join(f"{t:.0f}" for t in r["runs"])] for r in rows], "llrrl")
    markdown += (f"\n\nMedians over {args.repeats} processes per setting (alternating order), "
                 f"each {args.rounds} interleaved rounds of {args.sample_seconds} s samples; "
                 f"cores usable: {cores}. Command: `{command}`")
    print(f"\n{markdown}")
    result = dict(machine=common.machine_info(load_start, load_end), rows=rows,
                  settings={name: dict(flags=list(map(str, table[name][0])), pin=table[name][1],
                                       env=table[name][2]) for name in names},
                  processes={name: [dict(threads=run["threads"], rows=[
                      dict(name=r["name"], tokens_per_sec=r["tokens_per_sec"],
                           samples_s=r["samples_s"]) for r in run["rows"]],
                      peak_gflops=run["peak_gflops"]) for run in results[name]]
                      for name in names},
                  markdown=markdown)
    out = common.write_results(args.out, command, result)
    print(f"\nresults written to {out}")
    return dict(command=command, **result)


if __name__ == "__main__":
    main()
