"""The PAR pipeline (`train.py --then_retrain --stop_rule=stable --export=...`) interrupted
at every stage boundary, by SIGINT and by SIGKILL; the same command then ends as the
uninterrupted command, exactly: the derived architecture, both runs' final weights
and metrics, and the exported package. Nothing half-written is left.

The stages: (a) the search, (b) its decision saved, before the retrain's first step
(a signal when the retrain's config is made, `retrain_config`), (c) the retrain, (d)
the export, while Keras writes the package. One run goes through the SIGINTs (and a
SIGTERM at (b) and (d)) in turn, each restart also the resume of the previous stop; a
second one through the kills at (b) and (d). Three child processes in all
(tests/helpers/faults.py), the uninterrupted reference in the first.
"""

import json
import os
import signal

import numpy as np
import pytest

from tests.helpers.faults import assert_same_checkpoint, leftovers, run_child

LINE = "interrupted at step {}: checkpoint written; run the same command to resume"
SEARCH_SIGINT_STEP = 6  # after the architecture warm-up (4), before any decision (>= 14)
RETRAIN_SIGINT_STEP = 7
BOUNDARY = "training.plugins.par_search.plugin.retrain_config"
# Called by Keras while it writes the package: its metadata and config are in the zip.
MID_EXPORT = "keras.src.saving.saving_lib._save_state"


def pipeline_flags(data_dir, root):
    """The tiny pipeline of tests/training/test_pipeline.py, exported to root/out."""
    return ["--preset=tiny", "--num_blocks=2", f"--data_dir={data_dir}",
            f"--model_dir={root}/search", f"--logdir={root}/logs", "--dropout=0.1",
            "--learning_rate=3e-3", "--warmup_steps=5", "--log_interval=3",
            "--checkpoint_interval=5", "--eval_interval=10", "--eval_max_records=8",
            "--sample_tokens=0", "--arch_warmup_steps=4", "--arch_learning_rate=0.5",
            "--freeze_threshold=0", "--stop_rule=stable", "--stop_window=10",
            "--stop_min_lead=0.05", "--then_retrain", "--max_steps=80", "--retrain_epochs=1",
            "--checkpoint_every_minutes=0", "--keep_checkpoints=2", "--deterministic",
            f"--export={root}/out/model.keras"]


def _listing(root, name):
    path = root / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture(scope="module")
