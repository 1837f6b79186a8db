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
One FLOPs model for the whole project: every count is for the batch B the model
runs (the training batch), because the position projection W_R r is computed
once per call and shared by the batch (divided by B * T); `batch_size` is
therefore required (block_costs.check_batch_size). The search's cost table, the
derivation report, the experiments and the benchmarks all count this way.
The counts of one block of each type are model/transformer_xl/block_costs.py's,
read here through the block registry; a supernet counts its config's
`candidates`.
"""

from model.config_base import tail_dims
from model.transformer_xl import blocks
from model.transformer_xl.block_costs import check_batch_size
from model.transformer_xl.config import SUPERNET, TRANSFORMER_XL, transformer_xl_architecture


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
            candidate of `config.candidates` (identity is free).
        seq_len: int, segment length T (required: it is not a model field).
        mem_len: int, memory length M; None uses config.mem_len.
        batch_size: int B >= 1, required: the batch the model runs (the
            training batch); see `block_costs.attention_flops_per_token`.
        cluster_mass: probability mass per tail cluster (optionally head
            first), e.g. from optimal_cuts; see `head_flops_per_token`.
        spans: for adaptive span, the largest span in tokens of each
            attention layer (memory-carrying block, in block order),
            trimming its memory.

    Returns:
        dict of floats: "embedding", one entry per block type of the
        network (`config.block_specs(architecture)`: the config's
        candidates, then any other type the string uses) by name with the
        FLOPs of all its blocks ("attention", "dense", "identity"),
        "blocks" (their sum), "head", "total", and "num_<name>" (block
        counts, "num_attention", "num_dense", ...).
    """
    arch = _architecture(config, architecture)
    if seq_len is None or seq_len < 1:
        raise ValueError(f"seq_len must be a segment length >= 1 (e.g. the data's seq_len), got "
                         f"{seq_len}")
    mem_len = config.mem_len if mem_len is None else mem_len
    if mem_len < 0:
        raise ValueError(f"mem_len must be >= 0, got {mem_len}")
    batch_size = check_batch_size(batch_size)
    specs = config.block_specs(arch)
    letters = [config.candidates] * config.num_blocks if arch == SUPERNET else list(arch)
    counts = {spec.name: sum(spec.letter in b for b in letters) for spec in specs}
    num_memory = sum(counts[spec.name] for spec in specs if spec.carries_memory)
    spans = list(spans) if spans is not None else [None] * num_memory
    if len(spans) != num_memory:
        raise ValueError(f"spans has {len(spans)} entries for {num_memory} attention blocks")
    spans = iter(spans)
    per_type = {spec.name: 0.0 for spec in specs}
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
        seq_len, mem_len, **kwargs: as in `forward_flops_per_token` (`batch_size`
            required).

    Returns:
        dict: "blocks" = block FLOPs ratio, "total" = whole-model ratio
        (< 1 means cheaper than "af" * (num_blocks // 2)).
    """
    reference = transformer_xl_architecture(config.num_blocks)
    ours = forward_flops_per_token(config, architecture, seq_len, mem_len, **kwargs)
    base = forward_flops_per_token(config, reference, seq_len, mem_len, **kwargs)
    return {"blocks": ours["blocks"] / base["blocks"], "total": ours["total"] / base["total"]}


def param_count(config, architecture=None):
    """Number of parameters of the model built from `config`.

    Args:
        config: ModelConfig.
        architecture: as in `forward_flops_per_token`; None uses
            config.architecture ("supernet" includes every candidate of
            `config.candidates` and the architecture logits, one per
            candidate, of every block).

    Returns:
        int, equal to `build_model(config).count_params()` for that
        architecture.
    """
    arch = _architecture(config, architecture)
    d, v = config.d_model, config.vocab_size
    layer_norm = 2 * d
    rel_bias = 2 * config.num_heads * config.head_size  # one shared pair u, v for the model
    if arch == SUPERNET:  # every candidate and the architecture logits per block
        specs = config.candidate_specs
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
