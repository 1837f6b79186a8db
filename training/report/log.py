"""model_dir/training_log.log: one plain-text line of `key=value` pairs per logged step.

A step's line is `step loss ppl lr`, the plug-ins' step values (e.g. `tau`),
`skipped` (the non-finite steps skipped since the last line, with
--on_nonfinite=skip) and `tokens_per_sec`; a plug-in's event (e.g. a block
frozen) is a line of its own that starts with `step` too. Lines are appended
whole or not at all (`run_dir.append_line`); `read_training_log` parses the file.
"""

import os

from runstore import run_dir


class TrainingLog:
    """The training_log.log of a run, written by the chief only (`enabled`)."""

    def __init__(self, path, enabled):
        self.path = path
        self.enabled = enabled

    def truncate(self, step):
        """Drops lines after `step` (logged by a run that died before saving) and a
        last line without its newline."""
        if not (self.enabled and os.path.exists(self.path)):
            return
        with open(self.path, encoding="utf-8") as f:
            lines = f.readlines()
        kept = [line for line in lines if line.endswith("\n") and _line_step(line) <= step]
        if len(kept) != len(lines):
            run_dir.atomic_write(self.path, "".join(kept))

    def write(self, values):
        if not self.enabled:
            return
        run_dir.append_line(self.path, " ".join(f"{k}={v}" for k, v in values.items()))


def _line_step(line):
    head = line.split(" ", 1)[0]
    return int(head[len("step="):]) if head.startswith("step=") else -1


def step_line(step, nll, perplexity, lr, step_values, skipped, tokens_per_sec):
    """The fields of a logged step's line, formatted (`skipped` None: not skipping)."""
    line = {"step": step, "loss": f"{nll:.7f}", "ppl": f"{perplexity:.4f}", "lr": f"{lr:.6e}"}
    line.update({k: f"{v:.6f}" for k, v in step_values.items()})
    if skipped is not None:
        line["skipped"] = str(skipped)
    line["tokens_per_sec"] = f"{tokens_per_sec:.1f}"
    return line


def read_training_log(path):
    """Parses training_log.log into a list of dicts (numbers as floats, step int).

    A last line without its newline (a write cut short) is ignored.
    """
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            fields = dict(item.split("=", 1) for item in line.split())
            rows.append({k: int(v) if k == "step" else float(v) for k, v in fields.items()})
    return rows
