"""Training-step speed of this tree against an earlier commit, in one run.

Each side runs in its own worker process (experiments/bench_commits_worker.py) with its
own `model/` and `training/` code: the baseline commit is exported with `git archive`
into a temporary directory, the candidate is this working tree (or another commit). Both
workers build the same cases with their tree's `bench/bench_train.py` (`Case`: the
trainer's real `train_step`, Zipf token ids, frozen architecture logits), whichever layout
the commit has, and warm them up; then the driver samples them in alternating order
(A B, B A, ...) for `--rounds` rounds, so that load from other processes hits both alike,
and reports the median tokens/s of each and the median of the per-round ratios.

`--check_steps N` first runs every case for N steps from the same
initialisation with dropout off in both trees and reports the largest
relative difference of the losses (a speed change must not change the loss curve
beyond float rounding, 1e-4 relative).

Usage (from the project root):
    python -m experiments.bench_commits --baseline a07faa5 --rounds 7 --check_steps 50
    python -m experiments.bench_commits --only "soft search float32" --rounds 3
    python -m experiments.bench_commits --quick     # smoke check, seconds of sampling
Results: bench/results/bench_commits.json and a Markdown table on stdout.
"""

import argparse
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from bench import common
from experiments.bench_commits_worker import REPLY_PREFIX  # only the standard library

ROOT = common.ROOT
WORKER = "experiments.bench_commits_worker"
WORKER_FILE = pathlib.Path(__file__).with_name("bench_commits_worker.py")

# (label, preset overrides): the wt2_base cases of bench_train.py. A tree
# without --hard_gradient builds "hard search chosen-only" as its plain hard
# search (the only estimator it had) and says so; a case a tree cannot build
# otherwise is skipped.
CASES = [
    ("soft search", dict(architecture="supernet", search_mode="soft")),
    ("hard search", dict(architecture="supernet", search_mode="hard")),
    ("hard search chosen-only",
     dict(architecture="supernet", search_mode="hard", hard_gradient="chosen")),
    ("transformer_xl afafaf", dict(architecture="transformer_xl")),
    ("derived aafaff", dict(architecture="aafaff")),
]
PRECISIONS = ("float32", "mixed_bfloat16")


# ----------------------------------------------------------------- the driver

