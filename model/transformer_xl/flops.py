"""Forward FLOPs and parameter counts of an architecture (pure arithmetic).

Used to report the PAR speed-up of a derived architecture over the
Transformer-XL with the same number of blocks (Mandava et al. 2020,
arXiv 2009.04534). No TensorFlow: only the config is needed.

Size glossary:
    T: segment length.       M: memory length.     K: keys, M + T.
    B: batch size.           N: heads.             H: head size.
    D: d_model.              F: d_ffn.             V: vocabulary size.
    d_i: width of tail cluster i.   C_i: size of tail cluster i.

Conventions: a multiply-add is 2 FLOPs; only matrix products are counted
(softmax, layer norm, bias and residual adds, dropout and the embedding
lookup are a few FLOPs per element and are left out). Attention is counted as
the layers compute it: the full [T, K] score matrix, masked entries included.
"""

import math

from model.config_base import tail_dims
from model.transformer_xl.config import SUPERNET, TRANSFORMER_XL, transformer_xl_architecture

# The adaptive-span layer keeps memory in multiples of this many positions.
SPAN_TRIM_MULTIPLE = 64


def _clusters(config):
    """(head tokens c_0, [(d_i, C_i) per tail])."""
    bounds = list(config.cutoffs) + [config.vocab_size]
    head_tokens = bounds[0]
    dims = tail_dims(config.d_model, len(config.cutoffs), config.proj_factor, config.proj_dims)
    tails = [(d, hi - lo) for d, lo, hi in zip(dims, bounds, bounds[1:])]
    return head_tokens, tails


def _tail_mass(config, cluster_mass):
    """Per-tail probability mass P_i; all ones (every tail visited) when unknown."""
    num_tails = len(config.cutoffs)
    if cluster_mass is None:
        return [1.0] * num_tails
    mass = list(cluster_mass)
    if len(mass) == num_tails + 1:  # head mass first, as optimal_cuts reports it
        mass = mass[1:]
    if len(mass) != num_tails:
        raise ValueError(
            f"cluster_mass has {len(cluster_mass)} values; give one per tail cluster "
            f"({num_tails}) or head first then one per tail ({num_tails + 1})"
        )
    return mass


def _architecture(config, architecture):
    arch = config.architecture if architecture is None else architecture
    if arch == TRANSFORMER_XL:
        return transformer_xl_architecture(config.num_blocks)
    if arch != SUPERNET:
        # Validates letters and length with the config's own messages.
        config.replace(architecture=arch)
    return arch


def _kept_memory(config, mem_len, span):
    """Memory positions an attention layer actually uses.

    Adaptive span drops memory older than max_h(z_h) + R, rounded up to a
    multiple of SPAN_TRIM_MULTIPLE; `span` is that layer's max_h(z_h) in
    tokens (None: untrimmed).
    """
    if config.attention != "adaptive_span" or span is None:
        return mem_len
    needed = SPAN_TRIM_MULTIPLE * math.ceil((span + config.span_ramp) / SPAN_TRIM_MULTIPLE)
    return min(mem_len, needed)


def attention_flops_per_token(config, seq_len, mem_len, batch_size=None, span=None):
    """FLOPs per token of one attention block, by component.

    Args:
        config: ModelConfig.
        seq_len: int, segment length T.
        mem_len: int, memory length M.
        batch_size: int or None; the position projection W_R r over K
            positions is computed once per call and shared by the batch, so it
            is divided by B * T (by T when None, i.e. per sequence).
        span: float or None, the layer's largest span in tokens (adaptive
            span only; trims the memory).

    Returns:
        dict with "projections" (q over T, k and v over K, output),
        "position_projection" (W_R r), "scores" (content, position and the
        weighted sum of values) and "total".
    """
    d, nh = config.d_model, config.num_heads * config.head_size
    keys = _kept_memory(config, mem_len, span) + seq_len
    projections = 2 * d * nh * (2 + 2 * keys / seq_len)  # q and o per token; k, v per key
    position_projection = 2 * keys * d * nh / (seq_len * (batch_size or 1))
    scores = 3 * 2 * nh * keys  # (q+u).k, (q+v).r, weights.v
    return {
        "projections": projections,
        "position_projection": position_projection,
        "scores": scores,
        "total": projections + position_projection + scores,
    }


