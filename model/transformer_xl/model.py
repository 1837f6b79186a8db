"""Transformer-XL language model over PAR blocks (supernet or fixed string).

Transformer-XL (Dai et al. 2019, arXiv 1901.02860) with the block view of PAR
(Mandava et al. 2020, arXiv 2009.04534): a network is `num_blocks` blocks,
each attention ("a"), dense/feed-forward ("f") or identity ("i"); in the
supernet every block is a `StochasticBlock` choosing among the config's
`candidates` (the three: "afi").

Size glossary:
    B: batch size.            T: segment length.
    M: memory length.         D: model width (d_model).
    V: vocabulary size.       N: heads.
    C: candidates per block (len(config.candidates), 3 for "afi").

Data flow:
    ids [B, T] -> embedding * sqrt(D) (init="pytorch": unscaled) -> dropout
      -> blocks (each attention-carrying block also reads its memory [B, M, D]
         and caches its input as the next memory)
      -> optional final layer norm -> dropout -> hidden [B, T, D]
    hidden -> adaptive softmax: token_nll [B, T] or log_probs [B, T, V].

Every dropout is `model.layers.dropout.FastDropout`: rates are applied quantised to a
multiple of 1/256 (0.1 -> 26/256, 0.2 -> 51/256).

Memory is explicit: `hidden, new_mems = model(inputs, mems)`, with
`new_mems[i] = stop_gradient(concat(mems[i], block_input)[:, -mem_len:])`.
"""

import dataclasses
import math

import keras
import numpy as np
import tensorflow as tf

from model.interface import is_decayed_by_role
from model.layers.adaptive_softmax import AdaptiveEmbedding, AdaptiveSoftmax
from model.layers.dropout import FastDropout
from model.layers.initializers import pytorch_defaults
from model.layers.layer_norm import LayerNorm
from model.transformer_xl import blocks
from model.transformer_xl.config import SUPERNET, ModelConfig
from model.transformer_xl.stochastic_block import StochasticBlock

_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelConfig))


def update_memory(mem, block_input, mem_len):
    """Next memory of one block: the last `mem_len` positions of [mem; input].

    Args:
        mem: [B, M, D] previous memory or None (empty).
        block_input: [B, T, D] the block's input on this segment.
        mem_len: int >= 0, positions to keep.

    Returns:
        [B, min(M + T, mem_len), D], gradient stopped.
    """
    cat = (
        block_input if mem is None else tf.concat([tf.cast(mem, block_input.dtype), block_input], 1)
    )
    if mem_len == 0:  # `[:, -0:]` would keep everything
        return tf.stop_gradient(cat[:, :0])
    return tf.stop_gradient(cat[:, -mem_len:])  # [B, <=mem_len, D]


def _model_config(config, fields):
    """The ModelConfig of `TransformerXLLM(config)` or `TransformerXLLM(**fields)`."""
    if config is None:
        return ModelConfig.from_dict(fields)  # one validation for every entry point
    if fields:
        raise TypeError(f"give the model either a config or its fields, not both "
                        f"(got config and {sorted(fields)})")
    if isinstance(config, dict):
        return ModelConfig.from_dict(config)
    if not isinstance(config, ModelConfig):
        raise TypeError(
            f"config must be a ModelConfig or its dict, got {type(config).__name__}"
        )
    return config


