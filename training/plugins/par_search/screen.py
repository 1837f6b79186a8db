"""Settling several finished searches by short retrains of their candidates (screens).

Searches that differ only in their seed may derive different architectures; their
supernets' own scores rank the candidates almost in reverse of what the networks
reach once trained (docs/results/par_settle.md). A screen compares the candidates by
the network each becomes instead:

    screen[arch] = the valid NLL per token at step N of `arch` trained from scratch
                   with the retrain's flags and seed (retrain.retrain_config of the
                   first search);
    pick         = the architecture of the lowest screen NLL (ties: the first).

Two schedules:

- `prefix`: each screen's schedules are planned for the retrain's whole length S
  (--plan_steps=S, --max_steps=N), so a screen is exactly the first N steps of that
  architecture's retrain and the pick's screen, resumed to S, *is* its retrain;
- `own`: each screen is a short training of its own, its schedules over its N steps
  (decayed by its end), with the retrain's recipe or another (`recipe`); the pick's
  retrain then starts from scratch in <out_dir>/<pick>_retrain.

Importing this module does not load TensorFlow.
"""

import os

from pardata.errors import DataError
from pardata.meta import load_meta
from training.plugins.par_search.retrain import retrain_config, with_recipe
from training.plugins.par_search.settle import SettleError, first_lowest, plan
from training.setup.config import TrainConfig

SCREEN_FILE = "screen.json"
SCHEDULES = ("prefix", "own")


def retrain_length(search_config, retrain_epochs):
    """The derived network's TrainConfig length fields for `retrain_epochs` (0: the
    search's own --retrain_epochs / recipe / length, as --then_retrain trains)."""
    search = search_config.search
    epochs = retrain_epochs or search.retrain_epochs
    return search_config.replace(search=search.replace(then_retrain=True,
                                                       retrain_epochs=epochs))


def screen_configs(runs, out_dir, screen_steps, extra=(), retrain_epochs=0, schedule="prefix",
                   recipe=""):
    """The screens of the searches `runs` (finished search directories) and the retrains
    that follow them.

    Args:
        runs: directories of finished searches of one supernet and data.
        out_dir: each screen trains in out_dir/<architecture>.
        screen_steps: N, the steps of each screen.
        extra: architectures to screen too, after the runs' derived ones.
        retrain_epochs: the retrain's length in epochs (0: the search's own).
        schedule: "prefix" or "own" (the module's docstring).
        recipe: with "own", the screens' recipe ("": the retrain's).

    Returns:
        (SettlePlan, {architecture: screen TrainConfig},
         {architecture: retrain TrainConfig}) in the plan's order.

    Raises:
        SettleError: bad runs, architectures, schedule or recipe, the first run's data
            unreadable, or N not shorter than the retrain.
    """
    if schedule not in SCHEDULES:
        raise SettleError(f"--schedule={schedule} is not one of {', '.join(SCHEDULES)}")
    if recipe and schedule == "prefix":
        raise SettleError(f"--screen_recipe={recipe} trains the screens with another recipe "
                          "than the retrain, so a screen is not the retrain's beginning: add "
                          "--schedule=own, or drop --screen_recipe")
    settle_plan = plan(runs, extra=extra)
    first = settle_plan.searches[0]
    try:
        train_records = load_meta(first.config.data_dir)["splits"]["train"]["records"]
    except DataError as error:
        raise SettleError(f"run {first.run}: cannot read its data ({error})") from None
    base = retrain_length(TrainConfig.load(first.run), retrain_epochs)
    screens, retrains = {}, {}
    for arch in settle_plan.architectures:
        full = retrain_config(base, arch)
        steps = full.max_steps or full.epochs * train_records
        if not 1 <= screen_steps < steps:
            raise SettleError(f"--screen_steps={screen_steps} must be at least 1 and fewer than "
                              f"the retrain's {steps} steps: give a shorter screen (e.g. one "
                              f"epoch, {train_records}) or a longer --retrain_epochs")
        model_dir = os.path.join(out_dir, arch)
        if schedule == "prefix":
            screens[arch] = full.replace(model_dir=model_dir, logdir="",
                                         max_steps=screen_steps, plan_steps=steps)
            retrains[arch] = full.replace(model_dir=model_dir, logdir="")
        else:
            own = _screen_recipe(full, recipe) if recipe else full
            screens[arch] = own.replace(model_dir=model_dir, logdir="", max_steps=screen_steps)
            retrains[arch] = full.replace(model_dir=f"{model_dir}_retrain", logdir="")
    return settle_plan, screens, retrains


def pick(valid_nll, architectures):
    """The architecture of the lowest screen NLL (ties: the first in order)."""
    return first_lowest(valid_nll, architectures)


def _screen_recipe(config, name):
    """`config` with the settings (and warm-up) of recipe `name` (retrain.with_recipe)."""
    try:
        return with_recipe(config, name, flag="--screen_recipe")
    except ValueError as error:
        raise SettleError(str(error)) from None