class Worker:
    """The worker process of one tree (`python -m experiments.bench_commits_worker` run from
    the tree's root, which is also its only PYTHONPATH entry), driven over pipes."""

    def __init__(self, label, tree, specs, env):
        self.label, self.tree = label, tree
        self.process = subprocess.Popen(
            [sys.executable, "-m", WORKER, "--specs", json.dumps(specs)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(env, PYTHONPATH=str(tree)), cwd=tree)

    def read(self):
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"error: the worker of {self.label} ({self.tree}) exited with "
                                 f"status {self.process.wait()}; its traceback is above")
            if line.startswith(REPLY_PREFIX):
                message = json.loads(line[len(REPLY_PREFIX):])
                if "fatal" in message:
                    raise SystemExit(f"error: {self.label}: {message['fatal']}")
                return message

    def ask(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()


def export_commit(commit, directory):
    """Writes the tree of `commit` (this repository) into `directory`, with this driver's
    worker module (the commit's own, if it has one, may speak another protocol)."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                                 check=True, capture_output=True).stdout
    except subprocess.CalledProcessError as error:
        raise SystemExit(f"--baseline/--candidate: git archive {commit!r} failed: "
                         f"{error.stderr.decode().strip()}") from None
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    target = pathlib.Path(directory) / "experiments" / WORKER_FILE.name
    target.parent.mkdir(exist_ok=True)  # a namespace package where the commit has none
    shutil.copyfile(WORKER_FILE, target)


def resolve(commit):
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", commit],
                          check=True, capture_output=True, text=True).stdout.strip()


def calibrate(workers, name, target_s):
    """Steps per sample so that the slower side's sample lasts about target_s."""
    per_step = max(w.ask(op="run", case=name, steps=3)["seconds"] for w in workers)
    return max(1, round(target_s / per_step))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="a07faa5", help="commit A (the reference)")
    parser.add_argument("--candidate", default="",
                        help="commit B; empty: this working tree, uncommitted changes included")
    parser.add_argument("--baseline_env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable for side A only (repeatable), e.g. "
                             "TF_ENABLE_ONEDNN_OPTS=0 to compare a setting on one tree")
    parser.add_argument("--candidate_env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable for side B only (repeatable)")
    parser.add_argument("--only", default="",
                        help="comma-separated substrings of case names to keep")
    parser.add_argument("--precisions", default="float32",
                        help=f"comma-separated, of {','.join(PRECISIONS)}")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds")
    parser.add_argument("--sample_seconds", type=float, default=4.0,
                        help="length of one sample of one side")
    parser.add_argument("--check_steps", type=int, default=0,
                        help="compare N dropout-free losses of both trees first (0: skip)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke check: transformer_xl only, 2 short rounds, 3 check steps")
    parser.add_argument("--out", default=str(common.results_path("bench_commits")))
    args = parser.parse_args(argv)
    if args.quick:
        args.only = args.only or "transformer_xl afafaf float32"
        args.rounds, args.sample_seconds, args.check_steps = 2, 0.5, args.check_steps or 3
    if args.check_steps < 0:
        parser.error("--check_steps must be 0 (skip) or more")
    if args.sample_seconds <= 0:
        parser.error("--sample_seconds must be positive")
    out_dir = pathlib.Path(args.out).resolve().parent
    if pathlib.Path(args.out).is_dir() or (out_dir.exists() and not os.access(out_dir, os.W_OK)):
        parser.error(f"--out={args.out}: not a writable file path")
    bad = [p for p in args.precisions.split(",") if p not in PRECISIONS]
    if bad:
        parser.error(f"--precisions: unknown {bad}; choose from {list(PRECISIONS)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for flag in ("baseline_env", "candidate_env"):
        for item in getattr(args, flag):
            if "=" not in item or not item.split("=", 1)[0]:
                parser.error(f"--{flag}: expected KEY=VALUE, got {item!r}")
    return args


def case_specs(args):
    specs = [(f"{label} {precision}", overrides, precision)
             for precision in dict.fromkeys(args.precisions.split(","))
             for label, overrides in CASES]
    if args.only:
        keep = [s.strip() for s in args.only.split(",") if s.strip()]
        specs = [s for s in specs if any(k in s[0] for k in keep)]
        if not specs:
            raise SystemExit(f"--only={args.only!r} matches no case of "
                             f"{[f'{c[0]} <precision>' for c in CASES]}")
    return specs


def summarize(names, samples, labels):
    rows = []
    for name in names:
        a, b = samples[name][labels[0]], samples[name][labels[1]]
        paired = common.paired_medians(a, b)  # seconds: a / b is B's speed over A's
        rows.append(dict(
            case=name,
            tokens_per_sec={labels[0]: 1024 / paired["median_a"],
                            labels[1]: 1024 / paired["median_b"]},
            ratio=paired["ratio"], ratio_range=paired["ratio_range"],
            seconds_per_step={labels[0]: a, labels[1]: b}))
    return rows


def markdown(rows, labels, checks, command):
    table = common.markdown_table(
        ["wt2_base, `Trainer.train_step`", f"{labels[0]} tokens/s", f"{labels[1]} tokens/s",
         "B / A (paired median)", "range", "max rel. loss diff"],
        [[row["case"], f"{row['tokens_per_sec'][labels[0]]:,.0f}",
          f"{row['tokens_per_sec'][labels[1]]:,.0f}", f"**{row['ratio']:.2f}x**",
          f"{row['ratio_range'][0]:.2f}-{row['ratio_range'][1]:.2f}",
          "" if checks.get(row["case"]) is None else f"{checks[row['case']]:.1e}"]
         for row in rows],
        "lrrrrr")
    return table + f"\n\n`{command}`"


def main(argv=None):
    args, command = common.start("experiments.bench_commits", parse_args, argv)
    specs = case_specs(args)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory(prefix="bench_commits_trees_") as scratch:
        trees = {}
        envs = {}
        for side, commit, extra in (("A", args.baseline, args.baseline_env),
                                    ("B", args.candidate, args.candidate_env)):
            if commit:
                tree = pathlib.Path(scratch) / side
                tree.mkdir()
                export_commit(commit, tree)
                label = f"{side} {resolve(commit)}"
            else:
                tree, label = ROOT, f"{side} working tree"
            if extra:
                label += " " + " ".join(extra)
            trees[label] = str(tree)
            envs[label] = dict(env, **dict(item.split("=", 1) for item in extra))
        labels = list(trees)
        load_start = common.loadavg()
        t0 = time.perf_counter()
        workers = [Worker(label, tree, specs, envs[label]) for label, tree in trees.items()]
        try:
            ready = [w.read() for w in workers]
            for w, r in zip(workers, ready):
                for name, error in r["errors"].items():
                    print(f"{w.label}: cannot build {name!r} ({error}); skipped", flush=True)
                for name, note in r["notes"].items():
                    print(f"{w.label}: {name}: {note}", flush=True)
            names = [s[0] for s in specs if all(s[0] in r["ready"] for r in ready)]
            if not names:
                raise SystemExit("no case could be built by both trees")
            print(f"built and warmed {len(names)} cases in both trees in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            checks = {}
            for name in names if args.check_steps else []:
                a, b = (w.ask(op="losses", case=name, steps=args.check_steps)["losses"]
                        for w in workers)
                checks[name] = max(
                    abs(x - y) / abs(x) if math.isfinite(x) and math.isfinite(y) else math.inf
                    for x, y in zip(a, b))
                print(f"{name}: {args.check_steps} dropout-free losses, max relative "
                      f"difference {checks[name]:.2e} (first {a[0]:.6f} / {b[0]:.6f}, "
                      f"last {a[-1]:.6f} / {b[-1]:.6f})", flush=True)
            steps = {name: calibrate(workers, name, args.sample_seconds) for name in names}
            samples = {name: {label: [] for label in labels} for name in names}
            for r in range(args.rounds):
                for name in names:
                    for w in common.round_order(workers, r, "alternate"):
                        samples[name][w.label].append(
                            w.ask(op="run", case=name, steps=steps[name])["seconds"])
                print(f"round {r + 1}/{args.rounds} done", flush=True)
        finally:
            for w in workers:
                w.close()
        load_end = common.loadavg()
    rows = summarize(names, samples, labels)
    table = markdown(rows, labels, checks, command)
    print("\n" + table)
    result = dict(sides=labels, rounds=args.rounds, steps_per_sample=steps,
                  notes={w.label: r["notes"] for w, r in zip(workers, ready)},
                  machine=common.machine_info(load_start, load_end), rows=rows,
                  loss_check={"steps": args.check_steps, "max_relative_difference": checks},
                  markdown=table)
    out = common.write_results(args.out, command, result)
    print(f"\nresults written to {out}")
    return dict(command=command, **result)


if __name__ == "__main__":
    main()
