"""An export alone generates what its run generates: no run directory, no built data.

For every registered model family and the word, sentencepiece and byte tokenizers, a
run is exported as a `.keras` package and a SavedModel; then the run
directories and the data are deleted, and in clean processes
`generate.py --model=<file>` prints what `generate.py --model_dir=<run>`
printed, and the SavedModel's `generate` signature (loaded with TensorFlow
and tensorflow_text only) returns the same texts and the same token ids as
the library's `Decoder` on the run, for the same seeds: without the unknown-word
token (`generate`, generate.py's default), and with it allowed
(`generate_allow_unk`, the Decoder without excluded ids).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.families import names
from tests.helpers.runs import build_data, make_family_run

TOKENIZERS = ("word", "sentencepiece", "byte")
FAMILIES = names()  # the registry's, in its order (it seeds the runs)
PROMPT = "The game of the year"
# generate.py flags of each case (sampled with top-k/top-p/temperature, or greedy).
SAMPLING = {"num_tokens": 12, "num_samples": 2, "seed": 7, "top_k": 40, "top_p": 0.95,
            "temperature": 0.9, "greedy": False}
GREEDY = dict(SAMPLING, greedy=True, seed=0)
# Prompts of several lengths decoded as one batch (prompt i with seed + i), with a stop string
# and the repetition penalty: in the SavedModel (generate_batch), the Python API and
# generate.py --each_line, against the library on the run, one prompt at a time.
BATCH = [PROMPT, "The", PROMPT + " , and the first game of the series"]
# Both families and the three tokenizers (every case would add exports' first calls).
BATCH_CASES = ("transformer_xl-sentencepiece", "sha_rnn-word", "transformer_xl-byte")
BATCH_OPTIONS = {"num_tokens": 10, "seed": 11, "sampler": "top_k", "top_k": 40,
                 "temperature": 0.9, "stop": ["."], "repetition_penalty": 1.2}
BATCH_FLAGS = ["--num_tokens=10", "--seed=11", "--sampler=top_k",
               "--sampler_args=top_k=40,temperature=0.9", "--stop=.",
               "--repetition_penalty=1.2", "--each_line"]

# Loads every SavedModel with TensorFlow and tensorflow_text only, runs its generate
# signature, then loads every .keras package with the project's code and generates
# with the library; prints JSON.
CLEAN_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the sentencepiece op)

cases = json.loads(sys.argv[1])
out = {}
for name, case in cases.items():
    signatures = tf.saved_model.load(case["saved"]).signatures
    o = case["options"]
    inputs = dict(prompt=tf.constant(case["prompt"]), num_tokens=tf.constant(o["num_tokens"]),
                  num_samples=tf.constant(o["num_samples"]),
                  temperature=tf.constant(o["temperature"], tf.float32),
                  top_k=tf.constant(o["top_k"]), top_p=tf.constant(o["top_p"], tf.float32),
                  greedy=tf.constant(o["greedy"]), seed=tf.constant(o["seed"], tf.int64))
    result = signatures["generate"](**inputs)
    b = case["batch_options"]
    batch = case["batch"] and signatures["generate_batch"](
        prompts=tf.constant(case["batch"]), num_tokens=tf.constant(b["num_tokens"]),
        sampler=tf.constant(b["sampler"]),
        params=tf.constant([b["top_k"], b["temperature"]], tf.float32),
        seed=tf.constant(b["seed"], tf.int64), allow_unk=tf.constant(False),
        stop=tf.constant(b["stop"]), repetition_penalty=tf.constant(b["repetition_penalty"]))
    out[name] = {"saved_text": [t.decode("utf-8") for t in result["text"].numpy()],
                 "saved_ids": result["token_ids"].numpy().tolist(),
                 "saved_unk_ids": signatures["generate_allow_unk"](
                     **inputs)["token_ids"].numpy().tolist(),
                 "saved_batch": batch and [t.decode("utf-8") for t in batch["text"].numpy()]}
project = sorted(m for m in sys.modules if m.split(".")[0] in
                 ("model", "serving", "training", "pardata", "data_utils"))
assert not project, project

import par
from serving.generation import encode_prompt
from serving.packaged import load_package

for name, case in cases.items():
    o = case["options"]
    run = load_package(case["keras"])
    ids = encode_prompt(run.tokenizer, case["prompt"]).ids
    tokens = run.decoder().generate(
        ids, o["num_tokens"], num_samples=o["num_samples"], temperature=o["temperature"],
        top_k=o["top_k"], top_p=o["top_p"], greedy=o["greedy"], seed=o["seed"],
        chunk_len=run.config.seq_len, exclude_ids=run.tokenizer.unknown_ids())
    out[name]["keras_ids"] = tokens.tolist()
    out[name]["keras_batch"] = case["batch"] and par.load(case["keras"]).generate(
        case["batch"], **case["batch_options"])
print("RESULT " + json.dumps(out))
"""


