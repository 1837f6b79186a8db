"""Settling several finished searches by short retrains of their candidates (screens).

Searches that differ only in their seed may derive different architectures; their
supernets' own scores rank the candidates almost in reverse of what the networks
reach once trained (docs/results/par_settle.md). A screen compares the candidates by
the network each becomes instead:

    screen[arch] = the valid NLL per token at step N of `arch` trained from scratch
                   with the retrain's recipe (retrain.retrain_config of the first
                   search: its flags and seed), its schedules planned for the
                   retrain's whole length S (--plan_steps=S, --max_steps=N);
    pick         = the architecture of the lowest screen NLL (ties: the first).

Each screen is therefore exactly the first N steps of that architecture's retrain,
so the pick's screen, resumed with the retrain's own length, *is* its retrain:
`finish_config` continues it from step N, and the only steps spent on the comparison
are the other candidates' N each.

Importing this module does not load TensorFlow.
"""

import os

from training.plugins.par_search.retrain import retrain_config
from training.plugins.par_search.settle import SettleError, first_lowest, plan
from training.setup.config import TrainConfig

SCREEN_FILE = "screen.json"


def retrain_length(search_config, retrain_epochs):
    """The derived network's TrainConfig length fields for `retrain_epochs` (0: the
    search's own --retrain_epochs / recipe / length, as --then_retrain trains)."""
    search = search_config.search
    epochs = retrain_epochs or search.retrain_epochs
    return search_config.replace(search=search.replace(then_retrain=True,
                                                       retrain_epochs=epochs))


def screen_configs(runs, out_dir, screen_steps, train_records, extra=(), retrain_epochs=0):
    """The screens of the searches `runs` (finished search directories).

    Args:
        runs: directories of finished searches of one supernet and data.
        out_dir: each screen trains in out_dir/<architecture>.
        screen_steps: N, the steps of each screen.
        train_records: records of the training split (steps per epoch).
        extra: architectures to screen too, after the runs' derived ones.
        retrain_epochs: the retrain's length in epochs (0: the search's own).

    Returns:
        (SettlePlan, {architecture: screen TrainConfig}) in the plan's order.

    Raises:
        SettleError: bad runs or architectures, or N not shorter than the retrain.
    """
    settle_plan = plan(runs, extra=extra)
    first = TrainConfig.load(settle_plan.runs[0])
    base = retrain_length(first, retrain_epochs)
    configs = {}
    for arch in settle_plan.architectures:
        full = retrain_config(base, arch)
        steps = full.max_steps or full.epochs * train_records
        if not 1 <= screen_steps < steps:
            raise SettleError(f"--screen_steps={screen_steps} must be at least 1 and fewer than "
                              f"the retrain's {steps} steps: give a shorter screen (e.g. one "
                              f"epoch, {train_records}) or a longer --retrain_epochs")
        configs[arch] = full.replace(model_dir=os.path.join(out_dir, arch), logdir="",
                                     max_steps=screen_steps, plan_steps=steps)
    return settle_plan, configs


def finish_config(screen):
    """The pick's screen TrainConfig resumed to the retrain's whole length (its planned
    steps as --max_steps)."""
    return screen.replace(max_steps=screen.plan_steps, plan_steps=0)


def pick(valid_nll, architectures):
    """The architecture of the lowest screen NLL (ties: the first in order)."""
    return first_lowest(valid_nll, architectures)
