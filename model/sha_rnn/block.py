"""SHA-RNN block: LSTM, optional single-head attention, Boom feed-forward.

Merity 2019, arXiv 1911.11423; the reference `Block(residual=False)` in
smerity/sha-rnn model.py.

Size glossary:
    B: batch size.     T: segment length.     M: memory length.
    D: model width (d_model, also the LSTM size).
    F: Boom inner width (boom_dim), a multiple of D.

One block, every dropout at the block rate (the reference's dropouth):

    h = LN_start(h)
    x, (h_T, c_T) = LSTM(h, (h_0, c_0));  h = dropout(x)         # no residual
    if attention:                                                 # SHA blocks
        mh = LN_mem(h);  h = LN_mid(h)
        h = dropout(Attention(h, concat(memory, mh), key_mask)) + h
        new_memory = last mem_len positions of concat(memory, mh)
    h = LN_ff(h) + dropout(Boom(LN_xff(h)))

with `Boom(x) = sum of the F / D chunks of dropout(GELU(W_1 x + b_1))` (no
second matrix). The returned LSTM states and memory are gradient-stopped.
Layer norms use the reference's epsilon 1e-12.

Empty memory: a memory position whose vector is all zeros is an empty slot,
masked out of the attention (`key_mask`). The memory starts as M zero
vectors (`ShaRnnLM.initial_state`), so a fresh model attends only to what it
has seen, as the reference, whose memory starts empty and grows segment by
segment; the shapes stay fixed (XLA, tf.distribute, exported signatures).
A real memory vector is LN_mem's output, which is all zeros only if the
LSTM output is constant over the D units and LN_mem's offset is zero.
"""

import math

import keras
import tensorflow as tf

from model.layers.dropout import FastDropout
from model.layers.layer_norm import LayerNorm
from model.layers.relative_attention import clone_initializer
from model.sha_rnn.attention import (
    SingleHeadAttention,
    init_stddev,
    next_memory,
    offset_seed,
    sigmoid_gelu,
)
from model.sha_rnn.lstm import ProjectedLSTM

LAYER_NORM_EPSILON = 1e-12  # the reference's LayerNorm(eps=1e-12)