def _flags(options):
    flags = [f"--{k}={v}" for k, v in options.items() if k != "greedy"]
    return flags + (["--greedy"] if options["greedy"] else [])


def _samples(stdout):
    """The texts generate.py printed, one per sample (after its '=== sample' headers)."""
    texts, current = [], None
    for line in stdout.splitlines(keepends=True):
        if line.startswith("=== sample "):
            current = len(texts)
            texts.append("")
        else:
            texts[current] += line
    return [t[:-1] if t.endswith("\n") else t for t in texts]


def _make_cases(tmp_path, wikitext2_root):
    """name -> case of every family and tokenizer: a run, its data, its options."""
    cases = {}
    for tokenizer in TOKENIZERS:
        (tmp_path / f"data_{tokenizer}").mkdir()
        data_dir = build_data(tmp_path / f"data_{tokenizer}", wikitext2_root, tokenizer)
        for family in FAMILIES:
            name = f"{family}-{tokenizer}"
            run_dir = tmp_path / "runs" / name
            # One supernet (deterministic evaluation architecture), the others fixed.
            architecture = "supernet" if tokenizer == "word" else "afaf"
            make_family_run(run_dir, data_dir, family, architecture, seed=len(cases))
            options = GREEDY if name == "sha_rnn-byte" else SAMPLING
            cases[name] = {"run": str(run_dir), "data": str(data_dir), "options": options,
                           "prompt": PROMPT, "keras": str(tmp_path / f"{name}.keras"),
                           "saved": str(tmp_path / f"{name}_saved"),
                           "batch": BATCH if name in BATCH_CASES else None,
                           "batch_options": BATCH_OPTIONS}
    return cases


def _expect_from_runs(cases):
    """What the runs give, by the library, before they are deleted; both exports of each.

    Returns:
        dict "ids" / "unk_ids" (name -> rows of the Decoder without / with the unknown
        token), "unknown" (name -> its ids), "one_at_a_time" (the batch's prompts
        alone, prompt i with seed + i) and "unstopped" (the batch without its stop).
    """
    from serving import export
    from serving.generation import encode_prompt, load_run
    from serving.texts import generate_texts

    expected = {key: {} for key in ("ids", "unk_ids", "unknown", "one_at_a_time",
                                    "unstopped")}
    for name, case in cases.items():
        run = load_run(case["run"])
        o = case["options"]
        expected["unknown"][name] = run.tokenizer.unknown_ids()
        for key, exclude in (("ids", expected["unknown"][name]), ("unk_ids", [])):
            expected[key][name] = run.decoder().generate(
                encode_prompt(run.tokenizer, PROMPT).ids, o["num_tokens"],
                num_samples=o["num_samples"], temperature=o["temperature"], top_k=o["top_k"],
                top_p=o["top_p"], greedy=o["greedy"], seed=o["seed"],
                chunk_len=run.config.seq_len, exclude_ids=exclude).tolist()
        if case["batch"]:
            options = {key: value for key, value in BATCH_OPTIONS.items() if key != "seed"}
            expected["one_at_a_time"][name] = [
                generate_texts(run, text, seed=BATCH_OPTIONS["seed"] + i, **options)
                for i, text in enumerate(BATCH)]
            expected["unstopped"][name] = generate_texts(
                run, BATCH, **dict(options, stop=None, seed=BATCH_OPTIONS["seed"]))
        export.export_keras(run, case["keras"])
        export.export_saved_model(run, case["saved"])
    return expected


