"""Short real comparison of the model families on WikiText-2 after the same time.

For each model (Transformer-XL `--preset=wt2_base --architecture=transformer_xl`,
SHA-RNN `--model_family=sha_rnn --preset=sha_rnn_wt2`, the plain LSTM
`--model_family=sha_rnn --preset=lstm_wt2`), one after another:
  1. calibrate: `train.py` for --calibration_warmup + --calibration_steps
     steps into a scratch directory; the median step time of the steps after
     the warm-up (training_log.log, which times the steps only) gives its
     tokens/s on the real data pipeline;
  2. plan: max_steps = --minutes of training at that speed (evaluations,
     checkpoints and start-up come on top), written to
     <run_dir>/compare_plan.json before the run starts;
  3. run `train.py` into <runs_dir>/compare_<name> with that --max_steps,
     --eval_interval = max_steps / --evaluations (valid metrics recorded
     along the way), --sample_tokens=0, its output appended to
     <run_dir>/train.log, the wall time of each attempt added to the plan.
Then one table (valid bits per byte, valid perplexity, valid word perplexity,
steps, training and wall time, tokens/s) from each run's metrics.json goes to
bench/results/compare_families.json and, as Markdown, to stdout.

Resumable: a model whose run finished (metrics.json at the planned step) is
read, not rerun; an interrupted one resumes from its last checkpoint with the
same plan (train.py resumes a run found in its model_dir). --overwrite plans
and trains the chosen models again from scratch.

The presets are not matched in size (wt2_base Transformer-XL 2.48M
parameters, sha_rnn_wt2 3.96M, lstm_wt2 3.76M on the 12k vocabulary): the
comparison is at equal training time. --match_params resizes SHA-RNN and the
LSTM to the Transformer-XL's count (bench/bench_families.py's search; run
directories get a `_matched` suffix).

Usage (from the project root):
    ./create_tfrecords.sh                                        # data/wikitext2
    python -m experiments.compare_families --minutes=10          # about 40 minutes
    python -m experiments.compare_families --minutes=10 --models=lstm   # one model
Results: bench/results/compare_families.json and a Markdown table on stdout.
"""

import argparse
import os
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common

ROOT = common.ROOT

PLAN_FILE = "compare_plan.json"
LOG_FILE = "train.log"
# Name -> (label, train.py flags that choose the model).
MODELS = {
    "transformer_xl": ("Transformer-XL", ("--preset=wt2_base", "--architecture=transformer_xl")),
    "sha_rnn": ("SHA-RNN", ("--model_family=sha_rnn", "--preset=sha_rnn_wt2")),
    "lstm": ("LSTM", ("--model_family=sha_rnn", "--preset=lstm_wt2")),
}


class CompareError(RuntimeError):
    """A user-fixable problem (missing data, foreign run directory, failed run)."""


# ----------------------------------------------------------------- pure parts


def step_seconds(log_rows, tokens_per_step, skip):
    """Seconds per step of each logged interval after the first `skip` steps.

    Args:
        log_rows: training.run.loop.read_training_log rows (step, tokens_per_sec).
        tokens_per_step: B * T.
        skip: steps to leave out (tracing and warm-up).

    Returns:
        List of seconds per step, one per logged interval.
    """
    return [tokens_per_step / row["tokens_per_sec"] for row in log_rows
            if row["step"] > skip and row.get("tokens_per_sec", 0) > 0]


def training_seconds(log_rows, tokens_per_step):
    """Seconds spent in training steps (tracing included), from the training log."""
    total, previous = 0.0, 0
    for row in log_rows:
        steps = row["step"] - previous
        if steps > 0 and row.get("tokens_per_sec", 0) > 0:
            total += steps * tokens_per_step / row["tokens_per_sec"]
        previous = row["step"]
    return total


def plan_steps(minutes, seconds_per_step):
    """Training steps that fill `minutes` at `seconds_per_step` (at least 1)."""
    return max(1, int(round(60.0 * minutes / seconds_per_step)))


def run_status(run_dir, plan_file=PLAN_FILE):
    """"finished", "planned" (a plan, no final metrics yet), "foreign" or "new".

    "foreign": the directory holds a training run that this script did not
    plan (its max_steps is unknown), which it will neither read nor resume.
    `plan_file` names the plan (a dict with "max_steps") in run_dir.
    """
    plan = common.read_json(run_dir / plan_file)
    metrics = common.read_json(run_dir / "metrics.json")
    if plan is None:
        return "foreign" if (run_dir / "config.json").exists() else "new"
    if metrics is not None and metrics.get("step", -1) >= plan["max_steps"]:
        return "finished"
    return "planned"


