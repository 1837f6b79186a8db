"""The PAR search's section of the training config: `SearchConfig`.

`TrainConfig.search` (training/setup/config.py) holds it; its fields are train.py
flags of their own name (`--tau_start`, ...) in the "search" group, made
from the fields' metadata as TrainConfig's are. config.json stores it under
"search"; files written before the section existed have these keys at the
top level, and `migrate_flat` moves them (a run written before progressive
freezing existed did not freeze: `freeze_threshold` 0).

Importing this module does not load TensorFlow.
"""

import dataclasses
import json
import os

from model.config_base import ConfigBase, field
from runstore.errors import ConfigError
from training.setup.recipes import RECIPES

TAU_SCHEDULES = ("exponential", "linear")
# When a search with --then_retrain has decided (training/plugins/par_search/stopping.py).
STOP_RULES = ("frozen", "stable")
# How the --then_retrain stage starts: fresh weights, or the supernet's.
RETRAIN_INITS = ("scratch", "supernet")
# The architecture warm-up is at most this fraction of the run's planned steps (the
# default of --arch_warmup_fraction).
ARCH_WARMUP_FRACTION = 0.2
SECTION = "search"
# Fields a resumed run may change: whether and how it freezes blocks from now
# on (the steps already taken stay as they were), and how the derived network trains
# once the search has decided (its length and recipe).
RESUMABLE = frozenset({"freeze_threshold", "freeze_window", "then_retrain", "retrain_epochs",
                       "retrain_recipe"})


def _field(default, help, choices=None):  # noqa: A002
    return field(default, help, choices, group="search")


