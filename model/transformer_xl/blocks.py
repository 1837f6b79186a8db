"""The block registry: every block type of a PAR network, by letter.

A PAR network (Mandava et al. 2020, arXiv 2009.04534) is a string of blocks,
one letter each; the supernet's stochastic block chooses among its config's
`candidates` (by default every type registered when the config is made; a
config.json written before the field searched "afi"). One `BlockSpec` per type
says everything the rest of the project needs about it:

    name             candidate name ("attention"): the layer's name inside a
                     stochastic block, its attribute `<name>_layer`, the
                     suffix of a fixed block's layer (`block_3_attention`),
                     the column of architecture reports and plots
    letter           its letter in architecture strings ("a")
    make_layer       (config, name, dtype, supernet) -> Keras layer, or None
                     for a block that passes its input through (identity)
    carries_memory   the layer reads a memory [B, M, D] and the block keeps
                     one: called as `layer(x, mem, training=, rel_bias=)`;
                     otherwise `layer(x, training=)`
    flops_per_token  (config, seq_len, mem_len, batch_size, span=None)
                     -> forward FLOPs per token of one such block, for the
                     batch B the model runs (block_costs.py: the one FLOPs model)
    param_count      (config) -> parameters of one such block
    color            its colour in the plots

The registry order is the default candidates' order in a stochastic block (the
columns of its architecture logits): attention, dense, identity, the order
saved checkpoints hold the logits in. Adding a block type is one
`register(BlockSpec(...))` (and its layer's module); new configs then record it
among their `candidates`, which the stochastic block, FLOPs and parameter counts,
derivation, plots and the search plug-in read, so earlier runs keep loading with
the candidates they searched.

Importing this module does not load TensorFlow (layers are imported by the
factories when called).
"""

import dataclasses
from typing import Callable

from model.transformer_xl import block_costs


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """One block type (see the module docstring)."""

    name: str
    letter: str
    make_layer: Callable
    carries_memory: bool
    flops_per_token: Callable
    param_count: Callable
    color: str


_REGISTRY: dict = {}  # letter -> BlockSpec, in candidate order


def register(spec):
    """Adds a block type at the end of the candidate order.

    Raises:
        ValueError: the letter or name is taken, or the letter is not one
            lower-case character.
    """
    if len(spec.letter) != 1 or not spec.letter.isalpha() or not spec.letter.islower():
        raise ValueError(f"a block letter is one lower-case letter, got {spec.letter!r}")
    if spec.letter in _REGISTRY:
        raise ValueError(f"block letter {spec.letter!r} is already registered "
                         f"({_REGISTRY[spec.letter].name})")
    if spec.name in names():
        raise ValueError(f"block name {spec.name!r} is already registered")
    _REGISTRY[spec.letter] = spec
    return spec


def unregister(letter):
    """Removes a block type (tests that register one undo it with this)."""
    del _REGISTRY[letter]


def specs():
    """tuple of BlockSpec in candidate order."""
    return tuple(_REGISTRY.values())


def letters():
    """str: the registered letters in candidate order ("afi")."""
    return "".join(_REGISTRY)


def names():
    """tuple of the registered block names in candidate order."""
    return tuple(spec.name for spec in _REGISTRY.values())


def get(letter):
    """The BlockSpec of a letter (ValueError naming the registered ones)."""
    if letter not in _REGISTRY:
        raise ValueError(f"unknown block letter {letter!r}: registered are "
                         + ", ".join(f"{s.letter} ({s.name})" for s in specs()))
    return _REGISTRY[letter]


def describe():
    """'a (attention), f (dense), i (identity)' for error messages."""
    return ", ".join(f"{s.letter} ({s.name})" for s in specs())


# ------------------------------------------------------------ the three types


def make_attention(config, name, dtype, supernet=False):
    """The attention layer of `config.attention` ("relative" or "adaptive_span").

    In a supernet the block adds the adaptive-span loss itself (outside its
    `switch_case` branches), so the layer must not.
    """
    from model.layers.adaptive_span import AdaptiveSpanAttention
    from model.layers.relative_attention import RelativeMultiHeadAttention

    args = dict(d_model=config.d_model, num_heads=config.num_heads, d_head=config.head_size,
                dropout=config.dropout, attn_dropout=config.attn_dropout,
                clamp_len=config.clamp_len, pre_norm=config.pre_norm,
                untie_rel_bias=config.untie_rel_bias, same_length=config.same_length)
    if config.attention == "adaptive_span":
        return AdaptiveSpanAttention(
            span_max=config.span_max, span_ramp=config.span_ramp, span_init=config.span_init,
            span_loss_coef=config.span_loss_coef, add_span_loss=not supernet,
            span_positions=config.span_positions, dtype=dtype, name=name, **args)
    return RelativeMultiHeadAttention(dtype=dtype, name=name, **args)


def make_dense(config, name, dtype, supernet=False):
    """The position-wise feed-forward layer."""
    del supernet
    from model.layers.feed_forward import PositionwiseFeedForward

    return PositionwiseFeedForward(config.d_model, config.d_ffn, dropout=config.dropout,
                                   pre_norm=config.pre_norm, dtype=dtype, name=name)


def _no_layer(config, name, dtype, supernet=False):
    return None


def _attention_flops(config, seq_len, mem_len, batch_size, span=None):
    costs = block_costs.attention_flops_per_token(config, seq_len, mem_len, batch_size, span)
    return costs["total"]


def _dense_flops(config, seq_len, mem_len, batch_size, span=None):
    block_costs.check_batch_size(batch_size)
    return block_costs.dense_flops_per_token(config)


def _zero_flops(config, seq_len, mem_len, batch_size, span=None):
    block_costs.check_batch_size(batch_size)
    return 0.0


def _attention_params(config):
    return block_costs.attention_param_count(config)


def _dense_params(config):
    return block_costs.dense_param_count(config)


def _zero_params(config):
    return 0


ATTENTION = register(BlockSpec("attention", "a", make_attention, True, _attention_flops,
                               _attention_params, "#1f77b4"))
DENSE = register(BlockSpec("dense", "f", make_dense, False, _dense_flops, _dense_params,
                           "#ff7f0e"))
IDENTITY = register(BlockSpec("identity", "i", _no_layer, False, _zero_flops, _zero_params,
                              "#7f7f7f"))
