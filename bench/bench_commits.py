"""Training-step speed of this tree against an earlier commit, in one run (issue 13).

Each side runs in its own worker process (its own `model/` and `training/`
code): the baseline commit is exported with `git archive` into a temporary
directory, the candidate is this working tree (or another commit). Both
workers build the same cases with their tree's `bench/bench_train.py`
(`Case`: the trainer's real `train_step`, Zipf token ids, frozen
architecture logits) and warm them up; then the driver samples them in
alternating order (A B, B A, ...) for `--rounds` rounds, so that load from
other processes hits both alike, and reports the median tokens/s of each and
the median of the per-round ratios.

`--check_steps N` first runs every case for N steps from the same
initialisation with dropout off in both trees and reports the largest
relative difference of the losses (issue 13: the loss curve must not change
beyond float rounding, 1e-4 relative).

Usage:
    python bench/bench_commits.py --baseline a07faa5 --rounds 7 --check_steps 50
    python bench/bench_commits.py --only "soft search float32" --rounds 3
    python bench/bench_commits.py --quick     # smoke check, seconds of sampling
Results: bench/results/bench_commits.json and a Markdown table on stdout.
"""

import argparse
import json
import math
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

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


# ----------------------------------------------------------------- the worker

def worker(tree, specs):
    """Serves one tree: builds its cases, then answers commands on stdin.

    Commands (one JSON object per line): {"op": "run", "case": name,
    "steps": n} -> {"seconds": per step}; {"op": "losses", "case": name,
    "steps": n} -> {"losses": [...]} from a fresh dropout-free case;
    {"op": "quit"}.
    """
    here = str(pathlib.Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, tree)
    os.chdir(tree)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from bench import bench_train  # this tree's
        from model.transformer_xl.presets import preset_config
    except ImportError as error:
        reply({"fatal": f"{tree} has no usable bench/bench_train.py or model/transformer_xl/presets.py "
                        f"({error}); choose a newer commit"})
        return

    workdir = tempfile.mkdtemp(prefix="bench_commits_")
    cases, errors = {}, {}

    def build(name, overrides, precision, extra=None):
        config = preset_config("wt2_base", **dict(overrides, **(extra or {})))
        return bench_train.Case(name, config, 32, 32, precision, workdir, True)

    notes = {}
    for index, (name, overrides, precision) in enumerate(specs):
        try:
            try:
                cases[name] = build(name, overrides, precision)
            except (TypeError, ValueError) as error:
                # Trees before --hard_gradient had only the chosen-only estimator.
                unknown = "['hard_gradient']" in str(error)  # "unknown ModelConfig field(s) [...]"
                if overrides.get("hard_gradient") != "chosen" or not unknown:
                    raise
                overrides = {k: v for k, v in overrides.items() if k != "hard_gradient"}
                specs[index] = (name, overrides, precision)
                cases[name] = build(name, overrides, precision)
                notes[name] = "no --hard_gradient in this tree: its hard search is chosen-only"
                plain = name.replace("hard search chosen-only", "hard search")
                if any(spec[0] == plain for spec in specs):
                    notes[plain] = ("no --hard_gradient in this tree: this is the chosen-only "
                                    "estimator, not the default of later trees")
            cases[name].run(2)  # trace and warm up
        except (TypeError, ValueError) as error:  # a field this tree does not have
            errors[name] = f"{type(error).__name__}: {error}"
    reply({"ready": sorted(cases), "errors": errors, "notes": notes})
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        name = command["case"]
        if command["op"] == "run":
            reply({"seconds": cases[name].run(command["steps"])})
        elif command["op"] == "losses":
            spec = next(s for s in specs if s[0] == name)
            case = build(name + " check", spec[1], spec[2],
                         extra=dict(dropout=0.0, attn_dropout=0.0))
            losses = []
            for step in range(command["steps"]):
                inputs, targets = case.batches[step % len(case.batches)]
                losses.append(float(case.step_fn(inputs, targets)))
            reply({"losses": losses})


def reply(obj):
    sys.stdout.write("@@" + json.dumps(obj) + "\n")
    sys.stdout.flush()


# ----------------------------------------------------------------- the driver

class Worker:
    """A worker process of one tree, driven over pipes."""

    def __init__(self, label, tree, specs, env):
        self.label, self.tree = label, tree
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", tree,
                   "--specs", json.dumps(specs)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env, cwd=tree)

    def read(self):
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"error: the worker of {self.label} ({self.tree}) exited with "
                                 f"status {self.process.wait()}; its traceback is above")
            if line.startswith("@@"):
                message = json.loads(line[2:])
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
    """Writes the tree of `commit` (this repository) into `directory`."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                                 check=True, capture_output=True).stdout
    except subprocess.CalledProcessError as error:
        raise SystemExit(f"--baseline/--candidate: git archive {commit!r} failed: "
                         f"{error.stderr.decode().strip()}") from None
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)


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
    parser.add_argument("--out", default=str(RESULTS / "bench_commits.json"))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--specs", default=None, help=argparse.SUPPRESS)
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
        rows.append(dict(
            case=name,
            tokens_per_sec={labels[0]: 1024 / statistics.median(a),
                            labels[1]: 1024 / statistics.median(b)},
            ratio=statistics.median(x / y for x, y in zip(a, b)),  # B speed / A speed
            ratio_range=[min(x / y for x, y in zip(a, b)), max(x / y for x, y in zip(a, b))],
            seconds_per_step={labels[0]: a, labels[1]: b}))
    return rows


def markdown(rows, labels, checks, command):
    lines = [f"| wt2_base, `Trainer.train_step` | {labels[0]} tokens/s | {labels[1]} tokens/s "
             "| B / A (paired median) | range | max rel. loss diff |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        diff = checks.get(row["case"])
        lines.append(f"| {row['case']} | {row['tokens_per_sec'][labels[0]]:,.0f} | "
                     f"{row['tokens_per_sec'][labels[1]]:,.0f} | **{row['ratio']:.2f}x** | "
                     f"{row['ratio_range'][0]:.2f}-{row['ratio_range'][1]:.2f} | "
                     + ("" if diff is None else f"{diff:.1e}") + " |")
    return "\n".join(lines) + f"\n\n`{command}`"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.worker is not None:
        return worker(args.worker, [tuple(s) for s in json.loads(args.specs)])
    command = "python bench/bench_commits.py " + " ".join(shlex.quote(a) for a in argv)
    print(f"command: {command}", flush=True)
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
        load_start = os.getloadavg()
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
                    order = workers if r % 2 == 0 else workers[::-1]
                    for w in order:
                        samples[name][w.label].append(
                            w.ask(op="run", case=name, steps=steps[name])["seconds"])
                print(f"round {r + 1}/{args.rounds} done", flush=True)
        finally:
            for w in workers:
                w.close()
        load_end = os.getloadavg()
    rows = summarize(names, samples, labels)
    table = markdown(rows, labels, checks, command)
    print("\n" + table)
    result = dict(command=command, sides=labels, rounds=args.rounds, steps_per_sample=steps,
                  notes={w.label: r["notes"] for w, r in zip(workers, ready)},
                  loadavg=[load_start, load_end], cpus=os.cpu_count(), rows=rows,
                  loss_check={"steps": args.check_steps, "max_relative_difference": checks},
                  markdown=table)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out)
    print(f"\nresults written to {out}")
    return result


if __name__ == "__main__":
    main()
