"""Frozen, validated configuration of the language model.

`ModelConfig` is the one object that describes a model: the trainer builds it
from flags, writes it to `config.json` and hands it to
`model.transformer_xl.build`, the only place that unpacks it into layer
arguments. Every field is checked in `__post_init__`, and a bad value raises a
`ValueError` that names the field and says how to fix it.

Architectures (PAR, Mandava et al. 2020, arXiv 2009.04534):
    "supernet":        every block is a stochastic choice among the block
                       types of `candidates` (attention, dense
                       (feed-forward) and identity: "afi").
    "transformer_xl":  the standard Transformer-XL, "af" repeated
                       num_blocks // 2 times (num_blocks must be even).
    "aafiaf...":       a fixed string of length num_blocks over the block
                       letters of model/transformer_xl/blocks.py: a
                       (attention), f (feed-forward), i (identity).

`candidates` records the block types a supernet chooses among, in the order of
its architecture logits' columns: a new config takes every type registered in
blocks.py when it is made (None), and a config.json or Keras config written
before the field existed loads with the three built-in types its run searched
(`BUILTIN_CANDIDATES`, "afi"; see `ModelConfig.from_dict`).
"""

import dataclasses

from model.config_base import ConfigBase, check_softmax_fields
from model.config_base import field as _field
from model.transformer_xl import blocks

SUPERNET = "supernet"
TRANSFORMER_XL = "transformer_xl"
ATTENTIONS = ("relative", "adaptive_span")
# Positions of adaptive-span attention (model/layers/adaptive_span.py).
SPAN_POSITIONS = ("relative", "learned")
# Weight initialisation: the project's (Transformer-XL's N(0, 0.02), Keras'
# embedding and softmax defaults, embedding scaled by sqrt(D)) or PyTorch's
# defaults as the adaptive-span reference has them (see model.py).
INITS = ("default", "pytorch")
SEARCH_MODES = ("soft", "hard")
HARD_GRADIENTS = ("all", "chosen")
EVAL_MODES = ("argmax", "expected")
# The candidates of every config written before `candidates` existed: the three
# built-in block types, the columns of their checkpoints' architecture logits.
BUILTIN_CANDIDATES = "afi"


