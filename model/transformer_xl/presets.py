"""Transformer-XL / PAR presets: dicts of `ModelConfig` fields.

Presets are dicts of `ModelConfig` keyword arguments:
    tiny         unit tests: V 64, D 32, 2 heads, F 64, 4 blocks, M 8.
    wt2_base     WikiText-2 with a 12k (sentencepiece) vocabulary, PAR base
                 size: D 128, 4 heads, F 512, 6 blocks, M 16.
    wt2_large    WikiText-2, D 256, 8 heads, F 1024, 12 blocks, M 64.
    enwik8       byte level (V 256): D 256, 8 heads, F 1024, 12 blocks,
                 M 512, full softmax.
    enwik8_span  enwik8 with adaptive-span attention (S 1024, R 32).
    adaptive_span_small   the adaptive-span reference's enwik8_small recipe
                 scaled to this CPU (docs/results/adaptive_span_fidelity.md):
                 4 layers (8 blocks), D 128, F 512, 4 heads, post-norm, no
                 final norm, untied full softmax, dropout 0; adaptive span
                 S 512, R 32, init 0, lambda 2e-6, M 512, the reference's
                 learned key positions and PyTorch initialisation; trains
                 with the reference's Adagrad (TRAIN_DEFAULTS). Build the
                 data with --seq_len=128 --batch_size=16.
    adaptive_span_enwik8_small  the reference's experiments/enwik8_small.sh
                 itself: 8 layers (16 blocks), D 256, F 1024, 4 heads, S 1024,
                 M 1024, with its Adagrad recipe (warm-up 8,000, 150,000
                 steps); build enwik8 with --seq_len=256 --batch_size=64.

Every preset says `candidates=None`: its supernet chooses among every block
type registered when its config is made (a dict without the key reads as a
config.json written before the field, `ModelConfig.from_dict`).
"""

from model.transformer_xl.config import ModelConfig

PRESETS: dict[str, dict] = {
    "tiny": dict(
        vocab_size=64, d_model=32, num_heads=2, d_ffn=64, num_blocks=4, mem_len=8, cutoffs=(16, 32)
    ),
    # Cutoffs from the real counts of the default 12k sentencepiece build:
    #   python optimal_cuts.py --data_dir=data/wikitext2 --num_tails=2 \
    #       --d_model=128 --logit_cost=60 --min_head=1000
    # min_head=1000 keeps the frequent pieces at full width; without it the
    # optimum shrinks the head (predicted speed-ups: bench/README.md#optimal-cutoffs).
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

# The adaptive-span reference's model (facebookresearch/adaptive-span,
# models.py): post-norm layers, no final norm, untied embedding and softmax
# (with bias), no dropout, learned key positions, PyTorch's initialisation.
_SPAN_REFERENCE = dict(
    vocab_size=256, architecture="transformer_xl", attention="adaptive_span", span_ramp=32,
    span_init=0.0, span_loss_coef=2e-6, span_positions="learned", init="pytorch",
    dropout=0.0, pre_norm=False, final_norm=False, tie_weights=False, adaptive_input=False,
    cutoffs=(),
)
PRESETS["adaptive_span_small"] = dict(
    _SPAN_REFERENCE, d_model=128, num_heads=4, d_ffn=512, num_blocks=8, span_max=512,
    mem_len=512)
PRESETS["adaptive_span_enwik8_small"] = dict(
    _SPAN_REFERENCE, d_model=256, num_heads=4, d_ffn=1024, num_blocks=16, span_max=1024,
    mem_len=1024)
for _preset in PRESETS.values():
    _preset.setdefault("candidates", None)  # every block type registered at config time
del _preset

# The reference's optimisation (main.py --optim adagrad --grad-clip 0.03
# --lr 0.07): its Adagrad with the per-tensor learning-rate throttle
# (training/optimizers/adagrad_clip.py; --tensor_clip_norm is 0.03 by
# default), epsilon 1e-10 after the square root, no global clip, a linear
# warm-up then a constant rate; evaluation keeps the training memory
# (eval_mem_len's default). Applied by train.py for the flags a user does not
# give.
_ADAGRAD_RECIPE = dict(optimizer="adagrad_clip", learning_rate=0.07, epsilon=1e-10,
                       clip_norm=0.0, weight_decay=0.0, lr_schedule="constant",
                       warmup_fraction=0.5)
TRAIN_DEFAULTS: dict[str, dict] = {
    "adaptive_span_small": dict(_ADAGRAD_RECIPE, warmup_steps=200),
    "adaptive_span_enwik8_small": dict(_ADAGRAD_RECIPE, warmup_steps=8000, max_steps=150_000),
}


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
