"""serving.export: the .keras file and the SavedModel reload and give the model's outputs.

The reloads run in a fresh process that imports only TensorFlow for the
SavedModel and `keras` plus `serving.packaged` (which registers the classes)
for the .keras file; the outputs are compared here with the in-memory model's.
tests/serving/test_self_contained.py checks the text-in/text-out side.
"""

import errno
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.runs import make_run

PROJECT_ROOT = str(PROJECT_ROOT)

# Runs in a child process: io.npz holds the inputs, out.npz receives the outputs.
RELOAD_SCRIPT = r"""
import sys
import numpy as np
import tensorflow as tf

io = dict(np.load("io.npz", allow_pickle=False))
n = int(io["num_state"])
out = {}
serve = tf.saved_model.load("saved").signatures["serve"]
for name in ("empty", "memory"):
    state = {f"state_{i}": tf.constant(io[f"{name}_state_{i}"]) for i in range(n)}
    result = serve(token_ids=tf.constant(io["ids"]), **state)
    out[f"saved_log_probs_{name}"] = result["log_probs"].numpy()
    for i in range(n):
        out[f"saved_new_state_{name}_{i}"] = result[f"new_state_{i}"].numpy()
assert "model" not in sys.modules, "the SavedModel must load without the project's code"

import keras

import serving.packaged  # registers the package's and the families' "par" classes

package = keras.saving.load_model("lm.keras")
assert type(package).__module__ == "serving.packaged", type(package)
assert type(package.lm).__module__ == sys.argv[1], type(package.lm)
lm = package.lm
out["keras_encoded"] = np.array(package.tokenizer.encode("the game of the year\n"))
memory = [io[f"memory_state_{i}"] for i in range(n)]
hidden, new_state = lm(tf.constant(io["ids"]), memory, training=False)
out["keras_log_probs"] = lm.log_probs(hidden).numpy()
for i, s in enumerate(new_state):
    out[f"keras_new_state_{i}"] = s.numpy()
out["keras_mem_len"] = np.array(lm.mem_len)
np.savez("out.npz", **out)
"""


def random_state(model, batch, mem, rng):
    """A state of `model` with random values: memory length `mem` where free."""
    state = []
    for spec in model.state_signature():
        shape = [batch] + [mem if d is None else d for d in spec.shape[1:]]
        state.append(rng.normal(size=shape).astype(np.float32))
    return state


def check_exports(run, tmp_path, family_module):
    """Exports `run` both ways, reloads them in a clean process, compares outputs."""
    import tensorflow as tf

    import data_utils
    from serving import export

    model = run.model
    assert export.export_keras(run, tmp_path / "lm.keras") == str(tmp_path / "lm.keras")
    export.export_saved_model(run, str(tmp_path / "saved"), mem_len=6)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []  # no temporaries

    rng = np.random.default_rng(0)
    ids = rng.integers(0, model.vocab_size, (2, 5)).astype(np.int32)
    memory = random_state(model, 2, 3, rng)
    empty = [s.numpy() for s in model.initial_state(2, 0)]
    n = len(memory)
    np.savez(tmp_path / "io.npz", ids=ids, num_state=n,
             **{f"memory_state_{i}": s for i, s in enumerate(memory)},
             **{f"empty_state_{i}": s for i, s in enumerate(empty)})
    child = subprocess.run(
        [sys.executable, "-c", RELOAD_SCRIPT, family_module], cwd=tmp_path, capture_output=True,
        text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=PROJECT_ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
    assert child.returncode == 0, child.stderr[-3000:]
    out = dict(np.load(tmp_path / "out.npz", allow_pickle=False))

    for name, state in (("empty", empty), ("memory", memory)):
        hidden, new_state = model(tf.constant(ids), [tf.constant(s) for s in state],
                                  training=False, mem_len=6)
        np.testing.assert_allclose(out[f"saved_log_probs_{name}"],
                                   model.log_probs(hidden).numpy(), atol=1e-5)
        for i, s in enumerate(new_state):
            np.testing.assert_allclose(out[f"saved_new_state_{name}_{i}"], s.numpy(), atol=1e-6)
    # The state matters, so the comparison above sees it.
    assert np.abs(out["saved_log_probs_memory"] - out["saved_log_probs_empty"]).max() > 1e-3
    # The .keras model keeps its config mem_len.
    hidden, new_state = model(tf.constant(ids), [tf.constant(s) for s in memory], training=False)
    assert int(out["keras_mem_len"]) == model.mem_len
    np.testing.assert_allclose(out["keras_log_probs"], model.log_probs(hidden).numpy(), atol=1e-5)
    for i, s in enumerate(new_state):
        np.testing.assert_allclose(out[f"keras_new_state_{i}"], s.numpy(), atol=1e-6)
    # Both exports carry the tokenizer.
    tokenizer = data_utils.load_tokenizer(str(tmp_path / "saved" / "tokenizer"))
    text = "the game of the year\n"
    assert tokenizer.encode(text) == run.tokenizer.encode(text)
    assert out["keras_encoded"].tolist() == run.tokenizer.encode(text)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory, word_data):
    from serving.generation import load_run

    root = tmp_path_factory.mktemp("export_run")
    make_run(root / "run", word_data)
    return load_run(root / "run")


@pytest.mark.slow
def test_exports_reload_in_a_clean_process_with_equal_outputs(run, tmp_path):
    model = run.model
    out = check_exports(run, tmp_path, "model.transformer_xl.model")
    # Transformer-XL: one memory per attention-carrying block, kept to mem_len.
    assert len(model.state_signature()) == model.num_mems == 4
    assert out["saved_new_state_memory_0"].shape == (2, 6, model.d_model)
    assert out["saved_new_state_empty_0"].shape == (2, 5, model.d_model)
    assert model.mem_len == 8  # the tiny preset's, kept by the .keras file


