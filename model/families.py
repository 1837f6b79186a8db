"""Model families by name: each one's config dataclass, builder and presets.

A family is a language model that implements `model/interface.py`. Adding
one means its own package, whose `family.py` builds its `Family` and registers
it (`model/registry.py`), plus one line below importing that module; training/,
serving/ and train.py then work for it unchanged (train.py generates the
family's model flags from its config fields' help metadata). Tests and
experiments register a family at run time: `register_family` / `unregister_family`.

This module is the registry's public face: it imports the built-in families
and re-exports `model/registry.py`, whose `FAMILIES` dict the registrations
change in place. Importing it does not load TensorFlow: builders are imported
on first use.
"""

from model.registry import (
    FAMILIES,
    Family,
    build_model,
    evaluation_settings,
    family_of,
    get_family,
    preset_family,
    register_family,
    register_keras_objects,
    unregister_family,
)

# The built-in families, each registered by its own family.py when imported, in this
# order (the registry's: the flags', help texts' and evaluate.py's order; the default
# first). A new family adds one line.
import model.transformer_xl.family  # noqa: F401

# isort: split
import model.sha_rnn.family  # noqa: F401

DEFAULT_FAMILY = "transformer_xl"

__all__ = ["DEFAULT_FAMILY", "FAMILIES", "Family", "build_model", "evaluation_settings",
           "family_of", "get_family", "preset_family", "register_family",
           "register_keras_objects", "unregister_family"]
