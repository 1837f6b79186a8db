r"""Copies a run's small text artefacts into docs/results/<run name>/ for git.

    python -m tools.collect_run runs/wt2_base_lower_20ep      # from the project root
    python -m tools.collect_run runs/wt2_base_lower_20ep \
        --console_log=runs/wt2_base_lower_20ep.log   # train.py's output, if kept

Copies config.json, metrics.json, training_log.log, architecture.json,
architecture.txt, arch_history.json and spans.png (whichever the run has;
config.json and training_log.log are required) and writes STATUS.md: finished
or not (metrics.json is written at the end of a run), the last logged step and
the valid evaluations reached so far, so that a run still in progress can be
reported for what it reached. Checkpoints and anything over 2 MB are never
copied. For a search with progressive freezing (docs/freezing.md), STATUS.md
also lists the freezes and the training speed of each stage between them
(median tokens/s of the logged intervals, from training_log.log). The
destination is written to a temporary directory first and then
swapped in: an error leaves the previous copy as it was. With --console_log
(train.py's standard output and error, as the README's background commands
keep it), that log is copied too (console.log) and its periodic valid
evaluations go into STATUS.md.
"""

import argparse
import json
import pathlib
import re
import shutil
import sys
import tempfile

from runstore import run_dir as names
from training.plugins.par_search.derive import ARCHITECTURE_JSON, ARCHITECTURE_TXT
from training.plugins.par_search.plots import ARCH_HISTORY_FILE
from training.plugins.span_report.plots import SPANS_PNG

ROOT = pathlib.Path(__file__).resolve().parents[1]

ARTEFACTS = (names.CONFIG_FILE, names.METRICS_FILE, names.TRAINING_LOG, ARCHITECTURE_JSON,
             ARCHITECTURE_TXT, ARCH_HISTORY_FILE, SPANS_PNG)
REQUIRED = (names.CONFIG_FILE, names.TRAINING_LOG)
MAX_BYTES = 2 * 2**20
# train.py's line for a periodic evaluation (training/run/loop.py).
_VALID_LINE = re.compile(r"step (\d+) valid: nll ([\d.]+) ppl ([\d.]+) word ppl ([\d.]+) "
                         r"bpb ([\d.]+)")


class CollectError(ValueError):
    """A user-fixable problem with the run directory."""


def _valid_rows(console_log):
    if console_log is None:
        return []
    text = pathlib.Path(console_log).read_text(encoding="utf-8", errors="replace")
    rows = [dict(zip(("step", "nll", "ppl", "word ppl", "bpb"), (int(m[0]),) + tuple(
        float(x) for x in m[1:]))) for m in _VALID_LINE.findall(text)]
    # A restart resumes from the last checkpoint and may evaluate a step again:
    # one row per step, the latest.
    return sorted({row["step"]: row for row in rows}.values(), key=lambda row: row["step"])


