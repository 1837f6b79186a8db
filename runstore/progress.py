"""How far a run directory got, read from its files (no model, no checkpoint read).

For the commands that use a run or its export before it is done (README's
generate, evaluate and export steps against a stopped pipeline): one line
with the run's progress and how to finish it, instead of a bare "does not
exist" or a silent export of a half-trained checkpoint.

Pure Python until a run turns out unfinished (a finished command is answered without
TensorFlow: training/setup/finished.py). A run is finished once its metrics.json exists
(written at its end); before that its progress is the step of its newest complete
checkpoint (the one a resumed run starts from) against its planned steps (`max_steps`, or
`epochs` times the training records of its data's meta.json).
"""

import dataclasses
import glob
import json
import os

from runstore.run_dir import CONFIG_FILE, METRICS_FILE


@dataclasses.dataclass(frozen=True)
class Progress:
    """Attributes: model_dir; step (of the newest complete checkpoint, or metrics.json's
    when finished); planned (the run's planned steps, None when its data is gone);
    finished (metrics.json was written)."""

    model_dir: str
    step: int
    planned: int | None
    finished: bool

    def describe(self):
        """'finished at step 3,190' or 'unfinished: step 2,123 of 54,520 (its last
        checkpoint)'."""
        if self.finished:
            return f"finished at step {self.step:,}"
        of = f" of {self.planned:,}" if self.planned else ""
        return f"unfinished: step {self.step:,}{of} (its last checkpoint)"


def is_run_dir(path):
    """True for a directory holding a run's config.json."""
    return os.path.isfile(os.path.join(path, CONFIG_FILE))


def _planned(config):
    if config.get("max_steps"):
        return int(config["max_steps"])
    try:
        with open(os.path.join(config["data_dir"], "meta.json"), encoding="utf-8") as f:
            records = json.load(f)["splits"]["train"]["records"]
        return int(config["epochs"]) * int(records)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run_progress(model_dir):
    """The `Progress` of run directory `model_dir` (which must hold a config.json)."""
    with open(os.path.join(model_dir, CONFIG_FILE), encoding="utf-8") as f:
        config = json.load(f)
    metrics_path = os.path.join(model_dir, METRICS_FILE)
    if os.path.isfile(metrics_path):
        try:
            with open(metrics_path, encoding="utf-8") as f:
                step = int(json.load(f)["step"])
            return Progress(model_dir, step, _planned(config), True)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged metrics.json: judge by the checkpoints
    from runstore import checkpoints  # TensorFlow's checkpoint list: only when unfinished

    steps = checkpoints.listed_steps(model_dir) or []
    return Progress(model_dir, max(steps, default=0), _planned(config), False)


def unfinished_runs_for(package_path):
    """The unfinished runs whose export `package_path` (`X.keras`) would be: run
    directory X itself and its follow-up stages X_<name> (the PAR pipeline's X_retrain),
    in name order. [] when there is none."""
    base = os.path.splitext(os.fspath(package_path))[0]
    found = []
    for path in [base, *sorted(glob.glob(glob.escape(base) + "_*"))]:
        if is_run_dir(path):
            progress = run_progress(path)
            if not progress.finished:
                found.append(progress)
    return found


def missing_package_note(package_path):
    """For a `.keras` path that does not exist: what the runs it would come from say
    (their progress and how to finish them), or "" when no run matches."""
    runs = unfinished_runs_for(package_path)
    if not runs:
        return ""
    described = "; ".join(f"{run.model_dir} is {run.describe()}" for run in runs)
    newest = runs[-1].model_dir
    return (f"it is not written yet: {described}. Run the command that trains it again to "
            f"finish and export it (e.g. ./base_model.sh --pipeline), or use its best "
            f"checkpoint so far with --model_dir={newest}")
