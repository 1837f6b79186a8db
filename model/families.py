"""Model families by name: each one's config dataclass, builder and presets.

A family is a language model that implements `model/interface.py`. Adding
one means its own files plus one `Family` entry in `FAMILIES`; training/,
serving/ and train.py then work for it unchanged (train.py generates the
family's model flags from its config fields' help metadata).

Importing this module does not load TensorFlow: builders are imported on
first use.
"""

import dataclasses
from typing import Any, Callable

from model import sha_rnn, transformer_xl
from model.sha_rnn import presets as sha_rnn_presets
from model.sha_rnn.config import ShaRnnConfig
from model.transformer_xl import flags as transformer_xl_flags
from model.transformer_xl import presets as transformer_xl_presets
from model.transformer_xl.config import ModelConfig

DEFAULT_FAMILY = "transformer_xl"


def _d_model(config):
    return config.d_model


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family.

    Attributes:
        name: registry name (the value of `--model_family`).
        description: one line for help texts.
        config_class: frozen dataclass with `from_dict`, `to_dict` and
            `replace`; every field but vocab_size carries
            `metadata={"help": ...}` (and "choices" for enums).
        presets: preset name -> dict of config fields.
        default_preset: the preset used when none is given.
        builder: `(config, dtype=None) -> built model`; it imports the
            model's module (and TensorFlow) only when called.
        train_defaults: preset name -> TrainConfig field values the preset
            recommends (e.g. its optimizer); flags given by the user win.
        register_keras_objects: `() -> None`, registers the family's Keras
            classes for `keras.saving.load_model` (imports TensorFlow).
        model_flags: the `ModelFlag`s the family parses by hand (their config fields
            get no generated flag).
        summary_fields: the config fields a run's one-line description names.
        softmax_width: `config -> int`, the width of the vectors the output layer reads
            (what the adaptive softmax's cutoff solver prices).
        evaluation_settings: the config fields an evaluation may change on a trained
            run, the weights staying valid (evaluate.py makes them flags).
    """

    name: str
    description: str
    config_class: type
    presets: dict
    default_preset: str
    builder: Callable
    register_keras_objects: Callable
    train_defaults: dict = dataclasses.field(default_factory=dict)
    model_flags: tuple = ()
    summary_fields: tuple = ()
    softmax_width: Callable = _d_model
    evaluation_settings: tuple = ()

    def build(self, config, dtype=None):
        """Builds the family's model from `config` (weights created)."""
        if not isinstance(config, self.config_class):
            raise TypeError(f"the {self.name} family builds from a {self.config_class.__name__}, "
                            f"got {type(config).__name__}")
        return self.builder(config, dtype=dtype)

    def check_preset(self, preset):
        """Raises ValueError unless `preset` is one of this family's presets.

        The message names the family that has the preset, if any, and the fix.
        """
        if preset in self.presets:
            return
        owner = preset_family(preset)
        if owner is not None:
            raise ValueError(
                f"--preset={preset} is a {owner.name} preset but --model_family={self.name}: "
                f"pass --model_family={owner.name}, or a {self.name} preset "
                f"({', '.join(sorted(self.presets))})")
        raise ValueError(f"--preset={preset} is unknown for --model_family={self.name}: use "
                         f"one of {sorted(self.presets)}")

    def preset_config(self, preset=None, **overrides):
        """The config of a preset of this family with some fields overridden.

        Raises:
            ValueError: unknown preset (see `check_preset`), unknown field, or
                an invalid value.
        """
        preset = self.default_preset if preset is None else preset
        self.check_preset(preset)
        return self.config_class.from_dict({**self.presets[preset], **overrides})

    def config_from_dict(self, values: dict[str, Any]):
        """The config class's `from_dict` (config.json -> config)."""
        return self.config_class.from_dict(values)

    def flag_fields(self):
        """The config's dataclass fields that become train.py flags (not vocab_size)."""
        return [f for f in dataclasses.fields(self.config_class) if f.name != "vocab_size"]

    def model_flag(self, name):
        """The family's `ModelFlag` called `name`, or None."""
        return next((flag for flag in self.model_flags if flag.name == name), None)


def _families():
    families = [
        Family(
            name="transformer_xl",
            description="Transformer-XL / PAR supernet (attention, dense or identity blocks)",
            config_class=ModelConfig,
            presets=transformer_xl_presets.PRESETS,
            default_preset="wt2_base",
            builder=transformer_xl.build,
            register_keras_objects=transformer_xl.register_keras_objects,
            train_defaults=transformer_xl_presets.TRAIN_DEFAULTS,
            model_flags=(transformer_xl_flags.ARCHITECTURE,),
            summary_fields=("architecture", "d_model", "num_blocks"),
            evaluation_settings=("clamp_len", "same_length"),
        ),
        Family(
            name="sha_rnn",
            description="SHA-RNN (LSTM blocks, single-head attention over a long memory, "
                        "Boom feed-forward; no attention layers: a plain LSTM LM)",
            config_class=ShaRnnConfig,
            presets=sha_rnn_presets.PRESETS,
            default_preset="sha_rnn_small",
            builder=sha_rnn.build,
            register_keras_objects=sha_rnn.register_keras_objects,
            train_defaults=sha_rnn_presets.TRAIN_DEFAULTS,
            summary_fields=("d_model", "num_layers"),
        ),
    ]
    return {family.name: family for family in families}


FAMILIES: dict[str, Family] = _families()


def evaluation_settings():
    """Every family's evaluation settings: name -> (its config field, the families that
    have it), in family order (evaluate.py's flags)."""
    settings = {}
    for family in FAMILIES.values():
        fields = {f.name: f for f in dataclasses.fields(family.config_class)}
        for name in family.evaluation_settings:
            settings.setdefault(name, (fields[name], []))[1].append(family.name)
    return settings


def get_family(name):
    """The `Family` called `name`; ValueError listing the families otherwise."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[name]


def preset_family(preset):
    """The family that has a preset called `preset`, or None."""
    for family in FAMILIES.values():
        if preset in family.presets:
            return family
    return None


def family_of(config):
    """The family whose config class `config` is an instance of."""
    for family in FAMILIES.values():
        if isinstance(config, family.config_class):
            return family
    known = ", ".join(f.config_class.__name__ for f in FAMILIES.values())
    raise TypeError(f"build_model expects a model family's config ({known}), "
                    f"got {type(config).__name__}")


def register_keras_objects():
    """Registers every family's Keras classes, before a `.keras` file is loaded."""
    for family in FAMILIES.values():
        family.register_keras_objects()


def build_model(config, dtype=None):
    """Builds the model of any family from its config (weights created).

    Args:
        config: a family's config dataclass (e.g. ModelConfig).
        dtype: optional Keras dtype policy; None uses the global policy.

    Returns:
        A built model implementing `model/interface.py`.
    """
    return family_of(config).build(config, dtype=dtype)
