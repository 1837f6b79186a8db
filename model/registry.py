"""The registry of model families: `Family` and the live `FAMILIES` it fills.

A family declares itself in its own package: `model/<package>/family.py` builds its
`Family` and calls `register_family` when imported; `model/families.py` imports the
built-in families' modules (one line each) and re-exports this module's names, so
callers import `model.families` (this module alone holds only the families imported
so far). Tests and experiments register a family at run time with `register_family`
and remove it with `unregister_family`. Importing this module imports nothing of the
project and does not load TensorFlow.
"""

import dataclasses
from typing import Any, Callable


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
            `metadata={"help": ...}` (and "choices" for enums). No other
            registered family may have the same class (`family_of` finds a
            config's family by its class; a subclass is a family of its own).
        presets: preset name -> dict of config fields (no other family's names).
        default_preset: the preset used when none is given.
        builder: `(config, dtype=None) -> built model`; it imports the
            model's module (and TensorFlow) only when called.
        register_keras_objects: `() -> None`, registers the family's Keras
            classes for `keras.saving.load_model` (imports TensorFlow).
        tiny_preset: the small preset the tests build and train the family with.
        tiny_train_values: TrainConfig field values a test run of `tiny_preset` sets
            besides the preset (what the family's recipe needs and the tiny preset
            leaves at the trainer's default, e.g. SHA-RNN's optimizer).
        package: the Python package of the family's modules (generic code imports
            none of them: tests/helpers/imports.py); default: the config class's.
        train_defaults: preset name -> TrainConfig field values the preset
            recommends (e.g. its optimizer); flags given by the user win.
        model_flags: the `ModelFlag`s the family parses by hand (their config fields
            get no generated flag).
        summary_fields: the config fields a run's one-line description names.
        softmax_width: `config -> int`, the width of the vectors the output layer reads
            (what the adaptive softmax's cutoff solver prices).
        evaluation_settings: the config fields an evaluation may change on a trained
            run, the weights staying valid (evaluate.py makes them flags).
        keras_model_names: the Keras registered names of the family's model class
            ("par>TransformerXLLM"): a `.keras` file holding one alone is a bare model
            an older export.py wrote, without its tokenizer.
    """

    name: str
    description: str
    config_class: type
    presets: dict
    default_preset: str
    builder: Callable
    register_keras_objects: Callable
    tiny_preset: str
    tiny_train_values: dict = dataclasses.field(default_factory=dict)
    package: str = ""
    train_defaults: dict = dataclasses.field(default_factory=dict)
    model_flags: tuple = ()
    summary_fields: tuple = ()
    softmax_width: Callable = _d_model
    evaluation_settings: tuple = ()
    keras_model_names: tuple = ()

    def __post_init__(self):
        if not self.package:
            module = self.config_class.__module__
            object.__setattr__(self, "package", module.rpartition(".")[0] or module)

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


# name -> Family, in registration order (the order of the flags, help texts and
# evaluate.py's settings). One dict for the whole process: `register_family` and
# `unregister_family` change it in place, so every `from ... import FAMILIES` sees them.
FAMILIES: dict[str, Family] = {}


def _registration_problems(family):
    """Why `family` cannot join the registry (empty: it can)."""
    problems = []
    if family.name in FAMILIES:
        problems.append(f"the name {family.name!r} is taken")
    for other in FAMILIES.values():
        shared = sorted(set(family.presets) & set(other.presets))
        if shared:
            problems.append(f"the {other.name} family has the preset(s) {shared}")
        if other.config_class is family.config_class:
            problems.append(f"the {other.name} family has the config class "
                            f"{family.config_class.__name__} (subclass it for a family of "
                            "its own)")
    for role, preset in (("default_preset", family.default_preset),
                         ("tiny_preset", family.tiny_preset)):
        if preset not in family.presets:
            problems.append(f"its {role} {preset!r} is not one of its presets "
                            f"{sorted(family.presets)}")
    return problems


def register_family(family):
    """Adds `family` to the registry (its package's family.py does, or a test at run time).

    Returns:
        `family`.

    Raises:
        TypeError: not a `Family`.
        ValueError: its name is taken, another family has one of its preset names or
            its config class, or its default or tiny preset is not one of its presets;
            one message lists every problem.
    """
    if not isinstance(family, Family):
        raise TypeError(f"register_family expects a Family, got {type(family).__name__}")
    problems = _registration_problems(family)
    if problems:
        raise ValueError(f"cannot register the model family {family.name!r}: "
                         + "; ".join(problems))
    FAMILIES[family.name] = family
    return family


def unregister_family(name):
    """Removes the family called `name` from the registry and returns it.

    Raises:
        ValueError: no family has that name.
    """
    if name not in FAMILIES:
        raise ValueError(f"cannot unregister the model family {name!r}: it is not "
                         f"registered; registered: {sorted(FAMILIES)}")
    return FAMILIES.pop(name)


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
    """The family whose config class `config` is an instance of: the most specific one
    (a family whose class subclasses another family's class owns its instances)."""
    by_class = {family.config_class: family for family in FAMILIES.values()}
    for cls in type(config).__mro__:
        if cls in by_class:
            return by_class[cls]
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
