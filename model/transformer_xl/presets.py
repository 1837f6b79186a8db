"""Transformer-XL / PAR presets: dicts of `ModelConfig` fields.

Presets are dicts of `ModelConfig` keyword arguments:
    tiny         unit tests: V 64, D 32, 2 heads, F 64, 4 blocks, M 8.
    wt2_base     WikiText-2 with a 12k (sentencepiece) vocabulary, PAR base
                 size: D 128, 4 heads, F 512, 6 blocks, M 16.
    wt2_large    WikiText-2, D 256, 8 heads, F 1024, 12 blocks, M 64.
    enwik8       byte level (V 256): D 256, 8 heads, F 1024, 12 blocks,
                 M 512, full softmax.
    enwik8_span  enwik8 with adaptive-span attention (S 1024, R 32).
"""

from model.transformer_xl.config import ModelConfig

PRESETS: dict[str, dict] = {
    "tiny": dict(
        vocab_size=64, d_model=32, num_heads=2, d_ffn=64, num_blocks=4, mem_len=8, cutoffs=(16, 32)
    ),
    # Cutoffs from the real counts of the default 12k sentencepiece build:
    #   python optimal_cuts.py --data_dir=data/wikitext2 --num_tails=2 \
    #       --d_model=128 --logit_cost=60 --min_head=1000
    # (predicted 8.3x over a full softmax on this CPU's cost model).
    # min_head=1000 keeps the frequent pieces (77% of tokens) at full width;
    # without it the optimum shrinks the head to ~100 pieces.
    "wt2_base": dict(
        vocab_size=12000, d_model=128, num_heads=4, d_ffn=512, num_blocks=6, mem_len=16,
        dropout=0.1, cutoffs=(1000, 3845),
    ),
    # WikiText-2 is small for this width: more dropout than the base.
    "wt2_large": dict(
        vocab_size=12000, d_model=256, num_heads=8, d_ffn=1024, num_blocks=12, mem_len=64,
        dropout=0.2, cutoffs=(1000, 3495),  # same command with --d_model=256
    ),
    "enwik8": dict(
        vocab_size=256, d_model=256, num_heads=8, d_ffn=1024, num_blocks=12, mem_len=512,
        dropout=0.1, cutoffs=(),
    ),
    "enwik8_span": dict(
        vocab_size=256, d_model=256, num_heads=8, d_ffn=1024, num_blocks=12, mem_len=1024,
        dropout=0.1, cutoffs=(), attention="adaptive_span", span_max=1024, span_ramp=32,
    ),
}  # fmt: skip


def preset_config(name, **overrides) -> ModelConfig:
    """The `ModelConfig` of a named preset, with some fields overridden.

    Args:
        name: a key of `PRESETS`.
        **overrides: ModelConfig fields to change.

    Returns:
        A validated ModelConfig.

    Raises:
        ValueError: unknown preset or field, or an invalid value.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    return ModelConfig.from_dict({**PRESETS[name], **overrides})
