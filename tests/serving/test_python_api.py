"""The Python API a Keras user gets from `import par` (par.py, serving/texts.py).

In this process, on a tiny word-level package: `generate` equals the library's
decoder with generate.py's rules (prompt i with seed + i, the unknown-word token
excluded), `max_length` counts the prompt's tokens, the sampler names map to
generate.py's options, `score` equals the evaluation of a file holding the text,
and a model biased towards <unk> never emits it in 1,000 tokens unless
`allow_unk=True`.

In a child process whose import path holds only the repository root (what the
README documents): `keras.saving.load_model("pretrained/wt2_base.keras")` fails
before `import par` and works after it, and the loaded model's `generate` and
`score` give exactly what generate.py and evaluate.py print and write for the
same seeds and settings.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.runs import make_word_package

PROMPTS = ["the game was", "in the first season"]


@pytest.fixture(scope="module")
def package(tmp_path_factory, word_data):
    """(the loaded PackagedLM of a tiny Transformer-XL word package, its run, its path)."""
    return make_word_package(tmp_path_factory.mktemp("api"), word_data)


def _decoded(run, prompt, num_tokens, seed, exclude, **options):
    """generate.py's printed text for one prompt, from the library's decoder."""
    from serving.prompts import continuation_text, encode_prompt

    encoded = encode_prompt(run.tokenizer, prompt)
    tokens = run.decoder().generate(encoded.ids, num_tokens, seed=seed, exclude_ids=exclude,
                                    chunk_len=run.config.seq_len, **options)
    return prompt + continuation_text(run.tokenizer, encoded, tokens[0])


def test_generate_is_the_decoder_with_generate_py_rules(package):
    import keras

    from serving.errors import GenerationError

    lm, run, path = package
    assert type(keras.saving.load_model(path)).__name__ == "PackagedLM"
    unknown = run.tokenizer.unknown_ids()
    assert unknown == [run.tokenizer.reserved_ids()["<unk>"]]
    texts = lm.generate(PROMPTS, num_tokens=9, top_k=20, temperature=0.9, seed=4)
    assert texts == [_decoded(run, p, 9, 4 + i, unknown, top_k=20, temperature=0.9)
                     for i, p in enumerate(PROMPTS)]
    assert lm.generate(PROMPTS[1], num_tokens=9, top_k=20, temperature=0.9, seed=5) == texts[1]
    # max_length counts the prompt's tokens (KerasHub's meaning).
    length = len(run.tokenizer.encode(PROMPTS[0]))
    assert lm.generate(PROMPTS[0], max_length=length + 6, sampler="greedy") == _decoded(
        run, PROMPTS[0], 6, 0, unknown, greedy=True)
    assert lm.generate(PROMPTS[0], max_length=length + 6, sampler="top_p", top_p=0.8,
                       seed=1) == _decoded(run, PROMPTS[0], 6, 1, unknown, top_p=0.8)
    errors = {
        "max_length": dict(max_length=length),
        "not both": dict(max_length=20, num_tokens=3),
        "sampler='greedy' takes": dict(sampler="greedy", top_k=3),
        "sampler='top_k' needs": dict(sampler="top_k"),
        "does not take top_p": dict(sampler="top_k", top_k=5, top_p=0.5),
        "must be one of greedy": dict(sampler="beam"),
        "temperature=0": dict(temperature=0.0),
        "seed=-1": dict(seed=-1),
    }
    for expected, options in errors.items():
        with pytest.raises(GenerationError, match=expected.replace("(", r"\(")):
            lm.generate(PROMPTS[0], **options)
    with pytest.raises(GenerationError, match="prompts must be a string"):
        lm.generate([])


@pytest.mark.slow
def test_score_is_the_evaluation_of_a_file_holding_the_text(package, tmp_path, wikitext2_root):
    from serving.errors import EvaluationError
    from serving.evaluation import evaluate_run
    from serving.texts import SCORE_KEYS

    lm, run, _ = package
    lines = (wikitext2_root / "wikitext-2" / "wiki.test.tokens").read_text(
        encoding="utf-8").splitlines(True)
    texts = ["".join(lines[:30]), "the game was released in the united states .\n"]
    scores = lm.score(texts)
    for text, score in zip(texts, scores):
        path = tmp_path / "text.txt"
        path.write_bytes(text.encode("utf-8"))
        expected = evaluate_run(run, text_file=path)
        assert score == {key: expected[key] for key in SCORE_KEYS}
        assert score["perplexity"] == pytest.approx(np.exp(score["total_nll"] / score["tokens"]))
    assert scores[0]["tokens"] > 16 * 4  # the first one fills batches of the data's B x T
    assert lm.score(texts[1]) == scores[1]
    with pytest.raises(EvaluationError, match=r"^texts\[0\] is 1 token"):
        lm.score("the")


@pytest.mark.slow
def test_the_unknown_word_token_is_never_generated_unless_allowed(package):
    lm, run, _ = package
    (unk,) = run.tokenizer.unknown_ids()
    softmax = lm.lm.softmax
    assert unk < softmax.head_tokens  # a head id: its bias is one entry of head_bias
    original = softmax.head_bias.numpy()
    biased = original.copy()
    biased[unk] += 12.0  # <unk> now takes nearly all the mass
    softmax.head_bias.assign(biased)
    try:
        prompts = ["the game", "in 1990", "the first", "he was"]  # 4 x 250 = 1,000 tokens
        options = dict(num_tokens=250, seed=11)
        texts = lm.generate(prompts, **options)
        allowed = lm.generate(prompts, allow_unk=True, **options)
        greedy = lm.generate(prompts[0], num_tokens=50, sampler="greedy")
    finally:
        softmax.head_bias.assign(original)
    new_words = [w for text, p in zip(texts, prompts) for w in text[len(p):].split()]
    assert "<unk>" not in new_words and len(new_words) > 500, texts
    assert "<unk>" not in greedy[len(prompts[0]):].split() and greedy != prompts[0]
    unk_drawn = sum(text[len(p):].split().count("<unk>") for text, p in zip(allowed, prompts))
    assert unk_drawn > 900, allowed  # the biased model's choice, when allowed


# Runs as a user's script from the repository root with nothing else on the import path.
CLEAN_PATH = r"""
import json, os, sys
root = os.getcwd()
# The project's directories on the path (an environment inside the clone, .venv, aside).
inside = [os.path.abspath(p or ".") for p in sys.path]
inside = [p for p in inside if os.path.commonpath([p, root]) == root
          and os.path.commonpath([p, sys.prefix]) != sys.prefix]
