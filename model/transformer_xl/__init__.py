"""Transformer-XL / PAR: the supernet of stochastic blocks and fixed architectures.

    config.py            ModelConfig (every field with its help) and the enums
    presets.py           named ModelConfig fields (tiny, wt2_base, ...)
    blocks.py            the block registry: letter -> BlockSpec
    stochastic_block.py  the Gumbel-softmax choice between the block types
    model.py             TransformerXLLM (the language-model interface)
    flops.py             forward FLOPs per token and parameter counts
    family.py            the family's registry entry (model/registry.py)

Papers: Dai et al. 2019 (arXiv 1901.02860), Mandava et al. 2020 (PAR,
arXiv 2009.04534). Importing this package does not load TensorFlow.
"""

def build(config, dtype=None):
    """Builds the Transformer-XL / PAR model described by `config`, weights created.

    The model and its layers read the `ModelConfig` itself.

    Args:
        config: ModelConfig.
        dtype: optional Keras dtype policy (e.g. "mixed_bfloat16"); None uses
            the global policy.

    Returns:
        A built `TransformerXLLM` (variables exist, so optimizers and
        checkpoints can be created before the first step).
    """
    from model.transformer_xl.config import ModelConfig

    if not isinstance(config, ModelConfig):
        raise TypeError(f"the transformer_xl family builds from a ModelConfig, got "
                        f"{type(config).__name__}")
    # Imported here so that importing the presets does not load TensorFlow.
    from model.transformer_xl.model import TransformerXLLM

    model = TransformerXLLM(config, dtype=dtype)
    model.build((None, None))  # [B, T]
    return model


def register_keras_objects():
    """Registers the family's Keras classes (importing its model module does), so that
    `keras.saving.load_model` can deserialize them."""
    import model.transformer_xl.model  # noqa: F401
