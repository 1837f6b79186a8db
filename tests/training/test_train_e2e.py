"""End to end on a tiny build of real WikiText-2: train, evaluate, log, derive."""

import json
import math

import numpy as np
import pytest

STEPS = 30


@pytest.fixture(scope="module")
def supernet_run(tiny_config_factory, tmp_path_factory):
    """A 30-step supernet search; returns (config, metrics, callback events)."""
    from training.run.loop import Callback, train

    events = []

    class Recorder(Callback):
        def on_train_log(self, step, logs):
            events.append(("log", step, logs["loss"]))

        def on_evaluate(self, split, step, results):
            events.append((split, step, results["nll"]))

        def on_train_end(self, results):
            events.append(("end", results["step"], results["last"]["test"]["nll"]))

    model_dir = tmp_path_factory.mktemp("search") / "run"
    config = tiny_config_factory(model_dir, max_steps=STEPS, log_interval=5, eval_interval=15,
                                 checkpoint_interval=15, arch_warmup_steps=5, sample_tokens=8)
    return config, train(config, callbacks=[Recorder()]), events


def _load_model(config, checkpoint):
    """A fresh model with the weights of `checkpoint` (read by hand, not by the trainer)."""
    import tensorflow as tf

    from model.families import build_model

    model = build_model(config.model)
    reader = tf.train.load_checkpoint(checkpoint)
    for i, variable in enumerate(model.variables):
        variable.assign(reader.get_tensor(f"model/{i}/.ATTRIBUTES/VARIABLE_VALUE"))
    return model


def _direct_metrics(model, config, split):
    """Split metrics from the model's full log-probabilities, summed in float64.

    The whole split, as the trainer scores it: the build's records, then the
    tail after them (`{split}-tail.txt`) continuing row B-1 at batch 1 in
    windows of T, the last one shorter."""
    import tensorflow as tf

    import data_utils

    meta = data_utils.load_meta(config.data_dir)
    info = meta["splits"][split]

    @tf.function(reduce_retracing=True)
    def forward(inputs, mems):
        hidden, mems = model(inputs, mems, training=False, mem_len=config.eval_mem_len)
        return model.log_probs(hidden), mems  # [B, T, V]

    def score(log_probs, targets):
        picked = np.take_along_axis(np.asarray(log_probs, dtype=np.float64),
                                    np.asarray(targets)[..., None], axis=-1)
        return -picked.sum(), picked.size

    mems = model.initial_mems(info["batch_size"], config.eval_mem_len)
    total, tokens = 0.0, 0
    for inputs, targets in data_utils.make_dataset(config.data_dir, split, meta=meta):
        log_probs, mems = forward(inputs, mems)
        nll, count = score(log_probs, targets)
        total, tokens = total + nll, tokens + count
    stream, seq_len = data_utils.read_stream(config.data_dir, split, meta), meta["seq_len"]
    mems = [m[-1:] for m in mems]  # row B-1 continues into the tail
    for start in range(tokens, len(stream) - 1, seq_len):
        stop = min(start + seq_len, len(stream) - 1)
        log_probs, mems = forward(stream[None, start:stop], mems)
        nll, count = score(log_probs, stream[None, start + 1:stop + 1])
        total, tokens = total + nll, tokens + count
    assert tokens == info["ids"] - 1
    return {"nll": total / tokens, "perplexity": math.exp(total / tokens),
            "word_perplexity": math.exp(total / info["words"]),
            "bits_per_byte": total / math.log(2) / info["bytes"], "tokens": tokens}


@pytest.mark.slow
def test_loss_falls_and_callbacks_see_it(supernet_run):
    from training.run.loop import read_training_log

    config, metrics, events = supernet_run
    log = read_training_log(f"{config.model_dir}/training_log.log")
    assert [row["step"] for row in log] == list(range(5, STEPS + 1, 5))
    assert log[-1]["loss"] < log[0]["loss"] - 0.5
    assert all(math.isclose(row["ppl"], math.exp(row["loss"]), rel_tol=1e-4) for row in log)
    logged = [(step, loss) for kind, step, loss in events if kind == "log"]
    assert [s for s, _ in logged] == [row["step"] for row in log]
    assert [loss for _, loss in logged] == pytest.approx([row["loss"] for row in log], abs=1e-6)
    evaluations = [(kind, step) for kind, step, _ in events if kind in ("valid", "test")]
    assert evaluations == [("valid", 15), ("valid", 30), ("test", 30)]
    assert events[-1] == ("end", STEPS, metrics["last"]["test"]["nll"])


