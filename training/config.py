"""Frozen, validated configuration of a training run.

`TrainConfig` is built once by `train.py` from its flags, checked in
`__post_init__`, written to `model_dir/config.json` and handed to
`training.loop.train`. Every field has the name of its flag, so an error
message that names a field also names the flag to fix. The model's own
hyper-parameters live in the nested config of its model family
(`model/families.py`: `ModelConfig` for transformer_xl, ...).

Checks that need more than the config itself (the built data's meta.json,
the number of replicas of the strategy, a previous run in `model_dir`) are
the functions `check_data`, `check_replicas` (with `check_batch_split`) and
`check_resume`; each raises `ConfigError` before anything is written.

Run length and schedules: the learning-rate decay, the Gumbel temperature
annealing and the warm-ups are planned for the run's *horizon*, its total
steps at the first start (`total_steps`), which a resumed run keeps even when
--max_steps/--epochs change how long it runs (training/trainer.py). The
warm-ups are capped at a fraction of the horizon (`capped_warmup`):
--warmup_steps at `WARMUP_FRACTION` (10%) and --arch_warmup_steps at 20%
(training/plugins/par_search.py), so a short run still warms up, then trains.
"""

import dataclasses
import json
import math
import os
from typing import Any

from model import families
from training.optimizers import OPTIMIZERS as _OPTIMIZER_TABLE

CONFIG_FILE = "config.json"
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
OPTIMIZERS = tuple(_OPTIMIZER_TABLE)
# Kept equal to training.schedules.LR_SCHEDULES / TAU_SCHEDULES (a test checks
# it) so that validating flags does not have to import TensorFlow.
LR_SCHEDULES = ("cosine", "linear", "constant", "inverse_sqrt")
TAU_SCHEDULES = ("exponential", "linear")
SPLITS = ("train", "valid", "test")
# The learning-rate warm-up is at most this fraction of the planned steps.
WARMUP_FRACTION = 0.1

# Fields that may change when a run is resumed: how long it runs, how often it
# evaluates, saves and logs. Everything else must match the saved config.
RESUMABLE_FIELDS = frozenset({
    "epochs", "max_steps", "eval_interval", "eval_max_records", "eval_mem_len",
    "sample_tokens", "checkpoint_interval", "keep_checkpoints", "log_interval",
    "logdir", "batch_split",
})


