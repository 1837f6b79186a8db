"""The stream evaluator (evaluation/stream.py), serving.evaluation and evaluate.py: every
transition once, against independent references.

The references never use the evaluator: a slow loop over the stream that
calls the model eagerly at batch 1, row by row, carrying the state by hand
and counting how often each transition is scored; and, for same_length, a
window of block inputs recomputed per position with plain attention. The
trainer scores through the same evaluator, so its metrics.json (runs trained
for a few steps by training.run.loop.train) must give evaluate.py's figures
exactly: one figure per split. Every registered family runs, with its tiny preset
(Transformer-XL: tiny, SHA-RNN: sha_rnn_tiny).
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.families import names
from tests.helpers.runs import LINES, make_run

PROJECT_ROOT = str(PROJECT_ROOT)
ENV = dict(os.environ, PYTHONPATH=PROJECT_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
FAMILIES = names()  # the registry's, in its order
EVAL_MEM_LEN = 8


@pytest.fixture(scope="module")
def data(word_data):
    """A word build (V 256, B 4, T 16) of WikiText-2 slices; valid has a 50-id tail."""
    return word_data


@pytest.fixture(scope="module")
def runs(trained_run):
    """family -> model_dir of a run trained 4 steps (evaluated on every record)."""
    from training.setup.config import TrainConfig

    out = {family: trained_run(family) for family in FAMILIES}
    for model_dir in out.values():
        config = TrainConfig.load(model_dir)
        assert (config.max_steps, config.eval_mem_len, config.eval_max_records) == (
            4, EVAL_MEM_LEN, 0)
    return out


def reference_nll(model, stream, batch_size, seq_len, mem_len, last_row_only=False):
    """Per-transition NLL from a batch-1 loop over the evaluation's rows, one at a time.

    Row b covers transitions [b*R*T, (b+1)*R*T), R = (L - 1) // (B*T); the
    transitions after the last row continue row B-1. Each row runs alone from
    the zero state, segment by segment, the state carried by hand (the model
    call is compiled only for speed).

    Returns:
        (float64 [L - 1] NLL of transition k (ids[k] -> ids[k + 1]), int [L - 1]
        how many times each transition was scored).
    """
    import tensorflow as tf

    stream = np.asarray(stream, np.int32)
    transitions = len(stream) - 1
    per_row = transitions // (batch_size * seq_len) * seq_len
    nll, seen = np.zeros(transitions), np.zeros(transitions, int)
    spans = [(b * per_row, (b + 1) * per_row) for b in range(batch_size)]
    spans[-1] = (spans[-1][0], transitions)  # the tail continues the last row

    @tf.function(reduce_retracing=True)
    def segment(inputs, targets, state):
        hidden, state = model(inputs, state, training=False, mem_len=mem_len)
        return model.token_nll(hidden, targets)[0], state

    for start, stop in spans[-1:] if last_row_only else spans:
        state = model.initial_state(1, mem_len)
        for s in range(start, stop, seq_len):
            e = min(s + seq_len, stop)
            values, state = segment(stream[None, s:e], stream[None, s + 1:e + 1], state)
            nll[s:e] += values.numpy()
            seen[s:e] += 1
    return nll, seen


def _stream(data, split):
    import data_utils

    return data_utils.read_stream(str(data), split)


# ---------------------------------------------------------------- library


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("batch_size,seq_len,mem_len", [(3, 7, 5), (1, 16, 8)])
def test_every_transition_once_against_a_slow_loop(runs, data, family, batch_size, seq_len,
                                                   mem_len):
    from evaluation.stream import StreamEvaluator
    from serving.generation import load_run

    run = load_run(runs[family])
    stream = _stream(data, "test")
    evaluator = StreamEvaluator(run.model, mem_len)
    result = evaluator.evaluate(stream, batch_size, seq_len)
    assert evaluator.tracing_count() == 1  # batch B, batch 1, the shorter last segment
    nll, seen = reference_nll(run.model, stream, batch_size, seq_len, mem_len)
    assert (seen == 1).all()  # the reference's own coverage
    assert result.tokens == len(stream) - 1
    np.testing.assert_allclose(result.total_nll, nll.sum(), rtol=2e-6)
    split = batch_size * ((len(stream) - 1) // (batch_size * seq_len)) * seq_len
    assert result.tail.count == len(stream) - 1 - split
    np.testing.assert_allclose(result.tail.total, nll[split:].sum(), rtol=2e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_training_settings_reproduce_metrics_json(runs, data, family):
    import data_utils
    from serving.evaluation import evaluate_run
    from serving.generation import load_run

    metrics = json.loads((runs[family] / "metrics.json").read_text())
    meta = data_utils.load_meta(str(data))
    run = load_run(runs[family])
    assert run.checkpoint_path.endswith(f"best/ckpt-{metrics['best']['step']}")
    for split in ("valid", "test"):
        info = meta["splits"][split]
        trainer = metrics["best"][split]
        result = evaluate_run(run, split=split)  # the data's batch, seq_len, eval_mem_len
        assert result["settings"]["batch_size"] == info["batch_size"] == 4
        assert (result["settings"]["seq_len"], result["settings"]["mem_len"]) == (16, EVAL_MEM_LEN)
        batched, tail = result["parts"]["batched"], result["parts"]["tail"]
        # The batched part is exactly the build's records.
        assert batched["tokens"] == info["records"] * 4 * 16
        assert batched["segments"] == trainer["records"] == info["records"]
        # The trainer scores the same stream with the same evaluator (evaluation/stream.py),
        # tail included: metrics.json holds the whole split's figure.
        assert trainer["tokens"] == result["tokens"] == info["ids"] - 1
        for key in ("nll", "perplexity", "word_perplexity", "bits_per_byte"):
            np.testing.assert_allclose(trainer[key], result[key], rtol=1e-12, err_msg=key)
        # The tail adds the ids the records drop, continuing the last row.
        assert tail["tokens"] == info["dropped_ids"] > 0
        nll, _ = reference_nll(run.model, _stream(data, split), 4, 16, EVAL_MEM_LEN,
                               last_row_only=True)
        np.testing.assert_allclose(tail["total_nll"], nll[-info["dropped_ids"]:].sum(),
                                   rtol=2e-6)
        # Whole-split metrics: every transition, the meta.json words and bytes.
        assert result["tokens"] == info["ids"] - 1
        total = batched["total_nll"] + tail["total_nll"]
        np.testing.assert_allclose(result["total_nll"], total, rtol=1e-12)
        np.testing.assert_allclose(result["perplexity"], np.exp(total / (info["ids"] - 1)))
        np.testing.assert_allclose(result["word_perplexity"], np.exp(total / info["words"]))
        np.testing.assert_allclose(result["bits_per_byte"], total / np.log(2) / info["bytes"])


@pytest.mark.slow
def test_same_length_equals_a_window_per_position(data, tmp_path):
    """One attention block: position p of a row sees exactly the block inputs of
    positions p - M .. p (zeros before the row's start, the zero initial state),
    recomputed here with plain attention, each window in one pass."""
    import tensorflow as tf

    from evaluation.stream import StreamEvaluator
    from serving.generation import load_run

    make_run(tmp_path / "run", data, architecture="fafi")
    run = load_run(tmp_path / "run", model_overrides={"same_length": True})
    plain = load_run(tmp_path / "run").model
    assert run.model.same_length and not plain.same_length
    stream = _stream(data, "valid")[:700]
    batch_size, seq_len, mem_len = 3, 9, 6
    result = StreamEvaluator(run.model, mem_len).evaluate(stream, batch_size, seq_len)
    transitions = len(stream) - 1
    per_row = transitions // (batch_size * seq_len) * seq_len
    row_start = np.minimum(np.arange(transitions) // per_row, batch_size - 1) * per_row
    offset = np.arange(transitions) - row_start  # position within its row
    nll = np.zeros(transitions)
    for r in range(mem_len + 1):  # r < M: r + 1 ids after M - r zero block inputs
        ks = np.flatnonzero(offset == r) if r < mem_len else np.flatnonzero(offset >= mem_len)
        width = min(r, mem_len) + 1
        windows = np.stack([stream[k + 1 - width:k + 1] for k in ks])
        zeros = [tf.zeros([len(ks), mem_len + 1 - width, plain.d_model])] * plain.num_mems
        hidden, _ = plain(windows, zeros, training=False)
        nll[ks] = plain.token_nll(hidden[:, -1:], stream[ks + 1][:, None]).numpy()[:, 0]
    np.testing.assert_allclose(result.total_nll, nll.sum(), rtol=2e-6)
    # ...and attending to every key in memory gives another number (the test can fail).
    other = StreamEvaluator(plain, mem_len).evaluate(stream, batch_size, seq_len)
    assert abs(other.total_nll - result.total_nll) > 1e-3 * result.total_nll


@pytest.mark.slow
def test_text_file_equals_the_split_and_counts_like_the_build(runs, data):
    import data_utils
    from serving.evaluation import default_output, evaluate_run
    from serving.generation import load_run

    run = load_run(runs["transformer_xl"])
    text_file = data.parent / "valid.txt"  # the raw text the valid split was built from
    info = data_utils.load_meta(str(data))["splits"]["valid"]
    from_text = evaluate_run(run, text_file=text_file, batch_size=2, seq_len=11, mem_len=5)
    from_split = evaluate_run(run, split="valid", batch_size=2, seq_len=11, mem_len=5)
    assert (from_text["words"], from_text["bytes"]) == (info["words"], info["bytes"])
    assert from_text["source"] == {"text_file": str(text_file)}
    for key in ("total_nll", "tokens", "perplexity", "word_perplexity", "bits_per_byte"):
        assert from_text[key] == from_split[key]
    assert default_output("d", text_file=text_file) == os.path.join("d", "eval_text_valid.json")
    assert default_output("d", split="test") == os.path.join("d", "eval_test.json")
    # Words counted as the build does: whitespace words plus one per line.
    text = text_file.read_text(encoding="utf-8")
    assert info["words"] == len(text.split()) + text.count("\n")
    assert LINES["valid"] == (600, 720)


@pytest.mark.slow
def test_clamp_len_and_same_length_are_transformer_xl_settings(runs):
    from evaluation.stream import StreamEvaluator
    from serving.generation import GenerationError, load_run

    stream = np.arange(60) % 200
    plain = load_run(runs["transformer_xl"])
    clamped = load_run(runs["transformer_xl"], model_overrides={"clamp_len": 2})
    assert clamped.model.clamp_len == 2 and clamped.config.model.clamp_len == 2
    a = StreamEvaluator(plain.model, 8).evaluate(stream, 2, 5).total_nll
    b = StreamEvaluator(clamped.model, 8).evaluate(stream, 2, 5).total_nll
    assert a != b
    sha = runs["sha_rnn"]
    for name, value in (("clamp_len", 4), ("same_length", True)):
        with pytest.raises(GenerationError, match=rf"^--{name}={value} does not apply to {sha}: "
                                                  rf"its sha_rnn model has no {name} setting "
                                                  rf"\(only transformer_xl models have one\): "
                                                  rf"drop --{name}$"):
            load_run(sha, model_overrides={name: value})


@pytest.mark.slow
def test_bad_input_is_refused(runs, data, tmp_path):
    import data_utils
    from evaluation.stream import StreamEvaluator
    from serving.evaluation import EvaluationError, evaluate_run
    from serving.generation import load_run

    run = load_run(runs["sha_rnn"])
    cases = {"empty.txt": (b"", r"is empty: give a text of at least two tokens"),
             "latin1.txt": (b"ok\ncaf\xe9\n", r"is not UTF-8 text \(line 2, byte 6\): the run's "
                                              r"word tokenizer reads UTF-8; convert the file"),
             "one.txt": (b"the", r"is 1 token\(s\) for the run's word tokenizer: at least 2")}
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(EvaluationError, match=rf"^--text_file={tmp_path / name} {message}"):
            evaluate_run(run, text_file=tmp_path / name)
    with pytest.raises(EvaluationError, match=r"^--text_file=\S+nope.txt does not exist"):
        evaluate_run(run, text_file=tmp_path / "nope.txt")
    for kwargs, flag in ((dict(seq_len=0), "--seq_len=0 must be an integer >= 1"),
                         (dict(mem_len=-1), "--mem_len=-1 must be an integer >= 0"),
                         (dict(batch_size=0), "--batch_size=0 must be an integer >= 1")):
        with pytest.raises(EvaluationError, match=f"^{flag}$"):
            evaluate_run(run, split="valid", **kwargs)
    with pytest.raises(EvaluationError, match="at least 2"):
        StreamEvaluator(run.model, 4).evaluate([3], 1, 4)
    # A build made before the tails were stored trains, but cannot be evaluated whole.
    old = tmp_path / "old"
    shutil.copytree(data, old)
    meta = json.loads((old / "meta.json").read_text())
    for info in meta["splits"].values():
        for key in ("tail_file", "tail_bytes", "tail_sha256"):
            info.pop(key)
    (old / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(data_utils.DataError, match=r"no tail_file.*--overwrite"):
        evaluate_run(run, split="test", data_dir=str(old))
    # Data built with another tokenizer is refused, not scored with the wrong ids.
    vocab = old / meta["tokenizer"]["files"][0]
    vocab.write_text(vocab.read_text().replace("the", "teh", 1))
    with pytest.raises(EvaluationError, match=rf"--data_dir={old} was not built with the run's "
                                              rf"tokenizer \(its {vocab.name} differs"):
        evaluate_run(run, split="test", data_dir=str(old))


# -------------------------------------------------------------------- CLI


def _start(*args):
    return subprocess.Popen([sys.executable, "evaluate.py", *args], cwd=PROJECT_ROOT, env=ENV,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _listing(*directories):
    return {str(d): sorted(os.listdir(d)) for d in directories}


@pytest.mark.slow
def test_cli_writes_the_librarys_numbers(runs, data, tmp_path):
    from serving.evaluation import evaluate_run
    from serving.generation import load_run

    model_dir = runs["transformer_xl"]
    output = tmp_path / "out.json"
    process = _start(f"--model_dir={model_dir}", "--split=test", "--batch_size=1",
                     "--mem_len=6", "--same_length", "--clamp_len=3", f"--output={output}",
                     "--progress_interval=0.001")
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    written = json.loads(output.read_text())
    run = load_run(model_dir, model_overrides={"same_length": True, "clamp_len": 3})
    expected = evaluate_run(run, split="test", batch_size=1, mem_len=6)
    for key in ("total_nll", "perplexity", "word_perplexity", "bits_per_byte"):
        assert written[key] == pytest.approx(expected[key], rel=1e-9), key  # another process
    for key in ("tokens", "settings", "source", "checkpoint", "step", "words", "bytes"):
        assert written[key] == expected[key], key
    for part in ("batched", "tail"):
        assert written["parts"][part]["tokens"] == expected["parts"][part]["tokens"]
    assert written["settings"] == {"seq_len": 16, "mem_len": 6, "batch_size": 1,
                                   "clamp_len": 3, "same_length": True}
    lines = stdout.splitlines()
    assert lines[0].startswith(f"test of {model_dir} ({run.checkpoint_path}, step 4): "
                               f"{expected['tokens']} tokens")
    assert lines[1].split()[:2] == ["nll", f"{expected['nll']:.4f}"]
    assert lines[-1] == f"wrote {output}"
    assert "evaluating test: " in stderr and ", ETA " in stderr  # progress lines
    assert not [f for f in os.listdir(tmp_path) if f != "out.json"]  # no temporary left


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_metrics_json_and_evaluate_py_give_one_test_figure(runs, data, family, tmp_path):
    """The trainer's test figure (metrics.json) is evaluate.py's for the same checkpoint:
    the same stream, tail included, through the same evaluator, in another process."""
    import data_utils

    model_dir = runs[family]
    metrics = json.loads((model_dir / "metrics.json").read_text())
    output = tmp_path / "test.json"
    process = _start(f"--model_dir={model_dir}", "--split=test", f"--output={output}")
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    written = json.loads(output.read_text())
    assert written["checkpoint"].endswith(f"best/ckpt-{metrics['best']['step']}")
    trainer = metrics["best"]["test"]
    info = data_utils.load_meta(str(data))["splits"]["test"]
    assert trainer["tokens"] == written["tokens"] == info["ids"] - 1  # the tail included
    assert written["parts"]["tail"]["tokens"] == info["dropped_ids"] > 0
    for key in ("nll", "perplexity", "word_perplexity", "bits_per_byte"):
        assert trainer[key] == pytest.approx(written[key], rel=1e-12, abs=0), key
    print(f"{family}: metrics.json test nll {trainer['nll']!r} ppl {trainer['perplexity']!r}; "
          f"evaluate.py nll {written['nll']!r} ppl {written['perplexity']!r}")


@pytest.mark.slow
def test_cli_errors_are_one_line_and_write_nothing(runs, tmp_path, cli_cases):
    txl, sha = runs["transformer_xl"], runs["sha_rnn"]
    no_checkpoint = tmp_path / "untrained"
    no_checkpoint.mkdir()
    shutil.copy(txl / "config.json", no_checkpoint)
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    before = _listing(txl, sha, no_checkpoint, tmp_path)
    cases = {
        "no checkpoint": ([f"--model_dir={no_checkpoint}"],
                          f"error: no trained model in {no_checkpoint} (no checkpoint): run "
                          f"train.py --model_dir={no_checkpoint} first"),
        "empty file": ([f"--model_dir={txl}", f"--text_file={tmp_path / 'empty.txt'}"],
                       f"error: --text_file={tmp_path / 'empty.txt'} is empty: give a text of "
                       "at least two tokens"),
        "not utf-8": ([f"--model_dir={txl}", f"--text_file={tmp_path / 'latin1.txt'}"],
                      f"error: --text_file={tmp_path / 'latin1.txt'} is not UTF-8 text (line 1, "
                      "byte 3): the run's word tokenizer reads UTF-8; convert the file"),
        "seq_len": ([f"--model_dir={txl}", "--seq_len=-1"], "error: --seq_len=-1 must be >= 1"),
        "mem_len": ([f"--model_dir={txl}", "--mem_len=-2"], "error: --mem_len=-2 must be >= 0"),
        "output": ([f"--model_dir={sha}", f"--output={tmp_path / 'nope' / 'x.json'}"],
                   f"error: --output={tmp_path / 'nope' / 'x.json'}: directory "
                   f"{tmp_path / 'nope'} does not exist"),
        "clamp_len": ([f"--model_dir={sha}", "--clamp_len=4"],
                      f"error: --clamp_len=4 does not apply to {sha}: its sha_rnn model has no "
                      "clamp_len setting (only transformer_xl models have one): drop "
                      "--clamp_len"),
    }
    results = cli_cases("evaluate.py", {name: args for name, (args, _) in cases.items()})
    for name, (returncode, stdout, stderr) in results.items():
        assert returncode == 1, (name, stderr[-2000:])
        assert stderr.strip().splitlines() == [stderr.strip()], (name, stderr)
        assert stderr.startswith(cases[name][1]), (name, stderr)
        assert stdout == ""
    assert _listing(txl, sha, no_checkpoint, tmp_path) == before  # nothing written


@pytest.mark.slow
def test_a_run_evaluated_without_memory_is_evaluated_without_memory(runs, data, tmp_path):
    """--eval_mem_len=0 (a run evaluated with no memory) is evaluate.py's default too, so
    the run still has one figure per split: the stream scored from an empty memory."""
    import shutil

    import data_utils
    from evaluation.stream import StreamEvaluator
    from serving.evaluation import evaluate_run
    from serving.generation import load_run

    model_dir = tmp_path / "no_memory"
    shutil.copytree(runs["transformer_xl"], model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["eval_mem_len"] = 0
    (model_dir / "config.json").write_text(json.dumps(config))
    run = load_run(model_dir)
    result = evaluate_run(run, split="valid")
    assert result["settings"]["mem_len"] == 0
    info = data_utils.load_meta(str(data))["splits"]["valid"]
    expected = StreamEvaluator(run.model, 0).evaluate(_stream(data, "valid"),
                                                      info["batch_size"], 16)
    with_memory = StreamEvaluator(run.model, EVAL_MEM_LEN).evaluate(
        _stream(data, "valid"), info["batch_size"], 16)
    assert result["total_nll"] == pytest.approx(expected.total_nll, rel=1e-12)
    assert result["total_nll"] != pytest.approx(with_memory.total_nll, rel=1e-6)