def dense_flops_per_token(config):
    """FLOPs per token of one dense (feed-forward) block: 2 D F + 2 F D."""
    return 4 * config.d_model * config.d_ffn


def embedding_flops_per_token(config, cluster_mass=None):
    """FLOPs per token of the input embedding (tail projections only)."""
    if not (config.adaptive_input or config.tie_weights) or not config.cutoffs:
        return 0.0
    _, tails = _clusters(config)
    return sum(
        p * 2 * d * config.d_model for p, (d, _) in zip(_tail_mass(config, cluster_mass), tails)
    )


def head_flops_per_token(config, cluster_mass=None):
    """FLOPs per token of the output layer.

    Full softmax: 2 D V. Adaptive softmax (Grave et al. 2017):
    `2 D (c_0 + n_tails) + sum_i P_i (2 D d_i + 2 d_i C_i)` with P_i the
    probability mass of tail i (`cluster_mass`); without it every tail is
    counted for every token (P_i = 1), which is the cost of `log_probs`.
    """
    if not config.cutoffs:
        return 2.0 * config.d_model * config.vocab_size
    head_tokens, tails = _clusters(config)
    d = config.d_model
    head = 2 * d * (head_tokens + len(tails))
    mass = _tail_mass(config, cluster_mass)
    return head + sum(p * (2 * d * di + 2 * di * ci) for p, (di, ci) in zip(mass, tails))


def forward_flops_per_token(
    config,
    architecture=None,
    seq_len=None,
    mem_len=None,
    batch_size=None,
    cluster_mass=None,
    spans=None,
):
    """Forward FLOPs per predicted token of a whole model.

    Args:
        config: ModelConfig.
        architecture: "supernet", "transformer_xl" or an a/f/i string of
            length num_blocks; None uses config.architecture. "supernet"
            counts a soft search step: every block computes every
            candidate (identity is free).
        seq_len: int, segment length T (required: it is not a model field).
        mem_len: int, memory length M; None uses config.mem_len.
        batch_size: int or None, see `attention_flops_per_token`.
        cluster_mass: probability mass per tail cluster (optionally head
            first), e.g. from optimal_cuts; see `head_flops_per_token`.
        spans: for adaptive span, the largest span in tokens of each
            attention layer (memory-carrying block, in block order),
            trimming its memory.

    Returns:
        dict of floats: "embedding", one entry per registered block type
        (model/transformer_xl/blocks.py) by name with the FLOPs of all its
        blocks ("attention", "dense", "identity"), "blocks" (their sum),
        "head", "total", and "num_<name>" (block counts, "num_attention",
        "num_dense", ...).
    """
    from model.transformer_xl import blocks

    arch = _architecture(config, architecture)
    if seq_len is None or seq_len < 1:
        raise ValueError(f"seq_len must be a segment length >= 1 (e.g. the data's seq_len), got "
                         f"{seq_len}")
    mem_len = config.mem_len if mem_len is None else mem_len
    if mem_len < 0:
        raise ValueError(f"mem_len must be >= 0, got {mem_len}")
    every = blocks.letters()
    letters = [every] * config.num_blocks if arch == SUPERNET else list(arch)
    counts = {spec.name: sum(spec.letter in b for b in letters) for spec in blocks.specs()}
    num_memory = sum(counts[spec.name] for spec in blocks.specs() if spec.carries_memory)
    spans = list(spans) if spans is not None else [None] * num_memory
    if len(spans) != num_memory:
        raise ValueError(f"spans has {len(spans)} entries for {num_memory} attention blocks")
    spans = iter(spans)
    per_type = {spec.name: 0.0 for spec in blocks.specs()}
    for block in letters:
        for letter in block:
            spec = blocks.get(letter)
            span = next(spans) if spec.carries_memory else None
            per_type[spec.name] += spec.flops_per_token(config, seq_len, mem_len, batch_size, span)
    out = {
        "embedding": embedding_flops_per_token(config, cluster_mass),
        **per_type,
        "blocks": sum(per_type.values()),
        "head": head_flops_per_token(config, cluster_mass),
        **{f"num_{name}": count for name, count in counts.items()},
    }
    out["total"] = out["embedding"] + out["blocks"] + out["head"]
    return out


