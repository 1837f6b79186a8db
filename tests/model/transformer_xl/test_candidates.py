"""A config records the block types its supernet chooses among (`ModelConfig.candidates`).

A new config takes every type registered when it is made; a config written
before the field existed loads with the three built-in types its run searched,
whatever is registered now. The supernet, FLOPs and parameter counts and the
search plug-in's derivation read the config's candidates. A fourth type, a
second dense layer registered only inside these tests, shows both sides.
"""

import json
import pathlib

import numpy as np
import pytest

from model.transformer_xl import blocks, flops
from model.transformer_xl.config import ModelConfig

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "pre_house"
EXTRA = blocks.BlockSpec("extra_dense", "e", blocks.DENSE.make_layer, False,
                         blocks.DENSE.flops_per_token, blocks.DENSE.param_count, "#9467bd")
SMALL = dict(vocab_size=100, d_model=16, num_heads=2, d_ffn=32, num_blocks=4, mem_len=4,
             dropout=0.0)


@pytest.fixture
def extra_registered():
    blocks.register(EXTRA)
    try:
        yield EXTRA
    finally:
        blocks.unregister(EXTRA.letter)
    assert blocks.letters() == "afi"


def _count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


def _without_candidates(config):
    values = config.to_dict()
    del values["candidates"]
    return values


# ------------------------------------------------------------------ the config


def test_a_new_config_records_the_registered_letters_and_round_trips():
    from model.families import get_family
    from model.transformer_xl.presets import preset_config

    config = ModelConfig(vocab_size=64)
    assert config.candidates == blocks.letters() == "afi"
    assert preset_config("tiny").candidates == "afi"
    assert get_family("transformer_xl").preset_config("tiny").candidates == "afi"
    written = json.loads(json.dumps(config.to_dict()))
    assert written["candidates"] == "afi"
    assert ModelConfig.from_dict(written) == config
    chosen = config.replace(candidates="fa")
    assert ModelConfig.from_dict(chosen.to_dict()).candidates == "fa"
    assert [s.name for s in chosen.candidate_specs] == ["dense", "attention"]


def test_a_dict_without_candidates_loads_as_the_three_builtin_types():
    values = _without_candidates(ModelConfig(**SMALL, candidates="af"))
    assert ModelConfig.from_dict(values).candidates == "afi"
    old = json.loads((FIXTURES / "transformer_xl" / "run" / "config.json").read_text())["model"]
    assert "candidates" not in old
    assert ModelConfig.from_dict(old).candidates == "afi"


@pytest.mark.parametrize("value,problem", [
    ("", "is empty"), ("ax", "unregistered letters ['x']"), ("afa", "repeats a letter")])
def test_candidates_are_checked(value, problem):
    with pytest.raises(ValueError, match=r"candidates=") as error:
        ModelConfig(**SMALL, candidates=value)
    assert problem in str(error.value) and blocks.describe() in str(error.value)
    with pytest.raises(ValueError, match="candidates must be a string"):
        ModelConfig(**SMALL, candidates=3)


def test_a_fixed_architecture_needs_registered_letters_not_candidates():
    config = ModelConfig(**SMALL, candidates="af", architecture="aifi")
    assert config.candidates == "af"
    with pytest.raises(ValueError, match="architecture='aexa'"):
        ModelConfig(**SMALL, architecture="aexa")
    assert [s.letter for s in config.block_specs()] == ["a", "f", "i"]


# ----------------------------------------------------- a fourth registered type


