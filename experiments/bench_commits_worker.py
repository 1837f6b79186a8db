"""The worker of experiments/bench_commits.py: one tree's training step, served over pipes.

The driver starts it as `python -m experiments.bench_commits_worker --specs=JSON` with the
root of the tree it measures as working directory and PYTHONPATH, so that `bench`,
`model` and `training` are that tree's. It copies this file into every tree it exports
from git (creating experiments/ where the commit has none), so that both sides speak this
protocol whatever the commit's own version of it; hence only the standard library is
imported at the top, and the tree's code in either layout:
  * packages (6bb8bbb and later): model/transformer_xl/presets.py, bench/ a package;
  * flat (bc8c113 and earlier): model/builder.py, bench/bench_train.py putting its tree on
    sys.path itself (bench/ is then a namespace package of the tree alone).

Protocol: after building and warming up its cases it replies {"ready": [...], "errors":
{...}, "notes": {...}}; then, one JSON command per line on stdin: {"op": "run", "case":
name, "steps": n} -> {"seconds": per step}; {"op": "losses", "case": name, "steps": n} ->
{"losses": [...]} from a fresh dropout-free case; {"op": "quit"}. Replies are stdout lines
starting with "@@" (anything else the tree prints is passed over); {"fatal": message} when
the tree cannot be used.
"""

import argparse
import json
import os
import sys
import tempfile

REPLY_PREFIX = "@@"


def reply(obj):
    sys.stdout.write(REPLY_PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


def load_tree():
    """(bench_train module, preset_config) of the tree this process runs in."""
    from bench import bench_train  # this tree's

    try:
        from model.transformer_xl.presets import preset_config
    except ImportError:  # the flat model/ of the commits before 6bb8bbb
        from model.builder import preset_config
    return bench_train, preset_config


def serve(specs):
    """Builds the cases of `specs` ((name, overrides, precision) each), then answers commands."""
    try:
        bench_train, preset_config = load_tree()
    except ImportError as error:
        reply({"fatal": f"{os.getcwd()} has no usable bench/bench_train.py and "
                        f"model/transformer_xl/presets.py or model/builder.py ({error}); "
                        "choose a newer commit"})
        return

    workdir = tempfile.mkdtemp(prefix="bench_commits_")
    cases, errors, notes = {}, {}, {}

    def build(name, overrides, precision, extra=None):
        config = preset_config("wt2_base", **dict(overrides, **(extra or {})))
        return bench_train.Case(name, config, 32, 32, precision, workdir, True)

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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--specs", required=True,
                        help="JSON list of [case name, preset overrides, precision]")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    serve([tuple(spec) for spec in json.loads(args.specs)])


if __name__ == "__main__":
    main()
