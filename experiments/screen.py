"""Settle finished PAR searches that disagree by short retrains of their candidates.

Every candidate architecture (the runs' derived architectures, then --extra's) is
trained from scratch with the retrain's recipe and seed (the first run's) for the
first --screen_steps of its own schedule (planned for the whole retrain,
--plan_steps), into --out_dir/<architecture>; the pick is the architecture of the
lowest valid NLL at that step (ties: the first listed)
(training/plugins/par_search/screen.py). With --finish the pick's screen is resumed
to the retrain's whole length: the same run a retrain from scratch would have been,
for the candidates' screens only. --schedule=own trains each screen with its own
schedule over its steps instead (with --screen_recipe's settings if given), and
--finish then trains the pick from scratch.

Usage (from the project root, after the searches):
    python -m experiments.screen --runs=runs/s0,runs/s1,runs/s2 --screen_steps=2726 \
        --retrain_epochs=20 --out_dir=runs/screen [--finish]
Results: --out_dir/screen.json (runs, derived, architectures, screen_steps, schedule,
planned_steps, screen_recipe, valid_nll, valid_ppl, pick, seed, the finished retrain's
best valid and test figures with --finish, command), written whole, and a Markdown table on stdout.
Running it again resumes the screen (and the retrain) it was in. Exit status 0 done, 1
training or the write failed, 2 bad input (one `error:` line; nothing trained), 128 + the
signal's number when interrupted (a checkpoint written; the same command resumes).
"""

import math
import os
import sys

from bench import common  # no TensorFlow
from experiments.settle import Parser, UsageError, add_runs_flags, runs_and_extra
import pardata.quiet  # noqa: F401  (TensorFlow start-up noise; before TF is imported)
from runstore import run_dir
from training.plugins.par_search import screen, settle

MODULE = "experiments.screen"


def parse_args(argv):
    """Parsed flags (runs and extra as lists); UsageError naming the flag otherwise."""
    parser = Parser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    add_runs_flags(parser, "; the first gives recipe and seed", "screen")
    parser.add_argument("--screen_steps", type=int, required=True,
                        help="steps of each screen (e.g. one epoch)")
    parser.add_argument("--retrain_epochs", type=int, default=0,
                        help="the retrain's length in epochs (0: the first search's own "
                        "--retrain_epochs, recipe or length)")
    parser.add_argument("--out_dir", required=True,
                        help="each screen trains in <out_dir>/<architecture>; screen.json")
    parser.add_argument("--schedule", default="prefix",
                        help="prefix: each screen is the first steps of its retrain (planned "
                        "for its whole length); own: a short training with its own schedule, "
                        "decayed by its end")
    parser.add_argument("--screen_recipe", default="",
                        help="with --schedule=own: the screens' recipe (training/setup/"
                        "recipes.py; default the retrain's flags)")
    parser.add_argument("--finish", action="store_true",
                        help="train the pick's retrain to its end (prefix: its screen resumed; "
                        "own: from scratch in <out_dir>/<pick>_retrain)")
    args = runs_and_extra(parser.parse_args(argv))
    if args.retrain_epochs < 0:
        raise UsageError(f"--retrain_epochs={args.retrain_epochs} must be >= 0 (0: the "
                         "search's own length)")
    if os.path.isfile(args.out_dir):
        raise UsageError(f"--out_dir={args.out_dir} is a file: give a directory")
    problem = run_dir.unwritable(os.path.join(args.out_dir, screen.SCREEN_FILE))
    if problem:
        cause, fix = run_dir.reason_and_fix(problem, args.out_dir)
        raise UsageError(f"--out_dir={args.out_dir}: cannot write there: {cause}; {fix}")
    return args