@dataclasses.dataclass(frozen=True)
class SearchConfig(ConfigBase):
    """The architecture search's settings (training/plugins/par_search/plugin.py).

    - arch_warmup_steps is a cap: at most arch_warmup_fraction (default 20%,
      `ARCH_WARMUP_FRACTION`) of the run's planned steps are used.
    - freeze_window counts steps after the architecture warm-up.
    """

    FLAG_PREFIX = "--"

    tau_start: float = _field(1.0, "Gumbel-softmax temperature at step 0.")
    tau_end: float = _field(0.1, "Temperature at the end of the annealing.")
    tau_schedule: str = _field("exponential", "Temperature annealing.", TAU_SCHEDULES)
    tau_anneal_steps: int = _field(0, "Annealing length in steps (0: the whole run as planned "
                                   "at its first start).")
    arch_warmup_steps: int = _field(0, "Steps before the architecture logits train (at most "
                                    "--arch_warmup_fraction of the run's planned steps are "
                                    "used).")
    arch_warmup_fraction: float = _field(
        ARCH_WARMUP_FRACTION, "The largest fraction of the run's planned steps the architecture "
        "warm-up may take (every candidate trains alike, the logits fixed, for that long).")
    # 1e-2, weight decay 5e-4 (PyTorch Adam semantics) as PAR and FBNet use; beta_1 0.5
    # as DARTS sets for architecture parameters.
    arch_learning_rate: float = _field(1e-2, "Adam learning rate of the architecture logits.")
    arch_weight_decay: float = _field(5e-4, "L2 weight decay of the architecture logits.")
    arch_beta_decay: float = _field(
        0.0, "Beta-decay regularisation of the architecture (beta-DARTS, Ye et al. 2022): "
        "lambda * mean over blocks of logsumexp(logits) added to the loss, lambda growing "
        "linearly from 0 at the end of the architecture warm-up to this value at the run's "
        "planned last step; it keeps the probabilities from growing peaked early (0: off).")
    arch_beta_1: float = _field(0.5, "Adam beta_1 of the architecture optimizer.")
    arch_beta_2: float = _field(0.999, "Adam beta_2 of the architecture optimizer.")
    search_cost_coef: float = _field(
        0.0, "Weight of the expected FLOPs of the network (sum over blocks of sum_k p_k cost_k, "
        "relative to Transformer-XL) in the architecture loss: higher trades perplexity for "
        "speed (0: off).")
    search_cost_target: float = _field(
        0.0, "Penalise only the expected cost above this fraction of Transformer-XL's FLOPs "
        "(0: 1/--search_speed_target when that is given, else penalise all of it).")
    search_speed_target: float = _field(
        0.0, "Derive a network at least this many times faster than Transformer-XL: the most "
        "probable architecture (sum over blocks of log p of its choice) with at most 1/X of the "
        "forward FLOPs per token of the Transformer-XL of the same depth (architecture.json's "
        "relative_flops), frozen blocks keeping their choice (docs/search.md#asking-for-a-"
        "speed-up); >= 1, 0: off (the most probable candidate of each block).")
    freeze_threshold: float = _field(
        0.97, "Progressive freezing (docs/freezing.md): a block whose most probable candidate "
        "has kept at least this probability for --freeze_window steps computes that candidate "
        "alone from then on; in (0.5, 1], 0 turns freezing off.")
    freeze_window: int = _field(
        1000, "Steps, after the architecture warm-up, a block's choice must stay above "
        "--freeze_threshold before it is frozen.")
    then_retrain: bool = _field(
        False, "When every block is frozen, stop the search and train the derived architecture "
        "from scratch in the same command (PAR's second stage), in <model_dir>_retrain.")
    stop_rule: str = _field(
        "frozen", "When the search is decided: 'frozen' once every block is frozen "
        "(--freeze_threshold), 'stable' once every block's most probable candidate has stayed "
        "the same for --stop_window steps with a lead that is not shrinking "
        "(training/plugins/par_search/stopping.py). A decided search ends; with --then_retrain "
        "its derived architecture is trained next.", STOP_RULES)
    stop_window: int = _field(
        2000, "--stop_rule=stable: steps, after the architecture warm-up, over which every "
        "block's choice must stay the same.")
    stop_min_lead: float = _field(
        0.1, "--stop_rule=stable: the smallest lead (best minus runner-up probability) of a "
        "decided block.")
    stop_tolerance: float = _field(
        0.05, "--stop_rule=stable: guard against a late turn: a block whose lead fell by more "
        "than this within the window is not decided.")
    retrain_epochs: int = _field(
        0, "--then_retrain: epochs of the derived network's training (0: the --recipe's "
        "length with a recipe, else the search's own --epochs / --max_steps). The search then "
        "keeps its own, shorter schedule.")
    retrain_recipe: str = _field(
        "", "--then_retrain: the recipe of the derived network's training "
        "(training/setup/recipes.py, e.g. 'muon'): its settings (optimizer, learning rate and "
        "schedule, dropout, ...) replace the search's in the second stage and its length "
        "applies unless --retrain_epochs is given ('': the search's own recipe and flags).")
    retrain_init: str = _field(
        "scratch", "--then_retrain: the derived network starts from fresh weights ('scratch', "
        "PAR's second stage) or from the search's best checkpoint ('supernet': each block "
        "takes the weights of its chosen candidate; optimizer and schedules start afresh).",
        RETRAIN_INITS)
    init_from: str = _field(
        "", "A finished search run whose best checkpoint gives a derived (fixed) network its "
        "first weights, each block those of its candidate in the supernet (set by "
        "--retrain_init=supernet; '' = fresh weights). Used only at the first start.")

    def validate(self):
        def require(condition, flag, message):
            if not condition:
                raise ValueError(f"--{flag}={getattr(self, flag)!r}: {message}")

        require(self.tau_start > 0, "tau_start", "must be > 0")
        require(self.tau_end > 0, "tau_end", "must be > 0")
        for flag in ("tau_anneal_steps", "arch_warmup_steps"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        require(0 <= self.arch_warmup_fraction < 1, "arch_warmup_fraction",
                "must be in [0, 1) (a search needs steps after the warm-up to choose)")
        require(self.arch_learning_rate > 0, "arch_learning_rate", "must be > 0")
        for flag in ("arch_weight_decay", "arch_beta_decay", "search_cost_coef",
                     "search_cost_target"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        require(self.search_speed_target == 0 or self.search_speed_target >= 1,
                "search_speed_target", "must be >= 1 (a network at least as fast as "
                "Transformer-XL: at most 1/X of its FLOPs), or 0 for no target")
        for flag in ("arch_beta_1", "arch_beta_2"):
            require(0 <= getattr(self, flag) < 1, flag, "must be in [0, 1)")
        require(self.freeze_threshold == 0 or 0.5 < self.freeze_threshold <= 1, "freeze_threshold",
                "must be in (0.5, 1] (one candidate clearly ahead), or 0 to turn freezing off")
        require(self.freeze_window >= 1, "freeze_window", "must be >= 1")
        require(not self.then_retrain or self.stop_rule == "stable" or self.freeze_threshold > 0,
                "then_retrain", "retrains once every block is frozen: give a --freeze_threshold "
                "> 0, or --stop_rule=stable")
        require(self.stop_window >= 1, "stop_window", "must be >= 1")
        require(0 <= self.stop_min_lead < 1, "stop_min_lead", "must be in [0, 1)")
        require(0 <= self.stop_tolerance < 1, "stop_tolerance", "must be in [0, 1)")
        require(self.retrain_epochs >= 0, "retrain_epochs", "must be >= 0")
        require(self.retrain_epochs == 0 or self.then_retrain, "retrain_epochs",
                "sets the length of the --then_retrain stage: add --then_retrain (or drop it)")
        require(not self.retrain_recipe or self.retrain_recipe in RECIPES, "retrain_recipe",
                f"is not a recipe: choose one of {', '.join(sorted(RECIPES))}")
        require(not self.retrain_recipe or self.then_retrain, "retrain_recipe",
                "sets the recipe of the --then_retrain stage: add --then_retrain (or drop it)")
        require(self.retrain_init == "scratch" or self.then_retrain, "retrain_init",
                "sets how the --then_retrain stage starts: add --then_retrain (or drop it)")

    def check_run(self, config, steps):
        """Checks against the run (TrainConfig `config` of `steps` planned steps) before
        any work. Raises ValueError naming the flag and the fix."""
        architecture = getattr(config.model, "architecture", None)
        warmup_steps = min(self.arch_warmup_steps, int(self.arch_warmup_fraction * steps))
        stages = [flag for flag, given in (("then_retrain", self.then_retrain),
                                           ("stop_rule", self.stop_rule != "frozen")) if given]
        if stages and architecture != "supernet":
            flag = stages[0]
            raise ValueError(
                f"--{flag}={getattr(self, flag)!r} belongs to the search stage, but the model "
                f"does not search (--architecture={architecture}): drop --{flag}, or pass "
                "--architecture=supernet to search first")
        if self.init_from:
            if architecture == "supernet":
                raise ValueError(
                    f"--init_from={self.init_from} gives a derived network its first weights, "
                    "but this run searches (--architecture=supernet): pass the derived "
                    f"architecture, e.g. --architecture={self.init_from}")
            if not os.path.isfile(os.path.join(self.init_from, "config.json")):
                raise ValueError(
                    f"--init_from={self.init_from} is not a run directory (no config.json): give "
                    "the directory of a finished search")
        self._check_speed_target(config)
        if self.then_retrain and architecture == "supernet":
            # A second stage already started with another recipe (a resumed pipeline).
            check_started_retrain(os.path.normpath(config.model_dir) + "_retrain",
                                  self.retrain_recipe or config.recipe)
        if self.stop_rule == "stable" and self.stop_window > steps - warmup_steps:
            raise ValueError(
                f"--stop_window={self.stop_window} is longer than the search after its "
                f"architecture warm-up ({steps} planned steps - {warmup_steps} warm-up = "
                f"{steps - warmup_steps}): give a smaller --stop_window or a longer search "
                "(--epochs/--max_steps)")

    def _check_speed_target(self, config):
        """--search_speed_target: a search whose candidates can reach it (speed_target.py)."""
        if not self.search_speed_target:
            return
        architecture = getattr(config.model, "architecture", None)
        if architecture != "supernet":
            given = (f"--architecture={architecture}" if architecture
                     else f"--model_family={config.model_family}")
            raise ValueError(
                f"--search_speed_target={self.search_speed_target:g} picks the architecture a "
                f"search derives, but the model does not search ({given}): drop "
                "--search_speed_target, or pass --architecture=supernet to search first")
        from training.plugins.par_search.speed_target import SpeedTarget

        SpeedTarget.for_run(config).check_reachable()

    @property
    def cost_target(self):
        """The expected cost above which the cost term penalises: --search_cost_target, or,
        when only --search_speed_target is given, its budget 1/X (0: all of it)."""
        if self.search_cost_target > 0 or not self.search_speed_target:
            return self.search_cost_target
        return 1.0 / self.search_speed_target

    @classmethod
    def field_names(cls):
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def flag_fields(cls):
        """The fields, all train.py flags, in definition order."""
        return list(dataclasses.fields(cls))


def check_started_retrain(model_dir, recipe):
    """Raises ConfigError when `model_dir`, the run directory of a search's second stage
    (retrain.retrain_config), holds a training started with another recipe than `recipe`
    (as when a pipeline is resumed with another --retrain_recipe): one line naming the
    flag that finishes it."""
    try:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            started = json.load(f).get("recipe", "")
    except (OSError, ValueError, AttributeError):
        return  # nothing started, or check_resume names the unreadable file
    if started == recipe:
        return
    finish = (f"--retrain_recipe={started}" if started
              else "--retrain_recipe= (empty: the search's own flags)")
    raise ConfigError(
        f"{model_dir} holds the derived network's training started with {_named(started)}, "
        f"but this command trains it with {_named(recipe)}: give {finish} to finish it, or "
        "start the pipeline in another --model_dir")


def _named(recipe):
    return f"--recipe={recipe}" if recipe else "the search's own flags"


def migrate_flat(values):
    """Moves a config.json's top-level search keys (the form before the section) into
    values["search"], in place; returns `values`.

    A flat file predates progressive freezing unless it names its fields: such a
    run did not freeze (freeze_threshold 0 unless the file says otherwise).
    """
    names = set(SearchConfig.field_names())
    flat = {k: values.pop(k) for k in list(values) if k in names}
    if flat:
        flat.setdefault("freeze_threshold", 0.0)
        section = values.get(SECTION)
        values[SECTION] = {**flat, **(section if isinstance(section, dict) else {})}
    return values
