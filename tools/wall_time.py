r"""Wall time of a run from its console log's timestamps, as JSON beside it.

    python -m tools.wall_time docs/results/RUN/console.log            # print
    python -m tools.wall_time docs/results/RUN/console.log --write    # -> RUN/wall_time.json

The console log's absl lines carry `IMMDD HH:MM:SS.micros`. A session runs from its first
timestamp to its last; a new session starts where `train.py` logs its start-up line again (a
restart) or where two consecutive timestamps lie more than `--gap_minutes` apart. The JSON
holds each session's start, end and minutes, their sum (the running wall time, stops
between sessions excluded) and, for every valid evaluation, the running minutes from the
first log line to it (`m:ss` as the results pages print them), and, when a
`training_log.log` lies beside it, the median training tokens/s of its logged intervals
after the first (the first holds the graph's tracing). The year is not in the log; a run
that crosses New Year is not handled.
"""

import argparse
import datetime
import json
import pathlib
import re
import statistics
import sys

STAMP = re.compile(r"^[IWE](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) ")
START = re.compile(r"train\.py:\d+\] .*full config in ")
EVAL = re.compile(r"step (\d+) valid: ")
TOKENS_PER_SEC = re.compile(r"tokens_per_sec=([\d.]+)")


def median_tokens_per_sec(training_log):
    """The median tokens/s of a training log's intervals after the first (None if fewer than 2)."""
    rates = [float(x) for x in TOKENS_PER_SEC.findall(training_log.read_text(encoding="utf-8"))]
    return round(statistics.median(rates[1:]), 1) if len(rates) > 1 else None


def _clock(minutes):
    seconds = round(minutes * 60)
    return f"{seconds // 60}:{seconds % 60:02d}"


def _timestamps(lines):
    """(datetime, line) of every timestamped line."""
    stamped = []
    for line in lines:
        match = STAMP.match(line)
        if match:
            month, day, hour, minute, second, micros = (int(g) for g in match.groups())
            stamped.append((datetime.datetime(2000, month, day, hour, minute, second, micros),
                            line))
    return stamped


def wall_time(console_log, gap_minutes=10.0):
    """The sessions, running minutes and per-evaluation running minutes of one console log."""
    stamped = _timestamps(pathlib.Path(console_log).read_text(encoding="utf-8").splitlines())
    if not stamped:
        raise ValueError(f"{console_log}: no timestamped log line (is it a console log?)")
    sessions, evaluations = [], []
    start = previous = stamped[0][0]
    done = 0.0  # running minutes of the finished sessions
    for when, line in stamped[1:]:
        gap = (when - previous).total_seconds() / 60
        if START.search(line) or gap > gap_minutes:
            sessions.append((start, previous))
            done += (previous - start).total_seconds() / 60
            start = when
        match = EVAL.search(line)
        if match:
            minutes = done + (when - start).total_seconds() / 60
            evaluations.append({"step": int(match.group(1)), "minutes": round(minutes, 2),
                                "clock": _clock(minutes)})
        previous = when
    sessions.append((start, previous))
    spans = [{"start": a.strftime("%m-%d %H:%M:%S"), "end": b.strftime("%m-%d %H:%M:%S"),
              "minutes": round((b - a).total_seconds() / 60, 2)} for a, b in sessions]
    return {"console_log": pathlib.Path(console_log).name, "gap_minutes": gap_minutes,
            "sessions": spans, "running_minutes": round(sum(s["minutes"] for s in spans), 2),
            "evaluations": evaluations}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("console_log", help="a run's console log (docs/results/RUN/console.log)")
    parser.add_argument("--gap_minutes", type=float, default=10.0,
                        help="a pause longer than this starts a new session")
    parser.add_argument("--write", action="store_true",
                        help="write wall_time.json beside the console log instead of printing")
    args = parser.parse_args(argv)
    path = pathlib.Path(args.console_log)
    if not path.is_file():
        print(f"error: {path} is not a file; pass a run's console.log", file=sys.stderr)
        return 2
    try:
        result = wall_time(path, args.gap_minutes)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    training_log = path.parent / "training_log.log"
    if training_log.is_file():
        result["median_tokens_per_sec"] = median_tokens_per_sec(training_log)
    result["command"] = "python -m tools.wall_time " + " ".join(argv or sys.argv[1:])
    text = json.dumps(result, indent=1) + "\n"
    if args.write:
        (path.parent / "wall_time.json").write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
