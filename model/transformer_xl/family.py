"""The Transformer-XL / PAR family's registry entry: registered when imported
(model/families.py imports this module). Importing it does not load TensorFlow."""

from model import transformer_xl
from model.registry import Family, register_family
from model.transformer_xl import flags, presets
from model.transformer_xl.config import ModelConfig

FAMILY = register_family(Family(
    name="transformer_xl",
    description="Transformer-XL / PAR supernet (attention, dense or identity blocks)",
    config_class=ModelConfig,
    presets=presets.PRESETS,
    default_preset="wt2_base",
    builder=transformer_xl.build,
    register_keras_objects=transformer_xl.register_keras_objects,
    tiny_preset="tiny",
    package=__package__,
    train_defaults=presets.TRAIN_DEFAULTS,
    model_flags=(flags.ARCHITECTURE,),
    summary_fields=("architecture", "d_model", "num_blocks"),
    evaluation_settings=("clamp_len", "same_length"),
    keras_model_names=("par>TransformerXLLM",),
))
