"""Mistakes a user can make with the entry scripts end in one line `error: ...` naming
the file or flag and the fix, exit status 1, nothing written; settings that run but
run badly on this machine say so once.

Few processes on purpose: cases run together in one child (`cli_cases`).
"""

import os
import subprocess

import pytest

PRE_HOUSE_KERAS = "tests/fixtures/pre_house/transformer_xl/model.keras"


def _check_errors(results, cases):
    assert results.keys() == cases.keys()
    for name, (code, stdout, stderr) in results.items():
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert code == 1 and stdout == "", (name, stderr[-2000:])
        assert len(errors) == 1 and errors[0].startswith(cases[name][1]), (name, stderr[-2000:])
        assert cases[name][2] in errors[0], (name, errors[0])
        assert "Traceback" not in stderr, name


def _listing(*paths):
    """Entries of each directory (not Python's byte-code caches, not hidden files)."""
    return {str(p): sorted(n for n in os.listdir(p) if n != "__pycache__" and n[0] != ".")
            for p in paths}


@pytest.fixture(scope="module")
def foreign_keras(tmp_path_factory):
    """A .keras file of a plain Keras model (not this project's)."""
    import keras

    path = tmp_path_factory.mktemp("foreign") / "dense.keras"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.save(path)
    return path


@pytest.mark.slow
def test_model_file_errors(cli_cases, tmp_path, word_data, foreign_keras, project_root):
    missing = tmp_path / "nope.keras"
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes((project_root / "pretrained" / "wt2_base.keras").read_bytes()[:100000])
    before = _listing(tmp_path, word_data, project_root)
    cases = {
        "missing": (["generate.py", f"--model={missing}"],
                    f"error: --model={missing} does not exist", "pretrained/wt2_base.keras"),
        "not keras": (["generate.py", "--model=README.md"],
                      "error: --model=README.md is not a Keras .keras file",
                      "export.py --format=keras"),
        "truncated": (["generate.py", f"--model={truncated}"],
                      f"error: --model={truncated} is a damaged .keras file (truncated",
                      "export it again with export.py --format=keras"),
        "older export": (["generate.py", f"--model={PRE_HOUSE_KERAS}"],
                         f"error: --model={PRE_HOUSE_KERAS} holds a model without its "
                         "tokenizer (a .keras file written by an older export.py)",
                         f"export.py --model_dir=<run> --output={PRE_HOUSE_KERAS} --overwrite"),
        "foreign keras": (["generate.py", f"--model={foreign_keras}"],
                          f"error: --model={foreign_keras} is a Keras file but not a model of "
                          "this project (it holds Sequential)", "written by export.py"),
        "data dir": (["generate.py", f"--model_dir={word_data}"],
                     f"error: {word_data} is a built data directory (it holds meta.json), not "
                     "a run", "--model"),
        "both": (["generate.py", f"--model={missing}", f"--model_dir={word_data}"],
                 "error: give either --model", "not both"),
        "checkpoint": (["generate.py", f"--model={PRE_HOUSE_KERAS}", "--checkpoint=latest"],
                       "error: --checkpoint selects a checkpoint of --model_dir",
                       "drop --checkpoint"),
        "evaluate older": (["evaluate.py", f"--model={PRE_HOUSE_KERAS}", "--split=test"],
                           f"error: --model={PRE_HOUSE_KERAS} holds a model without its "
                           "tokenizer", "--overwrite"),
        "evaluate data_dir": (["evaluate.py", f"--model={PRE_HOUSE_KERAS}",
                               f"--data_dir={word_data}"],
                              "error: --data_dir selects the build of a run directory's split",
                              "drop --data_dir"),
        "evaluate data dir as run": (["evaluate.py", f"--model_dir={word_data}"],
                                     f"error: {word_data} is a built data directory", "--model"),
        "export older": (["export.py", f"--model={PRE_HOUSE_KERAS}", "--format=saved_model",
                          f"--output={tmp_path / 'saved'}"],
                         f"error: --model={PRE_HOUSE_KERAS} holds a model without its "
                         "tokenizer", "--overwrite"),
        "export dtype": (["export.py", f"--model={PRE_HOUSE_KERAS}", "--format=saved_model",
                          "--dtype=float16", f"--output={tmp_path / 'saved'}"],
                         "error: --dtype applies to --format=keras only", ""),
    }
    # The three scripts' cases in one process (each case's arguments start with its script).
    results = cli_cases(None, {name: args for name, (args, *_) in cases.items()})
    _check_errors(results, cases)
    assert _listing(tmp_path, word_data, project_root) == before  # nothing written


