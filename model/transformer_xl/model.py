"""Transformer-XL language model over PAR blocks (supernet or fixed string).

Transformer-XL (Dai et al. 2019, arXiv 1901.02860) with the block view of PAR
(Mandava et al. 2020, arXiv 2009.04534): a network is `num_blocks` blocks,
each attention ("a"), dense/feed-forward ("f") or identity ("i"); in the
supernet every block is a `StochasticBlock` choosing among the three.

Size glossary:
    B: batch size.            T: segment length.
    M: memory length.         D: model width (d_model).
    V: vocabulary size.       N: heads.
    C: candidates per block (3).

Data flow:
    ids [B, T] -> embedding * sqrt(D) -> dropout
      -> blocks (each attention-carrying block also reads its memory [B, M, D]
         and caches its input as the next memory)
      -> optional final layer norm -> dropout -> hidden [B, T, D]
    hidden -> adaptive softmax: token_nll [B, T] or log_probs [B, T, V].

Every dropout is `model.layers.dropout.FastDropout`: rates are applied quantised to a
multiple of 1/256 (0.1 -> 26/256, 0.2 -> 51/256).

Memory is explicit: `hidden, new_mems = model(inputs, mems)`, with
`new_mems[i] = stop_gradient(concat(mems[i], block_input)[:, -mem_len:])`.
"""

import math

import keras
import numpy as np
import tensorflow as tf

from model.layers.adaptive_softmax import AdaptiveEmbedding, AdaptiveSoftmax
from model.transformer_xl.config import ARCHITECTURE_LETTERS, SUPERNET, ModelConfig
from model.layers.dropout import FastDropout
from model.layers.feed_forward import PositionwiseFeedForward
from model.interface import is_decayed_by_role
from model.layers.layer_norm import LayerNorm
from model.transformer_xl.stochastic_block import StochasticBlock, make_attention


def update_memory(mem, block_input, mem_len):
    """Next memory of one block: the last `mem_len` positions of [mem; input].

    Args:
        mem: [B, M, D] previous memory or None (empty).
        block_input: [B, T, D] the block's input on this segment.
        mem_len: int >= 0, positions to keep.

    Returns:
        [B, min(M + T, mem_len), D], gradient stopped.
    """
    cat = block_input if mem is None else tf.concat([tf.cast(mem, block_input.dtype), block_input], 1)
    if mem_len == 0:  # `[:, -0:]` would keep everything
        return tf.stop_gradient(cat[:, :0])
    return tf.stop_gradient(cat[:, -mem_len:])  # [B, <=mem_len, D]