@keras.saving.register_keras_serializable(package="par")
class TransformerXLLM(keras.Model):
    """Transformer-XL / PAR language model with explicit memory.

    Implements the language-model interface of `model/interface.py`: the
    state is the list of `num_mems` memories [B, M, D], one per
    attention-carrying block (every block of a supernet).

    The constructor takes one `ModelConfig` (validated), so `get_config` /
    `from_config` round-trip it; `model.families.build_model(config)` is the
    usual way to make one. The config's fields are also readable as
    attributes (`model.d_model`, ...). For `.keras` files written before the
    config was one argument, the constructor also accepts the config's
    fields as keyword arguments.

    Training code should add `span_losses` (computed from the span variables)
    to the loss and not also `model.losses`, which holds the same terms when
    training (counting both would double the span penalty).

    Args:
        config: `ModelConfig` (or its dict); None: the fields are given as
            keyword arguments instead (the old form).
        frozen: for a supernet, one entry per block: the index of the
            candidate the block is frozen to, or -1 / None while it searches
            (see `freeze_block`); None: no block frozen.
        **kwargs: the ModelConfig fields (only without `config`), then base
            `keras.Model` arguments (name, dtype, trainable).
    """

    family = "transformer_xl"

    def __init__(self, config=None, frozen=None, **kwargs):
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in _CONFIG_FIELDS}
        config = _model_config(config, fields)
        super().__init__(**kwargs)
        self.model_config = config
        for field in _CONFIG_FIELDS:  # the fields as attributes (read-only by convention)
            setattr(self, field, getattr(config, field))
        self._resolved = config.resolved_architecture

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
        self._add_shared_attention_weights(config)
        self._add_search_state(frozen)

    def _add_shared_attention_weights(self, config):
        """The weights every attention layer shares (created after the blocks)."""
        # untie_rel_bias=False: one pair u, v [N, H] for every attention layer
        # (the Transformer-XL reference's untie_r=False), owned and saved here
        # and passed to the layers at call time. None when untied or no block
        # can attend.
        self.content_bias = self.position_bias = None
        if not self.untie_rel_bias and self._attends:
            shape = (self.num_heads, config.head_size)  # [N, H]
            self.content_bias = self.add_weight(
                name="content_bias",
                shape=shape,
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )  # u
            self.position_bias = self.add_weight(
                name="position_bias",
                shape=shape,
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )  # v

        # span_positions="learned": the adaptive-span reference's key position
        # table [S, H], one for every attention layer and head, owned here and
        # passed to the layers at call time (as the shared u, v above).
        self.key_positions = None
        if config.learned_key_positions and self._attends:
            self.key_positions = self.add_weight(
                name="key_positions",
                shape=(self.span_max, config.head_size),
                initializer=keras.initializers.RandomNormal(stddev=1.0),
            )  # P [S, H], row x - 1: distance x

    def _add_search_state(self, frozen):
        """tau, the search step and the frozen blocks (created after the shared weights)."""
        # Set by the trainer every step (set_search_state); saved with the model.
        self.tau = self.add_weight(
            name="tau",
            shape=(),
            initializer="ones",
            trainable=False,
            dtype="float32",
            autocast=False,
        )
        self.search_step = self.add_weight(
            name="search_step",
            shape=(),
            initializer="zeros",
            trainable=False,
            dtype="int64",
            autocast=False,
        )
        # Progressive freezing (docs/freezing.md): per supernet block the index
        # of the candidate it is frozen to, -1 while it searches. A plain
        # tf.Variable, not a Keras weight: `model.variables` (the checkpoints'
        # flat list, the .keras weights) stays as before; checkpoints hold it
        # through `checkpoint_extras`, .keras files through get_config.
        self._frozen_variable = None
        if self._resolved == SUPERNET:
            self._frozen_variable = tf.Variable(
                tf.fill([self.num_blocks], -1), trainable=False, name="frozen_blocks",
                dtype=tf.int32)
        if frozen is not None:
            self.set_frozen(frozen)

    def _make_blocks(self):
        """One layer per block that has one (identity has none), in block order."""
        policy = self.dtype_policy
        if self._resolved == SUPERNET:
            return [StochasticBlock(self.model_config, block_index=i, dtype=policy,
                                    name=f"block_{i}") for i in range(self.num_blocks)]
        layers, plan = [], []
        for i, letter in enumerate(self._resolved):
            spec = blocks.get(letter)
            layer = spec.make_layer(self.model_config, f"block_{i}_{spec.name}", policy)
            plan.append((spec, None if layer is None else len(layers)))
            if layer is not None:
                layers.append(layer)
        self._plan = plan  # (spec, index into self.blocks or None) per block
        return layers

    def build(self, input_shape):
        hidden_shape = tuple(input_shape) + (self.d_model,)  # [B, T, D]
        if self.embedding is not None and not self.embedding.built:
            self.embedding.build(input_shape)
        for block in self.blocks:
            block.build(hidden_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(hidden_shape)
        super().build(input_shape)
        if self.init == "pytorch":
            pytorch_defaults(self.weights, self.seed)

    # ----------------------------------------------------------------- forward

    def _memory_blocks(self):
        """(spec, layer) per block: spec None for a supernet block, layer None for identity."""
        if self._resolved == SUPERNET:
            return [(None, block) for block in self.blocks]
        return [(spec, None if index is None else self.blocks[index])
                for spec, index in self._plan]

    @property
    def _attends(self):
        """bool: some block can attend (a memory-carrying type among a supernet's
        candidates or in the fixed string)."""
        if self._resolved == SUPERNET:
            return any(spec.carries_memory for spec in self.model_config.candidate_specs)
        return self.num_mems > 0

    @property
    def num_mems(self):
        """int: memories the model takes and returns (memory-carrying blocks; every
        block of a supernet)."""
        if self._resolved == SUPERNET:
            return self.num_blocks
        return sum(blocks.get(letter).carries_memory for letter in self._resolved)

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
                "blocks: pass model.initial_mems(batch_size), the new_mems of the previous call, "
                "or None"
            )
        self._sync_frozen()  # the frozen set is fixed per trace
        x = self._embed(inputs)  # [B, T, D]
        if self.init != "pytorch":  # the reference's embedding is N(0, 1), not scaled
            x = x * tf.cast(math.sqrt(self.d_model), self.compute_dtype)
        x = self.embedding_dropout(x, training=training)
        tau = tf.convert_to_tensor(self.tau)
        step = tf.convert_to_tensor(self.search_step)
        shared = {}
        if self.content_bias is not None:
            shared["rel_bias"] = (
                tf.convert_to_tensor(self.content_bias),
                tf.convert_to_tensor(self.position_bias),
            )
        if self.key_positions is not None:
            shared["key_positions"] = tf.convert_to_tensor(self.key_positions)
        new_mems = []
        mem_iter = iter(mems)
        for spec, layer in self._memory_blocks():
            if spec is None:  # a supernet block
                mem = next(mem_iter)
                if layer.frozen is not None and not layer.candidates[layer.frozen].carries_memory:
                    # Frozen to a block that reads no memory: its memory is
                    # never read again, so it is passed on unchanged.
                    new_mems.append(update_memory(mem, x, mem_len) if mem is None else mem)
                else:
                    new_mems.append(update_memory(mem, x, mem_len))
                x = layer(x, mem, tau=tau, step=step, training=training, **shared)
            elif spec.carries_memory:
                mem = next(mem_iter)
                new_mems.append(update_memory(mem, x, mem_len))
                x = layer(x, mem, training=training, **shared)
            elif layer is not None:
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
            return [block.attention_layer for block in self.blocks
                    if blocks.ATTENTION in block.candidates]
        return [layer for spec, layer in self._memory_blocks() if spec is blocks.ATTENTION]

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
        """list of scalar span losses lambda * mean_h(z_h), one per adaptive-span layer
        that still trains (not a candidate its block is frozen away from)."""
        if self.attention != "adaptive_span":
            return []
        if self._resolved == SUPERNET:
            return [layer.span_loss() for block in self.blocks
                    for layer in block._span_loss_layers()]
        return [layer.span_loss() for layer in self.attention_layers]

    @property
    def spans(self):
        """list of [N] spans in tokens per attention layer (adaptive span), else []."""
        if self.attention != "adaptive_span":
            return []
        return [layer.spans for layer in self.attention_layers]

    @property
    def arch_probabilities(self):
        """float32 [num_blocks, C]: softmax(alpha) per block over the config's candidates;
        one-hot when fixed (over the candidates, then any other type the string uses:
        `ModelConfig.block_specs`)."""
        if self._resolved == SUPERNET:
            return tf.nn.softmax(
                tf.stack([tf.convert_to_tensor(v) for v in self.arch_variables]), axis=-1
            )
        letters = [spec.letter for spec in self.model_config.block_specs()]
        indices = [letters.index(letter) for letter in self._resolved]
        return tf.one_hot(indices, len(letters), dtype=tf.float32)

    @property
    def derived_architecture(self):
        """str: per block its frozen candidate's letter, else the argmax candidate's;
        the string itself when fixed."""
        if self._resolved != SUPERNET:
            return self._resolved
        choice = np.argmax(keras.ops.convert_to_numpy(self.arch_probabilities), axis=-1)
        return "".join(block.candidates[k if frozen is None else frozen].letter
                       for block, k, frozen in zip(self.blocks, choice, self.frozen_blocks))

    # ----------------------------------------------------- progressive freezing

    def _sync_frozen(self):
        """Sets each block's Python-level choice from the frozen-blocks variable (which a
        checkpoint restore may have changed); read eagerly, also while tracing."""
        if self._frozen_variable is None:
            return
        with tf.init_scope():
            values = np.asarray(self._frozen_variable.numpy()).tolist()
        for block, value in zip(self.blocks, values):
            block.frozen = None if value < 0 else int(value)

    @property
    def frozen_blocks(self):
        """tuple per block: the index of the candidate it is frozen to, or None
        (all None for a fixed architecture, which has nothing to freeze)."""
        if self._resolved != SUPERNET:
            return (None,) * self.num_blocks
        self._sync_frozen()
        return tuple(block.frozen for block in self.blocks)

    def freeze_block(self, block, candidate):
        """Freezes supernet block `block` to candidate index `candidate`.

        From the next trace on, the block computes that candidate alone in
        training and evaluation (no Gumbel mixing); a block frozen to a type
        that reads no memory passes its memory on unchanged. Functions traced
        before keep the searching block: retrace them (training/run/trainer.py
        does when the frozen set changes).
        """
        if self._resolved != SUPERNET:
            raise ValueError("only a supernet's blocks can be frozen; this model has the fixed "
                             f"architecture {self._resolved!r}")
        if not 0 <= int(block) < self.num_blocks:
            raise ValueError(f"block {block} out of range [0, {self.num_blocks})")
        self.blocks[block].freeze(candidate)  # checks the candidate index
        values = np.asarray(self._frozen_variable.numpy())
        values[int(block)] = int(candidate)
        self._frozen_variable.assign(values)

    def set_frozen(self, frozen):
        """Sets the frozen set from a list (candidate index, or None / -1: searching)."""
        frozen = [-1 if f is None else int(f) for f in frozen]
        if len(frozen) != self.num_blocks:
            raise ValueError(f"frozen has {len(frozen)} entries for {self.num_blocks} blocks")
        for index, choice in enumerate(frozen):
            if choice >= 0:
                self.freeze_block(index, choice)
        self._frozen_variable.assign(frozen)
        self._sync_frozen()

    def checkpoint_extras(self):
        """Trackables saved in checkpoints beside `model.variables` (training/run/checkpoint.py):
        the frozen-blocks variable of a supernet. Older checkpoints lack it (nothing frozen)."""
        if self._frozen_variable is None:
            return {}
        return {"frozen_blocks": self._frozen_variable}

    def get_config(self):
        config = super().get_config()
        config["config"] = self.model_config.to_dict()
        if self._resolved == SUPERNET and any(f is not None for f in self.frozen_blocks):
            config["frozen"] = [-1 if f is None else f for f in self.frozen_blocks]
        return config
