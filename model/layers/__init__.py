"""Keras 3 layers shared by the model families, one public layer per file.

    relative_attention.py  RelativeMultiHeadAttention: Transformer-XL's attention
                           with relative positions and memory (Dai et al. 2019)
    adaptive_span.py       AdaptiveSpanAttention: spans learned per head
                           (Sukhbaatar et al. 2019, arXiv 1905.07799)
    feed_forward.py        PositionwiseFeedForward (with residual and norm)
    adaptive_softmax.py    AdaptiveSoftmax / AdaptiveEmbedding
                           (Grave et al. 2017, arXiv 1609.04309)
    dropout.py             FastDropout: stateless, seeded, rate quantised to 1/256
    layer_norm.py          LayerNorm with a fused backward
    initializers.py        initializer helpers

Every layer is registered with `keras.saving.register_keras_serializable`
(package "par"): the registered names are a compatibility promise.
"""
