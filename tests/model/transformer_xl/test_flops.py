"""Tests for model/transformer_xl/flops.py and block_costs.py: hand-computed FLOPs, real sizes."""

import numpy as np
import pytest

from model.transformer_xl import flops
from model.transformer_xl.block_costs import attention_flops_per_token, dense_flops_per_token
from model.transformer_xl.config import ModelConfig

# D 8, N 2, H 4 (N*H 8), F 16, V 64, cutoffs (16, 32), tails d = 8//2 = 4 and
# 8//4 = 2 with C = 16 and 32 tokens.
TINY = ModelConfig(
    vocab_size=64, d_model=8, num_heads=2, d_ffn=16, num_blocks=2, mem_len=4,
    cutoffs=(16, 32), proj_factor=2.0, architecture="af",
)  # fmt: skip

# By hand for T = 4, M = 4 (K = 8), B = 2, per token:
#   q 2*8*8 = 128, o 128, k and v 2*8*8*K/T = 256 each   -> 768
#   W_R r over K positions, once for the batch: 2*K*D*NH / (B*T) -> 128 (256 for B = 1)
#   scores (q+u).k, (q+v).r, weights.v: 3 * 2*NH*K        -> 384
B = 2
ATTENTION = 768 + 128 + 384
DENSE = 2 * 8 * 16 * 2  # 512
# head 2*D*(16 + 2) = 288; tail 1: 2*8*4 + 2*4*16 = 192; tail 2: 2*8*2 + 2*2*32 = 160
HEAD_ALL_TAILS = 288 + 192 + 160


def test_attention_and_dense_by_hand():
    parts = attention_flops_per_token(TINY, seq_len=4, mem_len=4, batch_size=B)
    assert parts["projections"] == 768
    assert parts["position_projection"] == 128
    assert parts["scores"] == 384
    assert parts["total"] == ATTENTION
    assert attention_flops_per_token(TINY, 4, 4, batch_size=1)["position_projection"] == 256
    assert dense_flops_per_token(TINY) == DENSE


def test_forward_flops_fixed_architecture_by_hand():
    out = flops.forward_flops_per_token(TINY, "af", seq_len=4, mem_len=4, batch_size=B)
    assert out["attention"] == ATTENTION
    assert out["dense"] == DENSE
    assert out["blocks"] == ATTENTION + DENSE
    assert out["head"] == HEAD_ALL_TAILS
    assert out["embedding"] == 0
    assert out["total"] == ATTENTION + DENSE + HEAD_ALL_TAILS
    assert (out["num_attention"], out["num_dense"]) == (1, 1)
    # Default architecture and memory come from the config.
    assert flops.forward_flops_per_token(TINY, seq_len=4, batch_size=B) == out


def _per_token_by_hand(d, nh, f, t, m, b):
    """One block of each kind on a [B, T] batch with a memory of M, counted from its matrix
    products (DESIGN.md's relative attention: q over the T queries, k and v over the K = M + T
    keys, W_R r over K positions computed once for the whole batch, scores (q + u).k and
    (q + v).W_R r, the weighted sum of the values, the output projection; the feed-forward's
    two products), a multiply-add 2 FLOPs, divided by the B * T tokens of the call."""
    k = m + t
    attention = (2 * b * t * d * nh  # q = x W_q
                 + 2 * 2 * b * k * d * nh  # k, v over memory and segment
                 + 2 * k * d * nh  # W_R r: once per call, shared by the batch
                 + 2 * b * t * k * nh  # (q + u) . k
                 + 2 * b * t * k * nh  # (q + v) . W_R r
                 + 2 * b * t * k * nh  # weights . v
                 + 2 * b * t * nh * d)  # output projection
    dense = 2 * b * t * d * f + 2 * b * t * f * d
    return {"attention": attention / (b * t), "dense": dense / (b * t), "identity": 0.0}


@pytest.mark.parametrize("b", [1, 32])
def test_one_block_of_each_kind_against_a_hand_count(b):
    # D 12, 3 heads of 5 (N*H 15, not D), F 20, T 6, M 10.
    config = ModelConfig(vocab_size=50, d_model=12, num_heads=3, d_head=5, d_ffn=20,
                         num_blocks=3, mem_len=10, cutoffs=(), architecture="afi")
    hand = _per_token_by_hand(12, 15, 20, t=6, m=10, b=b)
    out = flops.forward_flops_per_token(config, "afi", seq_len=6, mem_len=10, batch_size=b)
    for name in ("attention", "dense", "identity"):
        assert out[name] == pytest.approx(hand[name], rel=1e-12), name
    head = 2 * 12 * 50  # full softmax
    assert out["total"] == pytest.approx(sum(hand.values()) + head, rel=1e-12)
    # The search's cost table is the same count over the reference's "afa" (2 attention).
    from training.plugins.par_search.costs import candidate_costs

    costs, fixed = candidate_costs(config, seq_len=6, mem_len=10, batch_size=b)
    reference = 2 * hand["attention"] + hand["dense"] + head
    np.testing.assert_allclose(costs, [hand[n] / reference for n in ("attention", "dense",
                                                                     "identity")], rtol=1e-12)
    assert fixed == pytest.approx(head / reference, rel=1e-12)


def test_head_with_cluster_mass_and_full_softmax():
    expected = 288 + 0.3 * 192 + 0.2 * 160
    assert flops.head_flops_per_token(TINY, cluster_mass=(0.3, 0.2)) == pytest.approx(expected)
    # optimal_cuts style: head mass first.
    assert flops.head_flops_per_token(TINY, cluster_mass=(0.5, 0.3, 0.2)) == pytest.approx(expected)
    assert flops.head_flops_per_token(TINY.replace(cutoffs=())) == 2 * 8 * 64
    with pytest.raises(ValueError, match="cluster_mass"):
        flops.head_flops_per_token(TINY, cluster_mass=(1.0,))


