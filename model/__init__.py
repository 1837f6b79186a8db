"""Keras 3 layers and models of the PAR Transformer-XL toolkit.

    interface.py     the language-model interface training/ and serving/ use
    families.py      the family registry: config class, builder, presets
    config_base.py   what every config shares (fields with help, checks, JSON)
    layers/          layers shared by the families (attention, softmax, ...)
    transformer_xl/  Transformer-XL / PAR (config, presets, blocks, model)
    sha_rnn/         SHA-RNN and the plain LSTM (config, presets, model)

Light on purpose: `import model.transformer_xl.config` (or
`model.transformer_xl.flops`) does not load TensorFlow. The layers are
re-exported lazily on first attribute access, e.g. `model.TransformerXLLM`.
"""

import importlib

_EXPORTS = {
    "ModelConfig": "model.transformer_xl.config",
    "PRESETS": "model.transformer_xl.presets",
    "build_model": "model.families",
    "ShaRnnConfig": "model.sha_rnn.config",
    "ShaRnnLM": "model.sha_rnn.model",
    "preset_config": "model.transformer_xl.presets",
    "forward_flops_per_token": "model.transformer_xl.flops",
    "param_count": "model.transformer_xl.flops",
    "relative_to_transformer_xl": "model.transformer_xl.flops",
    "TransformerXLLM": "model.transformer_xl.model",
    "StochasticBlock": "model.transformer_xl.stochastic_block",
    "RelativeMultiHeadAttention": "model.layers.relative_attention",
    "AdaptiveSpanAttention": "model.layers.adaptive_span",
    "PositionwiseFeedForward": "model.layers.feed_forward",
    "AdaptiveSoftmax": "model.layers.adaptive_softmax",
    "AdaptiveEmbedding": "model.layers.adaptive_softmax",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