def test_a_registered_type_joins_new_configs_and_their_supernet(extra_registered):
    import tensorflow as tf

    from model.families import build_model, get_family
    from model.transformer_xl.presets import preset_config

    assert ModelConfig(**SMALL).candidates == "afie"
    assert preset_config("tiny").candidates == "afie"
    config = get_family("transformer_xl").preset_config("tiny", dropout=0.0)
    assert config.candidates == "afie"
    assert ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    model = build_model(config)
    assert [tuple(b.arch_logits.shape) for b in model.blocks] == [(4,)] * config.num_blocks
    assert [s.letter for s in model.blocks[0].candidates] == list("afie")
    assert hasattr(model.blocks[0], "extra_dense_layer")
    assert flops.param_count(config) == _count(model.trainable_variables)
    counted = flops.forward_flops_per_token(config, seq_len=8, batch_size=2)
    dense = blocks.DENSE.flops_per_token(config, 8, config.mem_len, 2)
    assert counted["extra_dense"] == counted["dense"] == config.num_blocks * dense
    assert counted["num_extra_dense"] == config.num_blocks
    hidden, _ = model(tf.zeros([2, 5], tf.int32), model.initial_state(2), training=True)
    assert hidden.shape == (2, 5, config.d_model)


@pytest.mark.parametrize("saved", ["without the field", "afi"])
def test_a_three_candidate_supernet_restores_while_a_fourth_is_registered(saved, tmp_path):
    import tensorflow as tf

    from model.families import build_model
    from runstore.checkpoints import CheckpointError, model_checkpoint, restore_model_variables

    config = ModelConfig(**SMALL)
    values = _without_candidates(config) if saved == "without the field" else config.to_dict()
    model = build_model(ModelConfig.from_dict(values))
    rng = np.random.default_rng(0)
    for v in model.trainable_variables:
        v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
    logits = [v.numpy() for v in model.arch_variables]
    weights = [v.numpy() for v in model.variables]
    ids = tf.constant(rng.integers(0, SMALL["vocab_size"], (2, 6)), tf.int32)
    expected = model(ids, model.initial_state(2), training=False)[0].numpy()
    prefix = model_checkpoint(model).save(str(tmp_path / "ckpt"))  # as the trainer saves
    (tmp_path / "config.json").write_text(json.dumps(values))

    blocks.register(EXTRA)
    try:
        loaded = ModelConfig.from_dict(json.loads((tmp_path / "config.json").read_text()))
        assert loaded.candidates == "afi" and ModelConfig(**SMALL).candidates == "afie"
        restored = build_model(loaded)
        assert [tuple(v.shape) for v in restored.arch_variables] == [(3,)] * 4
        assert not hasattr(restored.blocks[0], "extra_dense_layer")
        restore_model_variables(restored, prefix)
        for got, want in zip(restored.arch_variables, logits):
            np.testing.assert_array_equal(got.numpy(), want)
        for got, want in zip(restored.variables, weights):
            np.testing.assert_array_equal(got.numpy(), want)
        got = restored(ids, restored.initial_state(2), training=False)[0].numpy()
        np.testing.assert_array_equal(got, expected)
        assert flops.param_count(loaded) == _count(restored.trainable_variables)
        with pytest.raises(CheckpointError):  # what reading the registry would build
            restore_model_variables(build_model(loaded.replace(candidates=None)), prefix)
    finally:
        blocks.unregister(EXTRA.letter)


def test_runs_and_keras_files_written_before_the_field_load_while_a_fourth_is_registered(
        extra_registered):
    """The pre_house fixtures (tests/test_compat.py): a 3-candidate supernet's run and
    `.keras` export give the old code's numbers with another type registered."""
    import keras

    from serving import generation

    data = json.loads((FIXTURES / "transformer_xl" / "expected.json").read_text())
    segment = np.array(data["segment"], np.int32)
    expected = np.array(data["log_probs"], np.float32)
    run = generation.load_run(str(FIXTURES / "transformer_xl" / "run"), checkpoint="latest")
    loaded = keras.saving.load_model(str(FIXTURES / "transformer_xl" / "model.keras"))
    for model in (run.model, loaded):
        assert model.model_config.candidates == "afi"
        assert [tuple(v.shape) for v in model.arch_variables] == [(3,)] * model.num_blocks
        hidden, _ = model(segment, model.initial_state(1, 0), training=False)
        np.testing.assert_allclose(np.asarray(model.log_probs(hidden))[0], expected, atol=2e-5)


