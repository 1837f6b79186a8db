"""Keras 3 layers and models of the PAR Transformer-XL toolkit.

Light on purpose: `import model.config` (or `model.flops`) does not load
TensorFlow. The layers are re-exported lazily on first attribute access,
e.g. `model.TransformerXLLM`.
"""

import importlib

_EXPORTS = {
    "ModelConfig": "model.config",
    "PRESETS": "model.builder",
    "build_model": "model.builder",
    "preset_config": "model.builder",
    "forward_flops_per_token": "model.flops",
    "param_count": "model.flops",
    "relative_to_transformer_xl": "model.flops",
    "TransformerXLLM": "model.transformer_xl",
    "StochasticBlock": "model.stochastic_block",
    "RelativeMultiHeadAttention": "model.relative_attention",
    "AdaptiveSpanAttention": "model.adaptive_span",
    "PositionwiseFeedForward": "model.feed_forward",
    "AdaptiveSoftmax": "model.adaptive_softmax",
    "AdaptiveEmbedding": "model.adaptive_softmax",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
