r"""What progressive freezing would have done on a finished search, from its arch_history.json.

    python -m tools.freeze_replay docs/results/wt2_base_20ep
    python -m tools.freeze_replay docs/results/wt2_base_20ep --thresholds=0.9,0.97 \
        --windows=1000,2000 --arch_warmup_steps=2000

Replays the rule of docs/freezing.md on the logged probabilities (one entry
per --log_interval, so a window is counted in logged entries: the replay is
as coarse as the history): a block freezes once its most probable candidate
has kept a probability of at least the threshold at every logged step of a
window that starts after the architecture warm-up. For each threshold and
window it prints the step each block would have frozen at, the frozen
string, how many blocks it would have frozen to a candidate other than the
run's final choice, and the step from which every block is frozen.

A replay ignores that freezing changes the rest of the search (the frozen
blocks stop mixing); it shows when the decisions of a search without
freezing settled.
"""

import argparse
import json
import pathlib
import sys

import numpy as np


def load_history(path):
    """(steps [E], probs [E, num_blocks, C], choices) from arch_history.json or its run dir."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "arch_history.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    entries = data["entries"]
    steps = np.array([e["step"] for e in entries], np.int64)
    probs = np.array([e["probs"] for e in entries], np.float64)
    return steps, probs, tuple(data["choices"])


def replay(steps, probs, threshold, window, arch_warmup_steps=0):
    """Freeze step and candidate index per block (None: never frozen).

    Args:
        steps: [E] logged steps, increasing.
        probs: [E, num_blocks, C] probabilities at those steps.
        threshold: probability the most probable candidate must keep.
        window: steps it must keep it (counted as logged steps: the window
            holds every logged step s with since <= s and its length is
            step - since + the logging interval).
        arch_warmup_steps: steps before the logits train (not observed).

    Returns:
        list per block of (step, candidate) or None.
    """
    interval = int(steps[1] - steps[0]) if len(steps) > 1 else 1
    best = probs.argmax(axis=2)
    top = probs.max(axis=2)
    out = []
    for block in range(probs.shape[1]):
        since, frozen = None, None
        for i, step in enumerate(steps):
            if step <= arch_warmup_steps:
                continue
            if top[i, block] < threshold:
                since = None
                continue
            if since is None or best[i, block] != best[i - 1, block]:
                since = int(step)
            if step - since + interval >= window:
                frozen = (int(step), int(best[i, block]))
                break
        out.append(frozen)
    return out


def _letters(choices):
    from model.transformer_xl import blocks

    by_name = {spec.name: spec.letter for spec in blocks.specs()}
    return [by_name.get(name, "?") for name in choices]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a search run directory (or its arch_history.json)")
    parser.add_argument("--thresholds", default="0.8,0.9,0.95,0.97")
    parser.add_argument("--windows", default="1000,2000")
    parser.add_argument("--arch_warmup_steps", type=int, default=None,
                        help="default: the run's config.json (search.arch_warmup_steps), else 0")
    args = parser.parse_args(argv)
    steps, probs, choices = load_history(args.run)
    letters = _letters(choices)
    warmup = args.arch_warmup_steps
    if warmup is None:
        config = pathlib.Path(args.run) / "config.json"
        values = json.loads(config.read_text()) if config.is_file() else {}
        warmup = values.get("search", values).get("arch_warmup_steps", 0)
    final = "".join(letters[k] for k in probs[-1].argmax(axis=1))
    print(f"{args.run}: {probs.shape[1]} blocks, {len(steps)} logged steps to {steps[-1]}, "
          f"final {final}, warm-up {warmup}")
    print("| threshold | window | freeze step per block | frozen | wrong | all frozen from |")
    print("|---:|---:|---|---|---:|---:|")
    for threshold in (float(t) for t in args.thresholds.split(",")):
        for window in (int(w) for w in args.windows.split(",")):
            frozen = replay(steps, probs, threshold, window, warmup)
            string = "".join("?" if f is None else letters[f[1]] for f in frozen)
            wrong = sum(f is not None and letters[f[1]] != final[b] for b, f in enumerate(frozen))
            last = ("never" if any(f is None for f in frozen)
                    else f"{max(f[0] for f in frozen):,}")
            print(f"| {threshold:g} | {window:,} | "
                  f"{', '.join('-' if f is None else f'{f[0]:,}' for f in frozen)} | {string} | "
                  f"{wrong} | {last} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
