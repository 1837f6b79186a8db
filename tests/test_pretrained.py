"""pretrained/wt2_base.keras works right after clone: generate.py --model gives text,
evaluate.py --model reproduces a stored figure on a slice of the shipped test text, and the
model card's test figures (42.143) are recomputed from the file on the whole test split.

The figure was computed once (machine of the model card, one CPU core) by

    python3 -c "import lzma; d = lzma.decompress(open('datasets/wikitext-2/wiki.test.tokens.xz',
        'rb').read()); open('slice.txt', 'wb').write(b''.join(d.splitlines(True)[:300]))"
    python3 evaluate.py --model=pretrained/wt2_base.keras --text_file=slice.txt --output=s.json

which printed `23438 tokens ..., 18027 words, 89451 bytes`, `nll 3.6384 perplexity 38.031`
(s.json: total_nll 85277.01551818848). The counts are exact; the NLL is compared to
1e-5 relative (float32 sums differ in the last bits between CPUs).
"""

import hashlib
import json
import re

import pytest

MODEL = "pretrained/wt2_base.keras"
SLICE_LINES = 300
SLICE = {"tokens": 23438, "words": 18027, "bytes": 89451, "total_nll": 85277.01551818848}
PROMPT = "The game was released in"


@pytest.fixture(scope="module")
def pretrained_runs(wikitext2_root, tmp_path_factory, cli_cases):
    """evaluate.py on the whole test split and on the slice, generate.py sampled and greedy:
    the two scripts' cases in one process (each case's arguments start with its script).

    Returns:
        (name -> (exit status, stdout, stderr), name -> evaluate.py's --output file).
    """
    root = tmp_path_factory.mktemp("pretrained")
    lines = (wikitext2_root / "wikitext-2" / "wiki.test.tokens").read_bytes().splitlines(True)
    text = root / "slice.txt"
    text.write_bytes(b"".join(lines[:SLICE_LINES]))
    outputs = {"test": root / "test.json", "slice": root / "slice.json"}
    ran = cli_cases(None, {
        "test": ["evaluate.py", f"--model={MODEL}", "--split=test", f"--output={outputs['test']}"],
        "slice": ["evaluate.py", f"--model={MODEL}", f"--text_file={text}",
                  f"--output={outputs['slice']}"],
        "sample": ["generate.py", f"--model={MODEL}", f"--prompt={PROMPT}", "--num_tokens=40",
                   "--seed=1"],
        "greedy": ["generate.py", f"--model={MODEL}", f"--prompt={PROMPT}", "--num_tokens=40",
                   "--greedy"]})
    return ran, outputs


def test_model_card_describes_the_committed_file(project_root):
    data = (project_root / MODEL).read_bytes()
    card = (project_root / "pretrained" / "README.md").read_text(encoding="utf-8")
    assert hashlib.sha256(data).hexdigest() in card
    assert f"{len(data):,} bytes" in card
    # The test figure the card states is the one evaluate.py prints (3 decimals).
    assert re.search(r"test perplexity \*\*42\.143\*\*", card)


@pytest.mark.slow
def test_the_card_test_figures_are_recomputed_from_the_shipped_model(project_root,
                                                                     pretrained_runs):
    """The card's test row (and its headline figure) is what evaluate.py gives today for the
    committed file on the shipped test text, to the digits the card prints."""
    card = (project_root / "pretrained" / "README.md").read_text(encoding="utf-8")
    row = re.search(r"^\| test \| ([\d,]+) \| \*\*([\d.]+)\*\* \| ([\d.]+) \| ([\d.]+) \|$",
                    card, re.MULTILINE)
    assert row, "the card has no test row"
    assert f"test perplexity **{row[2]}**" in card  # the headline states the same figure
    ran, outputs = pretrained_runs
    code, stdout, stderr = ran["test"]
    assert code == 0, stderr[-3000:]
    result = json.loads(outputs["test"].read_text())
    assert f"{result['tokens']:,}" == row[1]
    assert f"{result['perplexity']:.3f}" == row[2]
    assert f"{result['word_perplexity']:.3f}" == row[3]
    assert f"{result['bits_per_byte']:.4f}" == row[4]


@pytest.mark.slow
def test_pretrained_generates_and_evaluates(pretrained_runs):
    ran, outputs = pretrained_runs
    output = outputs["slice"]
    code, stdout, stderr = ran["slice"]
    assert code == 0, stderr[-3000:]
    result = json.loads(output.read_text())
    assert {k: result[k] for k in ("tokens", "words", "bytes")} == {
        k: SLICE[k] for k in ("tokens", "words", "bytes")}
    assert result["total_nll"] == pytest.approx(SLICE["total_nll"], rel=1e-5)
    assert result["storage_dtype"] == "float16" and result["step"] == 52500
    assert f"perplexity {result['perplexity']:.3f}" in stdout

    generated = {name: ran[name] for name in ("sample", "greedy")}
    for name, (code, stdout, stderr) in generated.items():
        assert code == 0, (name, stderr[-3000:])
        assert stdout.startswith(PROMPT + " ")
        words = stdout[len(PROMPT):].split()
        assert len(words) >= 20, stdout  # 40 sentencepiece tokens: text, not fragments
        # Mostly real words: the model learned English, not noise.
        alphabetic = [w for w in words if w.isalpha()]
        assert len(alphabetic) >= len(words) // 2, stdout
