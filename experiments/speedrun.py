"""Time to quality: the records table of docs/results/speedrun.md.

Each *lever* is one change to the derived `aaafaf`'s training (its second
stage, `./base_model.sh --architecture=aaafaf --arch_warmup_steps=0`), screened
at a short budget on one core; `record` runs are the whole command a user
types, timed from its start to its final test evaluation. Every run goes to
runs/speedrun/<name> with its console log beside it (runs/speedrun/<name>.console.log)
and is resumable with the same command (train.py resumes a run found in its
model_dir). Each session's whole-command seconds (process start to exit, TensorFlow's
start-up and every evaluation included) are appended to runs/speedrun/<name>.sessions.json.

    python -m experiments.speedrun run s3_base s3_drop0          # screens, in order
    python -m experiments.speedrun run --cpus=0,1 record_muon_aaafaf_seed1
    python -m experiments.speedrun report                        # -> docs/results/speedrun/

`report` copies each finished run's artefacts (config.json, metrics.json,
training_log.log, console.log, wall_time.json: tools.collect_run and
tools.wall_time; sessions.json) to docs/results/speedrun/<name>/ and writes
docs/results/speedrun/runs.json (one row per run: lever, flags, wall minutes
of the whole command, median tokens/s, best valid, test at the best step) and
summary.json (the record runs: command, cores, architecture, seed, wall
minutes, test perplexity). A `pipeline` run is `./base_model.sh --pipeline` with its
flags: its search is collected from runs/speedrun/<name> and the derived network it
trained from runs/speedrun/<name>_retrain, whose test perplexity its row gives; its wall
minutes are the whole command's (search, retrain, test and export).
"""

import argparse
import dataclasses
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

import pardata.quiet  # noqa: F401  (TensorFlow's start-up noise, before collect_run loads it)
from tools import collect_run, wall_time

RUNS = pathlib.Path("runs", "speedrun")
RESULTS = pathlib.Path("docs", "results", "speedrun")
# The derived network of the seed's search, trained from scratch (PAR's second stage).
RETRAIN = ["--architecture=aaafaf", "--arch_warmup_steps=0"]
# Evaluated and checkpointed once per epoch (2,726 records per epoch).
EVERY_EPOCH = ("--eval_interval=2726", "--checkpoint_interval=2726")
# A screen: three epochs, evaluated once per epoch.
SCREEN = ["--epochs=3", *EVERY_EPOCH]


@dataclasses.dataclass(frozen=True)
class Run:
    """One row of the table.

    Attributes:
        name: runs/speedrun/<name>.
        lever: what the run changes, in words.
        flags: base_model.sh flags after RETRAIN (or --pipeline).
        record: a whole command of the record (else a screen).
        pipeline: `./base_model.sh --pipeline` (search, then the derived network trained
            in <name>_retrain) instead of the derived network alone.
    """

    name: str
    lever: str
    flags: tuple
    record: bool = False
    pipeline: bool = False

    def command(self):
        stage = ["--pipeline"] if self.pipeline else RETRAIN
        return ["./base_model.sh", f"--model_dir={RUNS / self.name}", *stage, *self.flags]


def _screen(name, lever, *flags):
    return Run(name, lever, tuple(SCREEN) + flags)


# The muon recipe's step before the recipe existed, 10 epochs, in mixed bfloat16: the runs
# that measured it and the levers tried on top of it.
MUON_E10 = ("--epochs=10", "--optimizer=muon", "--learning_rate=2e-3", "--muon_rms_rate=0.15",
            "--muon_ns_bfloat16=1", "--precision=mixed_bfloat16")


# The machine's flags of a record on the development CPU (AVX512_BF16): mixed bfloat16 and
# one intra-op / two inter-op threads (speedrun.md, "Threads and replicas").
CPU_FLAGS = ("--precision=mixed_bfloat16", "--intra_op_threads=1", "--inter_op_threads=2")


def _record(recipe, architecture, seed, take=None):
    """A record's run; `take` (e.g. "take2") names another run of the same command."""
    name = f"record_{recipe}_{architecture}_seed{seed}"
    lever = f"--recipe={recipe}, {architecture}, seed {seed}"
    if take:
        name, lever = f"{name}_{take}", f"{lever}, {take}"
    return Run(name, lever,
               (f"--recipe={recipe}", f"--seed={seed}", *CPU_FLAGS, *EVERY_EPOCH), record=True)


# The record's command as summary.json states it.
RECORD_COMMAND = shlex.join(["./base_model.sh", "--recipe=muon", *CPU_FLAGS,
                             "--architecture=ARCH", "--arch_warmup_steps=0", "--seed=SEED",
                             *EVERY_EPOCH])