@pytest.mark.slow
def test_train_errors_and_cpu_warnings(cli_cases, tmp_path, word_data, project_root):
    readme = (project_root / "README.md").read_bytes()
    common = [f"--data_dir={word_data}", "--preset=tiny", "--max_steps=1", "--sample_tokens=0",
              "--eval_max_records=1", f"--logdir={tmp_path / 'logs'}"]
    cases = {
        "model_dir is a file": (
            [*common, "--model_dir=README.md"],
            "error: --model_dir=README.md is an existing file, not a directory",
            "choose a directory",
        ),
        "model_dir inside a file": (
            [*common, "--model_dir=README.md/run"],
            "error: --model_dir=README.md/run is inside",
            "not a directory",
        ),
        "data_dir is a file": (
            [*common, "--data_dir=README.md", f"--model_dir={tmp_path / 'a'}"],
            "error: --data_dir=README.md is a file, not a data directory",
            "the one holding meta.json",
        ),
        "architecture too short": (
            [*common, f"--model_dir={tmp_path / 'a'}", "--architecture=aaf"],
            "error: --architecture=aaf has 3 blocks but the model has --num_blocks=4",
            "--num_blocks=3",
        ),
    }
    # After them, in the same process: a CPU-only machine, where mixed_float16 and a mirrored
    # strategy run, each warned once (its logs elsewhere: the errors must write none).
    cpu = [*[a for a in common if not a.startswith("--logdir=")],
           f"--logdir={tmp_path / 'cpu_logs'}", f"--model_dir={tmp_path / 'cpu'}",
           "--precision=mixed_float16", "--strategy=mirrored"]
    results = cli_cases("train.py", {**{name: args for name, (args, *_) in cases.items()},
                                     "cpu": cpu})
    code, stdout, stderr = results.pop("cpu")
    _check_errors(results, cases)
    assert (project_root / "README.md").read_bytes() == readme
    assert not (tmp_path / "a").exists() and not (tmp_path / "logs").exists()
    assert code == 0, stderr[-3000:]
    assert stderr.count("--precision=mixed_float16 on a machine without a GPU") == 1, stderr
    assert stderr.count("--strategy=mirrored found 0 GPUs: it runs one replica on the CPU") == 1
    assert stdout.startswith(f"finished {tmp_path / 'cpu'}: step 1")



def test_train_export_errors(cli_cases, tmp_path, word_data):
    """--export is checked before any work: one line naming it and the fix, status 1,
    no run directory, no logs, an existing file left as it was."""
    taken = tmp_path / "taken.keras"
    taken.write_bytes(b"an earlier export")
    missing = tmp_path / "nowhere" / "model.keras"
    common = [f"--data_dir={word_data}", "--preset=tiny", "--max_steps=1", "--sample_tokens=0",
              f"--model_dir={tmp_path / 'run'}", f"--logdir={tmp_path / 'logs'}"]
    cases = {
        "export exists": ([*common, f"--export={taken}"],
                          f"error: --export={taken} already exists: remove it, choose another "
                          "output or pass --overwrite", "--overwrite"),
        "export directory missing": (
            [*common, f"--export={missing}"],
            f"error: the directory {missing.parent} of --export={missing} does not exist: "
            "create it first", "create it first"),
        "export not .keras": ([*common, f"--export={tmp_path / 'model.h5'}"],
                              f"error: --export={tmp_path / 'model.h5'} must end in .keras",
                              "Keras package file"),
    }
    results = cli_cases("train.py", {name: args for name, (args, *_) in cases.items()})
    _check_errors(results, cases)
    assert taken.read_bytes() == b"an earlier export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.keras"]  # nothing trained

def test_create_tfrecords_wants_an_existing_data_dir(tmp_path, project_root):
    wanted = tmp_path / "shared" / "data"
    data = project_root / "data"
    before = sorted(os.listdir(data)) if data.is_dir() else None
    done = subprocess.run(["bash", str(project_root / "create_tfrecords.sh")], cwd=tmp_path,
                          env=dict(os.environ, DATA_DIR=str(wanted), PYTHON="false"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: DATA_DIR={wanted} is not an existing directory: create it first (mkdir -p "
        f"{wanted}) to keep the raw files there, or leave DATA_DIR unset for data/raw"]
    assert not (tmp_path / "shared").exists()
    assert (sorted(os.listdir(data)) if data.is_dir() else None) == before
