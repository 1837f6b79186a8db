"""Research add-ons of the training loop: plug-ins, not branches in the trainer.

A plug-in is created for a model it applies to (`Plugin.create` returns None
otherwise) and may:
- train a variable group of the model with its own optimizer
  (`optimizer_groups`): the trainer computes that group's gradients with the
  weights' and applies them from `OptimizerGroup.start_step` on;
- add training losses (`extra_losses`, inside the gradient tape);
- set model state before each step inside the compiled step (`before_step`)
  and report values of that step (`step_values`, e.g. the temperature);
- change what the compiled step computes between steps: a new `trace_key`
  makes the trainer trace its functions again, training only the variables
  no plug-in lists in `inactive_variables` (the PAR search freezing blocks);
- keep state in the checkpoints (`checkpoint_objects`, optional: restored
  when the checkpoint has it);
- act on the host after every step (`after_step`, returning events the
  loop logs), log, summarise, resume and finish (`on_start`, `on_log`,
  `on_finish`).

A plug-in may own a section of the training config (`CONFIG_SECTIONS`, a
`ConfigBase` dataclass whose fields are train.py flags; `TrainConfig` holds
it as a field of that name). A plug-in decides whether it applies from what
the model can do (e.g. `arch_variables`), not from its family's name.

The trainer and the loop know only this class. Registered plug-ins, each a
package owning its parts: `par_search` (ParSearch: architecture optimizer,
Gumbel temperature, progressive freezing, architecture summaries and
history, derivation and plots; its config section `search`) and
`span_report` (SpanReport: learned attention spans and their figure).
Adding one means a package here and an entry in `_registered`.
"""

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass
class OptimizerGroup:
    """Variables trained by one optimizer.

    Attributes:
        name: group name; the checkpoint key is `<name>_optimizer`.
        variables: the variables (a model variable group).
        optimizer: a built Keras optimizer.
        l2: coefficient of `l2 * w` added to the gradient of `l2_variables`
            (PyTorch-style L2 weight decay); 0 for none.
        l2_variables: the subset of `variables` that takes the L2 term.
        clip_norm: global-norm clipping of this group's gradients (0: off).
        start_step: the group is updated from this step index on.
        learning_rate: () -> current learning rate, for logging.
    """

    name: str
    variables: list
    optimizer: Any
    l2: float = 0.0
    l2_variables: list = dataclasses.field(default_factory=list)
    clip_norm: float = 0.0
    start_step: int = 0
    learning_rate: Callable | None = None


class Plugin:
    """Base class: every hook does nothing."""

    #: run-directory files the plug-in writes (removed by --overwrite)
    RUN_FILES: tuple = ()

    @classmethod
    def create(cls, model, config, horizon):
        """The plug-in for `model` trained with TrainConfig `config`, or None
        when it does not apply. `horizon` is the number of steps the run's
        schedules are planned for, fixed at its first start (a resumed run
        may stop earlier or later)."""
        raise NotImplementedError

    def optimizer_groups(self, step):
        """OptimizerGroups of the model variables this plug-in trains.

        Called once inside `strategy.scope()`. `step` is the trainer's step
        variable (the index of the step being taken).
        """
        return []

    def extra_losses(self):
        """Scalar float32 losses added to each replica's loss (inside the tape),
        divided by the number of replicas like the model's extra losses."""
        return []

    def before_step(self, step):
        """Inside the compiled step, before the forward pass (cross-replica context)."""
        return None  # a body besides the docstring: AutoGraph converts this method

    def step_values(self, step):
        """dict name -> scalar tensor of this step, returned with the step's outputs."""
        return {}

    def trace_key(self):
        """Hashable; when it changes the trainer traces its compiled functions again."""
        return None

    def inactive_variables(self):
        """Variables of the optimizer groups that no longer train (no gradient, no
        update; they and their optimizer slots stay in the checkpoints)."""
        return []

    def checkpoint_objects(self):
        """dict name -> trackable saved with every checkpoint (restored when present)."""
        return {}

    def after_step(self, step):
        """On the host after step `step` (steps done): a list of events, each a dict
        name -> number that the loop writes to training_log.log and TensorBoard."""
        return []

    def should_stop(self):
        """True to end the run after the current step (evaluated and saved as a last step)."""
        return False

    def follow_up(self, config, results):
        """A TrainConfig to train right after this run in the same command, or None."""
        return None

    def after_follow_up(self, results, followed):
        """This run's results once the follow-up run returned `followed` (its results)."""
        return results

    def on_start(self, model_dir, resumed_step):
        """On the host before the first step; `resumed_step` is None on a fresh run."""

    def log_values(self, step, out):
        """dict name -> number added to the logged training values at `step`."""
        return {}

    def on_log(self, step, summaries, model_dir):
        """On the chief at every log interval (summaries: training.summaries.TrainSummaries)."""

    def on_finish(self, results, model_dir, chief):
        """At the end of training: may add entries to metrics.json's `results`."""


def _registered():
    from training.plugins.par_search.plugin import ParSearch
    from training.plugins.span_report.plugin import SpanReport

    return (ParSearch, SpanReport)


def config_sections():
    """name -> config section class of the registered plug-ins (no TensorFlow)."""
    from training.plugins.par_search.config import SECTION, SearchConfig

    return {SECTION: SearchConfig}


def make_plugins(model, config, horizon):
    """The registered plug-ins that apply to `model`, in registry order."""
    plugins = []
    for cls in _registered():
        plugin = cls.create(model, config, horizon)
        if plugin is not None:
            plugins.append(plugin)
    return plugins


def run_files():
    """Every run-directory file name a registered plug-in may write."""
    return tuple(name for cls in _registered() for name in cls.RUN_FILES)
