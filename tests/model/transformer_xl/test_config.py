"""Tests for model/transformer_xl/config.py: validation messages, helpers, JSON round trip."""

import json
import subprocess
import sys

import pytest

from model.transformer_xl.config import ModelConfig
from tests.helpers import PROJECT_ROOT


def make(**overrides):
    values = dict(
        vocab_size=64, d_model=32, num_heads=2, d_ffn=64, num_blocks=4, mem_len=8, cutoffs=(16, 32)
    )
    values.update(overrides)
    return ModelConfig(**values)


def test_defaults_are_valid_and_head_size_defaults_to_d_model_over_heads():
    config = ModelConfig(vocab_size=100)
    assert config.head_size == 32
    assert make(d_head=7).head_size == 7
    assert (
        make(d_model=30, num_heads=4, d_head=8).head_size == 8
    )  # explicit d_head lifts divisibility


@pytest.mark.parametrize(
    "architecture, num_blocks, resolved",
    [
        ("supernet", 5, "supernet"),
        ("transformer_xl", 6, "afafaf"),
        ("aafiaf", 6, "aafiaf"),
        ("iiii", 4, "iiii"),
    ],
)
def test_resolved_architecture(architecture, num_blocks, resolved):
    assert make(architecture=architecture, num_blocks=num_blocks).resolved_architecture == resolved


def test_json_round_trip_restores_tuples():
    config = make(
        cutoffs=(10, 20), proj_dims=(8, 4), architecture="afia", attention="adaptive_span"
    )
    data = json.loads(json.dumps(config.to_dict()))
    assert data["cutoffs"] == [10, 20]
    restored = ModelConfig.from_dict(data)
    assert restored == config
    assert restored.cutoffs == (10, 20) and isinstance(restored.proj_dims, tuple)
    hash(restored)  # stays hashable after lists became tuples


def test_from_dict_rejects_unknown_keys_by_name():
    data = make().to_dict()
    data["num_layers"] = 3
    with pytest.raises(ValueError, match=r"num_layers.*valid fields"):
        ModelConfig.from_dict(data)


def test_replace_validates_and_rejects_unknown_fields():
    config = make()
    assert config.replace(mem_len=3).mem_len == 3
    assert config.mem_len == 8  # frozen original unchanged
    with pytest.raises(ValueError, match="mem_len"):
        config.replace(mem_len=-2)
    with pytest.raises(ValueError, match="memlen"):
        config.replace(memlen=3)


def test_frozen():
    with pytest.raises(Exception):
        make().mem_len = 3


BAD_CONFIGS = [
    # (overrides, field the message must name)
    (dict(d_model=30, num_heads=4), "num_heads"),
    (dict(d_model=30, num_heads=4), "d_model"),
    (dict(d_model=9, num_heads=3), "even"),  # sinusoid needs an even D
    (dict(vocab_size=0), "vocab_size"),
    (dict(d_model=0), "d_model"),
    (dict(num_heads=0), "num_heads"),
    (dict(d_head=0), "d_head"),
    (dict(d_ffn=-1), "d_ffn"),
    (dict(num_blocks=0, architecture="supernet"), "num_blocks"),
    (dict(num_heads=2.0), "num_heads"),
    (dict(cutoffs=(32, 16)), "cutoffs"),
    (dict(cutoffs=(16, 16)), "cutoffs"),
    (dict(cutoffs=(16, 64)), "cutoffs"),  # the vocabulary size itself
    (dict(cutoffs=(16, 80)), "cutoffs"),
    (dict(cutoffs=(0, 16)), "cutoffs"),
    (dict(cutoffs=(16.5,)), "cutoffs"),
    (dict(proj_dims=(8,)), "proj_dims"),
    (dict(proj_dims=(8, 0)), "proj_dims"),
    (dict(proj_factor=0.5), "proj_factor"),
    (dict(architecture="afxa"), "architecture"),
    (dict(architecture="AFAF"), "architecture"),
    (dict(architecture="afa"), "architecture"),  # wrong length
    (dict(architecture="afafa"), "num_blocks"),
    (dict(architecture=""), "architecture"),
    (dict(architecture="transformer_xl", num_blocks=5), "num_blocks"),
    (dict(mem_len=-1), "mem_len"),
    (dict(attention="adaptive_span", span_max=16, span_ramp=32), "span_ramp"),
    (dict(attention="adaptive_span", span_max=0), "span_max"),
    (dict(attention="adaptive_span", span_ramp=0), "span_ramp"),
    (dict(span_init=1.5), "span_init"),
    (dict(span_init=-0.1), "span_init"),
    (dict(span_loss_coef=-1.0), "span_loss_coef"),
    (dict(dropout=1.0), "dropout"),
    (dict(dropout=-0.1), "dropout"),
    (dict(attn_dropout=1.0), "attn_dropout"),
    (dict(search_mode="gumbel"), "search_mode"),
    (dict(eval_mode="sample"), "eval_mode"),
    (dict(attention="linear"), "attention"),
    (dict(pre_norm=1), "pre_norm"),
    (dict(architecture=None), "architecture"),
]


@pytest.mark.parametrize("overrides, field", BAD_CONFIGS, ids=[f"{f}-{o}" for o, f in BAD_CONFIGS])
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        make(**overrides)


def test_importing_config_does_not_load_tensorflow():
    code = ("import sys, model.transformer_xl.config, model.transformer_xl.flops; "
            "print('tensorflow' in sys.modules)")
    root = PROJECT_ROOT
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
