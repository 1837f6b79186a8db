"""SHA-RNN language model (Merity 2019, arXiv 1911.11423) with explicit state.

"Single Headed Attention RNN: Stop Thinking With Your Head"; reference code
smerity/sha-rnn, model.py (`SHARNN`). A stack of `ShaRnnBlock`s (LSTM,
single-head attention in the chosen blocks, Boom feed-forward) between an
embedding and an adaptive softmax. With no attention blocks it is a plain
LSTM language model (with Boom layers).

Size glossary:
    B: batch size.            T: segment length.
    M: memory length.         D: model width (d_model).
    L: number of blocks.      A: number of attention blocks.
    V: vocabulary size.

Data flow:
    ids [B, T] -> embedding (not scaled) -> dropout_input
      -> L blocks (each carries its LSTM (h, c); attention blocks also read
         and return a memory [B, M, D])
      -> dropout -> hidden [B, T, D]
    hidden -> adaptive softmax: token_nll [B, T] or log_probs [B, T, V].

State (a flat list, always in this order):
    [h_0, c_0, h_1, c_1, ..., h_{L-1}, c_{L-1}, memory_a0, ..., memory_a{A-1}]
with h_i, c_i [B, D] the LSTM states of block i, and one memory [B, M, D]
per attention block in increasing block order. Memory positions that are
all zeros are empty: the attention does not see them, so the zero memory of
`initial_state` is an empty one (the reference starts every epoch and every
evaluation with no memory), with fixed shapes. Everything returned is
gradient-stopped: no backpropagation between segments.

Every dropout is `model.layers.dropout.FastDropout` (rates rounded to 1/256).
"""

import dataclasses

import keras
import tensorflow as tf

from model.layers.adaptive_softmax import AdaptiveSoftmax
from model.layers.dropout import FastDropout
from model.layers.relative_attention import clone_initializer
from model.sha_rnn.attention import init_stddev, offset_seed
from model.sha_rnn.block import ShaRnnBlock
from model.sha_rnn.config import ShaRnnConfig

# Seed offsets from the config seed: embedding 0, dropouts 2 and 3, softmax
# kernels from 10 on (one per kernel), block i from _BLOCK_SEED_STRIDE * (i + 1)
# (a block uses offsets below 30).
_SOFTMAX_SEED_OFFSET = 10
_BLOCK_SEED_STRIDE = 100