def _freeze_lines(rows, seq_len, batch_size):
    """STATUS.md lines: the freezes and the speed of each stage between them."""
    freezes = [r for r in rows if "frozen_block" in r]
    if not freezes:
        return []
    train = [r for r in rows if "loss" in r and "tokens_per_sec" in r]
    lines = ["Freezes (training_log.log; choice: 0 attention, 1 dense, 2 identity):", "",
             "| step | block | choice | probability |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['step']} | {int(r['frozen_block'])} | {int(r['frozen_choice'])} | "
              f"{r['frozen_probability']:.4f} |" for r in freezes]
    bounds = sorted({r["step"] for r in freezes})
    stages = {}
    for previous, row in zip([{"step": 0}] + train, train):
        start, end = previous["step"], row["step"]
        if any(start < b < end for b in bounds):
            continue  # the interval holds a freeze (and the step traced again)
        stage = sum(b <= start for b in bounds)
        stages.setdefault(stage, []).append(row["tokens_per_sec"])
    edges = [0] + bounds + [train[-1]["step"] if train else bounds[-1]]
    lines += ["", "Speed by stage (median tokens/s of the logged intervals inside it):", "",
              "| steps | blocks frozen | tokens/s | steps/s |", "|---|---:|---:|---:|"]
    for stage, speeds in sorted(stages.items()):
        median = sorted(speeds)[len(speeds) // 2]
        frozen = sum(1 for r in freezes if r["step"] <= edges[stage])
        lines.append(f"| {edges[stage]}-{edges[stage + 1]} | {frozen} | {median:,.0f} | "
                     f"{median / (seq_len * batch_size):.2f} |")
    return lines + [""]


def _status(run_dir, copied, console_log):
    from training.run.loop import read_training_log

    rows = read_training_log(run_dir / names.TRAINING_LOG)
    train = [r for r in rows if "loss" in r]
    valid = _valid_rows(console_log)
    config = json.loads((run_dir / names.CONFIG_FILE).read_text(encoding="utf-8"))
    finished = names.METRICS_FILE in copied
    lines = [f"# {run_dir.name}", "",
             f"Status: {'finished' if finished else 'in progress (no metrics.json yet)'}; "
             f"last logged step {train[-1]['step'] if train else 0}"
             + (f" of {config['max_steps']}" if config.get("max_steps") else "") + ".", ""]
    if valid:
        lines += ["Valid evaluations (from console.log):", "",
                  "| step | nll | ppl | word ppl | bits/byte |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['step']} | {r['nll']:.4f} | {r['ppl']:.2f} | {r['word ppl']:.2f} | "
                  f"{r['bpb']:.4f} |" for r in valid]
    lines += [""] + _freeze_lines(rows, config.get("seq_len", 1), config.get("batch_size", 1))
    lines += [f"Files: {', '.join(copied)}.", ""]
    return "\n".join(lines)


def collect(run_dir, out_dir, console_log=None):
    """Copies the artefacts of `run_dir` to `out_dir/<run name>`; returns that path."""
    run_dir = pathlib.Path(run_dir)
    if console_log is not None and not pathlib.Path(console_log).is_file():
        raise CollectError(f"--console_log={console_log} does not exist")
    if not run_dir.is_dir():
        raise CollectError(f"run directory {run_dir} does not exist: pass --model_dir of a run")
    missing = [name for name in REQUIRED if not (run_dir / name).is_file()]
    if missing:
        raise CollectError(f"{run_dir} has no {', '.join(missing)}: is it a training run "
                           "directory (train.py --model_dir)?")
    target = pathlib.Path(out_dir) / run_dir.name
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        staged = pathlib.Path(scratch) / run_dir.name
        staged.mkdir()
        copied = []
        for name in ARTEFACTS:
            source = run_dir / name
            if not source.is_file():
                continue
            if source.stat().st_size > MAX_BYTES:
                raise CollectError(f"{source} is {source.stat().st_size} bytes, over the "
                                   f"{MAX_BYTES} allowed in git: leave it out or shrink it")
            shutil.copy2(source, staged / name)
            copied.append(name)
        if console_log is not None:
            if pathlib.Path(console_log).stat().st_size > MAX_BYTES:
                raise CollectError(f"--console_log={console_log} is over {MAX_BYTES} bytes")
            shutil.copy2(console_log, staged / "console.log")
            copied.append("console.log")
        (staged / "STATUS.md").write_text(_status(run_dir, copied, console_log),
                                          encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the run's --model_dir, e.g. runs/wt2_base_lower_20ep")
    parser.add_argument("--out_dir", default=str(ROOT / "docs" / "results"))
    parser.add_argument("--console_log", default=None,
                        help="train.py's console output of the run (copied, valid lines parsed)")
    args = parser.parse_args(argv)
    try:
        target = collect(args.run_dir, args.out_dir, args.console_log)
    except CollectError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"copied to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