def relative_to_transformer_xl(config, architecture, seq_len, mem_len=None, **kwargs):
    """Cost of an architecture relative to Transformer-XL with as many blocks.

    Args:
        config: ModelConfig (num_blocks must be even).
        architecture: the a/f/i string to compare (e.g. the derived one).
        seq_len, mem_len, **kwargs: as in `forward_flops_per_token`.

    Returns:
        dict: "blocks" = block FLOPs ratio, "total" = whole-model ratio
        (< 1 means cheaper than "af" * (num_blocks // 2)).
    """
    reference = transformer_xl_architecture(config.num_blocks)
    ours = forward_flops_per_token(config, architecture, seq_len, mem_len, **kwargs)
    base = forward_flops_per_token(config, reference, seq_len, mem_len, **kwargs)
    return {"blocks": ours["blocks"] / base["blocks"], "total": ours["total"] / base["total"]}


def attention_param_count(config):
    """Parameters of one attention block: q, k, v, W_R, o, layer norm, u, v, spans
    (learned key positions: no W_R, u, v; their table is the model's)."""
    d, nh = config.d_model, config.num_heads * config.head_size
    if config.learned_key_positions:
        return 4 * d * nh + 2 * d + config.num_heads
    params = 5 * d * nh + 2 * d
    if config.untie_rel_bias:
        params += 2 * nh
    if config.attention == "adaptive_span":
        params += config.num_heads  # one span fraction per head
    return params


def dense_param_count(config):
    """Parameters of one dense block: two kernels, two biases, layer norm."""
    return 2 * config.d_model * config.d_ffn + config.d_ffn + 3 * config.d_model


def param_count(config, architecture=None):
    """Number of parameters of the model built from `config`.

    Args:
        config: ModelConfig.
        architecture: as in `forward_flops_per_token`; None uses
            config.architecture ("supernet" includes every candidate and the
            architecture logits, one per candidate, of every block).

    Returns:
        int, equal to `build_model(config).count_params()` for that
        architecture.
    """
    from model.transformer_xl import blocks

    arch = _architecture(config, architecture)
    d, v = config.d_model, config.vocab_size
    layer_norm = 2 * d
    rel_bias = 2 * config.num_heads * config.head_size  # one shared pair u, v for the model
    if arch == SUPERNET:  # every candidate and the architecture logits per block
        specs = blocks.specs()
        block_params = config.num_blocks * (sum(s.param_count(config) for s in specs) + len(specs))
        attends = any(s.carries_memory for s in specs)
    else:
        block_params = sum(blocks.get(letter).param_count(config) for letter in arch)
        attends = any(blocks.get(letter).carries_memory for letter in arch)
    if not config.untie_rel_bias and attends:
        block_params += rel_bias
    if config.learned_key_positions and attends:
        block_params += config.span_max * config.head_size  # the shared key position table

    head_tokens, tails = _clusters(config)
    if config.cutoffs:
        head_size = head_tokens + len(tails)
        head = d * head_size + head_size + sum(d * di + di * ci + ci for di, ci in tails)
    else:
        head = d * v + v
    if config.tie_weights:
        embedding = 0
    elif config.adaptive_input:
        embedding = head_tokens * d + sum(ci * di + di * d for di, ci in tails)
    else:
        embedding = v * d
    final = layer_norm if config.final_norm else 0
    return int(embedding + block_params + final + head)
