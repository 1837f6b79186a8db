"""Frozen, validated configuration of the SHA-RNN language model, and presets.

SHA-RNN (Merity 2019, "Single Headed Attention RNN: Stop Thinking With Your
Head", arXiv 1911.11423; reference code smerity/sha-rnn, model.py): a stack
of LSTM blocks with a Boom feed-forward in every block and one single-head
attention in the second-to-last block. `ShaRnnConfig` describes one model;
`model.sha_rnn.model.build_sha_rnn(config)` is the only place that unpacks it.
Every field is checked in `__post_init__`; a bad value raises a `ValueError`
naming the field and the fix. Importing this module does not load TensorFlow.

Field names follow `model.transformer_xl.config.ModelConfig` where the concept is the same
(vocab_size, d_model, mem_len, dropout, attn_dropout, cutoffs, proj_factor,
proj_dims, tie_weights, seed). Each field's help text lives in its metadata
(flags are generated from it).
"""

import dataclasses
import math

from model.config_base import ConfigBase, check_softmax_fields
from model.config_base import field as _field

_DROPOUT_FIELDS = ("dropout", "dropout_input", "dropout_hidden", "attn_dropout")


def default_attention_layers(num_layers):
    """The reference's attention placement: the second-to-last block only.

    The reference builds `use_attn = idx == nlayers - 2`. With one layer that
    index does not exist; here the single block gets the attention instead
    (ask for a plain LSTM with `attention_layers=()`).

    Args:
        num_layers: int >= 1.

    Returns:
        Tuple with one block index.
    """
    return (num_layers - 2,) if num_layers >= 2 else (0,)


@dataclasses.dataclass(frozen=True)
class ShaRnnConfig(ConfigBase):
    """Hyper-parameters of `ShaRnnLM` (model/sha_rnn/model.py).

    The defaults are the reference's enwik8 model (README command): 4 layers,
    width 1024, Boom 4096, one attention in block 2, memory 5000, dropouts
    0.1, tied full softmax. Only `vocab_size` has no default.

    Attributes:
        vocab_size: number of token ids V.
        d_model: embedding and LSTM width D (the reference's --emsize).
        num_layers: number of blocks L (LSTM + optional attention + Boom).
        boom_dim: Boom inner width F (the reference's --nhid), a multiple of D.
        attention_layers: blocks with attention; None = second-to-last only,
            () = plain LSTM language model.
        mem_len: attention memory length M kept between segments.
        dropout: dropout on the last block's output (reference `dropout`).
        dropout_input: dropout on the embeddings (reference `dropouti`).
        dropout_hidden: dropout inside the blocks (reference `dropouth`).
        attn_dropout: dropout on the attention weights.
        ar_coef: activation regularisation coefficient (0 disables it).
        cutoffs, proj_factor, proj_dims: adaptive softmax, as in ModelConfig.
        tie_weights: share the softmax weights with the input embedding.
        seed: seed of the weight initialisers and dropout masks.
    All dropout rates are applied by `model.layers.dropout.FastDropout`, which rounds
    them to a multiple of 1/256.
    """

    vocab_size: int = dataclasses.field(
        metadata={"help": "Number of token ids V (the data's vocabulary size)."}
    )
    d_model: int = _field(1024, "Embedding and LSTM width D (reference --emsize).")
    num_layers: int = _field(4, "Number of SHA-RNN blocks (LSTM, optional attention, Boom).")
    boom_dim: int = _field(
        4096, "Boom feed-forward inner width (reference --nhid); a multiple of d_model."
    )
    attention_layers: tuple[int, ...] | None = _field(
        None,
        "Block indices with single-head attention; None: the second-to-last block "
        "(the paper's model); empty: plain LSTM language model.",
    )
    mem_len: int = _field(5000, "Attention memory length M kept between segments (0: none).")
    dropout: float = _field(0.1, "Dropout on the output of the last block (reference dropout).")
    dropout_input: float = _field(0.1, "Dropout on the input embeddings (reference dropouti).")
    dropout_hidden: float = _field(
        0.1, "Dropout inside the blocks: LSTM output, attention q/v/output, Boom (dropouth)."
    )
    attn_dropout: float = _field(
        0.1, "Dropout on the attention weights (the reference uses dropouth here)."
    )
    ar_coef: float = _field(
        0.0, "Activation regularisation ar_coef * mean(hidden**2) (AWD-LSTM); 0 disables it."
    )
    cutoffs: tuple[int, ...] = _field(
        (), "Adaptive-softmax cutoffs (excluding V); empty: full softmax."
    )
    proj_factor: float = _field(4.0, "Adaptive-softmax tail i has width d_model / proj_factor^i.")
    proj_dims: tuple[int, ...] = _field(
        (), "Explicit adaptive-softmax tail widths, one per cutoff (overrides proj_factor)."
    )
    tie_weights: bool = _field(
        True, "Share the softmax weights with the input embedding (the reference always ties)."
    )
    seed: int = _field(0, "Seed of the weight initialisers and dropout masks.")

    def validate(self):
        self._check_sizes()
        self._check_attention_layers()
        self._check_rates()
        check_softmax_fields(self)

    def _check_sizes(self):
        for name in ("vocab_size", "d_model", "num_layers", "boom_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.boom_dim % self.d_model:
            # The reference trims the remainder; those weights would never be used.
            raise ValueError(
                f"boom_dim={self.boom_dim} is not a multiple of d_model={self.d_model}: the Boom "
                "sums boom_dim // d_model chunks of width d_model; choose e.g. "
                f"boom_dim={4 * self.d_model}"
            )
        if self.mem_len < 0:
            raise ValueError(f"mem_len must be >= 0 (0 keeps no memory), got {self.mem_len}")

    def _check_attention_layers(self):
        layers = self.attention_layers
        if layers is None:
            return
        bad = [i for i in layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(
                f"attention_layers={layers} has indices {bad} outside "
                f"[0, num_layers={self.num_layers}): give block indices counted from 0, "
                "None for the second-to-last block, or () for none"
            )
        if len(set(layers)) != len(layers):
            raise ValueError(f"attention_layers={layers} repeats an index: list each block once")

    def _check_rates(self):
        for name in _DROPOUT_FIELDS:
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if not (self.ar_coef >= 0.0 and math.isfinite(self.ar_coef)):
            raise ValueError(
                f"ar_coef must be a finite number >= 0 (0 disables it), got {self.ar_coef}"
            )

    @property
    def resolved_attention_layers(self):
        """tuple[int, ...]: sorted block indices that carry attention."""
        if self.attention_layers is None:
            return default_attention_layers(self.num_layers)
        return tuple(sorted(self.attention_layers))
