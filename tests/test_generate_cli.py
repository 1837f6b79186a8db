"""generate.py and export.py as a user runs them: train.py for a few steps, then generate.

Few processes on purpose (each imports TensorFlow): one training run, one
generation, and the error cases of both scripts in one process (`cli_cases`).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.runs import build_data

PROJECT_ROOT = str(PROJECT_ROOT)
ENV = dict(os.environ, PYTHONPATH=PROJECT_ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def _start(*args):
    return subprocess.Popen([sys.executable, *args], cwd=PROJECT_ROOT, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process, timeout=300):
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory, wikitext2_root):
    """A 5-step supernet run made by train.py on a tiny word build."""
    root = tmp_path_factory.mktemp("cli")
    data_dir = build_data(root, wikitext2_root, "word")
    model_dir = root / "run"
    code, _, stderr = _finish(_start(
        "train.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}", "--preset=tiny",
        "--max_steps=5", "--eval_interval=0", "--eval_max_records=2", "--log_interval=5",
        "--sample_tokens=0", f"--logdir={root / 'logs'}"), timeout=600)
    assert code == 0, stderr[-3000:]
    return model_dir


@pytest.mark.slow
def test_generate_cli_matches_the_library(trained):
    from serving.generation import encode_prompt, load_run

    prompt = "the game of qwertyzz"
    flags = ["generate.py", f"--model_dir={trained}", f"--prompt={prompt}", "--num_tokens=7",
             "--num_samples=2", "--seed=3", "--top_k=20", "--temperature=0.9"]
    allowed = _start(*flags, "--allow_unk")
    code, stdout, stderr = _finish(_start(*flags))
    assert code == 0, stderr[-3000:]
    # One warning however many samples.
    assert stderr.count("unknown to the tokenizer") == 1 and "qwertyzz" in stderr
    run = load_run(trained)  # the best checkpoint written by train.py
    encoded = encode_prompt(run.tokenizer, prompt)
    # By default the unknown-word token is excluded; --allow_unk draws from all ids.
    for exclude, (code, out, err) in ((run.tokenizer.unknown_ids(), (code, stdout, stderr)),
                                      ([], _finish(allowed))):
        assert code == 0, err[-3000:]
        tokens = run.decoder().generate(encoded.ids, 7, num_samples=2, seed=3, top_k=20,
                                        temperature=0.9, chunk_len=run.config.seq_len,
                                        exclude_ids=exclude)
        expected = ""
        for i, row in enumerate(tokens):
            expected += (f"=== sample {i} (seed {3 + i}) ===\n{prompt} "
                         f"{run.tokenizer.decode(row)}\n")
        assert out == expected, exclude
    # The weights are the checkpoint's, read here without the serving code.
    import tensorflow as tf

    reader = tf.train.load_checkpoint(run.checkpoint_path)
    for i, variable in enumerate(run.model.variables):
        np.testing.assert_array_equal(
            variable.numpy(), reader.get_tensor(f"model/{i}/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.mark.slow
def test_cli_errors_are_one_line(trained, tmp_path, cli_cases):
    bad_prompt = tmp_path / "prompt.txt"
    bad_prompt.write_bytes(b"caf\xe9\n")
    cases = {
        "no model": (["generate.py", f"--model_dir={tmp_path}", "--prompt=the"],
                     f"error: no trained model in {tmp_path} (no config.json): run train.py"),
        "top_p": (["generate.py", f"--model_dir={trained}", "--top_p=1.5"],
                  "error: --top_p=1.5 must be in (0, 1]"),
        "prompt file": (["generate.py", f"--model_dir={trained}", f"--prompt_file={bad_prompt}"],
                        f"error: --prompt_file={bad_prompt} is not UTF-8 text (bad byte at "
                        "offset 3)"),
        "export": (["export.py", f"--model_dir={trained}", "--format=keras",
                    f"--output={tmp_path / 'lm.h5'}"], "error: --output="),
    }
    # Both scripts' cases in one process (each case's arguments start with its script).
    results = cli_cases(None, {name: args for name, (args, _) in cases.items()})
    assert results.keys() == cases.keys()
    for name, (code, stdout, stderr) in results.items():
        lines = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert code == 1 and stdout == "", (name, stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith(cases[name][1]), (name, stderr[-2000:])
        assert "Traceback" not in stderr, name
