"""The adaptive-span reference's options of the Transformer-XL family: learned key
positions (`span_positions="learned"`), PyTorch's initialisation (`init="pytorch"`),
and the presets that combine them."""

import numpy as np
import pytest

LEARNED = dict(attention="adaptive_span", span_positions="learned", span_max=8, span_ramp=2,
               span_init=0.5, dropout=0.0)


def _config(**overrides):
    from model.transformer_xl.presets import preset_config

    return preset_config("tiny", **overrides)


@pytest.mark.parametrize("overrides,pattern", [
    (dict(span_positions="learned"), r"span_positions='learned' .* applies to "
     r"attention='adaptive_span' only, got attention='relative': add --attention=adaptive_span"),
    (dict(LEARNED, span_max=16), r"span_max=16 is larger than mem_len=8: .* set --mem_len >= "
     r"--span_max or lower --span_max"),
    (dict(LEARNED, untie_rel_bias=False), r"untie_rel_bias=False shares relative biases .* "
     r"drop --nountie_rel_bias or use --span_positions=relative"),
    (dict(init="torch"), r"init"),
])
def test_options_that_do_not_apply_are_one_clear_error(overrides, pattern):
    with pytest.raises(ValueError, match=pattern) as error:
        _config(**overrides)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("architecture", ["afaf", "supernet"])
def test_learned_positions_segments_with_memory_equal_one_pass(architecture):
    """Two segments carrying memory score like one segment of both: the distances,
    the table rows and the window follow the absolute positions."""
    from model.families import build_model

    model = build_model(_config(architecture=architecture, mem_len=8, **LEARNED))
    assert model.key_positions is not None and tuple(model.key_positions.shape) == (8, 16)
    ids = np.random.default_rng(0).integers(0, 64, (2, 8)).astype("int32")
    whole, _ = model(ids, None, mem_len=8)
    first, mems = model(ids[:, :4], None, mem_len=8)
    second, _ = model(ids[:, 4:], mems, mem_len=8)
    np.testing.assert_allclose(np.concatenate([first, second], 1), whole, rtol=1e-5, atol=1e-5)
    # The table matters: zeroing it changes the scores.
    model.key_positions.assign(np.zeros((8, 16), "float32"))
    other, _ = model(ids, None, mem_len=8)
    assert np.abs(np.asarray(other) - np.asarray(whole)).max() > 1e-3


def test_pytorch_init_draws_pytorch_defaults_and_skips_the_embedding_scale():
    from model.families import build_model

    config = _config(architecture="afaf", init="pytorch", cutoffs=(), **LEARNED)
    model = build_model(config)
    weights = {w.path.split("/", 1)[1]: np.asarray(w.numpy()) for w in model.weights}
    d, f = config.d_model, config.d_ffn
    expected_bounds = {
        "block_0_attention/query_kernel": 1 / np.sqrt(d),
        "block_0_attention/output_kernel": 1 / np.sqrt(config.num_heads * config.head_size),
        "block_1_dense/inner_dense/kernel": 1 / np.sqrt(d),
        "block_1_dense/inner_dense/bias": 1 / np.sqrt(d),
        "block_1_dense/output_dense/kernel": 1 / np.sqrt(f),
        "block_1_dense/output_dense/bias": 1 / np.sqrt(f),
        "head_kernel": 1 / np.sqrt(d),
        "head_bias": 1 / np.sqrt(d),
    }
    for path, bound in expected_bounds.items():
        value = weights[path]
        assert np.abs(value).max() <= bound, path
        # Uniform on [-b, b]: standard deviation b / sqrt(3), not a tighter init.
        assert np.std(value) == pytest.approx(bound / np.sqrt(3), rel=0.35), path
    assert np.std(weights["embedding/embeddings"]) == pytest.approx(1.0, rel=0.1)
    assert np.std(weights["key_positions"]) == pytest.approx(1.0, rel=0.2)
    np.testing.assert_array_equal(weights["block_0_attention/layer_norm/gamma"], 1.0)
    # The same seed draws the same weights.
    again = {w.path.split("/", 1)[1]: np.asarray(w.numpy()) for w in build_model(config).weights}
    np.testing.assert_array_equal(again["block_0_attention/query_kernel"],
                                  weights["block_0_attention/query_kernel"])
    # No sqrt(D) scale: with every block an identity the hidden state is the embedding.
    plain = build_model(_config(architecture="iiii", init="pytorch", cutoffs=()))
    ids = np.array([[1, 2, 3]], "int32")
    hidden, _ = plain(ids, None)
    table = plain.embedding.embeddings.numpy()
    np.testing.assert_allclose(hidden, table[ids], rtol=1e-6)
    scaled = build_model(_config(architecture="iiii", cutoffs=()))
    hidden, _ = scaled(ids, None)
    np.testing.assert_allclose(hidden, scaled.embedding.embeddings.numpy()[ids] * np.sqrt(d),
                               rtol=1e-6)