# -------------------------------------------------- fewer candidates than types


def test_a_two_candidate_supernet_counts_and_derives_only_its_candidates():
    from model.families import build_model
    from training.plugins.par_search import derive
    from training.plugins.par_search.costs import candidate_costs

    config = ModelConfig(**SMALL, candidates="af")
    model = build_model(config)
    assert [tuple(v.shape) for v in model.arch_variables] == [(2,)] * 4
    assert [s.name for s in model.blocks[0].candidates] == ["attention", "dense"]
    assert flops.param_count(config) == _count(model.trainable_variables)
    counted = flops.forward_flops_per_token(config, seq_len=4, batch_size=2)
    assert "identity" not in counted
    assert counted["blocks"] == 4 * (
        blocks.ATTENTION.flops_per_token(config, 4, 4, 2)
        + blocks.DENSE.flops_per_token(config, 4, 4, 2))

    costs, fixed = candidate_costs(config, seq_len=4, mem_len=4, batch_size=2)
    all_costs, all_fixed = candidate_costs(config.replace(candidates="afi"), seq_len=4, mem_len=4,
                                           batch_size=2)
    np.testing.assert_array_equal(costs, all_costs[:2])
    assert fixed == all_fixed

    # Identity would win every block of an "afi" search with these numbers.
    probs = np.array([[0.4, 0.6], [0.9, 0.1], [0.5, 0.5], [0.2, 0.8]])
    report = derive.derivation_report(config, probs, seq_len=4, mem_len=4, batch_size=2)
    assert report["architecture"] == "faaf"
    assert report["counts"] == {"attention": 2, "dense": 2}
    assert report["flops"] == flops.forward_flops_per_token(config, "faaf", 4, 4, 2)
    assert report["params"] == flops.param_count(config, "faaf")
    np.testing.assert_array_equal(report["probabilities"], probs)
    with pytest.raises(ValueError, match=r"\[num_blocks, 2\]"):
        derive.derivation_report(config, np.full((4, 3), 1 / 3), seq_len=4, mem_len=4,
                                 batch_size=2)
    model.blocks[0].arch_logits.assign([0.0, 1.0])
    assert model.derived_architecture[0] == "f" and "i" not in model.derived_architecture
    np.testing.assert_allclose(model.arch_probabilities[0].numpy(),
                               np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum(), rtol=1e-6)


def test_the_candidates_order_is_the_logits_columns_order():
    from model.families import build_model
    from training.plugins.par_search import derive

    config = ModelConfig(**SMALL, candidates="if")
    model = build_model(config)
    assert [s.letter for s in model.blocks[0].candidates] == ["i", "f"]
    assert model.attention_layers == []
    for block in model.blocks:
        block.arch_logits.assign([2.0, 0.0])
    assert model.derived_architecture == "iiii"
    probs = np.array([[0.9, 0.1], [0.1, 0.9], [0.5, 0.5], [0.3, 0.7]])
    assert derive.architecture_from_probs(probs, config.candidates) == "ifif"


def test_a_supernet_without_attention_owns_no_shared_attention_weights():
    from model.families import build_model

    config = ModelConfig(**SMALL, candidates="fi", untie_rel_bias=False)
    model = build_model(config)
    assert model.content_bias is None and model.attention_layers == []
    assert flops.param_count(config) == _count(model.trainable_variables)
    with_attention = build_model(config.replace(candidates="fia"))
    assert with_attention.content_bias is not None
    assert flops.param_count(with_attention.model_config) == _count(
        with_attention.trainable_variables)


def test_a_fixed_network_reports_one_hot_over_its_candidates():
    from model.families import build_model

    model = build_model(ModelConfig(**SMALL, candidates="fa", architecture="afif"))
    np.testing.assert_array_equal(model.arch_probabilities.numpy(),
                                  np.eye(3)[[1, 0, 2, 0]].astype(np.float32))