assert inside == [root], sys.path
import keras
try:
    keras.saving.load_model("pretrained/wt2_base.keras")
    before = "loaded"
except Exception as error:  # what a user sees without the import
    before = str(error).splitlines()[0]
import par
lm = keras.saving.load_model("pretrained/wt2_base.keras")
args = json.loads(sys.argv[1])
out = {"before": before, "class": type(lm).__name__,
       "sampled": lm.generate(args["prompts"], num_tokens=20, sampler="top_p", top_p=0.9,
                              seed=3),
       "greedy": lm.generate(args["prompts"][0], max_length=args["max_length"],
                             sampler="greedy"),
       "prompt_tokens": len(lm.tokenizer.encode(args["prompts"][0])),
       "score": lm.score(open(args["text"], encoding="utf-8").read())}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_a_clean_process_loads_generates_and_scores_as_the_scripts(tmp_path, wikitext2_root,
                                                                   cli_cases):
    from serving.texts import SCORE_KEYS

    model = "pretrained/wt2_base.keras"
    prompts = ["The game was released in", "In 1990"]
    lines = (wikitext2_root / "wikitext-2" / "wiki.test.tokens").read_bytes().splitlines(True)
    text = tmp_path / "slice.txt"
    text.write_bytes(b"".join(lines[:40]))  # batched segments and a tail
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    child = subprocess.run(
        [sys.executable, "-c", CLEAN_PATH,
         json.dumps({"prompts": prompts, "max_length": 30, "text": str(text)})],
        cwd=PROJECT_ROOT, env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
        text=True, timeout=900)
    results = [x for x in child.stdout.splitlines() if x.startswith("RESULT ")]
    assert child.returncode == 0 and results, child.stderr[-3000:]
    api = json.loads(results[-1][len("RESULT "):])
    assert "Could not locate class 'PackagedLM'" in api["before"]
    assert api["class"] == "PackagedLM"

    greedy_tokens = 30 - api["prompt_tokens"]
    output = tmp_path / "eval.json"
    # The scripts' cases in one process (each case's arguments start with its script).
    scripts = cli_cases(None, {
        "0": ["generate.py", f"--model={model}", f"--prompt={prompts[0]}", "--num_tokens=20",
              "--top_p=0.9", "--seed=3"],
        "1": ["generate.py", f"--model={model}", f"--prompt={prompts[1]}", "--num_tokens=20",
              "--top_p=0.9", "--seed=4"],  # prompt i is drawn with seed + i
        "greedy": ["generate.py", f"--model={model}", f"--prompt={prompts[0]}",
                   f"--num_tokens={greedy_tokens}", "--greedy"],
        "text": ["evaluate.py", f"--model={model}", f"--text_file={text}", f"--output={output}"]})
    generated = {name: scripts[name] for name in ("0", "1", "greedy")}
    for name, (code, stdout, stderr) in generated.items():
        assert code == 0, (name, stderr[-2000:])
    assert [generated[i][1] for i in "01"] == [t + "\n" for t in api["sampled"]]
    assert generated["greedy"][1] == api["greedy"] + "\n"
    assert all("<unk>" not in t for t in api["sampled"] + [api["greedy"]])

    code, _, stderr = scripts["text"]
    assert code == 0, stderr[-2000:]
    evaluated = json.loads(output.read_text())
    assert api["score"] == {key: evaluated[key] for key in SCORE_KEYS}
    assert evaluated["parts"]["batched"]["tokens"] > 0 and evaluated["parts"]["tail"]["tokens"]
