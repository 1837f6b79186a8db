"""Frozen, validated configuration of a training run.

`TrainConfig` is built once by `train.py` from its flags, checked in
`__post_init__`, written to `model_dir/config.json` and handed to
`training.run.loop.train`. Every field has the name of its flag, so an error
message that names a field also names the flag to fix. The model's own
hyper-parameters live in the nested config of its model family
(`model/families.py`: `ModelConfig` for transformer_xl, ...).

Checks that need more than the config itself (the built data's meta.json,
the number of replicas of the strategy, a previous run in `model_dir`) are
the functions of training/setup/checks.py (`check_data`, `check_replicas`,
`check_model_dir`, `check_resume`) and `check_batch_split` here; each raises
`ConfigError` before anything is written.

Run length and schedules (training/setup/plan.py, re-exported here): the
learning-rate decay, the plug-ins' schedules and the warm-ups are planned for
the run's *horizon*, its total steps at the first start (`total_steps`),
which a resumed run keeps even when --max_steps/--epochs change how long it
runs (training/run/trainer.py). The warm-ups are capped at a fraction of the
horizon (`capped_warmup`): --warmup_steps at --warmup_fraction (default
`WARMUP_FRACTION`, 10%; the SHA-RNN/LSTM presets 50%), so a short run still
warms up, then trains.
"""

import dataclasses
import functools
import json
import os
from typing import Any

from model import families
from model.config_base import ConfigBase, field
from runstore import run_dir
from runstore.errors import ConfigError
from runstore.run_dir import CONFIG_FILE
from training import plugins
from training.optimizers import OPTIMIZERS as _OPTIMIZER_TABLE
from training.optimizers import option_owners
from training.setup.plan import (  # noqa: F401  (the run's plan, for the callers that read it here)
    COOLDOWN_FRACTION,
    LR_SCHEDULES,
    WARMUP_FRACTION,
    capped_warmup,
    total_steps,
)
from training.setup.recipes import RECIPES

NONFINITE_POLICIES = ("stop", "skip")
# At least two checkpoints are kept: a damaged newest one leaves one to resume from.
MIN_KEEP_CHECKPOINTS = 2
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
OPTIMIZERS = tuple(_OPTIMIZER_TABLE)

def _field(default, group, help, choices=None, **metadata):  # noqa: A002
    """A TrainConfig field: its flag's group, help text and choices live here."""
    return field(default, help, choices, group=group, **metadata)


# Given on the command line but taken from elsewhere when not given: the flag's
# default is None (the data's seq_len and batch_size, the family's preset, the
# model's mem_len, logs/<run>).
_FROM_ELSEWHERE = {"flag_default": None}