class ConfigError(ValueError):
    """A user-fixable problem with the flags, the data or the model directory."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs besides the data files.

    Attributes:
        data_dir: built dataset (meta.json, shards, tokenizer).
        model_dir: checkpoints, config.json, training_log.log, metrics.json.
        model: the model family's config (vocab_size taken from the data).
        model_family: name of the model family (model/families.py).
        preset: name of the model preset the model fields started from.
        batch_size: global batch B (rows of the context-batched data).
        batch_split: gradient accumulation: each replica runs its B/R rows as
            this many micro-batches of B/(R*batch_split) consecutive rows (each
            with its own rows of the model state) and the step applies one
            update from the summed gradients, equal to the unsplit step's.
            Must divide the per-replica batch B/R.
        seq_len: segment length T of the built data.
        eval_mem_len: memory length at evaluation (>= 0).
        tau_start: Gumbel-softmax temperature at step 0.
        tau_end: temperature from tau_anneal_steps on.
        tau_schedule: "exponential" or "linear" annealing.
        tau_anneal_steps: annealing length; 0 = the whole run.
        arch_warmup_steps: steps before the architecture logits are updated;
            a cap: at most 20% of the run's planned steps are used.
        arch_learning_rate: Adam learning rate of the architecture logits
            (1e-2 as in PAR and FBNet).
        arch_weight_decay: L2 coefficient added to the architecture gradients
            (5e-4; PyTorch Adam semantics, as PAR/FBNet/DARTS use).
        arch_beta_1: Adam beta_1 of the architecture optimizer (0.5, the
            DARTS setting for architecture parameters).
        arch_beta_2: Adam beta_2 of the architecture optimizer (0.999).
        search_cost_coef: weight of the expected-cost term of the
            architecture loss (0 = off; training/plugins/par_search.py).
        search_cost_target: penalise only the expected cost above this
            fraction of Transformer-XL's FLOPs (0 = penalise all of it).
        optimizer: weights optimizer, a key of training.optimizers.OPTIMIZERS
            (adam, adamw, lamb, adagrad; each owns its weight-decay rule).
        learning_rate: peak learning rate of the weights.
        weight_decay: weight decay of the weights (0 = none); never applied to
            biases and normalisation scales.
        beta_1: Adam beta_1 of the weights optimizer.
        beta_2: Adam beta_2 of the weights optimizer.
        epsilon: Adam epsilon of both optimizers.
        clip_norm: global-norm clipping of the weight gradients (0 = off).
        lr_schedule: "cosine", "linear", "constant" or "inverse_sqrt" after
            the warmup (training/schedules.py).
        warmup_steps: linear warmup length; a cap: at most WARMUP_FRACTION
            (10%) of the run's planned steps are used.
        decay_steps: step at which min_lr is reached; 0 = the run's planned
            steps (fixed at the first start).
        min_lr: learning-rate floor.
        epochs: passes over the training split (used when max_steps is 0).
        max_steps: total steps; 0 = epochs * records of the training split.
        eval_interval: evaluate on valid every this many steps (0 = at the end).
        eval_max_records: cap on evaluated records per split (0 = all).
        sample_tokens: tokens of generated text logged at evaluation (0 = none).
        checkpoint_interval: save every this many steps (0 = only at the end).
        keep_checkpoints: last checkpoints kept (the best is kept apart).
        log_interval: steps between logged training lines and summaries.
        logdir: TensorBoard directory of this run.
        strategy: "default", "mirrored", "multi_worker" or "tpu".
        num_cpu_replicas: with "mirrored" and no GPU, split the CPU into this
            many logical devices (0 = off).
        tpu: TPU address for "tpu" ("" = local).
        precision: "float32", "mixed_bfloat16" or "mixed_float16".
        xla: compile the step with XLA (jit_compile=True): on one device the whole
            step, with several replicas the forward and backward pass; the
            evaluation step too (model/xla.py: static-shape paths).
        deterministic: enable TensorFlow op determinism (exact resume).
    """

    data_dir: str
    model_dir: str
    model: Any
    model_family: str = families.DEFAULT_FAMILY
    preset: str = "wt2_base"
    batch_size: int = 32
    batch_split: int = 1
    seq_len: int = 32
    eval_mem_len: int = 16
    # Architecture search.
    tau_start: float = 1.0
    tau_end: float = 0.1
    tau_schedule: str = "exponential"
    tau_anneal_steps: int = 0
    arch_warmup_steps: int = 0
    arch_learning_rate: float = 1e-2
    arch_weight_decay: float = 5e-4
    arch_beta_1: float = 0.5
    arch_beta_2: float = 0.999
    search_cost_coef: float = 0.0
    search_cost_target: float = 0.0
    # Optimisation of the weights.
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8
    clip_norm: float = 0.25
    # Learning-rate schedule.
    lr_schedule: str = "cosine"
    warmup_steps: int = 0
    decay_steps: int = 0
    min_lr: float = 0.0
    # Run length.
    epochs: int = 20
    max_steps: int = 0
    # Evaluation.
    eval_interval: int = 1000
    eval_max_records: int = 0
    sample_tokens: int = 50
    # Checkpoints and logging.
    checkpoint_interval: int = 1000
    keep_checkpoints: int = 3
    log_interval: int = 100
    logdir: str = ""
    # Distribution and performance.
    strategy: str = "default"
    num_cpu_replicas: int = 0
    tpu: str = ""
    precision: str = "float32"
    xla: bool = False
    deterministic: bool = False

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
        self._check_types()
        self._check_values()

    def _check_types(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
                want = "an integer"
            elif field.type is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                ok = ok and math.isfinite(value)
                want = "a finite number"
            elif field.type is bool:
                ok = isinstance(value, bool)
                want = "true or false"
            elif field.type is str:
                ok = isinstance(value, str)
                want = "a string"
            else:
                continue
            if not ok:
                raise ConfigError(f"--{field.name} must be {want}, got {value!r}")

    def _check_values(self):
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
        require(self.tau_start > 0, "tau_start", "must be > 0")
        require(self.tau_end > 0, "tau_end", "must be > 0")
        require(self.tau_schedule in TAU_SCHEDULES, "tau_schedule", f"use one of {TAU_SCHEDULES}")
        for flag in ("tau_anneal_steps", "arch_warmup_steps", "warmup_steps", "decay_steps",
                     "max_steps", "eval_interval", "eval_max_records", "sample_tokens",
                     "checkpoint_interval", "num_cpu_replicas"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        for flag in ("arch_learning_rate", "learning_rate"):
            require(getattr(self, flag) > 0, flag, "must be > 0")
        for flag in ("arch_weight_decay", "weight_decay", "clip_norm", "min_lr"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        for flag in ("search_cost_coef", "search_cost_target"):
            require(getattr(self, flag) >= 0, flag, "must be >= 0")
        for flag in ("arch_beta_1", "arch_beta_2", "beta_1", "beta_2"):
            require(0 <= getattr(self, flag) < 1, flag, "must be in [0, 1)")
        require(self.epsilon > 0, "epsilon", "must be > 0")
        require(self.optimizer in OPTIMIZERS, "optimizer", f"use one of {OPTIMIZERS}")
        require(self.lr_schedule in LR_SCHEDULES, "lr_schedule", f"use one of {LR_SCHEDULES}")
        require(self.min_lr <= self.learning_rate, "min_lr",
                f"must not exceed --learning_rate={self.learning_rate}")
        require(self.epochs >= 1 or self.max_steps >= 1, "epochs",
                "must be >= 1 unless --max_steps is given")
        require(self.keep_checkpoints >= 1, "keep_checkpoints", "must be >= 1")
        require(self.log_interval >= 1, "log_interval", "must be >= 1")
        require(self.strategy in STRATEGIES, "strategy", f"use one of {STRATEGIES}")
        require(self.num_cpu_replicas == 0 or self.strategy == "mirrored", "num_cpu_replicas",
                "only applies to --strategy=mirrored")
        require(self.precision in PRECISIONS, "precision", f"use one of {PRECISIONS}")
        if self.decay_steps:
            require(self.decay_steps >= self.warmup_steps, "decay_steps",
                    f"must be >= --warmup_steps={self.warmup_steps} (or 0 for the whole run)")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict; the model config is nested under "model"."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["model"] = self.model.to_dict()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        """Inverse of `to_dict`; unknown keys raise a ConfigError listing them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown TrainConfig field(s) {unknown}; valid: {sorted(known)}")
        values = dict(values)
        family = families.get_family(values.get("model_family", families.DEFAULT_FAMILY))
        values["model"] = family.config_from_dict(values["model"])
        return cls(**values)

    def replace(self, **changes) -> "TrainConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def save(self, model_dir=None):
        """Writes config.json (atomically) into model_dir (default: self.model_dir)."""
        path = os.path.join(model_dir or self.model_dir, CONFIG_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, model_dir) -> "TrainConfig":
        """Reads model_dir/config.json."""
        path = os.path.join(model_dir, CONFIG_FILE)
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


def total_steps(config, train_records):
    """Number of training steps of the run (max_steps or epochs * records)."""
    return config.max_steps or config.epochs * train_records


def capped_warmup(steps, horizon, fraction):
    """A warm-up length capped at `fraction` of the planned steps.

    `min(steps, floor(fraction * horizon))`: the flag value is a cap, so a
    run shorter than the warm-up it asks for still warms up, then trains.

    Args:
        steps: the requested warm-up (--warmup_steps, --arch_warmup_steps).
        horizon: the run's planned total steps.
        fraction: largest share of the horizon spent warming up.
    """
    return min(int(steps), int(fraction * horizon))


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


def check_data(config, meta):
    """Checks the config against the built data's meta.json.

    Args:
        config: TrainConfig.
        meta: dict from data_utils.load_meta.

    Raises:
        ConfigError: naming the flag and the fix.
    """
    where = f"the data in {config.data_dir}"
    for split in SPLITS:
        if split not in meta.get("splits", {}):
            raise ConfigError(f"{where} has no '{split}' split: rebuild it with build_data.py")
        if meta["splits"][split].get("records", 0) < 1:
            raise ConfigError(
                f"{where}: split '{split}' has no complete record (batch_size x seq_len too "
                "large for it): rebuild with a smaller --batch_size or --seq_len")
    if config.seq_len != meta["seq_len"]:
        raise ConfigError(
            f"--seq_len={config.seq_len} but {where} was built with seq_len={meta['seq_len']}: "
            "drop --seq_len or rebuild the data with build_data.py --seq_len")
    if config.batch_size != meta["batch_size"]:
        raise ConfigError(
            f"--batch_size={config.batch_size} but {where} was built with batch_size="
            f"{meta['batch_size']}: drop --batch_size or rebuild the data with that batch size")
    vocab = meta["vocab_size"]
    cutoffs = getattr(config.model, "cutoffs", ())
    if cutoffs and (cutoffs[-1] >= vocab or cutoffs[0] < 1):
        raise ConfigError(
            f"--cutoffs={','.join(map(str, cutoffs))} do not fit the data's vocab_size={vocab} "
            "(each cutoff must be in [1, vocab_size)): use --cutoffs=auto or --cutoffs=none")
    if config.model.vocab_size != vocab:
        raise ConfigError(
            f"the model's vocab_size={config.model.vocab_size} differs from {where} "
            f"(vocab_size={vocab}); vocab_size always comes from the data")


def check_replicas(config, meta, num_replicas):
    """Checks that every split's batch splits evenly over the replicas, and the
    training batch of each replica into --batch_split micro-batches.

    Raises:
        ConfigError: naming --strategy / --num_cpu_replicas / --batch_split and
            the fix.
    """
    for split in SPLITS:
        batch = meta["splits"][split].get("batch_size", meta["batch_size"])
        if batch % num_replicas:
            raise ConfigError(
                f"batch size {batch} of split '{split}' is not divisible by the "
                f"{num_replicas} replicas of --strategy={config.strategy}"
                + (f" --num_cpu_replicas={config.num_cpu_replicas}"
                   if config.num_cpu_replicas else "")
                + ": use a replica count that divides it or rebuild the data with "
                "build_data.py --batch_size")
    train_batch = meta["splits"]["train"].get("batch_size", meta["batch_size"])
    check_batch_split(config, train_batch // num_replicas, num_replicas)


def incompatible_fields(old, new):
    """Fields (dotted for the model) that differ and forbid resuming.

    Args:
        old, new: TrainConfig.

    Returns:
        Sorted list of field names outside RESUMABLE_FIELDS whose values differ.
    """
    old_d, new_d = old.to_dict(), new.to_dict()
    # The same directory may be spelled differently (relative, symlinked).
    del old_d["model_dir"], new_d["model_dir"]
    old_d["data_dir"] = os.path.realpath(old_d["data_dir"])
    new_d["data_dir"] = os.path.realpath(new_d["data_dir"])
    diff = [k for k in new_d if k != "model" and k not in RESUMABLE_FIELDS
            and old_d.get(k) != new_d[k]]
    diff += [f"model.{k}" for k in new_d["model"] if old_d["model"].get(k) != new_d["model"][k]]
    return sorted(diff)


def check_resume(config, overwrite=False):
    """Checks that model_dir is empty, holds a compatible run, or may be overwritten.

    Args:
        config: TrainConfig of the new run.
        overwrite: the user passed --overwrite.

    Returns:
        True when a previous run with a compatible config exists (resume),
        False otherwise (fresh start; with overwrite the old run is discarded).

    Raises:
        ConfigError: incompatible or unreadable previous config and no overwrite.
    """
    path = os.path.join(config.model_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return False
    if overwrite:
        return False
    try:
        old = TrainConfig.load(config.model_dir)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"--model_dir={config.model_dir} holds an unreadable {CONFIG_FILE} ({error}): "
            "pass --overwrite to start a new run there or choose another --model_dir") from None
    if old.model_family != config.model_family:
        raise ConfigError(
            f"--model_dir={config.model_dir} holds a {old.model_family} run, which "
            f"--model_family={config.model_family} cannot resume: use "
            f"--model_family={old.model_family} to resume it, --overwrite to start over, or "
            "another --model_dir")
    diff = incompatible_fields(old, config)
    if diff:
        shown = ", ".join(
            f"{k}: {_field(old, k)!r} -> {_field(config, k)!r}" for k in diff[:6])
        raise ConfigError(
            f"--model_dir={config.model_dir} holds a run with a different config ({shown}"
            f"{', ...' if len(diff) > 6 else ''}): pass --overwrite to start over, or use "
            "another --model_dir")
    return True


def _field(config, dotted):
    if dotted.startswith("model."):
        return getattr(config.model, dotted[len("model."):])
    return getattr(config, dotted)
