"""runstore/progress.py: how far a run got, and the line a missing export gets when the
runs it would come from are unfinished (README's steps 3-4 against a stopped pipeline)."""

import json
import shutil

import pytest

from runstore import progress


@pytest.fixture
def pipeline_dirs(trained_run, tmp_path):
    """runs/x (a finished "search") and runs/x_retrain (the same run, unfinished: no
    metrics.json, planned for 10 steps, its last checkpoint at step 4)."""
    runs = tmp_path / "runs"
    shutil.copytree(trained_run("transformer_xl"), runs / "x")
    retrain = runs / "x_retrain"
    shutil.copytree(trained_run("transformer_xl"), retrain)
    (retrain / "metrics.json").unlink()
    config = json.loads((retrain / "config.json").read_text())
    config["max_steps"] = 10
    (retrain / "config.json").write_text(json.dumps(config))
    return runs


def test_progress_of_finished_and_unfinished_runs(pipeline_dirs):
    done = progress.run_progress(str(pipeline_dirs / "x"))
    assert (done.step, done.finished) == (4, True)
    assert done.describe() == "finished at step 4"
    left = progress.run_progress(str(pipeline_dirs / "x_retrain"))
    assert (left.step, left.planned, left.finished) == (4, 10, False)
    assert left.describe() == "unfinished: step 4 of 10 (its last checkpoint)"


def test_planned_steps_from_epochs_and_the_data(pipeline_dirs, word_data):
    retrain = pipeline_dirs / "x_retrain"
    config = json.loads((retrain / "config.json").read_text())
    config.update(max_steps=0, epochs=3)
    (retrain / "config.json").write_text(json.dumps(config))
    records = json.loads((word_data / "meta.json").read_text())["splits"]["train"]["records"]
    assert progress.run_progress(str(retrain)).planned == 3 * records


def test_missing_package_names_the_unfinished_stage(pipeline_dirs):
    note = progress.missing_package_note(str(pipeline_dirs / "x.keras"))
    retrain = pipeline_dirs / "x_retrain"
    assert note == (f"it is not written yet: {retrain} is unfinished: step 4 of 10 (its last "
                    "checkpoint). Run the command that trains it again to finish and export it "
                    "(e.g. ./base_model.sh --pipeline), or use its best checkpoint so far with "
                    f"--model_dir={retrain}")
    assert progress.missing_package_note(str(pipeline_dirs / "other.keras")) == ""
    shutil.rmtree(retrain)  # every stage finished: nothing to say
    assert progress.missing_package_note(str(pipeline_dirs / "x.keras")) == ""


@pytest.mark.slow
def test_generate_and_evaluate_against_a_stopped_pipeline(pipeline_dirs, cli_cases):
    package = pipeline_dirs / "x.keras"
    ran = cli_cases(None, {
        "generate": ["generate.py", f"--model={package}", "--prompt=the", "--num_tokens=3"],
        "evaluate": ["evaluate.py", f"--model={package}", "--split=test"]})
    for name, (code, stdout, stderr) in ran.items():
        assert code == 1 and stdout == "", (name, stderr)
        lines = [x for x in stderr.splitlines() if x]
        assert len(lines) == 1, (name, lines)
        assert lines[0].startswith(f"error: --model={package} does not exist: it is not "
                                   f"written yet: {pipeline_dirs / 'x_retrain'} is unfinished: "
                                   "step 4 of 10"), (name, lines[0])


def test_loading_an_unfinished_run_says_what_it_uses(pipeline_dirs, caplog):
    import logging

    from serving.runs import load_run

    with caplog.at_level(logging.WARNING):
        load_run(str(pipeline_dirs / "x"))
    assert not [r for r in caplog.records if "unfinished" in r.getMessage()]
    with caplog.at_level(logging.WARNING):
        load_run(str(pipeline_dirs / "x_retrain"))
    notes = [r.getMessage() for r in caplog.records if "unfinished" in r.getMessage()]
    assert notes == [f"{pipeline_dirs / 'x_retrain'} is unfinished: step 4 of 10 (its last "
                     "checkpoint): using its checkpoint at step 4; run its training command "
                     "again to finish it"]