@pytest.mark.slow
def test_metrics_equal_direct_recomputation(supernet_run):
    config, metrics, _ = supernet_run
    assert metrics["step"] == STEPS and metrics["last"]["step"] == STEPS
    with open(f"{config.model_dir}/metrics.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert saved == json.loads(json.dumps(metrics))
    model = _load_model(config, f"{config.model_dir}/ckpt-{STEPS}")
    for split in ("valid", "test"):
        direct = _direct_metrics(model, config, split)
        reported = metrics["last"][split]
        assert reported["tokens"] == direct["tokens"]
        for key in ("nll", "perplexity", "word_perplexity", "bits_per_byte"):
            assert reported[key] == pytest.approx(direct[key], rel=2e-5), (split, key)
    best = metrics["best"]
    assert best["step"] in (15, 30)
    assert best["valid"]["nll"] <= metrics["last"]["valid"]["nll"]
    import tensorflow as tf

    best_model = _load_model(config, tf.train.latest_checkpoint(f"{config.model_dir}/best"))
    assert best["valid"]["nll"] == pytest.approx(
        _direct_metrics(best_model, config, "valid")["nll"], rel=2e-5)


@pytest.mark.slow
def test_outputs_and_tensorboard_tags(supernet_run):
    import glob
    import os

    import tensorflow as tf

    config, metrics, _ = supernet_run
    run = config.model_dir
    for name in ("config.json", "training_log.log", "metrics.json", "arch_history.json",
                 "arch_history.png", "arch_history.gif", "architecture.json",
                 "architecture.txt", "ckpt-15.index", "ckpt-30.index"):
        assert os.path.exists(os.path.join(run, name)), name
    assert glob.glob(os.path.join(run, "best", "ckpt-*.index"))
    # The run carries its tokenizer: it loads from model_dir/data alone and
    # encodes like the data's own.
    import data_utils

    copied = data_utils.load_tokenizer(os.path.join(run, "data"))
    original = data_utils.load_built(config.data_dir)[1]
    text = "the game was released in 2010 .\n"
    assert copied.encode(text) == original.encode(text)
    tags = {}
    for split in ("train", "valid", "test"):
        tags[split] = set()
        for path in glob.glob(os.path.join(config.logdir, split, "events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(path):
                tags[split].update(v.tag for v in event.summary.value)
    expected_train = {"train/loss", "train/perplexity", "train/bits_per_token", "train/lr_weights",
                      "train/lr_arch", "train/tau", "train/step_time", "train/tokens_per_sec",
                      "train/grad_norm", "arch/block_00/attention", "arch/block_03/identity",
                      "arch/probabilities", "sample"}
    assert expected_train <= tags["train"]
    for split in ("valid", "test"):
        assert {f"{split}/{k}" for k in ("loss", "perplexity", "bits_per_token",
                                         "word_perplexity", "bits_per_byte")} <= tags[split]
    assert metrics["derivation"]["architecture"] == metrics["architecture"]
    assert open(os.path.join(run, "architecture.txt")).read().split()[0] == \
        metrics["architecture"]


@pytest.mark.slow
def test_derived_architecture_trains_from_scratch(supernet_run, tmp_path):
    from absl import flags

    import train as train_cli
    from training.run.loop import train

    config, metrics, _ = supernet_run
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={config.data_dir}", f"--model_dir={tmp_path / 'derived'}",
        "--preset=tiny", f"--architecture={config.model_dir}", "--max_steps=4",
        "--sample_tokens=0", "--eval_max_records=4", f"--logdir={tmp_path / 'logs'}"])
    derived, _ = train_cli.config_from_flags(fv)
    assert derived.model.architecture == metrics["architecture"]
    assert derived.model.architecture != "supernet"
    result = train(derived)
    assert result["architecture"] == metrics["architecture"]
    assert "derivation" not in result
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(tmp_path / "derived" / "ckpt-4"))
    assert not [n for n in reader.get_variable_to_shape_map() if n.startswith("arch_optimizer/")]


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(make_config, tmp_path):
    import tensorflow as tf

    from training.run.loop import NonFiniteError, train

    # A learning rate of 1e30 makes the first update explode the weights.
    config = make_config(model_dir=tmp_path / "nan", learning_rate=1e30, max_steps=10,
                         checkpoint_interval=1, sample_tokens=0)
    with pytest.raises(NonFiniteError, match=r"at step 2\b"):
        train(config)
    latest = tf.train.latest_checkpoint(str(tmp_path / "nan"))
    assert latest.endswith("ckpt-1")
    reader = tf.train.load_checkpoint(latest)
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        if np.issubdtype(np.asarray(value).dtype, np.floating):
            assert np.all(np.isfinite(value)) or name.startswith("state/best"), name


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_steps(make_config, tiny_data, precision):
    import keras
    import tensorflow as tf

    import data_utils
    from model.families import build_model
    from training.run.trainer import Trainer

    meta = data_utils.load_meta(str(tiny_data))
    batches = list(data_utils.make_dataset(str(tiny_data), "train", meta=meta).take(3))
    config = make_config(precision=precision)
    try:
        trainer = Trainer(config, meta, tf.distribute.get_strategy())
        # The first step's loss, in float32 from the same initial weights.
        keras.mixed_precision.set_global_policy("float32")
        reference = build_model(config.model)
        for a, b in zip(reference.variables, trainer.model.variables):
            a.assign(b)
        inputs, targets = batches[0]
        hidden, _ = reference(inputs, reference.initial_mems(inputs.shape[0]), training=True)
        expected = float(tf.reduce_mean(reference.token_nll(hidden, targets)))

        assert trainer.model.compute_dtype == precision.split("_")[1]
        assert all(m.dtype == trainer.model.compute_dtype for m in trainer.global_state())
        assert isinstance(trainer.optimizers["weights"], keras.optimizers.LossScaleOptimizer) == (
            precision == "mixed_float16")
        outs = [trainer.train_step(*batch) for batch in batches]
        assert all(out["finite"] for out in outs)
        assert outs[0]["loss"] == pytest.approx(expected, rel=1e-2)
        assert outs[-1]["loss"] < outs[0]["loss"]
        assert math.isfinite(trainer.evaluate("valid", 2)["nll"])
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow
def test_progress_lines_first_step_eta_and_evaluation(make_config, caplog, monkeypatch):
    import re

    from evaluation import stream
    import train as train_cli
    from training.run.loop import format_duration, train

    monkeypatch.setattr(stream, "PROGRESS_SECONDS", 0.0)
    caplog.set_level("INFO")
    # absl's own logger too: an earlier in-process CLI (optimal_cuts.main) may
    # have set absl's verbosity to WARNING for the rest of the session.
    caplog.set_level("INFO", logger="absl")
    config = make_config(max_steps=10, log_interval=5, sample_tokens=0, eval_max_records=3,
                         model_architecture="transformer_xl")
    train(config)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("step 1: tracing and compiling the training step") for m in messages)
    assert any(re.fullmatch(r"first step done in \d+\.\d s", m) for m in messages)
    step5 = next(m for m in messages if m.startswith("step 5/10 "))
    assert re.search(r" tokens/s eta (\d+m)?\d+s$", step5), step5
    # The shared stream evaluator's lines (evaluation/stream.py); --eval_max_records=3: the
    # first 3 records, no tail.
    assert any(re.fullmatch(r"evaluating valid: 1/3 segments \(33%\), \d+\.\d s, ETA \d+ s", m)
               for m in messages)
    assert (format_duration(3725), format_duration(185), format_duration(42.4)) == (
        "1h02m", "3m05s", "42s")
    # train.py logs one short line instead of the whole config (config.json has it).
    # Its length without the run directory (named twice), which is pytest's and longer
    # under a worker (.../pytest-N/popen-gw0/...): the bound is the one "< 300" gave with
    # the run directory of a run without workers (/tmp/pytest-of-root/pytest-NNN/
    # test_progress_lines_first_step0/run, 66 characters), with "<run>" in its place.
    summary = train_cli.config_summary(config)
    assert config.model_dir in summary and "transformer_xl" in summary
    assert len(summary.replace(config.model_dir, "<run>")) < 300 - 2 * (66 - len("<run>"))