@keras.saving.register_keras_serializable(package="par")
class TransformerXLLM(keras.Model):
    """Transformer-XL / PAR language model with explicit memory.

    Implements the language-model interface of `model/interface.py`: the
    state is the list of `num_mems` memories [B, M, D], one per
    attention-carrying block.

    The constructor takes the fields of `ModelConfig` as explicit arguments
    (and validates them with it), so `get_config` / `from_config` round-trip;
    `model.families.build_model(config)` is the usual way to make one.

    Training code should add `span_losses` (computed from the span variables)
    to the loss and not also `model.losses`, which holds the same terms when
    training (counting both would double the span penalty).

    Args:
        See `model.transformer_xl.config.ModelConfig` for every argument.
        **kwargs: base `keras.Model` arguments (name, dtype, trainable).
    """

    family = "transformer_xl"

    def __init__(
        self,
        vocab_size,
        d_model=128,
        num_heads=4,
        d_head=None,
        d_ffn=512,
        num_blocks=6,
        architecture=SUPERNET,
        attention="relative",
        mem_len=16,
        clamp_len=-1,
        dropout=0.1,
        attn_dropout=0.0,
        pre_norm=False,
        final_norm=False,
        untie_rel_bias=True,
        same_length=False,
        cutoffs=(),
        proj_factor=4.0,
        proj_dims=(),
        adaptive_input=False,
        tie_weights=False,
        span_max=1024,
        span_ramp=32,
        span_init=0.0,
        span_loss_coef=2e-6,
        search_mode="soft",
        hard_gradient="all",
        hard_rows=0.25,
        eval_mode="argmax",
        seed=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # One validation for every entry point (builder, from_config, direct).
        config = ModelConfig(
            vocab_size=vocab_size, d_model=d_model, num_heads=num_heads, d_head=d_head,
            d_ffn=d_ffn, num_blocks=num_blocks, architecture=architecture, attention=attention,
            mem_len=mem_len, clamp_len=clamp_len, dropout=dropout, attn_dropout=attn_dropout,
            pre_norm=pre_norm, final_norm=final_norm, untie_rel_bias=untie_rel_bias,
            same_length=same_length,
            cutoffs=tuple(cutoffs), proj_factor=proj_factor, proj_dims=tuple(proj_dims),
            adaptive_input=adaptive_input, tie_weights=tie_weights, span_max=span_max,
            span_ramp=span_ramp, span_init=span_init, span_loss_coef=span_loss_coef,
            search_mode=search_mode, hard_gradient=hard_gradient, hard_rows=hard_rows,
            eval_mode=eval_mode, seed=seed,
        )  # fmt: skip
        self.vocab_size = config.vocab_size
        self.d_model = config.d_model
        self.num_heads = config.num_heads
        self.d_head = config.d_head
        self.d_ffn = config.d_ffn
        self.num_blocks = config.num_blocks
        self.architecture = config.architecture
        self.attention = config.attention
        self.mem_len = config.mem_len
        self.clamp_len = config.clamp_len
        self.dropout = config.dropout
        self.attn_dropout = config.attn_dropout
        self.pre_norm = config.pre_norm
        self.final_norm = config.final_norm
        self.untie_rel_bias = config.untie_rel_bias
        self.same_length = config.same_length
        self.cutoffs = config.cutoffs
        self.proj_factor = config.proj_factor
        self.proj_dims = config.proj_dims
        self.adaptive_input = config.adaptive_input
        self.tie_weights = config.tie_weights
        self.span_max = config.span_max
        self.span_ramp = config.span_ramp
        self.span_init = config.span_init
        self.span_loss_coef = config.span_loss_coef
        self.search_mode = config.search_mode
        self.hard_gradient = config.hard_gradient
        self.hard_rows = config.hard_rows
        self.eval_mode = config.eval_mode
        self.seed = config.seed
        self._resolved = config.resolved_architecture
        self._head_size = config.head_size

        policy = self.dtype_policy
        self.softmax = AdaptiveSoftmax(
            self.vocab_size, self.d_model, self.cutoffs, self.proj_factor, self.proj_dims,
            tie_embedding=self.tie_weights, dtype=policy, name="softmax",
        )  # fmt: skip
        if self.tie_weights:
            self.embedding = None  # softmax.embed
        elif self.adaptive_input:
            self.embedding = AdaptiveEmbedding(
                self.vocab_size, self.d_model, self.cutoffs, self.proj_factor, self.proj_dims,
                dtype=policy, name="embedding",
            )  # fmt: skip
        else:
            self.embedding = keras.layers.Embedding(
                self.vocab_size, self.d_model, dtype=policy, name="embedding"
            )
        self.embedding_dropout = FastDropout(self.dropout, dtype=policy, name="embedding_dropout")
        self.output_dropout = FastDropout(self.dropout, dtype=policy, name="output_dropout")
        self.final_layer_norm = (
            LayerNorm(epsilon=1e-5, dtype=policy, name="final_layer_norm")
            if self.final_norm
            else None
        )
        self.blocks = self._make_blocks()
        # untie_rel_bias=False: one pair u, v [N, H] for every attention layer
        # (the Transformer-XL reference's untie_r=False), owned and saved here
        # and passed to the layers at call time. None when untied or no block
        # can attend.
        self.content_bias = self.position_bias = None
        if not self.untie_rel_bias and self.num_mems:
            shape = (self.num_heads, self._head_size)  # [N, H]
            self.content_bias = self.add_weight(
                name="content_bias", shape=shape, initializer=keras.initializers.RandomNormal(stddev=0.02)
            )  # u
            self.position_bias = self.add_weight(
                name="position_bias", shape=shape, initializer=keras.initializers.RandomNormal(stddev=0.02)
            )  # v

        # Set by the trainer every step (set_search_state); saved with the model.
        self.tau = self.add_weight(
            name="tau", shape=(), initializer="ones", trainable=False, dtype="float32", autocast=False
        )
        self.search_step = self.add_weight(
            name="search_step", shape=(), initializer="zeros", trainable=False, dtype="int64", autocast=False
        )

    def _attention_args(self):
        return dict(
            d_model=self.d_model, num_heads=self.num_heads, d_head=self._head_size,
            dropout=self.dropout, attn_dropout=self.attn_dropout, clamp_len=self.clamp_len,
            pre_norm=self.pre_norm, untie_rel_bias=self.untie_rel_bias,
            same_length=self.same_length, span_max=self.span_max,
            span_ramp=self.span_ramp, span_init=self.span_init, span_loss_coef=self.span_loss_coef,
        )  # fmt: skip

    def _make_blocks(self):
        """One layer per non-identity block, in block order."""
        policy = self.dtype_policy
        if self._resolved == SUPERNET:
            return [
                StochasticBlock(
                    d_ffn=self.d_ffn, attention=self.attention, search_mode=self.search_mode,
                    hard_gradient=self.hard_gradient, hard_rows=self.hard_rows,
                    eval_mode=self.eval_mode, seed=self.seed,
                    block_index=i, dtype=policy, name=f"block_{i}", **self._attention_args(),
                )  # fmt: skip
                for i in range(self.num_blocks)
            ]
        blocks = []
        for i, letter in enumerate(self._resolved):
            if letter == "a":
                name = f"block_{i}_attention"
                blocks.append(make_attention(self.attention, name, policy, **self._attention_args()))
            elif letter == "f":
                blocks.append(
                    PositionwiseFeedForward(
                        self.d_model, self.d_ffn, dropout=self.dropout, pre_norm=self.pre_norm,
                        dtype=policy, name=f"block_{i}_dense",
                    )  # fmt: skip
                )
        return blocks

    def build(self, input_shape):
        hidden_shape = tuple(input_shape) + (self.d_model,)  # [B, T, D]
        if self.embedding is not None and not self.embedding.built:
            self.embedding.build(input_shape)
        for block in self.blocks:
            block.build(hidden_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(hidden_shape)
        super().build(input_shape)

    # ----------------------------------------------------------------- forward

    def _memory_blocks(self):
        """(letter, layer) per block; identity blocks have layer None."""
        if self._resolved == SUPERNET:
            return [("s", block) for block in self.blocks]
        layers = iter(self.blocks)
        return [(letter, None if letter == "i" else next(layers)) for letter in self._resolved]

    @property
    def num_mems(self):
        """int: memories the model takes and returns (attention-carrying blocks)."""
        return self.num_blocks if self._resolved == SUPERNET else self._resolved.count("a")

    def call(self, inputs, mems=None, training=False, mem_len=None):
        """Runs the model on one segment.

        Args:
            inputs: int [B, T] token ids.
            mems: list of `num_mems` tensors [B, M, D] (M may be 0), or None
                for an empty memory.
            training: bool; dropout and (supernet) Gumbel sampling.
            mem_len: int, positions kept in `new_mems`; None: config mem_len.

        Returns:
            (hidden [B, T, D] in the compute dtype, new_mems: list of
            `num_mems` tensors [B, min(M + T, mem_len), D]).
        """
        mem_len = self.mem_len if mem_len is None else int(mem_len)
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}")
        if mems is None:
            mems = [None] * self.num_mems
        if len(mems) != self.num_mems:
            raise ValueError(
                f"got {len(mems)} memories but this model has {self.num_mems} attention-carrying "
                "blocks: pass model.initial_mems(batch_size), the new_mems of the previous call, or None"
            )
        x = self._embed(inputs) * tf.cast(math.sqrt(self.d_model), self.compute_dtype)  # [B, T, D]
        x = self.embedding_dropout(x, training=training)
        tau = tf.convert_to_tensor(self.tau)
        step = tf.convert_to_tensor(self.search_step)
        shared = {}
        if self.content_bias is not None:
            shared["rel_bias"] = (tf.convert_to_tensor(self.content_bias), tf.convert_to_tensor(self.position_bias))
        new_mems = []
        mem_iter = iter(mems)
        for letter, layer in self._memory_blocks():
            if letter in ("s", "a"):
                mem = next(mem_iter)
                new_mems.append(update_memory(mem, x, mem_len))
                if letter == "s":
                    x = layer(x, mem, tau=tau, step=step, training=training, **shared)
                else:
                    x = layer(x, mem, training=training, **shared)
            elif letter == "f":
                x = layer(x, training=training)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        x = self.output_dropout(x, training=training)
        return x, new_mems

    def _embed(self, inputs):
        if self.embedding is None:
            return tf.cast(self.softmax.embed(inputs), self.compute_dtype)
        return tf.cast(self.embedding(inputs), self.compute_dtype)

    def initial_state(self, batch_size, mem_len=None):
        """Zero memories to start from (the interface's state).

        Args:
            batch_size: int B.
            mem_len: int M; None uses the config's mem_len (0: empty memories).

        Returns:
            list of `num_mems` zeros [B, M, D] in the compute dtype.
        """
        mem_len = self.mem_len if mem_len is None else int(mem_len)
        shape = [batch_size, mem_len, self.d_model]  # [B, M, D]
        return [tf.zeros(shape, self.compute_dtype) for _ in range(self.num_mems)]

    initial_mems = initial_state

    def state_signature(self):
        """list of `num_mems` TensorSpecs [None, None, D]: batch and memory length free."""
        return [tf.TensorSpec([None, None, self.d_model], self.compute_dtype, name=f"mem_{i}")
                for i in range(self.num_mems)]

    def token_nll(self, hidden, targets):
        """Per-token NLL in nats: [B, T, D], [B, T] -> float32 [B, T] (targets < 0 -> 0)."""
        return self.softmax.nll(hidden, targets)

    def log_probs(self, hidden):
        """Full log-probabilities: [B, T, D] -> float32 [B, T, V]."""
        return self.softmax.log_probs(hidden)

    def set_search_state(self, tau, step):
        """Sets the Gumbel temperature and the noise step (works in tf.function).

        Args:
            tau: scalar float > 0.
            step: scalar int, usually the global step.
        """
        self.tau.assign(tf.cast(tau, tf.float32))
        self.search_step.assign(tf.cast(step, tf.int64))

    # -------------------------------------------------- what the trainer needs

    @property
    def attention_layers(self):
        """Attention sub-layers in block order (every block's candidate in a supernet)."""
        if self._resolved == SUPERNET:
            return [block.attention_layer for block in self.blocks]
        return [layer for letter, layer in self._memory_blocks() if letter == "a"]

    @property
    def arch_variables(self):
        """Architecture logits, one [C] variable per block (empty when fixed)."""
        if self._resolved != SUPERNET:
            return []
        return [block.arch_logits for block in self.blocks]

    @property
    def weight_variables(self):
        """Trainable variables that are not architecture logits."""
        arch = {id(v) for v in self.arch_variables}
        return [v for v in self.trainable_variables if id(v) not in arch]

    def variable_groups(self):
        """{"weights": weight_variables} plus {"arch": arch_variables} in a supernet."""
        groups = {"weights": self.weight_variables}
        if self.arch_variables:
            groups["arch"] = list(self.arch_variables)
        return groups

    def weight_decay_variables(self):
        """Weights that take weight decay: kernels, embedding tables, softmax matrices.

        Chosen by role (the variable's name), never by rank: biases, layer-norm
        scales and offsets, relative biases u and v, spans and architecture
        logits are not decayed.
        """
        return [v for v in self.weight_variables if is_decayed_by_role(v)]

    def extra_losses(self, hidden=None):
        """Training losses besides the token NLL: the adaptive-span losses."""
        del hidden  # the span losses depend on the span variables only
        return [tf.cast(loss, tf.float32) for loss in self.span_losses]

    @property
    def span_losses(self):
        """list of scalar span losses lambda * mean_h(z_h), one per adaptive-span layer."""
        if self.attention != "adaptive_span":
            return []
        return [layer.span_loss() for layer in self.attention_layers]

    @property
    def spans(self):
        """list of [N] spans in tokens per attention layer (adaptive span), else []."""
        if self.attention != "adaptive_span":
            return []
        return [layer.spans for layer in self.attention_layers]

    @property
    def arch_probabilities(self):
        """float32 [num_blocks, C]: softmax(alpha) per block; one-hot when fixed."""
        if self._resolved == SUPERNET:
            return tf.nn.softmax(tf.stack([tf.convert_to_tensor(v) for v in self.arch_variables]), axis=-1)
        indices = [ARCHITECTURE_LETTERS.index(letter) for letter in self._resolved]
        return tf.one_hot(indices, len(ARCHITECTURE_LETTERS), dtype=tf.float32)

    @property
    def derived_architecture(self):
        """str: argmax candidate per block ("a", "f" or "i"); the string itself when fixed."""
        if self._resolved != SUPERNET:
            return self._resolved
        choice = np.argmax(keras.ops.convert_to_numpy(self.arch_probabilities), axis=-1)
        return "".join(ARCHITECTURE_LETTERS[k] for k in choice)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "d_head": self.d_head,
                "d_ffn": self.d_ffn,
                "num_blocks": self.num_blocks,
                "architecture": self.architecture,
                "attention": self.attention,
                "mem_len": self.mem_len,
                "clamp_len": self.clamp_len,
                "dropout": self.dropout,
                "attn_dropout": self.attn_dropout,
                "pre_norm": self.pre_norm,
                "final_norm": self.final_norm,
                "untie_rel_bias": self.untie_rel_bias,
                "same_length": self.same_length,
                "cutoffs": list(self.cutoffs),
                "proj_factor": self.proj_factor,
                "proj_dims": list(self.proj_dims),
                "adaptive_input": self.adaptive_input,
                "tie_weights": self.tie_weights,
                "span_max": self.span_max,
                "span_ramp": self.span_ramp,
                "span_init": self.span_init,
                "span_loss_coef": self.span_loss_coef,
                "search_mode": self.search_mode,
                "hard_gradient": self.hard_gradient,
                "hard_rows": self.hard_rows,
                "eval_mode": self.eval_mode,
                "seed": self.seed,
            }
        )
        return config
