"""finetune.py (./finetune.sh): a trained model fine-tuned on a text, end to end.

One child process runs every command (tests/conftest.py `cli_cases`): the bad inputs,
a fine-tune of a tiny Transformer-XL word package on a WikiText-2 slice with characters
its tokenizer never saw, the same fine-tune stopped at step 20 and continued to 40, and
a SHA-RNN run directory fine-tuned. The figures come from the project's evaluation
(`PackagedLM.score`) in a child that imports only `par`.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers.runs import make_family_run, make_word_package

pytestmark = pytest.mark.slow

STEPS = 40
UNSEEN = "Zorblaxian ☃ 漢字 ünïcödé ⅞"
# Shared by every run: small enough to train in seconds.
RUN_FLAGS = ["--eval_interval=10", "--log_interval=10", "--sample_tokens=0",
             "--checkpoint_interval=10"]


def _run_flags(root, name, steps=STEPS, output=None):
    return [f"--model_dir={root / 'runs' / name}", f"--data_dir={root / 'data' / name}",
            f"--logdir={root / 'logs' / name}", f"--output={output or root / f'{name}.keras'}",
            f"--max_steps={steps}", *RUN_FLAGS]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, word_data, cli_cases):
    """Every command's (exit status, stdout, stderr) by case name, and the paths."""
    root = tmp_path_factory.mktemp("finetune")
    _, _, package = make_word_package(root, word_data)
    text = root / "text.txt"
    lines = []
    for split in ("train", "valid", "test"):
        lines += (word_data.parent / f"{split}.txt").read_text(encoding="utf-8").splitlines()
    lines.insert(len(lines) // 3, UNSEEN)  # in the training part
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    short = root / "short.txt"
    short.write_text("one line\nanother line\nthe last one\n", encoding="utf-8")
    sha_run = root / "sha_run"
    make_family_run(sha_run, word_data, "sha_rnn")
    (root / "empty_dir").mkdir()
    script = "finetune.py"
    common = [f"--text={text}"]
    bad = {
        "no_model": [script, f"--from={root / 'missing.keras'}", *common,
                     *_run_flags(root, "bad")],
        "not_a_model": [script, f"--from={root / 'empty_dir'}", *common,
                        *_run_flags(root, "bad")],
        "short_text": [script, f"--from={package}", f"--text={short}",
                       *_run_flags(root, "bad")],
        "tokenizer": [script, f"--from={package}", *common, "--tokenizer=sentencepiece",
                      *_run_flags(root, "bad")],
        "model_flag": [script, f"--from={package}", *common, "--d_model=64",
                       *_run_flags(root, "bad")],
    }
    runs = {
        "tune": [script, f"--from={package}", *common, *_run_flags(root, "tune")],
        "part": [script, f"--from={package}", *common,
                 *_run_flags(root, "part", 20, root / "part20.keras")],
        "continued": [script, f"--from={package}", *common,
                      *_run_flags(root, "part", STEPS, root / "part40.keras")],
        "sha_rnn": [script, f"--from={sha_run}", *common,
                    *_run_flags(root, "sha", 10)],
    }
    results = cli_cases(None, {**bad, **runs})
    return results, root, package


def _error(result):
    code, _, err = result
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1, err[-2000:]
    return errors[0]


@pytest.mark.parametrize("case,flag,fix", [
    ("no_model", "--from=", "give a .keras package"),
    ("not_a_model", "--from=", "give a .keras package"),
    ("short_text", "--text=", "lower --batch_size or --seq_len"),
    ("tokenizer", "--tokenizer=sentencepiece", "drop --tokenizer"),
    ("model_flag", "--d_model=64", "drop --d_model"),
])
def test_bad_input_is_one_line_naming_the_flag_and_nothing_is_written(tuned, case, flag, fix):
    results, root, _ = tuned
    line = _error(results[case])
    assert flag in line and fix in line, line
    for path in (root / "runs" / "bad", root / "data" / "bad", root / "bad.keras"):
        assert not path.exists(), path


def test_the_fine_tune_keeps_the_source_tokenizer_and_names_its_source(tuned):
    results, root, package = tuned
    assert results["tune"][0] == 0, results["tune"][2][-3000:]
    meta = json.loads((root / "data" / "tune" / "meta.json").read_text())
    assert meta["source_model"]["path"] == str(package)
    assert meta["source_model"]["kind"] == "package"
    config = json.loads((root / "runs" / "tune" / "config.json").read_text())
    assert config["recipe"] == "finetune" and config["init_weights"] == str(package)
    from serving.start_from import read_source

    source, tuned_package = read_source(package), read_source(root / "tune.keras")
    assert tuned_package.tokenizer_files == source.tokenizer_files
    text = f"The game was released in 2004 . {UNSEEN}"
    ids = source.tokenizer().encode(text)
    assert tuned_package.tokenizer().encode(text) == ids
    # The characters the source never saw are its unknown id, not an error.
    assert set(ids[-5:]) <= set(source.tokenizer().unknown_ids())


def test_held_out_perplexity_falls_and_the_package_loads_with_par_alone(tuned):
    results, root, package = tuned
    meta = json.loads((root / "data" / "tune" / "meta.json").read_text())
    first, last = meta["split"]["lines"]["test"]
    lines = (root / "text.txt").read_text(encoding="utf-8").splitlines()
    test_text = "\n".join(lines[first - 1:last]) + "\n"
    child = ("import json, sys, par\n"
             "text = open(sys.argv[3], encoding='utf-8').read()\n"
             "print(json.dumps([par.load(p).score(text)['perplexity'] for p in sys.argv[1:3]]))")
    (root / "test_split.txt").write_text(test_text, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.getcwd(), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", child, str(package), str(root / "tune.keras"),
                          str(root / "test_split.txt")], capture_output=True, text=True,
                         env=env, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = json.loads(out.stdout.splitlines()[-1])
    assert after < 0.8 * before, (before, after)


def test_a_run_stopped_and_continued_ends_with_the_uninterrupted_weights(tuned):
    import tensorflow as tf

    results, root, _ = tuned
    for case in ("part", "continued"):
        assert results[case][0] == 0, results[case][2][-3000:]
    assert "loaded (--init_weights)" not in results["continued"][2]  # resumed, not re-seeded
    whole = tf.train.load_checkpoint(str(root / "runs" / "tune" / f"ckpt-{STEPS}"))
    split = tf.train.load_checkpoint(str(root / "runs" / "part" / f"ckpt-{STEPS}"))
    names = [n for n in whole.get_variable_to_shape_map() if n.startswith("model/")]
    assert names
    for name in names:
        np.testing.assert_array_equal(whole.get_tensor(name), split.get_tensor(name), name)


def test_a_sha_rnn_run_directory_is_fine_tuned(tuned):
    results, root, _ = tuned
    code, _, err = results["sha_rnn"]
    assert code == 0, err[-3000:]
    meta = json.loads((root / "data" / "sha" / "meta.json").read_text())
    assert meta["source_model"]["kind"] == "run"
    assert meta["source_model"]["model_family"] == "sha_rnn"
    assert (root / "sha.keras").is_file()


def test_the_python_api_fine_tunes_a_loaded_package_on_texts(tuned):
    from serving.packaged import PackagedLM, load_packaged_lm
    from training.finetune import FinetuneError, finetune

    _, root, package = tuned
    lines = (root / "text.txt").read_text(encoding="utf-8").splitlines()
    output = root / "api" / "lm.keras"
    output.parent.mkdir()
    lm = finetune(load_packaged_lm(package), lines, output=str(output), name="api",
                  max_steps=3, eval_interval=3, sample_tokens=0, batch_size=4,
                  model_dir=str(root / "runs" / "api"), data_dir=str(root / "data" / "api"),
                  logdir=str(root / "logs" / "api"))
    assert isinstance(lm, PackagedLM) and output.is_file()
    assert (root / "api" / "lm.txt").read_text(encoding="utf-8").splitlines() == lines
    with pytest.raises(FinetuneError, match="texts_or_file=missing.txt does not exist"):
        finetune(package, "missing.txt")  # a path that is not there: not taken for text
