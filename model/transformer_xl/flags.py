"""The Transformer-XL family's hand-parsed model flag: --architecture.

Its value is a name (supernet, transformer_xl) or a string of one block letter per
block, checked against the depth here so that the message can name both flags. A
plug-in may first turn another value into such a string (the PAR search reads a
finished search run's directory or its architecture.json:
training/plugins/par_search).
"""

from model.config_base import ModelFlag
from model.transformer_xl import blocks
from model.transformer_xl.config import SUPERNET, TRANSFORMER_XL


def parse_architecture(value, fields, preset):
    """The config's `architecture` from the flag's value (see `ModelFlag.parse`)."""
    if value in (SUPERNET, TRANSFORMER_XL):
        return value
    if not value or not set(value) <= set(blocks.letters()):
        raise ValueError(f"is neither {SUPERNET}, {TRANSFORMER_XL} nor a string over "
                         f"{blocks.describe()}")
    num_blocks = fields.get("num_blocks")
    if num_blocks is not None and len(value) != num_blocks:
        raise ValueError(
            f"has {len(value)} blocks but the model has --num_blocks={num_blocks} (the "
            f"preset {preset}'s unless given): give {num_blocks} letters, or pass "
            f"--num_blocks={len(value)} to change the depth")
    return value


ARCHITECTURE = ModelFlag(
    "architecture",
    "supernet, transformer_xl, an a/f/i string of one letter per block such as afafff, or a "
    "finished search run (or its architecture.json/.txt) whose derived architecture to train "
    "from scratch. The string does not set the depth: it must have --num_blocks letters "
    "(default: the preset's num_blocks).",
    parse_architecture)
