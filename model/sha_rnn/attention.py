"""Single-head attention of the SHA-RNN (Merity 2019, arXiv 1911.11423).

Size glossary (shape comments and einsum equations):
    B: batch size.            T: segment (query) length.
    M: memory length.         K: key length, K = M + T.
    D: model width (d_model); the single head has size D.

With `h` the (already layer-normed) block state and `keys = concat(memory,
LN_mem(h))` (the block builds both), the layer computes, as the reference's
`Attention(nhid, q=True, k=False, v=False, r=False)`:

    query = LN_q(W_q h + b_q)                        # [B, T, D]
    q = dropout(sigmoid(s_q) * query)
    k = sigmoid(s_k) * keys                          # keys are not projected
    v = dropout(g(sigmoid(s_v)) * keys)              # values = keys
    g(x) = sigmoid(f) * tanh(c),  [c, f] = W_o x + b_o   ("over-parameterised" gate)
    out = dropout_w(softmax(q k^T / sqrt(D) + causal)) v

The causal mask lets query i (absolute position M + i) see every memory
position and the current positions up to i; an optional key mask removes
key positions (the block's empty memory slots, see model/sha_rnn/block.py). The reference's optional
`r`
(gated projection of [out, q]) is off in the SHA-RNN block, so it is absent.
"""

import math

import keras
import tensorflow as tf

from model.layers.dropout import FastDropout
from model.layers.layer_norm import LayerNorm
from model.layers.relative_attention import causal_mask, clone_initializer

# Added to masked logits (in float32): their softmax weight is exactly 0.
_MASK_VALUE = -1e30


def init_stddev(d_model):
    """float: the reference's `init_weights` stddev for Linear/Embedding weights, 0.1 / sqrt(D)."""
    return 0.1 / math.sqrt(d_model)


def offset_seed(seed, offset):
    """`seed + offset`, or None when unseeded: distinct seeds for the parts of a layer."""
    return None if seed is None else seed + offset


def sigmoid_gelu(x):
    """The reference's GELU approximation `x * sigmoid(1.702 x)` (Hendrycks & Gimpel 2016)."""
    return x * tf.sigmoid(tf.constant(1.702, x.dtype) * x)


def next_memory(keys, mem_len):
    """Next attention memory: the last `mem_len` positions of the keys.

    Args:
        keys: [B, K, D], concat(memory, LN_mem(h)) of this segment.
        mem_len: int >= 0, positions to keep.

    Returns:
        [B, min(K, mem_len), D], gradient stopped (no backpropagation into
        earlier segments).
    """
    if mem_len == 0:  # `[:, -0:]` would keep everything
        return tf.stop_gradient(keys[:, :0])
    return tf.stop_gradient(keys[:, -mem_len:])