def _clean_process(cases, tmp_path):
    """The SavedModels with TensorFlow alone, then the packages with the library."""
    child = subprocess.run(
        [sys.executable, "-c", CLEAN_PROCESS, json.dumps(cases)], cwd=tmp_path,
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), TF_CPP_MIN_LOG_LEVEL="2"))
    lines = [x for x in child.stdout.splitlines() if x.startswith("RESULT ")]
    assert child.returncode == 0 and lines, child.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _check_batches(cases, expected, clean, by_file, each_line):
    """Many prompts as one batch equal them one at a time in the three paths."""
    for name, case in cases.items():
        if case["batch"]:
            assert clean[name]["saved_batch"] == expected["one_at_a_time"][name], name
            assert clean[name]["keras_batch"] == expected["one_at_a_time"][name], name
    for name in each_line:
        code, stdout, stderr = by_file[name]
        expected_stdout = "".join(
            f"=== prompt {i} (seed {BATCH_OPTIONS['seed'] + i}) ===\n{text}\n"
            for i, text in enumerate(expected["one_at_a_time"][name[:-len("-lines")]]))
        assert code == 0 and stdout == expected_stdout, (stdout, stderr[-2000:])
    # The stop string cut some continuations short of their 10 tokens.
    assert any(len(cut) < len(text) for name in expected["one_at_a_time"]
               for cut, text in zip(expected["one_at_a_time"][name],
                                    expected["unstopped"][name]))


@pytest.mark.slow
def test_exports_alone_reproduce_the_run(tmp_path, wikitext2_root, cli_cases):
    cases = _make_cases(tmp_path, wikitext2_root)
    # The runs: generate.py --model_dir, the library's ids, and both exports.
    by_dir = cli_cases("generate.py", {
        name: [f"--model_dir={c['run']}", f"--prompt={c['prompt']}", *_flags(c["options"])]
        for name, c in cases.items()})
    for name, (code, _, stderr) in by_dir.items():
        assert code == 0, (name, stderr[-2000:])
    expected = _expect_from_runs(cases)

    # Nothing of the runs or their data is left.
    shutil.rmtree(tmp_path / "runs")
    for tokenizer in TOKENIZERS:
        shutil.rmtree(tmp_path / f"data_{tokenizer}")

    # With them, the prompt from standard input (--prompt_file=-, no prompt file needed).
    piped = "transformer_xl-sentencepiece"
    lines = tmp_path / "prompts.txt"
    lines.write_text("\n".join(BATCH) + "\n", encoding="utf-8")
    each_line = {f"{name}-lines": [f"--model={cases[name]['keras']}", f"--prompt_file={lines}",
                                   *BATCH_FLAGS] for name in (piped, "sha_rnn-word")}
    by_file = cli_cases("generate.py", {
        **each_line,
        **{name: [f"--model={c['keras']}", f"--prompt={c['prompt']}", *_flags(c["options"])]
           for name, c in cases.items()},
        "piped": [f"--model={cases[piped]['keras']}", "--prompt_file=-",
                  *_flags(cases[piped]["options"])]}, stdin=PROMPT)
    clean = _clean_process(cases, tmp_path)

    for name, case in cases.items():
        texts = _samples(by_dir[name][1])
        assert len(texts) == case["options"]["num_samples"], by_dir[name][1]
        assert all(t.startswith(PROMPT) and len(t) > len(PROMPT) for t in texts), texts
        code, stdout, stderr = by_file[name]
        assert code == 0, (name, stderr[-2000:])
        assert stdout == by_dir[name][1], name
        assert clean[name]["keras_ids"] == expected["ids"][name], name
        assert clean[name]["saved_ids"] == expected["ids"][name], name
        assert clean[name]["saved_unk_ids"] == expected["unk_ids"][name], name
        assert clean[name]["saved_text"] == texts, name
    _check_batches(cases, expected, clean, by_file, each_line)
    # The prompt can come from standard input (--prompt_file=-), no prompt file needed.
    code, stdout, stderr = by_file["piped"]
    assert code == 0 and stdout == by_dir[piped][1], stderr[-2000:]
    for name, ids in expected["ids"].items():  # never the unknown-word token by default
        assert not set(expected["unknown"][name]) & {i for row in ids for i in row}, name
    # The seeds matter: the sampled rows differ.
    assert any(ids[0] != ids[1] for name, ids in expected["ids"].items()
               if not cases[name]["options"]["greedy"])
