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
    with pytest.raises(baselines.BaselineError, match="--implementation=flax"):
        baselines.build_decoder(32, implementation="flax")


def test_training_batches_read_parallel_streams_each_window_once_per_epoch():
    stream = np.arange(103)  # 25 windows of 4 (+1 shared id): 3 rows of 8 windows
    seen = []
    for step in range(8):
        inputs, targets = baselines.training_windows(stream, 4, 3, step)
        np.testing.assert_array_equal(targets, inputs + 1)  # targets: the next ids
        assert list(inputs[:, 0]) == [4 * (8 * b + step) for b in range(3)]
        seen += list(inputs[:, 0])
    assert sorted(seen) == [4 * w for w in range(24)]
    np.testing.assert_array_equal(baselines.training_windows(stream, 4, 3, 8)[0],
                                  baselines.training_windows(stream, 4, 3, 0)[0])


def _tiny_decoder(implementation, seed=3):
    keras.utils.set_random_seed(seed)
    return baselines.build_decoder(29, d_model=16, num_layers=2, num_heads=2, d_ffn=32,
                                   context=6, dropout=0.1, implementation=implementation)


def test_keras_hub_decoder_loss_is_the_log_softmax_of_its_tied_logits():
    model = _tiny_decoder("keras_hub")
    rng = np.random.default_rng(1)
    inputs, targets = (rng.integers(0, 29, size=(3, 6)).astype("int32") for _ in range(2))
    logits = np.asarray(model(inputs, training=False), dtype="float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    loss = float(baselines.decoder_loss(model, inputs, targets, training=False))
    np.testing.assert_allclose(loss, -picked.mean(), rtol=1e-5)
    np.testing.assert_allclose(baselines.token_nll_fn(model)(inputs, targets), -picked,
                               rtol=1e-4, atol=1e-6)
    # The softmax is the token embedding itself (GPT-2's tied weights): logits = h E^T.
    table = np.asarray(model.get_layer("embedding").token_embedding.embeddings, "float64")
    final = keras.Model(model.input, model.get_layer("final_ln").output)
    hidden = np.asarray(final(inputs, training=False), dtype="float64")
    np.testing.assert_allclose(logits, hidden @ table.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("implementation", ["keras_hub", "keras"])
def test_decoder_is_causal(implementation):
    model = _tiny_decoder(implementation)
    ids = np.random.default_rng(2).integers(0, 29, size=(2, 6)).astype("int32")
    changed = ids.copy()
    changed[:, 4] = (changed[:, 4] + 7) % 29
    before, after = (np.asarray(model(x, training=False)) for x in (ids, changed))
    np.testing.assert_allclose(before[:, :4], after[:, :4], rtol=1e-6, atol=1e-6)
    assert np.abs(before[:, 4:] - after[:, 4:]).max() > 1e-4  # the change is seen from 4 on


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
@pytest.mark.parametrize("implementation", ["keras_hub", "keras"])
def test_sliding_nll_matches_a_per_target_loop(implementation):
    model = _tiny_decoder(implementation)
    nll = baselines.token_nll_fn(model)
    ids = np.random.default_rng(0).integers(0, 29, size=23).astype("int32")
    total, count = baselines.sliding_nll(nll, ids, 6, 1)
    assert count == 22
    np.testing.assert_allclose(total, _reference_nll(model, ids, 6), rtol=1e-5)
    # Batching the windows changes nothing.
    one = baselines.sliding_nll(nll, ids, 6, 3, batch_size=1)
    four = baselines.sliding_nll(nll, ids, 6, 3, batch_size=4)
    assert one[1] == four[1] == 22
    np.testing.assert_allclose(one[0], four[0], rtol=1e-6)
    # A context that holds the whole stream scores it in one window, whatever the stride.
    whole, _ = baselines.sliding_nll(nll, ids[:6], 6, 2)
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
    # The summary row is the run's metrics and its log's speed and time.
    row = baselines.summarize(tmp_path)["baselines/decoder"]
    assert row["parameters"] == metrics["parameters"] and row["steps"] == 3
    assert row["valid_perplexity"] == metrics["valid"]["perplexity"]
    assert row["test_bits_per_byte"] == metrics["test"]["bits_per_byte"]
    speeds = [float(line.split("tokens_per_sec=")[1]) for line in log]
    assert row["tokens_per_sec"] == speeds[1]  # the first interval (tracing) left out
    assert row["train_seconds"] == pytest.approx(2 * 32 / speeds[0] + 32 / speeds[1])
    assert (tmp_path / "summary.json").exists()


def test_transformer_xl_commands_use_the_same_build_and_steps(tmp_path):
    args = baselines.parse_args(["--data_dir=data/x", "--max_steps=7"])
    train, valid, test = baselines.transformer_xl_commands(args, tmp_path / "txl", tmp_path)
    assert train[0] == "./base_model.sh"  # the wt2_base recipe of docs/results/wt2_base_r3k.md
    assert "--data_dir=data/x" in train and "--max_steps=7" in train
    assert "--architecture=transformer_xl" in train and "--warmup_steps=300" in train
    assert [c[-2] for c in (valid, test)] == ["--split=valid", "--split=test"]
    assert all("--checkpoint=latest" in c for c in (valid, test))
    par = baselines.transformer_xl_commands(args, tmp_path / "par", tmp_path, "aaafaf")[0]
    assert "--architecture=aaafaf" in par


def test_tokens_per_step_must_fill_whole_windows(capsys):
    with pytest.raises(SystemExit):
        baselines.parse_args(["--tokens_per_step=1000", "--context=128"])
    assert "--tokens_per_step=1000 must be a multiple of --context=128" in capsys.readouterr().err


# The valid and test text of `byte_data`: lines of WikiText-2 valid (word_data's: 120 lines
# each, 29k and 34k bytes).
BYTE_EVAL_LINES = {"valid": (600, 610), "test": (720, 730)}


@pytest.fixture(scope="module")
def byte_data(tmp_path_factory, wikitext2_root):
    """A byte build (V 256, B 4, T 16) of WikiText-2 slices: word_data's train text, valid and
    test of 10 lines each (2k and 6k bytes). The driver scores every byte of both splits with
    each model (the decoder in windows of stride 8): what is checked (every transition
    scored once, bits per byte) does not depend on the length, the time does."""
    from tests.helpers.runs import LINES, build_data

    return build_data(tmp_path_factory.mktemp("byte_data"), wikitext2_root, "byte",
                      dict(LINES, **BYTE_EVAL_LINES))


def _checkpoint_weights(model_dir):
    """Weights of the model in a run's last checkpoint, counted from the checkpoint's own
    variable list (not from a built model): the float entries under model/ (not the
    optimizer's, nor the dropout layers' integer seed states)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    return sum(int(np.prod(shapes[name])) for name in shapes
               if name.startswith("model/") and dtypes[name].is_floating)


@pytest.mark.slow
def test_driver_runs_the_byte_level_models_end_to_end(byte_data, tmp_path):
    """The decoder, SHA-RNN and LSTM (tiny presets) train 3 steps of the same 64 bytes on a
    byte build, are scored on the whole valid and test splits and summarized."""
    out, runs = tmp_path / "bytes", tmp_path / "runs"
    code = baselines.main([f"--data_dir={byte_data}", f"--out_dir={out}", f"--runs_dir={runs}",
                           "--models=decoder,sha_rnn,lstm", "--recurrent_preset=tiny",
                           "--max_steps=3", "--context=16", "--tokens_per_step=64", "--stride=8",
                           "--d_model=16", "--num_heads=2", "--d_ffn=32", "--num_layers=2",
                           "--log_interval=1", "--recurrent_eval_records=2"])
    assert code == 0
    meta = json.loads((byte_data / "meta.json").read_text())
    assert meta["tokenizer"]["kind"] == "byte" and meta["batch_size"] * meta["seq_len"] == 64
    rows = baselines.summarize(tmp_path)
    assert sorted(rows) == ["bytes/decoder", "bytes/lstm", "bytes/sha_rnn"]
    for name in ("sha_rnn", "lstm"):
        commands = (out / name / "commands.txt").read_text().splitlines()
        assert commands[0].startswith("python3 train.py --model_family=sha_rnn "
                                      f"--preset={name}_tiny ")
        assert "--d_model=16" in commands[0] and "--boom_dim=32" in commands[0]
        assert (runs / "bytes" / "logs" / name).is_dir()  # TensorBoard's, beside the run
        for split in ("valid", "test"):
            scored = json.loads((out / name / f"{split}.json").read_text())
            info = meta["splits"][split]
            assert scored["tokens"] == info["ids"] - 1  # every transition of the whole split
            # bits per byte: the NLL of every byte, in bits, over the split's bytes
            assert scored["bits_per_byte"] == pytest.approx(
                scored["nll"] * scored["tokens"] / np.log(2) / info["bytes"])
            assert rows[f"bytes/{name}"][f"{split}_bits_per_byte"] == scored["bits_per_byte"]
        assert rows[f"bytes/{name}"]["steps"] == 3
        assert rows[f"bytes/{name}"]["architecture"] == name
        assert rows[f"bytes/{name}"]["parameters"] == _checkpoint_weights(runs / "bytes" / name)
    assert rows["bytes/sha_rnn"]["parameters"] > rows["bytes/lstm"]["parameters"]  # attention
    decoder = json.loads((out / "decoder" / "metrics.json").read_text())
    assert decoder["valid"]["tokens"] == meta["splits"]["valid"]["ids"] - 1
    assert json.loads((out / "decoder" / "config.json").read_text())["vocab_size"] == 256


@pytest.mark.parametrize("model,build", [("sha_rnn", "word"), ("lstm", "word"),
                                         ("transformer_xl", "byte"), ("par", "byte")])
def test_a_model_on_the_other_level_s_build_is_refused(model, build, word_data, byte_data,
                                                       tmp_path, capsys):
    data = {"word": word_data, "byte": byte_data}[build]
    out = tmp_path / "out"
    code = baselines.main([f"--data_dir={data}", f"--out_dir={out}",
                           f"--runs_dir={tmp_path / 'runs'}", f"--models=decoder,{model}"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: --models={model} needs")
    assert f"--data_dir={data}" in err
    assert not out.exists() and not (tmp_path / "runs").exists()  # nothing written


def test_decoder_ops_are_split_by_their_name_scope():
    component = baselines.decoder_component
    assert component("sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits/"
                     "SparseSoftmaxCrossEntropyWithLogits").startswith("loss")
    assert component("gradient_tape/plain_decoder_keras_hub_1/token_embedding_1/Tensordot/"
                     "MatMul/MatMul_1").startswith("token embedding")
    assert component("gradient_tape/plain_decoder_keras_hub_1/block1_1/feedforward_layer_norm_1"
                     "/mul_1/Mul_1") == "layer norms"
    assert component("plain_decoder_keras_hub_1/block2_1/self_attention_1/softmax_2_1/"
                     "SelectV2_1") == "attention"
    assert component("adam_w/AssignSubVariableOp_52") == "optimizer and clipping"
    assert component("AddN_20") == "other"


def test_profile_splits_the_op_time_of_the_decoder_step(word_data):
    args = baselines.parse_args([f"--data_dir={word_data}", "--context=8", "--tokens_per_step=32",
                                 "--d_model=16", "--num_heads=2", "--d_ffn=32", "--num_layers=1"])
    profile = baselines.profile_decoder(args, steps=2, warmup=1)
    assert profile["steps"] == 2 and profile["batch_size"] == 4
    for table in ("op_types", "components"):
        assert sum(e["fraction"] for e in profile[table]) == pytest.approx(1)
        assert sum(e["ms_per_step"] for e in profile[table]) == pytest.approx(
            profile["op_ms_per_step"])
    # The cross-entropy op is the loss component's.
    loss_ops = sum(e["ms_per_step"] for e in profile["op_types"]
                   if e["name"] == "SparseSoftmaxCrossEntropyWithLogits")
    loss = next(e for e in profile["components"] if e["name"].startswith("loss"))
    assert 0 < loss_ops <= loss["ms_per_step"]
    assert {e["name"] for e in profile["components"]} >= {"attention", "feed-forward",
                                                           "optimizer and clipping"}
