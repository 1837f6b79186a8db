"""A sampler registered for the test only (tests/helpers/samplers.py) works on every
generation path.

`AlwaysToken` ("always_token") draws the token `k` whatever the model says, so
its output is known in advance: the Python API (`lm.generate(...,
sampler="always_token", sampler_args={"k": ...})`), generate.py
(`--sampler=always_token --sampler_args=k=...`, in a child process that
registers it from tests/helpers/samplers.py) and a SavedModel exported while it is registered
(`generate_with_sampler`) all give k at every position, with no product file
edited. `Ranked` ("ranked") takes the `rank`-th most likely token: rank 0 is the
built-in greedy decoding, rank 1 something else. Both are unregistered in a
`finally`.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers.runs import make_word_package
from tests.helpers.samplers import register, unregister

PROMPT = "the game was"


@pytest.fixture(scope="module")
def package(tmp_path_factory, word_data):
    """(the PackagedLM of a tiny word package, its run, its .keras path)."""
    return make_word_package(tmp_path_factory.mktemp("custom_sampler"), word_data)


def _continuation(run, k, num_tokens):
    from serving.prompts import continuation_text, encode_prompt

    return PROMPT + continuation_text(run.tokenizer, encode_prompt(run.tokenizer, PROMPT),
                                      [k] * num_tokens)


def test_a_registered_sampler_through_the_python_api(package):
    from serving.errors import GenerationError

    lm, run, _ = package
    register()
    try:
        for k in (5, 17):
            assert lm.generate(PROMPT, num_tokens=6, sampler="always_token",
                               sampler_args={"k": k}) == _continuation(run, k, 6)
        greedy = lm.generate(PROMPT, num_tokens=8, sampler="greedy")
        assert lm.generate(PROMPT, num_tokens=8, sampler="ranked") == greedy
        assert lm.generate(PROMPT, num_tokens=8, sampler="ranked",
                           sampler_args={"rank": 1}) != greedy
        # The decoder takes an instance too: the tokens themselves.
        from samplers.registry import get_sampler

        tokens = run.decoder().generate(run.tokenizer.encode(PROMPT), 4, num_samples=2,
                                        sampler=get_sampler("always_token", k=9))
        np.testing.assert_array_equal(tokens, np.full((2, 4), 9))
        with pytest.raises(GenerationError, match="has no parameter 'q'"):
            lm.generate(PROMPT, num_tokens=2, sampler="always_token", sampler_args={"q": 1})
        with pytest.raises(GenerationError, match="needs k"):
            lm.generate(PROMPT, num_tokens=2, sampler="always_token")
        with pytest.raises(GenerationError, match=r"^rank=7 must be"):
            lm.generate(PROMPT, num_tokens=2, sampler="ranked", sampler_args={"rank": 7})
    finally:
        unregister()
    with pytest.raises(GenerationError, match="must be one of greedy"):
        lm.generate(PROMPT, num_tokens=2, sampler="always_token", sampler_args={"k": 1})


# generate.py with this file's samplers registered first (argv: the script's flags).
_CLI_WRAPPER = """
import runpy, sys
from tests.helpers.samplers import register  # the child's PYTHONPATH is the project root
register()
sys.argv[0] = "generate.py"
runpy.run_path("generate.py", run_name="__main__")
"""


@pytest.mark.slow
def test_a_registered_sampler_through_generate_py(package, tmp_path, cli_cases):
    _, run, path = package
    wrapper = tmp_path / "generate_with_test_samplers.py"
    wrapper.write_text(_CLI_WRAPPER, encoding="utf-8")
    common = [str(wrapper), f"--model={path}", f"--prompt={PROMPT}", "--num_tokens=5"]
    results = cli_cases(None, {
        "k3": [*common, "--sampler=always_token", "--sampler_args=k=3"],
        "k11": [*common, "--sampler=always_token", "--sampler_args=k=11", "--num_samples=2",
                "--seed=1"],
        "unknown": [*common, "--sampler=nope"],
        "bad arg": [*common, "--sampler=always_token", "--sampler_args=q=1"],
        "bad value": [*common, "--sampler=always_token", "--sampler_args=k=x"],
        "mixed": [*common, "--sampler=always_token", "--sampler_args=k=1", "--top_k=4"],
    })
    code, out, err = results["k3"]
    assert code == 0, err[-3000:]
    assert out == _continuation(run, 3, 5) + "\n"
    code, out, err = results["k11"]
    assert code == 0, err[-3000:]
    text = _continuation(run, 11, 5)
    assert out == f"=== sample 0 (seed 1) ===\n{text}\n=== sample 1 (seed 2) ===\n{text}\n"
    for name, flag in (("unknown", "--sampler="), ("bad arg", "--sampler_args="),
                       ("bad value", "--sampler_args="), ("mixed", "--sampler=")):
        code, out, err = results[name]
        lines = err.strip().splitlines()
        assert code == 1 and lines[-1].startswith(f"error: {flag}"), (name, err[-2000:])
    assert "always_token" in results["unknown"][2] and "'q'" in results["bad arg"][2]


# Loads the SavedModel with TensorFlow only and runs generate_with_sampler.
_SAVED_MODEL_CHILD = r"""
import json, sys
import tensorflow as tf

