"""Adaptive span against its reference: train, collect a run's evidence, compare.

The project's side of docs/results/adaptive_span_fidelity.md. One run:

    python -m experiments.span_fidelity run --name=preset_s1 \\
        --data_dir=data/wt2_bytes16 -- --seed=1 --max_steps=3000

trains `train.py --preset=adaptive_span_small` (plus the flags after `--`)
into runs/span_fidelity/<name>, evaluating every 250 steps on the first 64
valid records from an empty memory, then writes the run's evidence to
docs/results/adaptive_span_fidelity/<name>/: the command, config.json,
metrics.json, training_log.log, the console log, and `evals.json` (per
evaluation: valid bits per byte and the learned span of every layer and head,
read back from the run's TensorBoard events). `collect` does the second half
for a run that already exists; `table` prints the comparison with the
reference's figures (reference/metrics_seed*.json, measured outside the
repository, see reference/README.md).
"""

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

RESULTS = os.path.join("docs", "results", "adaptive_span_fidelity")
RUNS = os.path.join("runs", "span_fidelity")
# The fixed evaluation of the comparison (both sides).
BASE_FLAGS = ["--preset=adaptive_span_small", "--eval_interval=250", "--eval_max_records=64",
              "--log_interval=50", "--sample_tokens=0", "--intra_op_threads=1",
              "--inter_op_threads=1"]
_SPAN_TAG = re.compile(r"spans/layer_(\d+)/head_(\d+)$")
RUN_FILES = ("config.json", "metrics.json", "training_log.log")


def _scalars(event_dir):
    """{tag: {step: value}} of the scalar summaries in one TensorBoard directory."""
    import tensorflow as tf

    values = {}
    for path in sorted(glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.HasField("tensor"):
                    array = tf.make_ndarray(value.tensor)
                    if array.ndim or array.dtype.kind not in "fiu":
                        continue  # images, text
                    number = float(array)
                else:
                    number = float(value.simple_value)
                values.setdefault(value.tag, {})[int(event.step)] = number
    return values


def evals_from_logs(logdir):
    """Per validation step: bits per byte, loss and the spans [layer][head] logged then.

    Args:
        logdir: the run's TensorBoard directory (train/ and valid/ inside).

    Returns:
        list of dicts sorted by step.
    """
    valid = _scalars(os.path.join(logdir, "valid"))
    train = _scalars(os.path.join(logdir, "train"))
    spans = {}
    for tag, by_step in train.items():
        match = _SPAN_TAG.search(tag)
        if match:
            layer, head = int(match.group(1)), int(match.group(2))
            for step, value in by_step.items():
                spans.setdefault(step, {}).setdefault(layer, {})[head] = value
    rows = []
    bpb, loss = valid.get("valid/bits_per_byte", {}), valid.get("valid/loss", {})
    for step in sorted(bpb):
        row = {"step": step, "valid_bits_per_byte": bpb[step], "valid_nll": loss[step]}
        if step in spans:
            layers = spans[step]
            row["spans"] = [[layers[layer][h] for h in sorted(layers[layer])]
                            for layer in sorted(layers)]
            row["span_mean_per_layer"] = [sum(h) / len(h) for h in row["spans"]]
        rows.append(row)
    return rows


def collect(name, run_dir, logdir, command, console=None, results=RESULTS):
    """Writes docs/results/adaptive_span_fidelity/<name>/ from a finished (or stopped) run."""
    out = os.path.join(results, name)
    os.makedirs(out, exist_ok=True)
    for file in RUN_FILES:
        if os.path.exists(os.path.join(run_dir, file)):
            shutil.copyfile(os.path.join(run_dir, file), os.path.join(out, file))
    if console and os.path.exists(console) and os.path.abspath(console) != os.path.abspath(
            os.path.join(out, "console.log")):
        shutil.copyfile(console, os.path.join(out, "console.log"))
    with open(os.path.join(out, "command.txt"), "w", encoding="utf-8") as f:
        f.write(command + "\n")
    rows = evals_from_logs(logdir)
    with open(os.path.join(out, "evals.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
    return out, rows


def run(name, data_dir, extra, results=RESULTS, runs=RUNS):
    """Trains one configuration and collects it; returns (output directory, evals)."""
    run_dir = os.path.join(runs, name)
    logdir = os.path.join(run_dir, "logs")
    args = ["train.py", *BASE_FLAGS, f"--data_dir={data_dir}", f"--model_dir={run_dir}",
            f"--logdir={logdir}", *extra]
    command = shlex.join(["python", *args])
    out = os.path.join(results, name)
    os.makedirs(out, exist_ok=True)
    console = os.path.join(out, "console.log")
    with open(console, "w", encoding="utf-8") as log:
        done = subprocess.run([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT,
                              check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {command} failed (exit {done.returncode}); see {console}")
    return collect(name, run_dir, logdir, command, console, results)


def _reference(results, seed):
    path = os.path.join(results, "reference", f"metrics_seed{seed}.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {row["step"]: row for row in data["evals"] if row.get("step")}


def table(names, results=RESULTS, seed=1):
    """Markdown: valid bits per byte by step, each run beside the reference (seed)."""
    reference = _reference(results, seed)
    runs = {}
    for name in names:
        with open(os.path.join(results, name, "evals.json"), encoding="utf-8") as f:
            runs[name] = {row["step"]: row for row in json.load(f)}
    steps = sorted(set(reference) | {s for rows in runs.values() for s in rows})
    lines = ["| step | reference | " + " | ".join(names) + " |",
             "|---:|---:|" + "---:|" * len(names)]
    for step in steps:
        ref = reference.get(step, {}).get("valid_bpb")
        cells = [f"{ref:.4f}" if ref else ""]
        for name in names:
            got = runs[name].get(step, {}).get("valid_bits_per_byte")
            if got is None:
                cells.append("")
            elif ref:
                cells.append(f"{got:.4f} ({100 * (got / ref - 1):+.1f}%)")
            else:
                cells.append(f"{got:.4f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="train one configuration and collect it")
    one.add_argument("--name", required=True)
    one.add_argument("--data_dir", required=True, help="byte build, --batch_size=16 --seq_len=128")
    one.add_argument("extra", nargs="*", help="train.py flags after --")
    got = sub.add_parser("collect", help="collect an existing run")
    got.add_argument("--name", required=True)
    got.add_argument("--run_dir", required=True)
    got.add_argument("--logdir", required=True)
    got.add_argument("--command_line", required=True, help="the command that trained it")
    got.add_argument("--console", default=None)
    show = sub.add_parser("table", help="print the comparison table")
    show.add_argument("names", nargs="+")
    show.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "run":
        out, rows = run(args.name, args.data_dir, args.extra)
        print(f"wrote {out} ({len(rows)} evaluations)")
    elif args.command == "collect":
        out, rows = collect(args.name, args.run_dir, args.logdir, args.command_line, args.console)
        print(f"wrote {out} ({len(rows)} evaluations)")
    else:
        print(table(args.names, seed=args.seed))


if __name__ == "__main__":
    main()
