"""The block registry (model/transformer_xl/blocks.py): a new block type is one entry.

A gated-linear-unit feed-forward block, written here and registered only
inside these tests, becomes the fourth candidate of every supernet block:
the supernet searches it end to end through the real trainer, derives,
plots and counts its FLOPs and parameters, and fixed architectures use its
letter, without any other file knowing about it.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.transformer_xl import blocks, flops


@keras.saving.register_keras_serializable(package="par_test")
class GatedFeedForward(keras.layers.Layer):
    """LN(x + W_o (sigmoid(W_g x) * W_v x)): a GLU feed-forward (Dauphin et al. 2017)."""

    def __init__(self, d_model, d_ffn, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.d_ffn = int(d_model), int(d_ffn)
        self.gate = keras.layers.Dense(self.d_ffn, name="gate", dtype=self.dtype_policy)
        self.value = keras.layers.Dense(self.d_ffn, name="value", dtype=self.dtype_policy)
        self.out = keras.layers.Dense(self.d_model, name="out", dtype=self.dtype_policy)
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm",
                                                    dtype=self.dtype_policy)

    def build(self, input_shape):
        inner = tuple(input_shape[:-1]) + (self.d_ffn,)
        self.gate.build(input_shape)
        self.value.build(input_shape)
        self.out.build(inner)
        self.norm.build(input_shape)
        super().build(input_shape)

    def call(self, x, training=False):
        return self.norm(x + self.out(tf.sigmoid(self.gate(x)) * self.value(x)))

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "d_ffn": self.d_ffn}


def _make_glu(config, name, dtype, supernet=False):
    return GatedFeedForward(config.d_model, config.d_ffn, dtype=dtype, name=name)


def _glu_flops(config, seq_len, mem_len, batch_size, span=None):
    return 6.0 * config.d_model * config.d_ffn  # three D x F products, 2 FLOPs a multiply-add


def _glu_params(config):
    d, f = config.d_model, config.d_ffn
    return 2 * (d * f + f) + f * d + d + 2 * d


GLU = blocks.BlockSpec("glu", "g", _make_glu, False, _glu_flops, _glu_params, "#2ca02c")


@pytest.fixture
def glu_registered():
    blocks.register(GLU)
    try:
        yield GLU
    finally:
        blocks.unregister("g")
    assert blocks.letters() == "afi"


def test_the_three_types_keep_their_checkpoint_order():
    assert blocks.letters() == "afi"
    assert blocks.names() == ("attention", "dense", "identity")
    assert [s.carries_memory for s in blocks.specs()] == [True, False, False]
    with pytest.raises(ValueError, match="already registered"):
        blocks.register(blocks.BlockSpec("other", "a", _make_glu, False, _glu_flops,
                                         _glu_params, "#000000"))
    with pytest.raises(ValueError, match="unknown block letter 'g'"):
        blocks.get("g")


def test_a_fixed_architecture_uses_the_new_letter(glu_registered):
    from model.families import build_model
    from model.transformer_xl.presets import preset_config

    config = preset_config("tiny", architecture="gfga", dropout=0.0)
    model = build_model(config)
    assert [layer.name for layer in model.blocks] == [
        "block_0_glu", "block_1_dense", "block_2_glu", "block_3_attention"]
    assert model.num_mems == 1
    assert flops.param_count(config) == sum(int(np.prod(v.shape))
                                            for v in model.trainable_variables)
    counted = flops.forward_flops_per_token(config, seq_len=8, batch_size=2)
    assert counted["glu"] == 2 * _glu_flops(config, 8, 8, 2)
    assert (counted["num_glu"], counted["num_dense"], counted["num_attention"]) == (2, 1, 1)
    assert counted["blocks"] == pytest.approx(
        counted["glu"] + counted["dense"] + counted["attention"])
    hidden, mems = model(tf.zeros([2, 5], tf.int32), model.initial_state(2))
    assert hidden.shape == (2, 5, config.d_model) and len(mems) == 1


@pytest.mark.slow
def test_a_supernet_searches_derives_and_plots_four_candidates(glu_registered, word_data,
                                                               tmp_path):
    from absl import flags

    from model.families import build_model
    import train as train_cli
    from training.plugins.par_search import derive, plots
    from training.run.loop import train

    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={word_data}", f"--model_dir={tmp_path / 'run'}",
        "--preset=tiny", "--max_steps=12", "--arch_warmup_steps=0", "--arch_learning_rate=0.3",
        "--freeze_threshold=0", "--log_interval=2", "--eval_interval=0", "--sample_tokens=0",
        f"--logdir={tmp_path / 'logs'}"])
    config = train_cli.config_from_flags(fv)[0]
    supernet = build_model(config.model)
    assert [tuple(b.arch_logits.shape) for b in supernet.blocks] == [(4,)] * 4
    assert hasattr(supernet.blocks[0], "glu_layer")
    assert flops.param_count(config.model) == sum(
        int(np.prod(v.shape)) for v in supernet.trainable_variables)

    results = train(config)
    run = tmp_path / "run"
    architecture = json.loads((run / "architecture.json").read_text())
    assert len(architecture["probabilities"][0]) == 4
    assert architecture["counts"].keys() == {"attention", "dense", "identity", "glu"}
    assert sum(architecture["counts"].values()) == 4
    assert results["architecture"] == architecture["architecture"]
    history = plots.ArchHistory.load(run)
    assert history.choices == ("attention", "dense", "identity", "glu")
    assert history.probs.shape == (6, 4, 4)
    assert (run / "arch_history.png").stat().st_size > 0
    assert (run / "arch_history.gif").stat().st_size > 0
    # The derivation reads the fourth column as "g" and counts its FLOPs.
    probs = np.full((4, 4), 0.1)
    probs[[0, 1, 2, 3], [3, 0, 3, 1]] = 0.7
    report = derive.derivation_report(config.model, probs, seq_len=16, mem_len=8,
                                     batch_size=2)
    assert report["architecture"] == "gagf"
    assert report["counts"]["glu"] == 2
    assert report["flops"]["glu"] == 2 * _glu_flops(config.model, 16, 8, 2)
    assert report["params"] == flops.param_count(config.model, "gagf")
    assert derive.read_architecture("gagf", num_blocks=4) == "gagf"