def test_adaptive_input_counts_tail_projections():
    config = TINY.replace(adaptive_input=True)
    out = flops.forward_flops_per_token(config, seq_len=4, batch_size=B, cluster_mass=(0.3, 0.2))
    assert out["embedding"] == pytest.approx(0.3 * 2 * 4 * 8 + 0.2 * 2 * 2 * 8)


def test_supernet_and_identity_architectures():
    supernet = flops.forward_flops_per_token(
        TINY.replace(architecture="supernet"), seq_len=4, mem_len=4, batch_size=B
    )
    assert supernet["blocks"] == 2 * (ATTENTION + DENSE)  # soft search: all candidates
    identity = flops.forward_flops_per_token(TINY, "ii", seq_len=4, mem_len=4, batch_size=B)
    assert identity["blocks"] == 0 and identity["total"] == HEAD_ALL_TAILS


def test_adaptive_span_trims_memory_to_span_plus_ramp():
    config = TINY.replace(attention="adaptive_span", span_max=256, span_ramp=32)
    # span 10 + ramp 32 = 42 kept of M = 100: K = 46.
    trimmed = attention_flops_per_token(config, seq_len=4, mem_len=100, batch_size=B, span=10)
    assert trimmed["total"] == attention_flops_per_token(TINY, 4, 42, B)["total"]
    # span 70 + 32 = 102 > M: nothing trimmed.
    full = attention_flops_per_token(config, seq_len=4, mem_len=100, batch_size=B, span=70)
    assert full["total"] == attention_flops_per_token(TINY, 4, 100, B)["total"]
    out = flops.forward_flops_per_token(config, "af", seq_len=4, mem_len=100, batch_size=B,
                                        spans=[10])
    assert out["attention"] == trimmed["total"]
    with pytest.raises(ValueError, match="spans"):
        flops.forward_flops_per_token(config, "af", seq_len=4, mem_len=100, batch_size=B,
                                      spans=[10, 20])


def test_relative_to_transformer_xl():
    ratio = flops.relative_to_transformer_xl(TINY, "ff", seq_len=4, mem_len=4, batch_size=B)
    assert ratio["blocks"] == pytest.approx(2 * DENSE / (ATTENTION + DENSE))
    total = (2 * DENSE + HEAD_ALL_TAILS) / (ATTENTION + DENSE + HEAD_ALL_TAILS)
    assert ratio["total"] == pytest.approx(total)
    same = flops.relative_to_transformer_xl(TINY, "transformer_xl", seq_len=4, mem_len=4,
                                            batch_size=B)
    assert same == {"blocks": 1.0, "total": 1.0}


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="architecture"):
        flops.forward_flops_per_token(TINY, "afx", seq_len=4, batch_size=B)
    with pytest.raises(ValueError, match="seq_len"):
        flops.forward_flops_per_token(TINY, "af", batch_size=B)
    with pytest.raises(ValueError, match="num_blocks"):
        flops.relative_to_transformer_xl(
            TINY.replace(num_blocks=3, architecture="afa"), "afa", seq_len=4, batch_size=B
        )
    # One FLOPs model: the batch that shares the position projection is always given.
    for bad in (None, 0, 2.5):
        with pytest.raises(ValueError, match="batch_size must be the batch B >= 1"):
            flops.forward_flops_per_token(TINY, "af", seq_len=4, batch_size=bad)
        with pytest.raises(ValueError, match="batch_size must be the batch B >= 1"):
            attention_flops_per_token(TINY, 4, 4, bad)


def test_param_count_by_hand():
    attention = 5 * 8 * 8 + 2 * 8 + 2 * 8  # q k v W_R o, u v, layer norm
    dense = 2 * 8 * 16 + 16 + 8 + 2 * 8
    head = 8 * 18 + 18 + (8 * 4 + 4 * 16 + 16) + (8 * 2 + 2 * 32 + 32)
    embedding = 64 * 8
    assert flops.param_count(TINY) == embedding + attention + dense + head
    assert flops.param_count(TINY, "supernet") == embedding + 2 * (attention + dense + 3) + head


REAL_MODELS = [
    dict(architecture="supernet"),
    dict(architecture="supernet", attention="adaptive_span", final_norm=True),
    dict(architecture="aafi"),
    dict(architecture="transformer_xl", adaptive_input=True, proj_dims=(6, 3)),
    dict(architecture="fafa", tie_weights=True),
    dict(architecture="afaf", cutoffs=(), d_head=5, pre_norm=True),
    dict(architecture="afia", adaptive_input=True, cutoffs=()),
    dict(architecture="supernet", untie_rel_bias=False),
    dict(architecture="aafi", attention="adaptive_span", untie_rel_bias=False),
    dict(architecture="ffif", untie_rel_bias=False),
    dict(architecture="afaf", attention="adaptive_span", span_positions="learned", span_max=8,
         span_ramp=4),
    dict(architecture="supernet", attention="adaptive_span", span_positions="learned",
         span_max=6, span_ramp=2, init="pytorch"),
]


@pytest.mark.parametrize(
    "overrides", REAL_MODELS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())
)
@pytest.mark.slow
def test_param_count_equals_the_built_model(overrides):
    from model.families import build_model
    from model.transformer_xl.presets import preset_config

    config = preset_config("tiny", **overrides)
    model = build_model(config)
    trainable = sum(int(v.numpy().size) for v in model.trainable_variables)
    assert flops.param_count(config) == trainable
    # count_params also sees the two search-state scalars (tau, search_step).
    assert model.count_params() == trainable + 2