RUNS_TABLE = {run.name: run for run in (
    _screen("s3_base", "the seed recipe, 3 epochs (reference of the screens)"),
    _screen("s3_drop0", "dropout 0 (was 0.1)", "--dropout=0.0"),
    _screen("s3_lr2e3", "learning rate 2e-3 (was 1e-3)", "--learning_rate=2e-3"),
    _screen("s3_lr2e3_drop0", "learning rate 2e-3 and dropout 0", "--learning_rate=2e-3",
            "--dropout=0.0"),
    _screen("s3_lr3e3_drop0", "learning rate 3e-3 and dropout 0", "--learning_rate=3e-3",
            "--dropout=0.0"),
    _screen("s3_muon_drop0", "Muon (lr 2e-3, dropout 0; Adam on the embedding and "
            "softmax)", "--optimizer=muon", "--learning_rate=2e-3", "--dropout=0.0"),
    # Nine epochs (the budget 30 minutes on both cores allows) with dropout kept: the
    # 3-epoch screens' dropout 0 overfits at this length.
    Run("e9_lr2e3", "learning rate 2e-3, dropout 0.1, 9 epochs",
        ("--epochs=9", "--learning_rate=2e-3", *EVERY_EPOCH)),
    Run("e9_lr3e3", "learning rate 3e-3, dropout 0.1, 9 epochs",
        ("--epochs=9", "--learning_rate=3e-3", *EVERY_EPOCH)),
    Run("e9_muon_lr2e3", "Muon (Adam on the embedding and softmax), learning rate 2e-3, "
        "dropout 0.1, 9 epochs",
        ("--epochs=9", "--optimizer=muon", "--learning_rate=2e-3", *EVERY_EPOCH)),
    Run("e11_muon_lr2e3", "Muon, learning rate 2e-3, dropout 0.1, 11 epochs",
        ("--epochs=11", "--optimizer=muon", "--learning_rate=2e-3", *EVERY_EPOCH)),
    # The two levers most likely to give Muon's 9 epochs the last 1%: an average of the
    # weights for evaluation, and a larger step of the hidden matrices than of the Adam part.
    Run("e9_muon_lr2e3_ema999", "Muon, learning rate 2e-3, dropout 0.1, 9 epochs, EMA of the "
        "weights 0.999 for evaluation",
        ("--epochs=9", "--optimizer=muon", "--learning_rate=2e-3", "--ema_decay=0.999",
         *EVERY_EPOCH)),
    Run("e9_muon_lr2e3_rms03", "Muon, learning rate 2e-3, dropout 0.1, 9 epochs, Muon's "
        "update scale 0.3 (the matrices' step 1.5x the Adam part's)",
        ("--epochs=9", "--optimizer=muon", "--learning_rate=2e-3", "--muon_rms_rate=0.3",
         *EVERY_EPOCH)),
    # On a CPU with bfloat16 instructions (AVX512_BF16) a Muon step in mixed bfloat16 runs
    # about 1.4x the float32 one: the lever's price in quality.
    Run("e9_muon_lr2e3_bf16", "Muon, learning rate 2e-3, dropout 0.1, 9 epochs, mixed "
        "bfloat16", ("--epochs=9", "--optimizer=muon", "--learning_rate=2e-3",
                     "--precision=mixed_bfloat16", *EVERY_EPOCH)),
    # Muon's update scale 0.3 trailed 0.2 at every evaluation, so the other side: 0.15
    # (the matrices' step 0.75x the Adam part's), in bfloat16 for this CPU's speed.
    Run("e9_muon_rms015_bf16", "Muon, learning rate 2e-3, dropout 0.1, 9 epochs, Muon's "
        "update scale 0.15 (the matrices' step 0.75x the Adam part's), mixed bfloat16",
        ("--epochs=9", "--optimizer=muon", "--learning_rate=2e-3", "--muon_rms_rate=0.15",
         "--precision=mixed_bfloat16", *EVERY_EPOCH)),
    # The candidate for the record: Muon's update scale 0.15 (ahead of 0.2 by 2% mid-run),
    # the Newton-Schulz iteration in bfloat16 (1.11x the step on both cores) and 10 epochs,
    # which that speed fits in 30 minutes on both cores.
    Run("e10_muon_rms015_nsbf16_bf16", "Muon, learning rate 2e-3, dropout 0.1, 10 epochs, "
        "update scale 0.15, Newton-Schulz in bfloat16, mixed bfloat16",
        (*MUON_E10, *EVERY_EPOCH)),
    # The same with dropout 0.15: at 11 epochs of Muon the training perplexity (with dropout
    # on) ran at 36 against 44 valid, and dropout 0 overfit badly at 9 epochs, so the model
    # may want more regularisation at this length, not less.
    Run("e10_muon_rms015_nsbf16_bf16_drop015", "Muon, learning rate 2e-3, dropout 0.15, "
        "10 epochs, update scale 0.15, Newton-Schulz in bfloat16, mixed bfloat16",
        (*MUON_E10, "--dropout=0.15", *EVERY_EPOCH)),
    # The schedule, the lever left with the best prior for the last 0.7%: the muon recipe's
    # step with the peak held and a linear decay over the last 20% (warm-up, stable,
    # decay), and with a linear decay over the whole run.
    *(Run(f"e10_muon_{name}", f"the muon recipe's step, 10 epochs, {lever}",
          (*MUON_E10, *flags, *EVERY_EPOCH))
      for name, lever, flags in (
          ("wsd02", "learning rate held at the peak, then linear to the floor over the last "
           "20% (--lr_schedule=wsd)", ("--lr_schedule=wsd", "--lr_cooldown_fraction=0.2")),
          ("linear", "a linear decay instead of the cosine (--lr_schedule=linear)",
           ("--lr_schedule=linear",)),
          # Decoupled weight decay of the matrices, W -= lr * wd * W: at 0.05 its time
          # constant 1 / (lr * wd) is 10,000 steps at the peak rate and about 20,000 at
          # the cosine's mean rate, near the run's 27,260 steps. Regularisation of
          # another kind than dropout, which was settled at 0.1.
          ("wd005", "decoupled weight decay 0.05 of the weight matrices "
           "(--weight_decay=0.05)", ("--weight_decay=0.05",)))),
    # The matrices' step went the right way each time it was made smaller (update scale
    # 0.3 < 0.2 < 0.15 at every evaluation), and holding the peak rate longer (wsd02)
    # lost: the next step down, 0.1 (the matrices' step half the Adam part's).
    Run("e10_muon_rms010", "the muon recipe's step, 10 epochs, Muon's update scale 0.1 "
        "(was 0.15)", (*(f if f != "--muon_rms_rate=0.15" else "--muon_rms_rate=0.1"
                         for f in MUON_E10), *EVERY_EPOCH)),
    # The seed recipe (20 epochs of Adam at 1e-3) in mixed bfloat16: whether the PAR
    # pipeline's retrain can take bfloat16's speed at its quality.
    Run("e20_seed_bf16", "the seed recipe (Adam 1e-3, 20 epochs) in mixed bfloat16",
        ("--precision=mixed_bfloat16", *EVERY_EPOCH)),
    # The fast recipe at its full length on one core: its quality (the record's wall
    # time needs both cores).
    Run("fast_seed0_one_core", "--recipe=fast at its full length, one core",
        ("--recipe=fast", *EVERY_EPOCH)),
    *(_record(recipe, arch, seed) for recipe in ("muon",) for arch in ("aaafaf", "afafaf")
      for seed in (0, 1, 2)),
    # Seed 0 again once the training input no longer stalled at epoch ends (tf.data's
    # autotuning thread, 2.7 of the first run's 30.7 minutes): the same command.
    _record("muon", "aaafaf", 0, "take2"),
    # The one-command PAR pipeline with the record's recipe and flags: the search (2 epochs
    # at most, stopped once the derived network holds) and the derived network's 10 epochs,
    # test and export, timed as a whole on both cores.
    Run("pipeline_muon_seed0", "./base_model.sh --pipeline --recipe=muon, seed 0, both cores",
        ("--recipe=muon", "--seed=0", *CPU_FLAGS), pipeline=True),
    # The search with the seed recipe (Adam; with Muon it drifts to attention, speedrun.md)
    # and the derived network alone with the record's recipe (--retrain_recipe=muon).
    *(Run(f"pipeline_retrainmuon_seed{seed}",
          f"./base_model.sh --pipeline --retrain_recipe=muon, seed {seed}, both cores",
          ("--retrain_recipe=muon", f"--seed={seed}", *CPU_FLAGS), pipeline=True)
      for seed in range(3)),
)}