@keras.saving.register_keras_serializable(package="par")
class ShaRnnLM(keras.Model):
    """SHA-RNN language model with explicit recurrent state and memory.

    The constructor takes the fields of `ShaRnnConfig` as explicit arguments
    (and validates them with it), so `get_config` / `from_config` round-trip;
    `build_sha_rnn(config)` is the usual way to make one.

    Weights start as in the reference's `init_weights`: embedding, softmax
    and every Dense kernel N(0, 0.1 / sqrt(D)), biases zero. Layer norms keep
    scale 1 and offset 0: the reference's `init_weights` lists
    `nn.LayerNorm`, but its layer norms are apex `FusedLayerNorm`, which is
    not an `nn.LayerNorm` subclass, so they are never re-initialised. LSTMs
    keep PyTorch's default (see `ShaRnnBlock`).

    Args:
        See `model.sha_rnn.config.ShaRnnConfig` for every argument.
        **kwargs: base `keras.Model` arguments (name, dtype, trainable).
    """

    family = "sha_rnn"

    def __init__(
        self,
        vocab_size,
        d_model=1024,
        num_layers=4,
        boom_dim=4096,
        attention_layers=None,
        mem_len=5000,
        dropout=0.1,
        dropout_input=0.1,
        dropout_hidden=0.1,
        attn_dropout=0.1,
        ar_coef=0.0,
        cutoffs=(),
        proj_factor=4.0,
        proj_dims=(),
        tie_weights=True,
        seed=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # One validation for every entry point (builder, from_config, direct).
        config = ShaRnnConfig(
            vocab_size=vocab_size, d_model=d_model, num_layers=num_layers, boom_dim=boom_dim,
            attention_layers=None if attention_layers is None else tuple(attention_layers),
            mem_len=mem_len, dropout=dropout, dropout_input=dropout_input,
            dropout_hidden=dropout_hidden, attn_dropout=attn_dropout, ar_coef=ar_coef,
            cutoffs=tuple(cutoffs), proj_factor=proj_factor, proj_dims=tuple(proj_dims),
            tie_weights=tie_weights, seed=seed,
        )  # fmt: skip
        self.vocab_size = config.vocab_size
        self.d_model = config.d_model
        self.num_layers = config.num_layers
        self.boom_dim = config.boom_dim
        self.attention_layers = config.attention_layers
        self.mem_len = config.mem_len
        self.dropout = config.dropout
        self.dropout_input = config.dropout_input
        self.dropout_hidden = config.dropout_hidden
        self.attn_dropout = config.attn_dropout
        self.ar_coef = config.ar_coef
        self.cutoffs = config.cutoffs
        self.proj_factor = config.proj_factor
        self.proj_dims = config.proj_dims
        self.tie_weights = config.tie_weights
        self.seed = config.seed
        self.attention_block_indices = config.resolved_attention_layers

        policy = self.dtype_policy
        init = keras.initializers.RandomNormal(stddev=init_stddev(self.d_model), seed=self.seed)
        softmax_init = clone_initializer(init, _SOFTMAX_SEED_OFFSET)
        self.softmax = AdaptiveSoftmax(
            self.vocab_size, self.d_model, self.cutoffs, self.proj_factor, self.proj_dims,
            tie_embedding=self.tie_weights, kernel_initializer=softmax_init, dtype=policy,
            name="softmax",
        )  # fmt: skip
        self._redraw_softmax_kernels(softmax_init)
        if self.tie_weights:
            self.embedding = None  # softmax.embed
        else:
            self.embedding = keras.layers.Embedding(
                self.vocab_size, self.d_model, embeddings_initializer=init, dtype=policy,
                name="embedding",
            )  # fmt: skip
        self.input_dropout = FastDropout(
            self.dropout_input, seed=offset_seed(self.seed, 2), dtype=policy, name="input_dropout"
        )
        self.output_dropout = FastDropout(
            self.dropout, seed=offset_seed(self.seed, 3), dtype=policy, name="output_dropout"
        )
        self.blocks = [
            ShaRnnBlock(
                self.d_model, self.boom_dim, use_attention=i in self.attention_block_indices,
                dropout=self.dropout_hidden, attn_dropout=self.attn_dropout,
                seed=offset_seed(self.seed, _BLOCK_SEED_STRIDE * (i + 1)), dtype=policy,
                name=f"block_{i}",
            )  # fmt: skip
            for i in range(self.num_layers)
        ]

    def _redraw_softmax_kernels(self, initializer):
        """Gives each softmax kernel its own seed.

        `AdaptiveSoftmax` draws all its kernels from one initializer; a seeded
        Keras 3 initializer returns the same stream at every call, so the
        head kernel and the tail weights would start with equal leading values.
        """
        kernels = [self.softmax.head_kernel]
        kernels += list(self.softmax.tail_projections) + list(self.softmax.tail_kernels)
        for offset, kernel in enumerate(kernels):
            kernel.assign(clone_initializer(initializer, offset)(kernel.shape, kernel.dtype))

    def build(self, input_shape):
        if self.embedding is not None and not self.embedding.built:
            self.embedding.build(input_shape)
        for block in self.blocks:
            block.build(tuple(input_shape) + (self.d_model,))
        super().build(input_shape)

    # ------------------------------------------------------------------ state

    @property
    def num_states(self):
        """int: length of the state list, 2 L + A."""
        return 2 * self.num_layers + len(self.attention_block_indices)

    def _mem_len(self, mem_len):
        mem_len = self.mem_len if mem_len is None else mem_len
        if isinstance(mem_len, bool) or int(mem_len) != mem_len or mem_len < 0:
            raise ValueError(f"mem_len must be an integer >= 0, got {mem_len!r}")
        return int(mem_len)

    def initial_state(self, batch_size, mem_len=None):
        """Zero state to start from: zero LSTM states, empty memories.

        The memories are M zero vectors, which the attention treats as empty
        positions (masked out): the first segment attends only to itself,
        the next to the first and itself, and so on, as with no memory.

        Args:
            batch_size: int (or scalar int tensor) B.
            mem_len: int M of the zero memories; None: the config's mem_len;
                0: memories of length 0.

        Returns:
            list of `num_states` zero tensors in the compute dtype:
            [h_0, c_0, ..., h_{L-1}, c_{L-1}] each [B, D], then one [B, M, D]
            memory per attention block.
        """
        mem_len = self._mem_len(mem_len)
        dtype = self.compute_dtype
        state = [tf.zeros([batch_size, self.d_model], dtype) for _ in range(2 * self.num_layers)]
        state += [
            tf.zeros([batch_size, mem_len, self.d_model], dtype)
            for _ in self.attention_block_indices
        ]
        return state

    def state_signature(self):
        """list of tf.TensorSpec in the state order: h/c [None, D], memories [None, None, D]."""
        dtype = tf.as_dtype(self.compute_dtype)
        specs = []
        for i in range(self.num_layers):
            specs.append(tf.TensorSpec([None, self.d_model], dtype, name=f"block_{i}_h"))
            specs.append(tf.TensorSpec([None, self.d_model], dtype, name=f"block_{i}_c"))
        for i in self.attention_block_indices:
            specs.append(tf.TensorSpec([None, None, self.d_model], dtype, name=f"block_{i}_memory"))
        return specs

    # ---------------------------------------------------------------- forward

    def call(self, inputs, state=None, training=False, mem_len=None):
        """Runs the model on one segment.

        Args:
            inputs: int [B, T] token ids.
            state: list of `num_states` tensors in the state order (see the
                module docstring), or None for zero LSTM states and empty
                memories.
            training: bool, enables dropout.
            mem_len: int, positions kept in the new memories; None: the
                config's mem_len.

        Returns:
            (hidden [B, T, D] in the compute dtype, new_state: list in the
            same order, LSTM states [B, D] and memories
            [B, min(M + T, mem_len), D], all gradient-stopped).
        """
        mem_len = self._mem_len(mem_len)
        inputs = tf.convert_to_tensor(inputs)
        if state is None:
            state = self.initial_state(tf.shape(inputs)[0], mem_len=0)
        state = list(state)
        if len(state) != self.num_states:
            raise ValueError(
                f"got a state of {len(state)} tensors but this model takes {self.num_states} "
                f"({self.num_layers} LSTM (h, c) pairs, then {len(self.attention_block_indices)} "
                "memories): pass model.initial_state(batch_size), the previous new_state, or None"
            )
        num_lstm = 2 * self.num_layers
        memories = iter(state[num_lstm:])
        x = self.input_dropout(self._embed(inputs), training=training)  # [B, T, D]
        lstm_state, new_memories = [], []
        for i, block in enumerate(self.blocks):
            memory = next(memories) if block.use_attention else None
            x, h, c, new_memory = block(
                x, state[2 * i], state[2 * i + 1], memory=memory, training=training,
                mem_len=mem_len,
            )  # fmt: skip
            lstm_state += [h, c]
            if block.use_attention:
                new_memories.append(new_memory)
        x = self.output_dropout(x, training=training)
        return x, lstm_state + new_memories

    def _embed(self, inputs):
        if self.embedding is None:
            return tf.cast(self.softmax.embed(inputs), self.compute_dtype)
        return tf.cast(self.embedding(inputs), self.compute_dtype)

    def token_nll(self, hidden, targets):
        """Per-token NLL in nats: [B, T, D], [B, T] -> float32 [B, T] (targets < 0 -> 0)."""
        return self.softmax.nll(hidden, targets)

    def log_probs(self, hidden):
        """Full log-probabilities: [B, T, D] -> float32 [B, T, V]."""
        return self.softmax.log_probs(hidden)

    # -------------------------------------------------- what the trainer needs

    def extra_losses(self, hidden):
        """Terms to add to the training loss.

        Activation regularisation (AR, Merity et al. 2017, arXiv 1708.02182)
        on the dropped output: `ar_coef * mean(hidden ** 2)` over this call's
        rows, positions and units.

        Args:
            hidden: [B, T, D] the output of `call`.

        Returns:
            list of scalar float32 tensors ([] when ar_coef is 0).
        """
        if not self.ar_coef:
            return []
        hidden = tf.cast(hidden, tf.float32)
        return [tf.constant(self.ar_coef, tf.float32) * tf.reduce_mean(tf.square(hidden))]

    def variable_groups(self):
        """dict: {"weights": every trainable variable} (one optimizer group)."""
        return {"weights": list(self.trainable_variables)}

    def weight_decay_variables(self):
        """Weights that take weight decay, chosen by role.

        Kernels, LSTM recurrent kernels, the embedding and the softmax weight
        matrices; not biases, layer-norm scales and offsets, nor the
        attention gate vectors s_q, s_k, s_v.
        """
        out = [] if self.embedding is None else [self.embedding.embeddings]
        out.append(self.softmax.head_kernel)
        out += list(self.softmax.tail_projections) + list(self.softmax.tail_kernels)
        for block in self.blocks:
            out += block.weight_decay_variables()
        return out

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "num_layers": self.num_layers,
                "boom_dim": self.boom_dim,
                "attention_layers": (
                    None if self.attention_layers is None else list(self.attention_layers)
                ),
                "mem_len": self.mem_len,
                "dropout": self.dropout,
                "dropout_input": self.dropout_input,
                "dropout_hidden": self.dropout_hidden,
                "attn_dropout": self.attn_dropout,
                "ar_coef": self.ar_coef,
                "cutoffs": list(self.cutoffs),
                "proj_factor": self.proj_factor,
                "proj_dims": list(self.proj_dims),
                "tie_weights": self.tie_weights,
                "seed": self.seed,
            }
        )
        return config


def build_sha_rnn(config: ShaRnnConfig, dtype=None):
    """Builds the SHA-RNN described by `config`, weights created.

    Args:
        config: ShaRnnConfig.
        dtype: optional Keras dtype policy (e.g. "mixed_bfloat16"); None uses
            the global policy.

    Returns:
        A built `ShaRnnLM` (variables exist, so optimizers and checkpoints can
        be created before the first step).
    """
    if not isinstance(config, ShaRnnConfig):
        raise TypeError(f"build_sha_rnn expects a ShaRnnConfig, got {type(config).__name__}")
    model = ShaRnnLM(**dataclasses.asdict(config), dtype=dtype)
    model.build((None, None))  # [B, T]
    return model
