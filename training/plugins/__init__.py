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
Adding one means a package here, an entry in `registered` and, when it owns
a config section, an entry in `sections.py`. The base class and its hooks are
in `base.py`.
"""

from training.plugins.base import OptimizerGroup, Plugin
from training.plugins.sections import config_sections

__all__ = ["OptimizerGroup", "Plugin", "config_sections", "make_plugins", "registered",
           "run_files"]


def registered():
    """The registered plug-in classes, in the order they are applied."""
    from training.plugins.par_search.plugin import ParSearch
    from training.plugins.span_report.plugin import SpanReport

    return (ParSearch, SpanReport)


def make_plugins(model, config, horizon):
    """The registered plug-ins that apply to `model`, in registry order."""
    plugins = []
    for cls in registered():
        plugin = cls.create(model, config, horizon)
        if plugin is not None:
            plugins.append(plugin)
    return plugins


def run_files():
    """Every run-directory file name a registered plug-in may write."""
    return tuple(name for cls in registered() for name in cls.RUN_FILES)
