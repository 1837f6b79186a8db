"""The registered model families as the tests run them, and a family registered for the
length of a `with` block.

Tests that run every family take the registry's list (`names()`) and each family's
declared test run (`Family.tiny_preset` and `Family.tiny_train_values`: `tiny_flags`);
they add only the tuning they choose for a family they know (e.g. fewer Transformer-XL
blocks) and the variants they add on purpose (adaptive spans, other optimizers).
"""

import contextlib
import types

from model.families import FAMILIES, get_family, register_family, unregister_family


def names():
    """The registered families' names in registration order (the default family first)."""
    return list(FAMILIES)


def _flag(name, value):
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no{name}"
    if isinstance(value, (tuple, list)):
        return f"--{name}={','.join(str(v) for v in value)}"
    return f"--{name}={value}"


def tiny_flags(name):
    """train.py flags of the family's test run: --model_family, --preset (its
    `tiny_preset`) and its `tiny_train_values`."""
    family = get_family(name)
    return [f"--model_family={name}", f"--preset={family.tiny_preset}",
            *(_flag(key, value) for key, value in family.tiny_train_values.items())]


def no_dropout_flags(name):
    """train.py flags that turn off every dropout of the family: its config fields whose
    name says dropout, at 0."""
    return [f"--{field.name}=0" for field in get_family(name).flag_fields()
            if "dropout" in field.name]


@contextlib.contextmanager
def registered(family):
    """Registers `family` for the `with` block (which gets it), then unregisters it.

    TrainConfig's `model_family` field (training/setup/config.py) holds as its choices
    the families registered when it was defined, and train.py's --model_family takes its
    choices from there: for the block, they also hold the new family's name.
    """
    from training.setup.config import TrainConfig

    register_family(family)
    field = TrainConfig.__dataclass_fields__["model_family"]
    metadata = field.metadata
    try:
        choices = metadata.get("choices")
        if choices is not None and family.name not in choices:
            field.metadata = types.MappingProxyType({**metadata,
                                                     "choices": (*choices, family.name)})
        yield family
    finally:
        field.metadata = metadata
        unregister_family(family.name)