@pytest.mark.slow
def test_export_errors_leave_nothing_behind(run, tmp_path):
    from serving import export

    with pytest.raises(export.ExportError, match=r"must end in \.keras"):
        export.export_keras(run, tmp_path / "lm.h5")
    (tmp_path / "lm.keras").write_text("keep me")
    with pytest.raises(export.ExportError, match="already exists: .*overwrite"):
        export.export_keras(run, tmp_path / "lm.keras")
    (tmp_path / "saved").mkdir()
    with pytest.raises(export.ExportError, match="already exists"):
        export.export_saved_model(run, tmp_path / "saved")
    with pytest.raises(export.ExportError, match="does not exist: create it first"):
        export.export_keras(run, tmp_path / "no" / "lm.keras")
    with pytest.raises(export.ExportError, match="mem_len=-1"):
        export.export_saved_model(run, tmp_path / "other", mem_len=-1)
    assert sorted(os.listdir(tmp_path)) == ["lm.keras", "saved"]
    assert (tmp_path / "lm.keras").read_text() == "keep me"
    export.export_keras(run, tmp_path / "lm.keras", overwrite=True)
    assert (tmp_path / "lm.keras").stat().st_size > 1000


@pytest.fixture(scope="module")
def sha_rnn_run(trained_run):
    """A SHA-RNN run trained for a few steps by the generic trainer, loaded for serving."""
    from serving.generation import load_run

    return load_run(trained_run("sha_rnn"))


@pytest.mark.slow
def test_sha_rnn_exports_reload_in_a_clean_process_with_equal_outputs(sha_rnn_run, tmp_path):
    model = sha_rnn_run.model
    assert model.family == "sha_rnn"
    out = check_exports(sha_rnn_run, tmp_path, "model.sha_rnn.model")
    # State: (h, c) of both LSTM layers, then the attention memory kept to mem_len.
    d = model.d_model
    assert [tuple(s.shape[1:]) for s in model.state_signature()] == [(d,)] * 4 + [(None, d)]
    assert out["saved_new_state_memory_4"].shape == (2, 6, d)
    assert out["saved_new_state_empty_4"].shape == (2, 5, d)
    assert out["saved_new_state_memory_0"].shape == (2, d)


# ---------------------------------------------- the writes, with the model faked

_FULL = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
_DEAD = ".tmp-4194304-0a1b2c3d"  # a temporary of a process that cannot be alive (> pid_max)


def _full_disk_message(path):
    return (f"cannot write {path}: No space left on device (ENOSPC); nothing was written (the "
            "temporary files are removed): free some space, then export again")


@pytest.fixture
def fake_saved_model(monkeypatch):
    """A run whose SavedModel export writes `saved_model.pb`, the tokenizer directory and
    a model card without a model; `fail(error)` makes the tokenizer step raise."""
    import tensorflow as tf

    from serving import export

    failure = []

    def save(module, path, signatures=None):
        os.makedirs(path)
        with open(os.path.join(path, "saved_model.pb"), "w") as f:
            f.write("new")

    def write_tokenizer(run, target):
        if failure:
            raise failure[0]
        os.makedirs(target)

    monkeypatch.setattr(export, "ServingModule",
                        lambda *args: types.SimpleNamespace(signatures=dict))
    monkeypatch.setattr(tf.saved_model, "save", save)
    monkeypatch.setattr(export, "_write_tokenizer", write_tokenizer)
    monkeypatch.setattr(export, "run_facts", lambda run, export_format: None)
    monkeypatch.setattr(export, "render_card", lambda facts: "card\n")
    run = types.SimpleNamespace(default_mem_len=4, model=None, tokenizer=None,
                                config=types.SimpleNamespace(seq_len=8))
    return run, failure.append


def test_a_saved_model_replaces_an_existing_directory_and_stale_temporaries(
        fake_saved_model, tmp_path):
    from serving import export

    run, _ = fake_saved_model
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "old.txt").write_text("old")
    (tmp_path / f".saved{_DEAD}").mkdir()  # an export killed mid-write
    assert export.export_saved_model(run, saved, overwrite=True) == str(saved)
    assert os.listdir(tmp_path) == ["saved"]
    assert sorted(os.listdir(saved)) == ["README.md", "saved_model.pb", "tokenizer"]


def test_a_failed_saved_model_keeps_the_old_directory_and_leaves_no_temporary(
        fake_saved_model, tmp_path):
    from serving import export

    run, fail = fake_saved_model
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "old.txt").write_text("old")
    fail(_FULL)
    with pytest.raises(export.ExportError) as caught:
        export.export_saved_model(run, saved, overwrite=True)
    assert str(caught.value) == _full_disk_message(saved)
    assert os.listdir(tmp_path) == ["saved"] and os.listdir(saved) == ["old.txt"]


def test_a_failed_keras_export_leaves_no_temporary(monkeypatch, tmp_path):
    from serving import export
    import serving.packaged

    def package_run(run, dtype):
        def save(path):
            assert path.endswith(".keras")  # Keras chooses the format by the ending
            with open(path, "w") as f:
                f.write("half")
            raise _FULL

        return types.SimpleNamespace(save=save)

    monkeypatch.setattr(serving.packaged, "package_run", package_run)
    (tmp_path / f".lm.keras{_DEAD}.keras").write_text("left by a killed export")
    with pytest.raises(export.ExportError) as caught:
        export.export_keras(None, tmp_path / "lm.keras")
    assert str(caught.value) == _full_disk_message(tmp_path / "lm.keras")
    assert os.listdir(tmp_path) == []