signatures = tf.saved_model.load(sys.argv[1]).signatures
out = {}
def run(name, sampler, params, signature="generate_with_sampler", **extra):
    inputs = dict(prompt=tf.constant(%r), num_tokens=tf.constant(6),
                  num_samples=tf.constant(2), seed=tf.constant(4, tf.int64))
    if signature == "generate_with_sampler":
        inputs.update(sampler=tf.constant(sampler), params=tf.constant(params, tf.float32),
                      allow_unk=tf.constant(False))
    inputs.update(extra)
    try:
        out[name] = signatures[signature](**inputs)["token_ids"].numpy().tolist()
    except tf.errors.InvalidArgumentError as error:
        out[name] = "error: " + error.message
run("k5", "always_token", [5.0])
run("ranked0", "ranked", [])
run("greedy", "greedy", [])
run("top_k", "top_k", [40.0, 0.9])
run("keywords", None, None, signature="generate", temperature=tf.constant(0.9),
    top_k=tf.constant(40), top_p=tf.constant(1.0), greedy=tf.constant(False))
run("unknown", "nope", [])
run("bad", "top_k", [0.0])
run("missing", "always_token", [])
print("OUT " + json.dumps(out))
""" % PROMPT


@pytest.mark.slow
def test_a_saved_model_exported_with_a_registered_sampler(package, tmp_path):
    from serving.export import export_saved_model
    from serving.prompts import encode_prompt

    _, run, _ = package
    register()
    try:
        export_saved_model(run, tmp_path / "saved")
    finally:
        unregister()
    child = subprocess.run([sys.executable, "-c", _SAVED_MODEL_CHILD, str(tmp_path / "saved")],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads([x for x in child.stdout.splitlines() if x.startswith("OUT ")][-1][4:])
    assert out["k5"] == [[5] * 6] * 2
    ids = encode_prompt(run.tokenizer, PROMPT).ids
    exclude = run.tokenizer.unknown_ids()
    decoder = run.decoder()
    greedy = decoder.generate(ids, 6, num_samples=2, greedy=True, exclude_ids=exclude,
                              chunk_len=run.config.seq_len)
    assert out["greedy"] == out["ranked0"] == greedy.tolist()
    sampled = decoder.generate(ids, 6, num_samples=2, seed=4, top_k=40, temperature=0.9,
                               exclude_ids=exclude, chunk_len=run.config.seq_len)
    assert out["top_k"] == out["keywords"] == sampled.tolist()
    assert out["unknown"].startswith("error:") and "always_token" in out["unknown"]
    assert "top_k must be >= 1" in out["bad"]
    assert "k must be" in out["missing"]