@keras.saving.register_keras_serializable(package="par")
class SingleHeadAttention(keras.layers.Layer):
    """SHA-RNN single-head attention with gates and the over-parameterised value gate.

    The gates `s_q`, `s_k`, `s_v` start at zero (sigmoid 0.5), as in the
    reference; the kernels start N(0, 0.1 / sqrt(D)), biases at zero.

    Args:
        d_model: int, model width D (also the head size).
        dropout: float, dropout on q and v (the reference's dropouth).
        attn_dropout: float, dropout on the attention weights.
        layer_norm_epsilon: float, epsilon of LN_q (the reference: 1e-12).
        seed: int or None, seed of the initialisers and dropout masks.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).
    """

    def __init__(
        self, d_model, dropout=0.0, attn_dropout=0.0, layer_norm_epsilon=1e-12, seed=None, **kwargs
    ):
        super().__init__(**kwargs)
        if int(d_model) <= 0:
            raise ValueError(f"d_model must be a positive integer, got {d_model}")
        for name, value in (("dropout", dropout), ("attn_dropout", attn_dropout)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        self.d_model = int(d_model)
        self.dropout = float(dropout)
        self.attn_dropout = float(attn_dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.seed = seed
        policy = self.dtype_policy
        kernel_init = keras.initializers.RandomNormal(stddev=init_stddev(self.d_model), seed=seed)
        self.query_dense = keras.layers.Dense(
            self.d_model, kernel_initializer=clone_initializer(kernel_init, 0),
            dtype=policy, name="query_dense",
        )  # [B, T, D] -> [B, T, D]  (W_q)
        self.query_norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="query_norm"
        )  # LN_q
        self.overparam_dense = keras.layers.Dense(
            2 * self.d_model, kernel_initializer=clone_initializer(kernel_init, 1),
            dtype=policy, name="overparam_dense",
        )  # [D] -> [2D]  (W_o: [c, f])
        self.query_dropout = FastDropout(
            self.dropout, seed=offset_seed(seed, 2), dtype=policy, name="query_dropout"
        )
        self.value_dropout = FastDropout(
            self.dropout, seed=offset_seed(seed, 3), dtype=policy, name="value_dropout"
        )
        self.weight_dropout = FastDropout(
            self.attn_dropout, seed=offset_seed(seed, 4), dtype=policy, name="weight_dropout"
        )

    def build(self, input_shape=None):
        if self.built:
            return
        d = self.d_model
        for name in ("s_q", "s_k", "s_v"):
            setattr(self, name, self.add_weight(name=name, shape=(d,), initializer="zeros"))  # [D]
        self.query_dense.build((None, None, d))
        self.query_norm.build((None, None, d))
        self.overparam_dense.build((None, d))
        self.built = True

    def value_gate(self):
        """[D], compute dtype: g(sigmoid(s_v)) = sigmoid(f) * tanh(c), [c, f] = W_o x + b_o."""
        gate_input = tf.sigmoid(tf.cast(self.s_v, self.compute_dtype))  # [D]
        cf = self.overparam_dense(gate_input[None, :])[0]  # [2D]
        c, f = cf[: self.d_model], cf[self.d_model :]
        return tf.sigmoid(f) * tf.tanh(c)

    def call(self, query, keys, training=False, key_mask=None):
        """Attends from the segment's positions to memory + segment.

        Args:
            query: [B, T, D], the block state LN_mid(h).
            keys: [B, K, D] with K = M + T, concat(memory, LN_mem(h)); also the values.
            training: bool, enables dropout.
            key_mask: optional bool [B, K], False for key positions no query
                may see (on top of the causal mask; the last T must be True).

        Returns:
            [B, T, D] attention output (before the block's dropout and residual).
        """
        dtype = self.compute_dtype
        query = tf.cast(query, dtype)
        keys = tf.cast(keys, dtype)
        projected = self.query_norm(self.query_dense(query))  # [B, T, D]
        q = tf.sigmoid(tf.cast(self.s_q, dtype)) * projected  # [B, T, D]
        q = self.query_dropout(q, training=training)
        k = tf.sigmoid(tf.cast(self.s_k, dtype)) * keys  # [B, K, D]
        v = self.value_dropout(self.value_gate() * keys, training=training)  # [B, K, D]

        scores = tf.einsum("btd,bkd->btk", q, k) / tf.constant(math.sqrt(self.d_model), dtype)
        mask = causal_mask(tf.shape(q)[1], tf.shape(k)[1])[None]  # [1, T, K]
        if key_mask is not None:
            mask = mask & key_mask[:, None, :]  # [B, T, K]
        scores = tf.where(mask, tf.cast(scores, tf.float32), _MASK_VALUE)  # [B, T, K]
        weights = tf.cast(tf.nn.softmax(scores, axis=-1), dtype)
        weights = self.weight_dropout(weights, training=training)
        return tf.einsum("btk,bkd->btd", weights, v)  # [B, T, D]

    def weight_decay_variables(self):
        """The kernels W_q and W_o (not biases, LN_q or the gate vectors)."""
        return [self.query_dense.kernel, self.overparam_dense.kernel]

    def compute_output_shape(self, query_shape, keys_shape=None):
        return query_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "dropout": self.dropout,
                "attn_dropout": self.attn_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "seed": self.seed,
            }
        )
        return config