def built_meta(data_dir):
    """meta.json of the dataset built in `data_dir`, or None after printing the error."""
    meta = common.read_json(pathlib.Path(data_dir) / "meta.json")
    if meta is None:
        print(f"error: no built dataset in --data_dir={data_dir} (meta.json missing): run "
              "./create_tfrecords.sh (12k sentencepiece WikiText-2) or pass --data_dir",
              file=sys.stderr)
    return meta


# ------------------------------------------------------------------- running


def close_killed_attempts(plan, log_path):
    """Gives an attempt killed with this script its duration: the log's last write.

    The duration is then an estimate (`estimated: true` in the plan).
    """
    for attempt in plan["attempts"]:
        if attempt["seconds"] is None:
            end = os.path.getmtime(log_path) if os.path.exists(log_path) else attempt["started"]
            attempt.update(seconds=max(0.0, end - attempt["started"]), estimated=True)


def train_command(model_flags, data_dir, model_dir, logdir, extra):
    return [sys.executable, str(ROOT / "train.py"), *model_flags, f"--data_dir={data_dir}",
            f"--model_dir={model_dir}", f"--logdir={logdir}", "--sample_tokens=0", *extra]


def run_logged(command, log_path):
    """Runs `command` from the project root, appending its output to log_path.

    Returns:
        (return code, wall seconds).
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    start = time.perf_counter()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {shlex.join(command)}\n")
        log.flush()
        code = subprocess.call(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    return code, time.perf_counter() - start


def tail(path, lines=15):
    text = pathlib.Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


def calibrate(name, model_flags, args, tokens_per_step, shared_flags):
    """Median seconds per training step of `name` on the real data (a scratch run)."""
    from training.run.loop import read_training_log

    steps = args.calibration_warmup + args.calibration_steps
    with tempfile.TemporaryDirectory(prefix=f"compare_{name}_") as scratch:
        scratch = pathlib.Path(scratch)
        command = train_command(
            model_flags, args.data_dir, scratch / "run", scratch / "logs",
            [*shared_flags, f"--max_steps={steps}", "--log_interval=1", "--eval_max_records=1",
             "--checkpoint_interval=0"])
        code, seconds = run_logged(command, scratch / LOG_FILE)
        if code:
            raise CompareError(f"calibration of {name} failed (exit {code}):\n"
                               f"{tail(scratch / LOG_FILE)}\ncommand: {shlex.join(command)}")
        rows = read_training_log(scratch / "run" / "training_log.log")
    times = step_seconds(rows, tokens_per_step, args.calibration_warmup)
    if not times:
        raise CompareError(f"calibration of {name}: no timed step in its training log")
    print(f"  {name}: calibrated {statistics.median(times) * 1e3:.1f} ms/step over "
          f"{len(times)} steps ({seconds:.0f} s with start-up)", flush=True)
    return statistics.median(times)


def model_flags_for(name, args, matched):
    flags = list(MODELS[name][1])
    if matched and name in matched:
        flags += matched[name]
    return flags


def prepare_and_run(name, args, meta, matched):
    """Plans (if needed) and runs one model; returns its run directory."""
    suffix = "_matched" if args.match_params else ""
    run_dir = pathlib.Path(args.runs_dir) / f"compare_{name}{suffix}"
    logdir = pathlib.Path(args.logs_dir) / f"compare_{name}{suffix}"
    status = "new" if args.overwrite else run_status(run_dir)
    if status == "finished":
        print(f"{name}: finished run in {run_dir}, read (use --overwrite to train again)")
        return run_dir
    if status == "foreign":
        raise CompareError(
            f"{run_dir} holds a training run without {PLAN_FILE} (not started by this script, "
            "so its planned length is unknown): pass --overwrite to replace it, or another "
            "--runs_dir")
    tokens_per_step = meta["batch_size"] * meta["seq_len"]
    model_flags = model_flags_for(name, args, matched)
    shared_flags = [f"--precision={args.precision}", *shlex.split(args.train_flags)]
    fresh = status == "new"
    if fresh:
        print(f"{name}: calibrating ({args.calibration_warmup} + {args.calibration_steps} steps)",
              flush=True)
        seconds_per_step = calibrate(name, model_flags, args, tokens_per_step, shared_flags)
        max_steps = plan_steps(args.minutes, seconds_per_step)
        interval = max(1, max_steps // args.evaluations)
        run_flags = [*shared_flags, f"--max_steps={max_steps}", f"--eval_interval={interval}",
                     f"--checkpoint_interval={interval}",
                     f"--log_interval={max(1, min(100, max_steps // 20))}"]
        plan = dict(model=name, label=MODELS[name][0], minutes=args.minutes,
                    calibrated_step_s=seconds_per_step,
                    calibrated_tokens_per_sec=tokens_per_step / seconds_per_step,
                    max_steps=max_steps, command=train_command(
                        model_flags, args.data_dir, run_dir, logdir, run_flags),
                    attempts=[])
        if args.overwrite and run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        common.write_json(run_dir / PLAN_FILE, plan)
    else:
        plan = common.read_json(run_dir / PLAN_FILE)
        if plan["minutes"] != args.minutes:
            print(f"{name}: resuming the plan of {plan['minutes']} minutes "
                  f"(--minutes={args.minutes} ignored; --overwrite to replan)")
    command = list(plan["command"])
    if args.overwrite:  # the logdir of an old run is cleared by train.py
        command.append("--overwrite")
    print(f"{name}: training {plan['max_steps']} steps (~{plan['minutes']} min of steps) into "
          f"{run_dir}, log {run_dir / LOG_FILE}", flush=True)
    close_killed_attempts(plan, run_dir / LOG_FILE)
    attempt = dict(started=time.time(), seconds=None, returncode=None)
    plan["attempts"].append(attempt)
    common.write_json(run_dir / PLAN_FILE, plan)  # a killed attempt keeps its start time
    code, seconds = run_logged(command, run_dir / LOG_FILE)
    attempt.update(seconds=seconds, returncode=code)
    common.write_json(run_dir / PLAN_FILE, plan)
    if code:
        raise CompareError(f"{name}: train.py failed (exit {code}); the run resumes next time. "
                           f"Last lines of {run_dir / LOG_FILE}:\n{tail(run_dir / LOG_FILE)}")
    print(f"{name}: done in {seconds:.0f} s", flush=True)
    return run_dir


# ------------------------------------------------------------------- results


def run_row(name, run_dir, meta):
    """One table row from a finished run directory."""
    from bench.bench_families import count_params, describe
    from training.run.loop import read_training_log
    from training.setup.config import TrainConfig

    plan = common.read_json(run_dir / PLAN_FILE)
    close_killed_attempts(plan, run_dir / LOG_FILE)
    metrics = common.read_json(run_dir / "metrics.json")
    config = TrainConfig.load(str(run_dir))
    tokens_per_step = config.batch_size * config.seq_len
    rows = read_training_log(run_dir / "training_log.log")
    valid, test = metrics["last"]["valid"], metrics["last"]["test"]
    total, io = count_params(config.model)
    times = step_seconds(rows, tokens_per_step, skip=rows[0]["step"] if len(rows) > 1 else 0)
    return dict(
        model=name, label=MODELS[name][0], run_dir=str(run_dir), params=total,
        params_embedding_softmax=io, shape=describe(config.model), optimizer=config.optimizer,
        precision=config.precision, steps=metrics["step"], max_steps=plan["max_steps"],
        minutes=plan["minutes"], train_s=training_seconds(rows, tokens_per_step),
        wall_s=sum(a["seconds"] for a in plan["attempts"]),
        tokens_per_sec=tokens_per_step / statistics.median(times) if times else None,
        calibrated_tokens_per_sec=plan["calibrated_tokens_per_sec"],
        valid_bits_per_byte=valid["bits_per_byte"], valid_perplexity=valid["perplexity"],
        valid_word_perplexity=valid["word_perplexity"], test_bits_per_byte=test["bits_per_byte"],
        best_step=metrics["best"]["step"],
        best_valid_bits_per_byte=metrics["best"]["valid"]["bits_per_byte"],
        command=shlex.join(plan["command"]), data_tokenizer=meta["tokenizer"].get("kind"))


def markdown_table(rows, command):
    table = common.markdown_table(
        ["model", "params", "shape", "valid bpb", "valid ppl", "valid word ppl", "steps",
         "budget min", "train min", "wall min", "tokens/s"],
        [[r["label"], f"{r['params']:,}", r["shape"], f"{r['valid_bits_per_byte']:.4f}",
          f"{r['valid_perplexity']:.2f}", f"{r['valid_word_perplexity']:.2f}", f"{r['steps']:,}",
          f"{r['minutes']:g}", f"{r['train_s'] / 60:.1f}", f"{r['wall_s'] / 60:.1f}",
          f"{r['tokens_per_sec']:,.0f}" if r["tokens_per_sec"] else ""] for r in rows],
        "lrlrrrrrrrr")
    return table + "\n\n" + (
        "Metrics of the last checkpoint on the whole valid split. budget min: the --minutes "
        "the run's max_steps was planned for; train min: time in training "
        "steps (training_log.log); wall min: the train.py process, with start-up, evaluations "
        "and checkpoints; tokens/s: median of the logged intervals after the first. "
        f"Command: `{command}`")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=str(ROOT / "data" / "wikitext2"),
                        help="built dataset (default: data/wikitext2 of ./create_tfrecords.sh)")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="training time per model (steps only), in minutes")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}, run in this order")
    parser.add_argument("--runs_dir", default=str(ROOT / "runs"),
                        help="run directories go to <runs_dir>/compare_<model>")
    parser.add_argument("--logs_dir", default=str(ROOT / "logs"),
                        help="TensorBoard directories go to <logs_dir>/compare_<model>")
    parser.add_argument("--precision", default="float32",
                        choices=("float32", "mixed_bfloat16", "mixed_float16"))
    parser.add_argument("--evaluations", type=int, default=5,
                        help="valid evaluations per run (sets --eval_interval)")
    parser.add_argument("--calibration_warmup", type=int, default=5,
                        help="calibration steps left out of the timing (tracing)")
    parser.add_argument("--calibration_steps", type=int, default=20, help="timed calibration steps")
    parser.add_argument("--train_flags", default="",
                        help="more train.py flags for every run, e.g. '--eval_max_records=4'")
    parser.add_argument("--match_params", action="store_true",
                        help="resize SHA-RNN and the LSTM to the Transformer-XL's parameter count")
    parser.add_argument("--overwrite", action="store_true",
                        help="calibrate, plan and train the chosen models again from scratch")
    parser.add_argument("--out", default=str(common.results_path("compare_families")))
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown or not args.models:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    if not args.minutes > 0:
        parser.error("--minutes must be > 0")
    if args.evaluations < 1 or args.calibration_steps < 1 or args.calibration_warmup < 1:
        parser.error("--evaluations, --calibration_steps and --calibration_warmup must be >= 1")
    for name in ("data_dir", "runs_dir", "logs_dir", "out"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    return args


def matched_flags(meta):
    """train.py flags resizing SHA-RNN and the LSTM to wt2_base's parameter count."""
    from bench.bench_families import describe, matched_configs

    _, matched = matched_configs("wt2_base", "sha_rnn_wt2", "lstm_wt2",
                                 vocab_size=meta["vocab_size"])
    out = {}
    for name, label in (("sha_rnn", "SHA-RNN"), ("lstm", "LSTM")):
        config = matched[label][2]
        out[name] = [f"--d_model={config.d_model}", f"--boom_dim={config.boom_dim}",
                     f"--num_layers={config.num_layers}"]
        print(f"  matched {label}: {describe(config)}, {matched[label][3][0]:,} parameters")
    return out


def main(argv=None):
    args, command = common.start("experiments.compare_families", parse_args, argv)
    meta = built_meta(args.data_dir)
    if meta is None:
        return 1
    matched = matched_flags(meta) if args.match_params else None
    run_dirs, failures = {}, []
    for name in args.models:
        try:
            run_dirs[name] = prepare_and_run(name, args, meta, matched)
        except CompareError as error:
            failures.append(f"error: {error}")
            print(failures[-1], file=sys.stderr, flush=True)
    rows = [run_row(name, run_dir, meta) for name, run_dir in run_dirs.items()]
    if rows:
        table = markdown_table(rows, command)
        print(f"\n{table}")
        out = common.write_results(args.out, command, dict(
            data_dir=args.data_dir, minutes=args.minutes, machine=common.machine_info(),
            rows=rows, failures=failures, markdown=table))
        print(f"\nresults written to {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