def transformer_xl_architecture(num_blocks):
    """The fixed PAR string of a Transformer-XL with num_blocks // 2 layers.

    Args:
        num_blocks: int, even number of blocks (two per Transformer-XL layer).

    Returns:
        str, "af" repeated num_blocks // 2 times.
    """
    if num_blocks % 2:
        raise ValueError(
            f"num_blocks={num_blocks} is odd, but architecture 'transformer_xl' pairs "
            "an attention and a dense block per layer: use an even num_blocks"
        )
    return "af" * (num_blocks // 2)


@dataclasses.dataclass(frozen=True)
class ModelConfig(ConfigBase):
    """Hyper-parameters of `TransformerXLLM` (see docs/interfaces.md).

    Attributes:
        vocab_size: number of token ids V.
        d_model: model width D (even: sinusoid positions).
        num_heads: attention heads N.
        d_head: head size H; None means d_model // num_heads.
        d_ffn: inner width F of the feed-forward blocks.
        num_blocks: number of blocks (a Transformer-XL layer is two blocks).
        architecture: "supernet", "transformer_xl" or an a/f/i string.
        candidates: the block letters a supernet chooses among, in the order
            of its architecture logits' columns; None (the default) is
            replaced by every type registered when the config is made
            (`blocks.letters()`, "afi" unless more are registered). Fixed
            architectures do not read it.
        attention: "relative" or "adaptive_span".
        mem_len: memory length M kept between segments during training.
        clamp_len: clamp relative distances to this value; <= 0: no clamping
            (as the reference Transformer-XL).
        dropout: dropout on embeddings and sub-layer outputs, in [0, 1);
            applied by `model.layers.dropout.FastDropout`, which rounds the rate to
            a multiple of 1/256 (and scales by the rounded rate).
        attn_dropout: dropout on attention weights, in [0, 1) (same rounding).
        pre_norm: pre-norm blocks instead of the paper's post-norm.
        final_norm: layer norm after the last block.
        untie_rel_bias: one pair of relative biases u, v per layer; False: one
            pair shared by every attention layer, owned by the model.
        same_length: every query attends to the same number of keys (the
            memory length + 1), Transformer-XL's evaluation option
            (evaluate.py --same_length sets it on a trained run).
        cutoffs: adaptive-softmax cutoffs (excluding V); () = full softmax.
        proj_factor: tail cluster i has width d_model / proj_factor^(i+1).
        proj_dims: explicit tail widths, one per cutoff (overrides proj_factor).
        adaptive_input: adaptive input embedding with the same clusters.
        tie_weights: share the softmax's weights with the input embedding.
        span_max: adaptive-span maximum span S (tokens).
        span_ramp: adaptive-span soft-mask ramp R (tokens).
        span_init: initial span fraction s_h in [0, 1].
        span_loss_coef: lambda of the span loss lambda * mean_h(z_h).
        span_positions: adaptive span's positions, "relative" (Transformer-XL's
            sinusoids, W_R, u, v) or "learned" (the adaptive-span reference's
            key position table shared by every layer and head; a query sees
            the span_max keys before it, not itself).
        init: "default" or "pytorch" (the adaptive-span reference's PyTorch
            defaults: linear layers and their biases U(+-1/sqrt(fan_in)),
            embedding N(0, 1) not scaled by sqrt(D), key positions N(0, 1)).
        search_mode: "soft" (mix all candidates) or "hard" (straight-through).
        hard_gradient: hard search's architecture gradient: "all" (every
            candidate's output, the straight-through Gumbel-softmax estimator)
            or "chosen" (the chosen candidate's alone; cheapest).
        hard_rows: with hard_gradient "all", the fraction of rows on which the
            unchosen candidates run for the architecture gradient.
        eval_mode: "argmax" or "expected" candidate weights at evaluation.
        seed: seed of the Gumbel noise (with the block index and the step).
    """

    vocab_size: int = dataclasses.field(
        metadata={"help": "Number of token ids V (taken from the data)."})
    d_model: int = _field(128, "Model width D.")
    num_heads: int = _field(4, "Attention heads N.")
    d_head: int | None = _field(None, "Head size H (default D / N).")
    d_ffn: int = _field(512, "Inner width of the dense (feed-forward) blocks.")
    num_blocks: int = _field(6, "Blocks (a Transformer-XL layer is two: attention + dense).")
    architecture: str = _field(SUPERNET, "supernet, transformer_xl or an a/f/i string.")
    candidates: str | None = _field(
        None, "Block types a supernet chooses among, as letters such as af (presets: every "
        "registered type, afi).")
    attention: str = _field("relative", "Attention kind.", ATTENTIONS)
    mem_len: int = _field(16, "Memory length M during training.")
    clamp_len: int = _field(-1, "Clamp relative distances to this (<= 0: no clamping).")
    dropout: float = _field(0.1, "Dropout on embeddings and block outputs.")
    attn_dropout: float = _field(0.0, "Dropout on attention weights.")
    pre_norm: bool = _field(False, "Pre-norm blocks instead of the paper's post-norm.")
    final_norm: bool = _field(False, "Layer norm after the last block.")
    untie_rel_bias: bool = _field(
        True, "Relative-position biases u, v per layer; false: one pair shared by every layer "
        "(the Transformer-XL reference default).")
    same_length: bool = _field(
        False, "Every query attends to the same number of keys (memory length + 1), as "
        "Transformer-XL's evaluation option; false: every earlier key.")
    cutoffs: tuple[int, ...] = _field(
        (), "Adaptive-softmax cutoffs (excluding V); empty: full softmax.")
    proj_factor: float = _field(
        4.0, "Tail cluster i of the adaptive softmax has width d_model / proj_factor^(i+1).")
    proj_dims: tuple[int, ...] = _field((), "Explicit tail widths, one per cutoff.")
    adaptive_input: bool = _field(False, "Adaptive input embedding with the softmax's clusters.")
    tie_weights: bool = _field(False, "Share the softmax weights with the input embedding.")
    span_max: int = _field(1024, "Adaptive span: maximum span S.")
    span_ramp: int = _field(32, "Adaptive span: soft-mask ramp R.")
    span_init: float = _field(0.0, "Adaptive span: initial span fraction in [0, 1].")
    span_loss_coef: float = _field(2e-6, "Adaptive span: loss coefficient lambda.")
    span_positions: str = _field(
        "relative", "Adaptive span: relative = Transformer-XL's relative positions; learned = "
        "the adaptive-span reference's key position table shared by every layer and head (no "
        "u, v; a query sees the span_max keys before it, not itself; needs mem_len >= "
        "span_max).", SPAN_POSITIONS)
    init: str = _field(
        "default", "Weight initialisation: default = Transformer-XL's N(0, 0.02) projections, "
        "embedding scaled by sqrt(D); pytorch = the adaptive-span reference's PyTorch defaults "
        "(linear layers and biases U(+-1/sqrt(fan_in)), embedding N(0, 1) unscaled).", INITS)
    search_mode: str = _field(
        "soft", "Supernet search: soft mixes all candidates, hard samples one "
        "(straight-through).", SEARCH_MODES)
    hard_gradient: str = _field(
        "all", "Hard search's architecture gradient: all = every candidate's output (forward of "
        "all three, backward of the chosen one; straight-through Gumbel-softmax), chosen = the "
        "chosen candidate's output only (forward and backward of one candidate; tends to collapse "
        "to identity).", HARD_GRADIENTS)
    hard_rows: float = _field(
        0.25, "Hard search with hard_gradient=all: fraction of the batch's rows on which the "
        "unchosen candidates run (forward only, for the architecture gradient, scaled by "
        "B / rows: an unbiased estimate); 1 = every row.")
    eval_mode: str = _field("argmax", "Supernet blocks at evaluation.", EVAL_MODES)
    seed: int = _field(0, "Seed of initialisation, dropout and Gumbel noise.")

    def __post_init__(self):
        if self.candidates is None:  # a new config: the block types registered now
            object.__setattr__(self, "candidates", blocks.letters())
        super().__post_init__()

    @classmethod
    def from_dict(cls, values):
        """Inverse of `to_dict`; unknown keys raise ValueError listing them.

        A dict without "candidates" was written before the field existed (a
        run's config.json, a `.keras` file's config): its supernet chose among
        the three built-in types, so it loads with BUILTIN_CANDIDATES whatever
        is registered now. (The presets say None: every registered type.)
        """
        if "candidates" not in values:
            values = {**values, "candidates": BUILTIN_CANDIDATES}
        return super().from_dict(values)

    def validate(self):
        self._check_sizes()
        self._check_candidates()
        self._check_architecture()
        check_softmax_fields(self)
        self._check_attention()

    def _check_sizes(self):
        for field in ("vocab_size", "d_model", "num_heads", "d_ffn", "num_blocks"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)}")
        if self.d_head is None:
            if self.d_model % self.num_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}: "
                    "choose d_model as a multiple of num_heads or set d_head explicitly"
                )
        elif self.d_head < 1:
            raise ValueError(f"d_head must be a positive integer or None, got {self.d_head}")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even (sinusoid relative positions), got "
                             f"{self.d_model}")
        if self.mem_len < 0:
            raise ValueError(f"mem_len must be >= 0 (0 disables the memory), got {self.mem_len}")
        for field in ("dropout", "attn_dropout"):
            value = getattr(self, field)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{field} must be in [0, 1), got {value}")

    def _check_candidates(self):
        letters = self.candidates
        unknown = sorted(set(letters) - set(blocks.letters()))
        problem = ("is empty" if not letters
                   else f"has unregistered letters {unknown}" if unknown
                   else "repeats a letter" if len(set(letters)) != len(letters) else None)
        if problem:
            raise ValueError(
                f"candidates={letters!r} {problem}: list the block types a supernet chooses "
                f"among, each once, by their letters: {blocks.describe()}"
            )

    def _check_architecture(self):
        arch = self.architecture
        if arch == TRANSFORMER_XL:
            transformer_xl_architecture(self.num_blocks)  # raises on odd num_blocks
        elif arch != SUPERNET:
            bad = sorted(set(arch) - set(blocks.letters()))
            if bad or not arch:
                raise ValueError(
                    f"architecture={arch!r} has letters {bad}: use 'supernet', 'transformer_xl' "
                    f"or a string over {blocks.describe()}"
                )
            if len(arch) != self.num_blocks:
                raise ValueError(
                    f"architecture={arch!r} has {len(arch)} blocks but "
                    f"num_blocks={self.num_blocks}: "
                    "give one letter per block"
                )
        if not 0.0 < self.hard_rows <= 1.0:
            raise ValueError(f"hard_rows must be in (0, 1], got {self.hard_rows}")

    def _check_attention(self):
        # Span fields are checked whatever the attention so a config stays
        # valid when only `attention` is switched to "adaptive_span".
        for field in ("span_max", "span_ramp"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")
        if self.span_ramp > self.span_max:
            raise ValueError(
                f"span_ramp={self.span_ramp} is larger than span_max={self.span_max}: "
                "use a ramp no longer than the maximum span"
            )
        if not 0.0 <= self.span_init <= 1.0:
            raise ValueError(f"span_init must be in [0, 1] (a fraction of span_max), got "
                             f"{self.span_init}")
        if self.span_loss_coef < 0:
            raise ValueError(f"span_loss_coef must be >= 0, got {self.span_loss_coef}")
        if self.span_positions == "learned":
            if self.attention != "adaptive_span":
                raise ValueError(
                    "span_positions='learned' (the adaptive-span reference's key positions) "
                    f"applies to attention='adaptive_span' only, got attention="
                    f"{self.attention!r}: add --attention=adaptive_span or drop "
                    "--span_positions")
            if self.span_max > self.mem_len:
                raise ValueError(
                    f"span_max={self.span_max} is larger than mem_len={self.mem_len}: learned key "
                    "positions attend to the span_max keys before each query, so the memory "
                    "must hold them; set --mem_len >= --span_max or lower --span_max")
            if not self.untie_rel_bias:
                raise ValueError(
                    "untie_rel_bias=False shares relative biases u, v, which learned key "
                    "positions do not have: drop --nountie_rel_bias or use "
                    "--span_positions=relative")

    @property
    def learned_key_positions(self):
        """bool: attention uses the adaptive-span reference's shared key position table."""
        return self.attention == "adaptive_span" and self.span_positions == "learned"

    @property
    def head_size(self):
        """int: the head size H (d_head, or d_model // num_heads)."""
        return self.d_head if self.d_head is not None else self.d_model // self.num_heads

    @property
    def candidate_specs(self):
        """tuple of the BlockSpecs of `candidates`, in their order (a supernet block's
        candidates, the columns of its architecture logits)."""
        return tuple(blocks.get(letter) for letter in self.candidates)

    def block_specs(self, architecture=None):
        """The BlockSpecs a network of this config speaks of: its candidates, then any
        other type its fixed architecture uses (registry order).

        Args:
            architecture: a fixed string to use instead of the config's; None: the
                config's ("supernet" adds nothing to the candidates).
        """
        arch = self.architecture if architecture is None else architecture
        if arch == TRANSFORMER_XL:
            arch = transformer_xl_architecture(self.num_blocks)
        others = set() if arch == SUPERNET else set(arch) - set(self.candidates)
        return self.candidate_specs + tuple(s for s in blocks.specs() if s.letter in others)

    @property
    def resolved_architecture(self):
        """str: "supernet" or the fixed a/f/i string (transformer_xl expanded)."""
        if self.architecture == TRANSFORMER_XL:
            return transformer_xl_architecture(self.num_blocks)
        return self.architecture
