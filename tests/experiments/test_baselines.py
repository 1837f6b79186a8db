"""experiments/baselines.py: the plain decoder's evaluation windows, its sliding NLL against a
per-target loop, and the driver end to end on a tiny build (a few steps, not the experiment)."""

import json

import keras
import numpy as np
import pytest

from experiments import baselines


@pytest.mark.parametrize("length,context,stride", [(2, 4, 1), (20, 4, 1), (20, 4, 3),
                                                    (21, 5, 5), (9, 16, 8)])
def test_every_target_is_scored_once_with_enough_context(length, context, stride):
    scored = []
    for start, first in baselines.scoring_windows(length, context, stride):
        targets = list(range(start + 1, min(start + context, length - 1) + 1))[first:]
        for target in targets:
            assert target - start >= min(target, context - stride + 1)  # tokens before it
        scored += targets
    assert scored == list(range(1, length))


def test_stride_outside_the_context_is_refused():
    with pytest.raises(baselines.BaselineError, match="--stride=9"):
        baselines.scoring_windows(20, 8, 9)
    with pytest.raises(baselines.BaselineError, match="--implementation=keras_hub"):
        baselines.build_decoder(32, implementation="keras_hub")


def _reference_nll(model, ids, context):
    """Per target, one forward pass over the (at most `context`) ids before it."""
    total = 0.0
    for j in range(1, len(ids)):
        inputs = ids[max(0, j - context):j][None]
        logits = np.asarray(model(inputs, training=False), dtype="float64")[0, -1]
        logits -= logits.max()
        total -= logits[ids[j]] - np.log(np.exp(logits).sum())
    return total


# The per-target reference scores the first target from a one-token prefix: attention over
# one key is a softmax over an axis of size 1 (exactly 1), which Keras warns about.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis:UserWarning")
def test_sliding_nll_matches_a_per_target_loop():


    keras.utils.set_random_seed(3)
    model = baselines.build_decoder(29, d_model=16, num_layers=2, num_heads=2, d_ffn=32,
                                    context=6, dropout=0.1)
    ids = np.random.default_rng(0).integers(0, 29, size=23).astype("int32")
    total, count = baselines.sliding_nll(lambda x: model(x, training=False), ids, 6, 1)
    assert count == 22
    np.testing.assert_allclose(total, _reference_nll(model, ids, 6), rtol=1e-5)
    # Batching the windows changes nothing.
    one = baselines.sliding_nll(lambda x: model(x, training=False), ids, 6, 3, batch_size=1)
    four = baselines.sliding_nll(lambda x: model(x, training=False), ids, 6, 3, batch_size=4)
    assert one[1] == four[1] == 22
    np.testing.assert_allclose(one[0], four[0], rtol=1e-6)
    # A context that holds the whole stream scores it in one window, whatever the stride.
    whole, _ = baselines.sliding_nll(lambda x: model(x, training=False), ids[:6], 6, 2)
    np.testing.assert_allclose(whole, _reference_nll(model, ids[:6], 6), rtol=1e-5)


def test_driver_trains_evaluates_and_writes_its_artefacts(word_data, tmp_path):
    out = tmp_path / "baselines"
    code = baselines.main([f"--data_dir={word_data}", f"--out_dir={out}", "--max_steps=3",
                           "--context=8", "--tokens_per_step=32", "--stride=4", "--d_model=16",
                           "--num_heads=2", "--d_ffn=32", "--num_layers=1", "--log_interval=2"])
    assert code == 0
    meta = json.loads((word_data / "meta.json").read_text())
    metrics = json.loads((out / "decoder" / "metrics.json").read_text())
    for split in ("valid", "test"):
        assert metrics[split]["tokens"] == meta["splits"][split]["ids"] - 1
        assert metrics[split]["perplexity"] == pytest.approx(np.exp(metrics[split]["nll"]))
        assert 1 < metrics[split]["perplexity"] < 10 * meta["vocab_size"]
    config = json.loads((out / "decoder" / "config.json").read_text())
    assert config["batch_size"] == 4 and config["parameters"] == metrics["parameters"]
    log = (out / "decoder" / "training_log.log").read_text().splitlines()
    assert [line.split()[0] for line in log] == ["step=2", "step=3"]


def test_transformer_xl_commands_use_the_same_build_and_steps(tmp_path):
    args = baselines.parse_args(["--data_dir=data/x", "--max_steps=7"])
    train, valid, test = baselines.transformer_xl_commands(args, tmp_path / "txl")
    assert "--data_dir=data/x" in train and "--max_steps=7" in train
    assert "--architecture=transformer_xl" in train
    assert [c[-2] for c in (valid, test)] == ["--split=valid", "--split=test"]


def test_tokens_per_step_must_fill_whole_windows(capsys):
    with pytest.raises(SystemExit):
        baselines.parse_args(["--tokens_per_step=1000", "--context=128"])
    assert "--tokens_per_step=1000 must be a multiple of --context=128" in capsys.readouterr().err
