"""Tests for model/transformer_xl/presets.py: presets and config -> model."""

import numpy as np
import pytest
import tensorflow as tf

from model.families import build_model
from model.transformer_xl import flops
from model.transformer_xl.config import ModelConfig
from model.transformer_xl.model import TransformerXLLM
from model.transformer_xl.presets import PRESETS, preset_config


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_config(name):
    config = preset_config(name)
    assert isinstance(config, ModelConfig)
    assert config.d_model % config.num_heads == 0


def test_preset_values():
    tiny = preset_config("tiny")
    assert (tiny.vocab_size, tiny.d_model, tiny.num_heads, tiny.d_ffn, tiny.num_blocks,
            tiny.mem_len) == (64, 32, 2, 64, 4, 8)
    assert tiny.cutoffs == (16, 32)
    base = preset_config("wt2_base")
    assert (base.vocab_size, base.d_model, base.num_heads, base.d_ffn, base.num_blocks,
            base.mem_len) == (12000, 128, 4, 512, 6, 16)
    assert base.dropout == 0.1 and base.cutoffs == (1000, 3845)
    large = preset_config("wt2_large")
    assert (large.d_model, large.num_heads, large.d_ffn, large.num_blocks) == (256, 8, 1024, 12)
    assert large.mem_len == 64 and large.cutoffs == (1000, 3495)
    enwik8 = preset_config("enwik8")
    assert enwik8.vocab_size == 256 and enwik8.cutoffs == () and enwik8.mem_len == 512
    span = preset_config("enwik8_span")
    assert (span.attention, span.span_max, span.span_ramp) == ("adaptive_span", 1024, 32)
    assert span.mem_len == span.span_max  # memory covers the largest span
    assert span.replace(attention="relative", mem_len=512) == enwik8


def test_overrides_and_errors():
    config = preset_config("tiny", architecture="transformer_xl", mem_len=3)
    assert config.resolved_architecture == "afaf" and config.mem_len == 3
    with pytest.raises(ValueError, match=r"unknown model preset 'base'.*tiny.*wt2_base"):
        preset_config("base")
    with pytest.raises(ValueError, match="num_layers"):
        preset_config("tiny", num_layers=3)
    with pytest.raises(ValueError, match="mem_len"):
        preset_config("tiny", mem_len=-1)
    with pytest.raises(TypeError, match="ModelConfig"):
        build_model(PRESETS["tiny"])


def test_build_model_unpacks_every_field_and_builds_the_weights():
    config = preset_config(
        "tiny", architecture="afia", attention="adaptive_span", span_max=16, span_ramp=4,
        span_init=0.25, adaptive_input=True, final_norm=True, seed=7, eval_mode="expected",
        dropout=0.2)
    model = build_model(config)
    assert isinstance(model, TransformerXLLM) and model.built
    assert ModelConfig.from_dict(model.get_config()["config"]) == config
    assert model.model_config == config and model.span_max == 16  # fields readable as attributes
    assert flops.param_count(config) == sum(
        int(np.prod(v.shape)) for v in model.trainable_variables
    )
    np.testing.assert_allclose(np.asarray(model.spans[0]), [4.0, 4.0])
    hidden, mems = model(tf.zeros([2, 3], tf.int32))
    assert hidden.shape == (2, 3, 32) and len(mems) == 2


def test_package_reexports_lazily():
    import model

    assert model.build_model is build_model and model.TransformerXLLM is TransformerXLLM
    with pytest.raises(AttributeError):
        model.no_such_name


def test_wt2_base_size_matches_flops_param_count():
    config = preset_config("wt2_base")
    model = build_model(config)
    assert model.count_params() == flops.param_count(config) + 2  # + tau, search_step