def markdown_table(result):
    """architecture x (valid NLL and perplexity at the screen's step, derived by); pick."""
    lines = ["| architecture | valid NLL | valid ppl | derived by |", "|---|---:|---:|---|"]
    for arch in result["architectures"]:
        derived_by = ", ".join(os.path.basename(run) for run in result["runs"]
                               if result["derived"][run] == arch) or "-"
        name = f"**{arch}** (pick)" if arch == result["pick"] else arch
        nll = result["valid_nll"][arch]
        lines.append(f"| {name} | {nll:.4f} | {math.exp(nll):.2f} | {derived_by} |")
    lines.append(f"\nValid at step {result['screen_steps']} of {result['planned_steps']} "
                 f"(seed {result['seed']}); pick: {result['pick']}.")
    return "\n".join(lines)


def _train_screens(configs):
    """{architecture: valid NLL at the screen's last step} (each screen trained or resumed)."""
    from training.run.loop import train

    nll = {}
    for arch, config in configs.items():
        print(f"screen {arch}: {config.model_dir}, {config.max_steps} of "
              f"{config.plan_steps or config.max_steps} planned steps", flush=True)
        nll[arch] = float(train(config)["last"]["valid"]["nll"])
    return nll


def _finish(config):
    """The pick's retrain trained (prefix: resumed) to its end: its best figures."""
    from training.run.loop import train

    print(f"retraining {config.model_dir} to its end", flush=True)
    metrics = train(config)
    best = metrics["best"]
    return {"model_dir": config.model_dir, "step": metrics["step"], "best_step": best["step"],
            "valid_ppl": best["valid"]["perplexity"], "test_ppl": best["test"]["perplexity"]}


def plan(args):
    """(SettlePlan, {architecture: screen TrainConfig}, {architecture: retrain
    TrainConfig}) of the parsed flags, checked."""
    return screen.screen_configs(args.runs, args.out_dir, args.screen_steps, extra=args.extra,
                                 retrain_epochs=args.retrain_epochs, schedule=args.schedule,
                                 recipe=args.screen_recipe)


def run(settle_plan, configs, finish, command):
    """Trains the screens (and with `finish` the pick's retrain); screen.json's content.

    `configs`: ({architecture: screen config}, {architecture: retrain config})."""
    screens, retrains = configs
    architectures = list(settle_plan.architectures)
    print(f"command: {command}\n{len(architectures)} candidates: {', '.join(architectures)}",
          flush=True)
    nll = _train_screens(screens)
    chosen = screen.pick(nll, architectures)
    config = screens[chosen]
    result = {"runs": list(settle_plan.runs),
              "derived": {s.run: s.derived for s in settle_plan.searches},
              "architectures": architectures, "screen_steps": config.max_steps,
              "schedule": "prefix" if config.plan_steps else "own",
              "planned_steps": config.plan_steps or config.max_steps,
              "screen_recipe": config.recipe, "seed": config.model.seed,
              "valid_nll": nll, "valid_ppl": {a: math.exp(v) for a, v in nll.items()},
              "pick": chosen, "command": command}
    if finish:
        result["finished"] = _finish(retrains[chosen])
    return result


def main(argv=None):
    """Exit status: 0 done, 1 training or the write failed, 2 bad input, 128 + signal when
    interrupted (as train.py)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = common.command_line(MODULE, argv)
    try:
        args = parse_args(argv)
        settle_plan, *configs = plan(args)
    except (UsageError, settle.SettleError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    from pardata.errors import DataError
    from training.run.loop import NonFiniteError, TrainingInterrupted
    from training.setup.config import ConfigError

    out = os.path.join(args.out_dir, screen.SCREEN_FILE)
    try:
        result = run(settle_plan, configs, args.finish, command)
        os.makedirs(args.out_dir, exist_ok=True)
        run_dir.atomic_write_json(out, result)
    except TrainingInterrupted as stop:
        print(stop, file=sys.stderr)
        return stop.exit_code
    except (ConfigError, DataError, NonFiniteError, OSError, run_dir.WriteError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print(f"\n{markdown_table(result)}\n\nwritten to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