@keras.saving.register_keras_serializable(package="par")
class Boom(keras.layers.Layer):
    """Boom feed-forward with the shortcut of the reference (no output matrix).

    `u = dropout(GELU(x W_1 + b_1))` with `W_1: D -> F`, then the F / D
    chunks of width D are summed. GELU is `x * sigmoid(1.702 x)`; W_1 starts
    N(0, 0.1 / sqrt(D)), b_1 at zero.

    Args:
        d_model: int, width D.
        boom_dim: int, inner width F (a multiple of D).
        dropout: float, dropout on u.
        seed: int or None, seed of the initialiser and the dropout masks.
        **kwargs: base `keras.layers.Layer` arguments.
    """

    def __init__(self, d_model, boom_dim, dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if int(d_model) <= 0 or int(boom_dim) <= 0 or int(boom_dim) % int(d_model):
            raise ValueError(
                f"boom_dim={boom_dim} must be a positive multiple of d_model={d_model}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = int(d_model)
        self.boom_dim = int(boom_dim)
        self.dropout = float(dropout)
        self.seed = seed
        self.inner_dense = keras.layers.Dense(
            self.boom_dim,
            kernel_initializer=keras.initializers.RandomNormal(
                stddev=init_stddev(self.d_model), seed=seed
            ),
            dtype=self.dtype_policy,
            name="inner_dense",
        )  # [B, T, D] -> [B, T, F]
        self.inner_dropout = FastDropout(
            self.dropout, seed=offset_seed(seed, 1), dtype=self.dtype_policy, name="inner_dropout"
        )

    def build(self, input_shape):
        self.inner_dense.build(input_shape)
        self.built = True

    def call(self, inputs, training=False):
        """[B, T, D] -> [B, T, D]."""
        u = sigmoid_gelu(self.inner_dense(inputs))  # [B, T, F]
        u = self.inner_dropout(u, training=training)
        chunks = self.boom_dim // self.d_model
        shape = tf.concat([tf.shape(u)[:-1], [chunks, self.d_model]], axis=0)
        return tf.reduce_sum(tf.reshape(u, shape), axis=-2)  # [B, T, F/D, D] -> [B, T, D]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "boom_dim": self.boom_dim,
                "dropout": self.dropout,
                "seed": self.seed,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="par")
class ShaRnnBlock(keras.layers.Layer):
    """One SHA-RNN block (see the module docstring for the formulas).

    The LSTM is `keras.layers.LSTM` with cuDNN-compatible settings (tanh,
    sigmoid recurrent activation, no recurrent dropout, not unrolled, with
    bias), so a GPU runs it as one cuDNN kernel; elsewhere `ProjectedLSTM`
    (model/sha_rnn/lstm.py) computes the input projection of all steps
    outside the recurrence (same weights, same numbers). It is not touched by the
    reference's `init_weights`, so it keeps PyTorch's LSTM initialisation:
    every weight U(-1/sqrt(D), 1/sqrt(D)) (PyTorch has two biases per gate,
    Keras one; the single bias is drawn from the same uniform), and no unit
    forget bias.

    Args:
        d_model: int, width D (embedding and LSTM size).
        boom_dim: int, Boom inner width F (a multiple of D).
        use_attention: bool, this block has single-head attention and a memory.
        dropout: float, the block dropout (LSTM output, attention q/v/output, Boom).
        attn_dropout: float, dropout on the attention weights.
        seed: int or None, base seed of the initialisers and dropout masks.
        **kwargs: base `keras.layers.Layer` arguments.
    """

    def __init__(
        self, d_model, boom_dim, use_attention=False, dropout=0.0, attn_dropout=0.0, seed=None,
        **kwargs,
    ):  # fmt: skip
        super().__init__(**kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = int(d_model)
        self.boom_dim = int(boom_dim)
        self.use_attention = bool(use_attention)
        self.dropout = float(dropout)
        self.attn_dropout = float(attn_dropout)
        self.seed = seed
        policy = self.dtype_policy
        d = self.d_model

        def norm(name):
            return LayerNorm(
                epsilon=LAYER_NORM_EPSILON, dtype=policy, name=name
            )

        def dropout_layer(name, offset):
            return FastDropout(
                self.dropout, seed=offset_seed(seed, offset), dtype=policy, name=name
            )

        bound = 1.0 / math.sqrt(d)
        lstm_init = keras.initializers.RandomUniform(-bound, bound, seed=seed)
        self.start_norm = norm("start_norm")  # LN_start
        self.lstm = ProjectedLSTM(
            d,
            activation="tanh",
            recurrent_activation="sigmoid",
            use_bias=True,
            kernel_initializer=clone_initializer(lstm_init, 0),  # [D, 4D], gates i, f, c, o
            recurrent_initializer=clone_initializer(lstm_init, 1),  # [D, 4D]
            bias_initializer=clone_initializer(lstm_init, 2),  # [4D]
            unit_forget_bias=False,
            recurrent_dropout=0.0,
            unroll=False,
            return_sequences=True,
            return_state=True,
            dtype=policy,
            name="lstm",
        )
        self.lstm_dropout = dropout_layer("lstm_dropout", 3)
        if self.use_attention:
            self.memory_norm = norm("memory_norm")  # LN_mem
            self.mid_norm = norm("mid_norm")  # LN_mid
            self.attention = SingleHeadAttention(
                d, dropout=self.dropout, attn_dropout=self.attn_dropout,
                layer_norm_epsilon=LAYER_NORM_EPSILON, seed=offset_seed(seed, 20),
                dtype=policy, name="attention",
            )  # fmt: skip
            self.attention_dropout = dropout_layer("attention_dropout", 4)
        self.ff_norm = norm("ff_norm")  # LN_ff, on the residual path
        self.ff_input_norm = norm("ff_input_norm")  # LN_xff, on the Boom input
        self.boom = Boom(
            d, self.boom_dim, dropout=self.dropout, seed=offset_seed(seed, 10), dtype=policy,
            name="boom",
        )  # fmt: skip
        self.boom_dropout = dropout_layer("boom_dropout", 5)

    def build(self, input_shape=None):
        if self.built:
            return
        shape = (None, None, self.d_model)  # [B, T, D]
        self.start_norm.build(shape)
        self.lstm.build(shape)
        if self.use_attention:
            self.memory_norm.build(shape)
            self.mid_norm.build(shape)
            self.attention.build(shape)
        self.ff_norm.build(shape)
        self.ff_input_norm.build(shape)
        self.boom.build(shape)
        self.built = True

    def call(self, inputs, state_h, state_c, memory=None, training=False, mem_len=0):
        """Runs the block on one segment.

        Args:
            inputs: [B, T, D] block input.
            state_h: [B, D] LSTM hidden state from the previous segment.
            state_c: [B, D] LSTM cell state from the previous segment.
            memory: [B, M, D] attention memory (M may be 0; all-zero
                positions are empty and masked out); only with use_attention,
                else ignored.
            training: bool, enables dropout.
            mem_len: int >= 0, positions kept in the new memory.

        Returns:
            (output [B, T, D], new_h [B, D], new_c [B, D], new_memory
            [B, min(M + T, mem_len), D] or None without attention), states
            and memory gradient-stopped.
        """
        dtype = self.compute_dtype
        h = self.start_norm(tf.cast(inputs, dtype))
        x, new_h, new_c = self.lstm(
            h, initial_state=[tf.cast(state_h, dtype), tf.cast(state_c, dtype)], training=training
        )  # [B, T, D], [B, D], [B, D]
        h = self.lstm_dropout(x, training=training)
        new_memory = None
        if self.use_attention:
            mh = self.memory_norm(h)  # [B, T, D], the memory input
            h = self.mid_norm(h)
            if memory is None:
                memory = tf.zeros_like(mh[:, :0])  # [B, 0, D]
            memory = tf.cast(memory, dtype)
            keys = tf.concat([memory, mh], axis=1)  # [B, M + T, D]
            key_mask = tf.concat([tf.reduce_any(tf.not_equal(memory, 0), axis=-1),  # [B, M]
                                  tf.ones_like(mh[:, :, 0], tf.bool)], axis=1)  # [B, M + T]
            attended = self.attention(h, keys, training=training, key_mask=key_mask)
            h = self.attention_dropout(attended, training=training) + h
            new_memory = next_memory(keys, mem_len)
        boom = self.boom(self.ff_input_norm(h), training=training)
        h = self.ff_norm(h) + self.boom_dropout(boom, training=training)
        return h, tf.stop_gradient(new_h), tf.stop_gradient(new_c), new_memory

    def weight_decay_variables(self):
        """LSTM kernels, the Boom kernel and the attention kernels (no biases, norms, gates)."""
        out = [self.lstm.cell.kernel, self.lstm.cell.recurrent_kernel, self.boom.inner_dense.kernel]
        if self.use_attention:
            out += self.attention.weight_decay_variables()
        return out

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "boom_dim": self.boom_dim,
                "use_attention": self.use_attention,
                "dropout": self.dropout,
                "attn_dropout": self.attn_dropout,
                "seed": self.seed,
            }
        )
        return config
