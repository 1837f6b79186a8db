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
  loop logs), log, write its TensorBoard summaries (`on_log`), resume and
  finish (`on_start`, `on_finish`);
- add lines to the console's end-of-run summary and commands to its "next:"
  list (`summary_lines`, `next_commands`: class methods given the run's
  config and results; the search names its derived architecture and the
  command that retrains it).

Each plug-in package declares itself in its `__init__.py`: a `Registration`
(training/plugins/base.py) named `PLUGIN`, read without TensorFlow, with its
class (loaded lazily), its config section (a `ConfigBase` dataclass whose
fields are train.py flags; `TrainConfig` holds it as a field of the section's
name, `config.search`), the section's resumable fields and the migration of older
config.json files. Everything else the plug-in owns (its schedules, its
summaries, its files) lives in its package. A plug-in decides whether it
applies from what the model can do (e.g. `arch_variables`), not from its
family's name.

This file is the registry, the one generic file that names the plug-ins:
`par_search` (ParSearch: architecture optimizer, Gumbel temperature,
progressive freezing, architecture summaries and history, derivation and
plots; its config section `search`) and `span_report` (SpanReport: learned
attention spans and their figure). Adding one means a package here and its
line in `_REGISTERED`. The trainer, the loop and the config know only this
module and the base class (training/plugins/base.py). `register` adds a
plug-in at run time (tests, experiments).
"""

from training.plugins import par_search, span_report
from training.plugins.base import OptimizerGroup, Plugin, Registration

__all__ = ["OptimizerGroup", "Plugin", "Registration", "closing_lines", "config_sections",
           "later_runs", "later_steps", "make_plugins",
           "next_commands", "read_model_flag", "register", "registered", "registrations",
           "run_files", "summary_lines", "unregister"]

# The registered plug-ins, in the order they are applied: one line each.
_REGISTERED = [
    par_search.PLUGIN,
    span_report.PLUGIN,
]


def registrations():
    """The `Registration`s of the registered plug-ins, in registry order (no TensorFlow)."""
    return tuple(_REGISTERED)


def register(registration):
    """Adds a plug-in after the registered ones (`unregister` removes it).

    Raises:
        ValueError: its name, section or one of its flags is taken.
    """
    taken_flags = {f.name for r in _REGISTERED for f in r.flag_fields()}
    for other in _REGISTERED:
        if registration.name == other.name or (
                registration.section and registration.section == other.section):
            raise ValueError(f"plug-in {registration.name}: the name or section "
                             f"{registration.section!r} is taken by plug-in {other.name}")
    clash = sorted(taken_flags & {f.name for f in registration.flag_fields()})
    if clash:
        raise ValueError(f"plug-in {registration.name}: flags {clash} are taken")
    _REGISTERED.append(registration)


def unregister(name):
    """Removes the plug-in registered as `name` (KeyError when there is none)."""
    for index, registration in enumerate(_REGISTERED):
        if registration.name == name:
            del _REGISTERED[index]
            return
    raise KeyError(f"no plug-in {name!r} is registered")


def config_sections():
    """name -> config section class of the registered plug-ins (no TensorFlow)."""
    return {r.section: r.config for r in _REGISTERED if r.section is not None}


def registered():
    """The registered plug-in classes, in the order they are applied (loads them)."""
    return tuple(r.load() for r in _REGISTERED)


def reports():
    """The registered plug-ins' classes of class-level hooks (`Registration.report`), in
    registry order; they import no TensorFlow when the plug-ins declare a report."""
    return tuple(r.load_report() for r in _REGISTERED)


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


def summary_lines(config, results):
    """The registered plug-ins' lines of the end-of-run summary, in registry order."""
    return [line for cls in reports() for line in cls.summary_lines(config, results)]


def closing_lines(results):
    """The registered plug-ins' lines about the command's later stages, in registry order."""
    return [line for cls in reports() for line in cls.closing_lines(results)]


def later_steps(config, train_records):
    """The training steps of the later stages the registered plug-ins run after `config`'s."""
    return sum(cls.later_steps(config, train_records) for cls in reports())


def plan_lines(config, train_records):
    """The registered plug-ins' lines announcing the command's later stages."""
    return [line for cls in reports() for line in cls.plan_lines(config, train_records)]


def read_model_flag(name, value):
    """A model flag's value after the registered plug-ins' readers (`Registration.
    model_flag_readers`): a search run's directory becomes its derived architecture.

    Raises:
        ValueError, FileNotFoundError: a reader's, naming what it could not read.
    """
    for registration in _REGISTERED:
        reader = registration.model_flag_readers.get(name)
        if reader is not None:
            value = reader(value)
    return value


def later_runs(config):
    """The run directories of the stages the registered plug-ins train after `config`'s run
    in the same command (`Registration.later_runs`), in order; no TensorFlow."""
    return [path for r in _REGISTERED if r.later_runs is not None for path in r.later_runs(config)]


def next_commands(config, results):
    """The registered plug-ins' commands for the summary's "next:" list, in registry order."""
    return [line for cls in reports() for line in cls.next_commands(config, results)]