def _record_command(run):
    """The record's command with its architecture (the table's runs fix aaafaf)."""
    arch = run.name.split("_")[2]
    return [a if a != "--architecture=aaafaf" else f"--architecture={arch}"
            for a in run.command()]


def run(names, cpus):
    """Runs (or resumes) the named runs one after another, pinned to `cpus`."""
    RUNS.mkdir(parents=True, exist_ok=True)
    for name in names:
        spec = RUNS_TABLE[name]
        command = _record_command(spec) if spec.record else spec.command()
        pinned = ["taskset", "-c", cpus, *command] if cpus else command
        log = RUNS / f"{name}.console.log"
        print(f"{name}: {shlex.join(pinned)} > {log}", flush=True)
        start = time.monotonic()
        with open(log, "a", encoding="utf-8") as out:
            done = subprocess.run(pinned, stdout=out, stderr=subprocess.STDOUT)
        _add_session(name, pinned, time.monotonic() - start, done.returncode)
        if done.returncode:
            print(f"error: {name} exited with status {done.returncode}; see {log}",
                  file=sys.stderr)
            return done.returncode
    return 0


def _sessions_path(name):
    return RUNS / f"{name}.sessions.json"


def _add_session(name, command, seconds, status):
    path = _sessions_path(name)
    sessions = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    sessions.append({"command": shlex.join(command), "seconds": round(seconds, 1),
                     "exit_status": status})
    path.write_text(json.dumps(sessions, indent=1) + "\n", encoding="utf-8")