def pipelines(short_word_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline_interrupt")
    runs = {name: root / name for name in ("reference", "graceful", "killed")}
    for run in runs.values():
        (run / "out").mkdir(parents=True)
    flags = {name: pipeline_flags(short_word_data, run) for name, run in runs.items()}
    out = {"runs": runs}

    def record(name, run):
        return [{"record": str(run / "out"), "to": str(root / f"{name}.json")}]

    graceful = [
        {"name": "reference", "args": flags["reference"]},
        {"name": "search", "args": flags["graceful"],
         "faults": [{"at": "step", "step": SEARCH_SIGINT_STEP, "signal": "SIGINT"}]},
        {"name": "boundary", "args": flags["graceful"],
         "faults": [{"at": "call", "target": BOUNDARY, "signal": "SIGINT"}]},
        # The same boundary, SIGTERM when the retrain's train() is called (main's is the 1st).
        {"name": "boundary_sigterm", "args": flags["graceful"],
         "faults": [{"at": "call", "target": "training.run.loop.train", "call": 2,
                     "signal": "SIGTERM"}]},
        {"name": "retrain", "args": flags["graceful"],
         "faults": [{"at": "step", "step": RETRAIN_SIGINT_STEP, "signal": "SIGINT"}]},
        {"name": "export", "args": flags["graceful"],
         "faults": [{"at": "call", "target": MID_EXPORT, "signal": "SIGINT"}]},
        {"name": "export_sigterm", "args": flags["graceful"],
         "faults": [{"at": "call", "target": MID_EXPORT, "signal": "SIGTERM"}]},
        {"name": "final", "args": flags["graceful"],
         "before": record("after_sigint_export", runs["graceful"])},
        # SIGKILL once the search has decided and saved, before the retrain starts.
        {"name": "kill_boundary", "args": flags["killed"],
         "stderr_to": str(root / "kill_boundary.err"),
         "faults": [{"at": "call", "target": BOUNDARY, "kill": True}]},
    ]
    out["graceful"] = run_child(graceful)
    out["kill_export"] = run_child([
        {"name": "kill_export", "args": flags["killed"],
         "before": [{"record": str(runs["killed"]), "to": str(root / "after_kill_boundary.json")}],
         "stderr_to": str(root / "kill_export.err"),
         "faults": [{"at": "call", "target": MID_EXPORT, "kill": True}]}])
    out["kill_export_stderr"] = (root / "kill_export.err").read_text(errors="replace")
    out["final_killed"] = run_child([{"name": "final", "args": flags["killed"],
                                      "before": record("after_kill_export", runs["killed"])}])
    out["after_kill_boundary"] = _listing(root, "after_kill_boundary")
    out["after_kill_export"] = _listing(root, "after_kill_export")
    out["after_sigint_export"] = _listing(root, "after_sigint_export")
    return out


def _stages(run):
    return run / "search", run / "search_retrain"


@pytest.mark.slow
def test_each_sigint_stops_its_stage_with_one_line_and_the_next_start_resumes_it(pipelines):
    code, results, err = pipelines["graceful"]
    search, retrain = _stages(pipelines["runs"]["graceful"])
    assert results["reference"][0] == 0, results["reference"][1][-3000:]
    export = (f"interrupted: nothing was written to {pipelines['runs']['graceful']}/out/"
              "model.keras; the training is complete: run the same command to export")
    expected = {"search": (130, LINE.format(SEARCH_SIGINT_STEP)),
                "boundary": (130, LINE.format(0)), "boundary_sigterm": (143, LINE.format(0)),
                "retrain": (130, LINE.format(RETRAIN_SIGINT_STEP)),
                "export": (130, export), "export_sigterm": (143, export)}
    for name, (code, line) in expected.items():
        assert name in results, (name, err[-3000:])
        status, stderr = results[name]
        assert status == code, (name, stderr[-3000:])
        assert stderr.strip().splitlines()[-1] == line, (name, stderr[-3000:])
        assert "Traceback" not in stderr, name
    # Each start resumed where the previous one stopped, and trained no stage twice.
    assert f"resuming {search} at step {SEARCH_SIGINT_STEP}" in results["boundary"][1]
    for name in ("boundary_sigterm", "retrain"):
        assert f"resuming {retrain} at step 0" in results[name][1], name
    assert f"resuming {retrain} at step {RETRAIN_SIGINT_STEP}" in results["export"][1]
    # Once the search had finished, a start reads it from its files: no search step, no
    # evaluation of it again.
    assert json.loads((search / "metrics.json").read_text())["derivation"]["decided_step"]
    for name in ("boundary_sigterm", "retrain", "export"):
        assert f"{search} finished earlier: its results are read from its metrics.json" in \
            results[name][1], name
        assert f"resuming {search} at step" not in results[name][1], name
    # Once both stages had finished, a start resumes nothing: it only exports (the command
    # is answered from the runs' files, training/setup/finished.py).
    for name in ("export_sigterm", "final"):
        assert "resuming" not in results[name][1], name
    # The interrupted exports left nothing in the output directory.
    assert pipelines["after_sigint_export"] == []


@pytest.mark.slow
def test_sigkill_at_the_boundary_and_during_the_export_leaves_nothing_half_written(pipelines):
    code, results, err = pipelines["graceful"]
    assert code == -signal.SIGKILL, (code, err[-3000:])
    assert "kill_boundary" not in results
    # Killed after the search's decision was saved, before the retrain began.
    listing = pipelines["after_kill_boundary"]
    assert "search_retrain" not in listing and "search/metrics.json" in listing, listing
    kill_code, _, kill_err = pipelines["kill_export"]
    assert kill_code == -signal.SIGKILL, (kill_code, kill_err[-3000:])
    stderr = pipelines["kill_export_stderr"]
    search, retrain = _stages(pipelines["runs"]["killed"])
    assert f"{search} finished earlier" in stderr and f"resuming {search} at" not in stderr
    assert f"resuming {retrain}" not in stderr
    # Killed while the package was written: its temporary was there, the package not.
    written = pipelines["after_kill_export"]
    assert "model.keras" not in written
    assert [n for n in written if n.startswith(".model.keras.tmp-")], written


@pytest.mark.slow
def test_after_every_interruption_the_pipeline_ends_as_the_uninterrupted_one(pipelines):
    from serving import decoder
    from serving.packaged import load_package

    reference = pipelines["runs"]["reference"]
    ref_search, ref_retrain = _stages(reference)
    ref_metrics = json.loads((ref_search / "metrics.json").read_text())
    ref_package = load_package(str(reference / "out" / "model.keras"))
    prompt = [5, 1, 7, 2, 9, 3]
    ref_log_probs = _log_probs(ref_package, prompt)
    for name, (code, results, err) in (("graceful", pipelines["graceful"]),
                                       ("killed", pipelines["final_killed"])):
        assert results["final"][0] == 0, (name, results["final"][1][-3000:])
        run = pipelines["runs"][name]
        search, retrain = _stages(run)
        metrics = json.loads((search / "metrics.json").read_text())
        assert metrics["architecture"] == ref_metrics["architecture"] != "supernet"
        assert _without_paths(metrics) == _without_paths(ref_metrics), name
        assert (json.loads((retrain / "metrics.json").read_text())
                == json.loads((ref_retrain / "metrics.json").read_text())), name
        for mine, theirs in ((search, ref_search), (retrain, ref_retrain)):
            for file in ("architecture.json",):
                if (theirs / file).exists():
                    assert (mine / file).read_text() == (theirs / file).read_text(), name
            last = _last_checkpoint(theirs)
            assert _last_checkpoint(mine) == last, name
            assert_same_checkpoint(mine / last, theirs / last)
        package = load_package(str(run / "out" / "model.keras"))
        assert package.model.derived_architecture == ref_metrics["architecture"]
        for a, b in zip(_stored(package), _stored(ref_package), strict=True):
            assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]  # not the model's name
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
        np.testing.assert_array_equal(_log_probs(package, prompt), ref_log_probs)
        np.testing.assert_array_equal(
            np.asarray(decoder.generate(package.model, prompt, 8, seed=3)),
            np.asarray(decoder.generate(ref_package.model, prompt, 8, seed=3)))
        for directory in (search, retrain, run / "out"):
            assert not leftovers(directory), leftovers(directory)
            assert not (directory / ".lock").exists()
        assert sorted(os.listdir(run / "out")) == ["model.keras", "model.md"], name


def _stored(run):
    """The variables a .keras file stores: Keras keeps no SeedGenerator state there (the
    loaded dropout layers draw a fresh one; dropout is off at inference)."""
    variables = [v for v in run.model.variables if "seed_generator" not in v.path]
    assert len(variables) < len(run.model.variables)  # --dropout=0.1: there are some
    return variables


def _last_checkpoint(model_dir):
    import tensorflow as tf

    return os.path.basename(tf.train.latest_checkpoint(str(model_dir)))


def _without_paths(metrics):
    metrics = json.loads(json.dumps(metrics))
    metrics.get("retrain", {}).pop("model_dir", None)
    return metrics


def _log_probs(run, prompt):
    import tensorflow as tf

    hidden, _ = run.model(tf.constant([prompt], tf.int32), training=False)
    return run.model.log_probs(hidden).numpy()