@dataclasses.dataclass(frozen=True)
class TrainConfig(ConfigBase):
    """Everything a training run needs besides the data files.

    Every field is a train.py flag of the same name (but `model`, the model
    family's config, and the sections); its help text, group and choices live
    in the field's metadata, and train.py generates the flags from them.

    The fields written here are common to every run. Two registries add
    theirs: each option of an optimizer (training/optimizers/:
    `OptimizerSpec.options`, e.g. lamb_sharnn's `min_trust`) is a field of its
    name, None when not given; each registered plug-in with a config section
    (training/plugins: `Registration.section`, e.g. `search`, the PAR search's
    `SearchConfig`) has a field of the section's name holding it (given as an
    instance or its dict, as in config.json; its defaults when not given;
    `sections` lists them), each of the section's fields a train.py flag of
    its own. `TrainConfig(...)` therefore makes an instance of the dataclass
    with every field, `TrainConfig.complete()`, a subclass made for the
    registries as they are (as `pathlib.Path(...)` makes a `PosixPath`): the
    dataclass's own `__init__`, `__eq__`, `__repr__` and
    `dataclasses.replace` cover every field. Notes beyond the help texts:

    - batch_split must divide the per-replica batch B/R: each replica runs its
      rows as micro-batches of B/(R*batch_split) consecutive rows (each with
      its own rows of the model state) and the step applies one update from
      the summed gradients, equal to the unsplit step's.
    - warmup_steps (and the search's arch_warmup_steps) are caps: at most
      WARMUP_FRACTION (10%) (the search: 20%) of the run's planned steps are
      used.
    - weight_decay never touches biases and normalisation scales (each
      optimizer owns its decay rule: training/optimizers/; lamb_sharnn, as
      its reference, decays every weight).
    """

    ERROR = ConfigError
    FLAG_PREFIX = "--"

    data_dir: str = _field(dataclasses.MISSING, "data",
                           "Built dataset (meta.json) from build_data.py.", flag_default=None)
    model_dir: str = _field(dataclasses.MISSING, "checkpoints",
                            "Run directory (checkpoints, config.json, metrics.json); a run "
                            "found there is resumed.", flag_default=None)
    model: Any = _field(dataclasses.MISSING, "model", "The model family's config.", flag=False)
    model_family: str = _field(
        families.DEFAULT_FAMILY, "model", "Model family (model/families.py): " + "; ".join(
            f"{f.name}: {f.description}" for f in families.FAMILIES.values()) + ".",
        sorted(families.FAMILIES))
    preset: str = _field(
        "wt2_base", "model", "Model preset that the other model flags override (default: the "
        "family's: " + ", ".join(f"{f.name} {f.default_preset}" for f in
                                 families.FAMILIES.values()) + "). Presets: "
        + "; ".join(f"{f.name}: {', '.join(f.presets)}" for f in families.FAMILIES.values())
        + ".", **_FROM_ELSEWHERE)
    init_weights: str = _field(
        "", "model", "Start from the weights of a trained model: a .keras package (export.py) "
        "or a run directory (its best checkpoint). The model is that model's (its family, "
        "architecture and sizes: a model flag may only repeat them) and the data must be built "
        "with its tokenizer (./finetune.sh builds a text so). Used only at the first start: a "
        "resumed run continues from its own checkpoint.")
    batch_size: int = _field(32, "data", "Global batch B (default: the data's; must match).",
                             **_FROM_ELSEWHERE)
    batch_split: int = _field(
        1, "performance", "Gradient accumulation: run each replica's rows as this many "
        "micro-batches of whole rows and apply one update (equal to the unsplit step; less "
        "activation memory). Must divide the per-replica batch.")
    seq_len: int = _field(32, "data", "Segment length T (default: the data's; must match).",
                          **_FROM_ELSEWHERE)
    eval_mem_len: int = _field(16, "model", "Memory length at evaluation, >= 0 (default: "
                               "--mem_len).", **_FROM_ELSEWHERE)
    # Optimisation of the weights.
    recipe: str = _field(
        "", "optimisation", "A named training recipe (training/setup/recipes.py) that sets the "
        "flags it names where they are not given; a flag given with another value than the "
        "recipe's is refused, but its length (--epochs, --warmup_steps, --eval_interval, "
        "--early_stop) may be changed. "
        + " ".join(
            f"{name}: {recipe.help}" for name, recipe in RECIPES.items()), ("", *RECIPES),
        **_FROM_ELSEWHERE)
    optimizer: str = _field(
        "adam", "optimisation", "Weights optimizer (training/optimizers/): " + " ".join(
            f"{name}: {spec.help}" for name, spec in _OPTIMIZER_TABLE.items()),
        tuple(_OPTIMIZER_TABLE))
    learning_rate: float = _field(1e-3, "optimisation", "Peak learning rate of the weights.")
    weight_decay: float = _field(0.0, "optimisation", "Weight decay: of the weight matrices "
                                 "(adam, adamw, lamb, adagrad, muon, lion), of every weight "
                                 "(lamb_sharnn).")
    beta_1: float = _field(0.9, "optimisation", "Adam beta_1 of the weights optimizer.")
    beta_2: float = _field(0.999, "optimisation", "Adam beta_2 of the weights optimizer.")
    epsilon: float = _field(1e-8, "optimisation", "Adam epsilon of both optimizers.")
    clip_norm: float = _field(0.25, "optimisation",
                              "Global-norm clipping of the weight gradients (0: off).")
    ema_decay: float = _field(
        0.0, "optimisation", "Evaluate an exponential moving average of the weights (Polyak "
        "averaging) with this decay D (0: off): after every applied update ema = d * ema + "
        "(1 - d) * w, d = min(D, (1 + n) / (10 + n)) after n updates. Valid, test, the samples "
        "and the best checkpoint (what export.py packages) use the average; the checkpoints "
        "hold it beside the live weights. A run resumes only with the value it started with.")
    on_nonfinite: str = _field(
        "stop", "optimisation", "When the loss or a gradient becomes NaN/inf: stop (one line "
        "naming the step and the quantity; the last checkpoint is kept) or skip the update "
        "(as loss scaling does), counted in the logs, stopping after --max_nonfinite_steps "
        "in a row (docs/faults.md).", NONFINITE_POLICIES)
    max_nonfinite_steps: int = _field(
        10, "optimisation", "With --on_nonfinite=skip: stop after this many non-finite steps "
        "in a row.")
    # Learning-rate schedule.
    lr_schedule: str = _field(
        "cosine", "schedule", "Learning rate after the linear warmup (inverse_sqrt: peak * "
        "sqrt(warmup / step), Transformer-XL's).", LR_SCHEDULES)
    warmup_steps: int = _field(0, "schedule", "Linear warmup steps (at most --warmup_fraction "
                               "of the run's planned steps are used).")
    warmup_fraction: float = _field(
        WARMUP_FRACTION, "schedule", "Largest share of the run's planned steps spent in the "
        "learning-rate warm-up: a shorter run than --warmup_steps / --warmup_fraction warms up "
        "for that share only (1: no cap).")
    decay_steps: int = _field(0, "schedule", "Step at which --min_lr is reached (0: the end "
                              "planned at the first start).")
    min_lr: float = _field(0.0, "schedule", "Learning-rate floor.")
    lr_cooldown_fraction: float = _field(
        COOLDOWN_FRACTION, "schedule", "With --lr_schedule=wsd: the share of the steps after "
        "the warm-up over which the rate decays linearly from the peak to --min_lr (the peak "
        "is held before; 1 is --lr_schedule=linear).")
    # Run length.
    epochs: int = _field(20, "run length", "Passes over the training split (if --max_steps "
                         "is 0).")
    max_steps: int = _field(
        0, "run length", "Total training steps (0: --epochs). A resumed run may change it "
        "(and --epochs): it stops elsewhere, the schedules stay as planned at the first start.")
    plan_steps: int = _field(
        0, "run length", "Plan the schedules (learning rate and its warm-up, the search's "
        "temperature and warm-up) for this many steps instead of the run's own length (0: its "
        "length): a run stopped earlier by --max_steps is the first steps of that longer run, "
        "and resuming it with the longer length continues it exactly. Only read at the first "
        "start.")
    # Evaluation.
    eval_interval: int = _field(1000, "evaluation", "Evaluate on valid every this many steps "
                                "(0: only at the end).")
    eval_max_records: int = _field(0, "evaluation", "Evaluate at most this many records per "
                                   "split (0: all; for quick looks).")
    early_stop: int = _field(
        0, "evaluation", "Stop after this many evaluations on valid in a row without a new "
        "best (0: off); the best checkpoint is the one exported. Needs --eval_interval.")
    sample_tokens: int = _field(50, "evaluation",
                                "Tokens of generated text logged per evaluation.")
    # Checkpoints and logging.
    checkpoint_interval: int = _field(1000, "checkpoints",
                                      "Save every this many steps (0: at the end).")
    checkpoint_every_minutes: float = _field(
        10.0, "checkpoints", "Also save when this many minutes have passed since the last "
        "save (0: off), so that a killed run loses minutes, not hours.")
    keep_checkpoints: int = _field(3, "checkpoints", "Last checkpoints kept, at least 2 (the "
                                   "best is kept apart): a damaged newest one leaves another "
                                   "to resume from.")
    log_interval: int = _field(100, "logging", "Steps between logged lines and summaries.")
    logdir: str = _field("", "logging", "TensorBoard directory of this run (default: "
                         "logs/<basename of --model_dir>).", **_FROM_ELSEWHERE)
    # Distribution and performance.
    strategy: str = _field("default", "distribution",
                           "tf.distribute strategy (multi_worker reads TF_CONFIG).", STRATEGIES)
    num_cpu_replicas: int = _field(0, "distribution", "With --strategy=mirrored and no GPU: "
                                   "this many logical CPU replicas.")
    tpu: str = _field("", "distribution", "TPU name or address for --strategy=tpu.")
    intra_op_threads: int = _field(0, "performance", "TensorFlow's threads within one op "
                                   "(0: TensorFlow's default, one per usable core).")
    inter_op_threads: int = _field(0, "performance", "TensorFlow's threads running independent "
                                   "ops at once (0: TensorFlow's default). On a 2-core CPU "
                                   "--intra_op_threads=1 --inter_op_threads=2 runs a "
                                   "supernet's independent candidates two at once and searches "
                                   "faster than the default (bench/README.md#cpu-threads).")
    precision: str = _field("float32", "performance", "Keras dtype policy.", PRECISIONS)
    xla: bool = _field(False, "performance", "Compile the training and evaluation steps with "
                       "XLA (static-shape adaptive softmax, span and hard search; same numbers).")
    deterministic: bool = _field(False, "performance",
                                 "TensorFlow op determinism (exact resume).")

    def __new__(cls, *args, **kwargs):
        # An instance of the dataclass with every field; its generated __init__ runs next.
        return super().__new__(cls.complete())

    @classmethod
    def complete(cls):
        """The dataclass with every field: TrainConfig's, then the optimizers' options and
        the plug-ins' sections as registered now (one class per state of the registries; a
        config keeps the class it was made with, and called on it this returns it)."""
        if cls is not TrainConfig:
            return cls
        options = tuple((name, option, owners)
                        for name, (option, owners) in option_owners().items())
        return _complete_class(options, tuple(plugins.config_sections().items()))

    def __post_init__(self):
        try:
            family = families.get_family(self.model_family)
        except ValueError as error:
            raise ConfigError(f"--model_family={self.model_family}: {error}") from None
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", family.config_from_dict(self.model))
        if not isinstance(self.model, family.config_class):
            raise ConfigError(f"model must be a {family.config_class.__name__} for "
                              f"--model_family={family.name}, got {type(self.model).__name__}")
        for name, section in self.section_fields().items():
            value = getattr(self, name)
            if isinstance(value, dict):
                try:
                    value = section.from_dict(value)
                except (ValueError, TypeError) as error:
                    raise ConfigError(str(error)) from None
                object.__setattr__(self, name, value)
            if not isinstance(value, section):
                raise ConfigError(f"{name} must be a {section.__name__} or its dict, got "
                                  f"{type(value).__name__}")
        super().__post_init__()

    @property
    def sections(self):
        """name -> the config section of each registered plug-in that has one."""
        return {name: getattr(self, name) for name in self.section_fields()}

    @classmethod
    def check_known(cls, names):
        super(TrainConfig, cls.complete()).check_known(names)

    @classmethod
    def flag_fields(cls):
        """The fields that are train.py flags (the optimizers' options too), in definition
        order."""
        return [f for f in dataclasses.fields(cls.complete()) if f.metadata.get("flag", True)]

    def validate(self):
        def require(condition, flag, message):
            if not condition:
                raise ConfigError(f"--{flag}={getattr(self, flag)!r}: {message}")

        require(bool(self.data_dir), "data_dir", "give the built dataset directory")
        require(bool(self.model_dir), "model_dir", "give a directory for checkpoints")
        for flag in ("batch_size", "seq_len"):
            require(getattr(self, flag) >= 1, flag, "must be >= 1")
        require(self.batch_split >= 1, "batch_split",
                "must be >= 1 (1 = no gradient accumulation)")
        require(self.batch_size % self.batch_split == 0, "batch_split",
                f"must divide --batch_size={self.batch_size} (micro-batches of whole rows): "
                f"use one of {_divisors(self.batch_size)}")
        require(self.eval_mem_len >= 0, "eval_mem_len",
                "must be >= 0 (0 evaluates without memory)")
        require(self.early_stop >= 0, "early_stop", "must be >= 0 (0: off)")
        require(not self.early_stop or self.eval_interval > 0, "early_stop",
                "counts evaluations every --eval_interval steps: give --eval_interval > 0")
        for flag in ("warmup_steps", "decay_steps", "max_steps", "plan_steps",
                     "eval_interval", "eval_max_records", "sample_tokens", "checkpoint_interval",
                     "num_cpu_replicas", "intra_op_threads", "inter_op_threads"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        require(self.learning_rate > 0, "learning_rate", "must be > 0")
        for flag in ("weight_decay", "clip_norm", "min_lr"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        for flag in ("beta_1", "beta_2"):
            require(0 <= getattr(self, flag) < 1, flag, "must be in [0, 1)")
        require(self.epsilon > 0, "epsilon", "must be > 0")
        require(0 <= self.ema_decay < 1, "ema_decay", "must be in [0, 1) (0: off; the "
                "usual values are 0.99 to 0.9999)")
        require(0 < self.warmup_fraction <= 1, "warmup_fraction", "must be in (0, 1]")
        require(0 < self.lr_cooldown_fraction <= 1, "lr_cooldown_fraction", "must be in (0, 1]")
        for flag, (option, owners) in option_owners().items():
            if getattr(self, flag, None) is None:
                continue
            require(self.optimizer in owners, flag, f"does not apply to --optimizer="
                    f"{self.optimizer}: drop it or use --optimizer={'/'.join(owners)}")
            problem = option.problem(getattr(self, flag))
            require(problem is None, flag, problem)
        require(self.min_lr <= self.learning_rate, "min_lr",
                f"must not exceed --learning_rate={self.learning_rate}")
        require(self.epochs >= 1 or self.max_steps >= 1, "epochs",
                "must be >= 1 unless --max_steps is given")
        require(self.keep_checkpoints >= MIN_KEEP_CHECKPOINTS, "keep_checkpoints",
                f"must be >= {MIN_KEEP_CHECKPOINTS} (a damaged newest checkpoint needs another "
                "to resume from)")
        require(self.checkpoint_every_minutes >= 0, "checkpoint_every_minutes",
                "must be >= 0 (0: off)")
        require(self.max_nonfinite_steps >= 1, "max_nonfinite_steps", "must be >= 1")
        require(self.log_interval >= 1, "log_interval", "must be >= 1")
        require(self.num_cpu_replicas == 0 or self.strategy == "mirrored", "num_cpu_replicas",
                "only applies to --strategy=mirrored")
        if self.decay_steps:
            require(self.decay_steps >= self.warmup_steps, "decay_steps",
                    f"must be >= --warmup_steps={self.warmup_steps} (or 0 for the whole run)")

    @classmethod
    def section_fields(cls):
        """name -> section class of the plug-ins' config sections (each field a flag)."""
        return {f.name: f.type for f in dataclasses.fields(cls.complete())
                if f.metadata.get("section")}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        """Inverse of `to_dict` (the model config nested under "model", the plug-ins'
        sections under their names); unknown keys raise a ConfigError listing them.

        Older config.json files may hold a section's fields in an older form
        (the PAR search's at the top level): each registration's `migrate`
        moves them into its section.
        """
        values = dict(values)
        for registration in plugins.registrations():
            if registration.migrate is not None:
                values = registration.migrate(values)
        cls.check_known(values)
        values = dict(values)
        # Runs written when one kept checkpoint was allowed keep the minimum now.
        if values.get("keep_checkpoints", MIN_KEEP_CHECKPOINTS) < MIN_KEEP_CHECKPOINTS:
            values["keep_checkpoints"] = MIN_KEEP_CHECKPOINTS
        family = families.get_family(values.get("model_family", families.DEFAULT_FAMILY))
        if isinstance(values["model"], dict):
            values["model"] = family.config_from_dict(values["model"])
        return cls(**values)

    def save(self, model_dir=None):
        """Writes config.json (atomically) into model_dir (default: self.model_dir).

        Raises:
            runstore.run_dir.WriteError: the file could not be written (the old
                one is intact).
        """
        path = os.path.join(model_dir or self.model_dir, CONFIG_FILE)
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if not run_dir.same_content(path, text):  # a resumed run rewrites nothing
            run_dir.atomic_write(path, text)
        return path

    @classmethod
    def load(cls, model_dir) -> "TrainConfig":
        """Reads model_dir/config.json."""
        path = os.path.join(model_dir, CONFIG_FILE)
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


@functools.cache
def _complete_class(options, sections):
    """TrainConfig with a field per optimizer option and one per config section.

    Args:
        options: ((name, OptimizerOption, names of the optimizers taking it), ...).
        sections: ((section name, section class), ...), in registry order.
    """
    fields = [(name, float | None, _field(None, "optimisation",
                                          f"{'/'.join(owners)} only: {option.text()}"))
              for name, option, owners in options]
    fields += [(name, section, dataclasses.field(
        default_factory=section, metadata={"flag": False, "section": True,
                                           "help": f"The {name} section (its own flags)."}))
        for name, section in sections]
    return dataclasses.make_dataclass(TrainConfig.__name__, fields, bases=(TrainConfig,),
                                      namespace={"__module__": __name__}, frozen=True)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def check_batch_split(config, rows_per_replica, num_replicas=1):
    """Checks that --batch_split divides the rows of each replica.

    Raises:
        ConfigError: naming --batch_split and the values that would work.
    """
    if rows_per_replica % config.batch_split:
        where = (f"the {rows_per_replica} rows of each of the {num_replicas} replicas "
                 f"(--batch_size={rows_per_replica * num_replicas})" if num_replicas > 1 else
                 f"--batch_size={rows_per_replica}")
        raise ConfigError(
            f"--batch_split={config.batch_split} does not divide {where}: micro-batches "
            f"are whole rows of one replica; use one of {_divisors(rows_per_replica)}")