def _row(spec, run_dir, timing):
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    best = metrics["best"]
    return {"name": spec.name, "lever": spec.lever, "flags": list(spec.flags),
            "record": spec.record, "pipeline": spec.pipeline,
            "architecture": metrics.get("architecture"),
            "seed": config["model"]["seed"], "steps": metrics["step"],
            "wall_min": timing["command_minutes"],
            "log_minutes": timing["running_minutes"],
            "tokens_per_s": timing.get("median_tokens_per_sec"),
            "best_step": best["step"], "best_valid_ppl": round(best["valid"]["perplexity"], 2),
            "test_ppl": round(best["test"]["perplexity"], 2)}


def _with_earlier_rows(rows):
    """`rows` (of the runs named to `report`) with runs.json's rows of the other runs, in
    RUNS_TABLE order: naming a run collects it without dropping the others."""
    path = RESULTS / "runs.json"
    earlier = json.loads(path.read_text(encoding="utf-8"))["runs"] if path.is_file() else []
    by_name = {row["name"]: row for row in earlier}
    by_name.update({row["name"]: row for row in rows})
    return [by_name[name] for name in RUNS_TABLE if name in by_name]


def report(names=None):
    """Collects every finished run (or `names`) and writes runs.json and summary.json."""
    rows = []
    for name, spec in RUNS_TABLE.items():
        run_dir, log = RUNS / name, RUNS / f"{name}.console.log"
        # A pipeline's figures are its derived network's (trained in <name>_retrain).
        trained = RUNS / f"{name}_retrain" if spec.pipeline else run_dir
        if (names and name not in names) or not (trained / "metrics.json").is_file():
            continue
        target = collect_run.collect(run_dir, RESULTS, console_log=log)
        if spec.pipeline:
            collect_run.collect(trained, RESULTS)
        timing = wall_time.wall_time(target / "console.log")
        timing["median_tokens_per_sec"] = wall_time.median_tokens_per_sec(
            trained / "training_log.log")
        sessions = _sessions_path(name)
        if sessions.is_file():  # the whole commands, timed by `run`
            (target / "sessions.json").write_bytes(sessions.read_bytes())
            timing["command_minutes"] = round(sum(
                s["seconds"] for s in json.loads(sessions.read_text(encoding="utf-8"))) / 60, 2)
        else:  # run by hand: the console log's first to last line
            timing["command_minutes"] = timing["running_minutes"]
        (target / "wall_time.json").write_text(json.dumps(timing, indent=1) + "\n",
                                               encoding="utf-8")
        rows.append(_row(spec, trained, timing))
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = _with_earlier_rows(rows) if names else rows
    (RESULTS / "runs.json").write_text(json.dumps({"runs": rows}, indent=1) + "\n",
                                       encoding="utf-8")
    records = [r for r in rows if r["record"]]
    summary = {"command": RECORD_COMMAND, "cores": 2,
               "runs": [{k: r[k] for k in ("name", "architecture", "seed", "wall_min",
                                           "test_ppl")} for r in records]}
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=1) + "\n",
                                          encoding="utf-8")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    run_parser = sub.add_parser("run", help="run or resume the named runs, in order")
    run_parser.add_argument("names", nargs="+", choices=sorted(RUNS_TABLE))
    run_parser.add_argument("--cpus", default="1",
                            help="taskset -c list ('' for no pinning); screens use one core")
    report_parser = sub.add_parser("report", help="collect finished runs into docs/results")
    report_parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    if not os.path.isfile("base_model.sh"):
        print("error: run from the repository root (python -m experiments.speedrun ...)",
              file=sys.stderr)
        return 2
    if args.what == "run":
        return run(args.names, args.cpus)
    for row in report(args.names):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
