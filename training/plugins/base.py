"""The plug-in base class and the optimizer group a plug-in trains (no TensorFlow).

Every hook of `Plugin` does nothing. They run in two places, and the
grouping below says which:

- inside the compiled step (traced by `tf.function`, cross-replica context):
  `extra_losses`, `before_step`, `step_values`, and the variables they read
  from `optimizer_groups` (called once inside `strategy.scope()`) minus
  `inactive_variables`; `trace_key` decides when the step is traced again;
- on the host, between steps: `create`, `checkpoint_objects`, `after_step`,
  `should_stop`, `follow_up`, `after_follow_up`, `on_start`, `log_values`,
  `on_log`, `on_finish`;
- on the host after the run, on the class (no instance: the end-of-run summary
  is made from the run's config and results, training/report/summary.py):
  `summary_lines`, `next_commands`; and `finished_follow_up` / `merge_follow_up`,
  the follow-up of a run that finished in an earlier process, from its files.

A plug-in package declares itself in one place, a `Registration` named
`PLUGIN` in its `__init__.py` (read without TensorFlow): the class (loaded
when a run makes its plug-ins), its config section with the section's
resumable fields and the migration of older config.json files. The registry
(training/plugins/__init__.py) lists the registrations.
"""

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Registration:
    """What a plug-in package declares about itself (its `PLUGIN`), without TensorFlow.

    Attributes:
        name: the plug-in's name (its package's, e.g. "par_search").
        load: () -> its `Plugin` subclass; imports the plug-in's TensorFlow parts,
            called only when a run makes its plug-ins.
        section: name of its config section, or None: the `TrainConfig`
            field (`config.search`), the config.json key and the flag group.
        config: the section's class, a frozen `model.config_base.ConfigBase`
            dataclass whose fields (made with `field(default, help)`, group
            `section`) are train.py flags of their own name.
        resumable: names of the section's fields a resumed run may change.
        migrate: values -> values, moves an older config.json's keys into the
            section (the form before it existed), or None.
        model_flag_readers: model flag name -> `(value) -> value`: turns a value that
            names one of the plug-in's files into what the model family parses (the
            search: a finished search run's directory -> its derived architecture),
            and returns any other value as it is; raises ValueError or
            FileNotFoundError.
        later_runs: `(config) -> [model_dir, ...]`: the run directories of the stages
            the command trains after this run (the search's retrain), in order, read
            without TensorFlow (a finished command is answered from their files), or None.
        report: `() -> class` whose classmethods are the plug-in's class-level hooks
            (`summary_lines`, `closing_lines`, `later_steps`, `plan_lines`,
            `next_commands`, `finished_follow_up`, `merge_follow_up`), importing no
            TensorFlow so that a finished command is answered at once; its `load()` class
            inherits them. None: `load` (the plug-in class itself).
    """

    name: str
    load: Callable[[], type]
    section: str | None = None
    config: type | None = None
    resumable: frozenset = frozenset()
    migrate: Callable[[dict], dict] | None = None
    model_flag_readers: dict = dataclasses.field(default_factory=dict)
    later_runs: Callable | None = None
    report: Callable[[], type] | None = None

    def load_report(self):
        """The class of the plug-in's class-level hooks (`report`, else `load`)."""
        return (self.report or self.load)()

    def __post_init__(self):
        if (self.section is None) != (self.config is None):
            raise ValueError(f"plug-in {self.name}: give both a section name and its config "
                             "class, or neither")
        unknown = set(self.resumable) - {f.name for f in dataclasses.fields(self.config)} \
            if self.config else set(self.resumable)
        if unknown:
            raise ValueError(f"plug-in {self.name}: resumable fields {sorted(unknown)} are not "
                             "fields of its section")

    def flag_fields(self):
        """The fields of its section that are train.py flags (all but "flag": False)."""
        if self.config is None:
            return []
        return [f for f in dataclasses.fields(self.config) if f.metadata.get("flag", True)]


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
    """Base class: every hook does nothing (see the module docstring for where each runs)."""

    #: run-directory files the plug-in writes (removed by --overwrite)
    RUN_FILES: tuple = ()

    @classmethod
    def create(cls, model, config, horizon):
        """The plug-in for `model` trained with TrainConfig `config`, or None
        when it does not apply. `horizon` is the number of steps the run's
        schedules are planned for, fixed at its first start (a resumed run
        may stop earlier or later)."""
        raise NotImplementedError

    # ------------------------------------------------- used inside the compiled step

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

    # ------------------------------------------------------------------ on the host

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
        return type(self).merge_follow_up(self.config, results, followed)

    @classmethod
    def finished_follow_up(cls, config, results):
        """`follow_up` of a run that finished in an earlier process, from its config and
        metrics.json (`results`) alone: no model is built, nothing is evaluated again."""
        return None

    @classmethod
    def merge_follow_up(cls, config, results, followed):
        """`after_follow_up` from the run's config: its results with the follow-up's."""
        return results

    def on_start(self, model_dir, resumed_step):
        """On the host before the first step; `resumed_step` is None on a fresh run."""

    def log_values(self, step, out):
        """dict name -> number added to the logged training values at `step`."""
        return {}

    def on_log(self, step, summaries, model_dir):
        """On the chief at every log interval (summaries:
        training.report.tensorboard.TrainSummaries)."""

    def on_finish(self, results, model_dir, chief):
        """At the end of training: may add entries to metrics.json's `results`."""

    # ------------------------------------------ after the run, on the class

    @classmethod
    def summary_lines(cls, config, results):
        """Lines of the console's end-of-run summary about what the run made, after
        its best figures (`results`: what `train` returned, `config`: its TrainConfig).

        """
        return []

    @classmethod
    def closing_lines(cls, results):
        """Lines printed after the run's summary about the later stages the command ran
        (the search's retrain: both stages' figures), or [] (`results`: what `train`
        returned)."""
        return []

    @classmethod
    def later_steps(cls, config, train_records):
        """The training steps of the stages the command runs after this run (the search's
        retrain), for the whole command's ETA; 0 when none."""
        return 0

    @classmethod
    def plan_lines(cls, config, train_records):
        """Lines the command logs before it starts about the stages it will run after this
        one (a search followed by its retrain), with their steps and run directories."""
        return []

    @classmethod
    def next_commands(cls, config, results):
        """Commands the summary lists first under "next:" (without indent; a
        `   # why` comment may follow the command)."""
        return []
