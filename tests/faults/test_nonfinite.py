"""A loss or gradient that becomes NaN: the policy (--on_nonfinite), and no NaN checkpoint.

The NaN comes from a test-only plug-in (tests/helpers/faults.py
`InjectNonFinite`) at a chosen step: a NaN loss, or a NaN gradient of one
variable group with a finite loss. All runs share one child process. The
"skip" run also saves a checkpoint every step by wall time
(--checkpoint_every_minutes), so the time-based save path meets the
skipped steps.
"""

import json

import numpy as np
import pytest

from tests.helpers.faults import leftovers, run_child, run_flags

FIXES = ("likely fixes: lower --learning_rate (now 0.003), clip with --clip_norm (now 0.25), "
         "train in --precision=float32 (now float32)")


@pytest.fixture(scope="module")
def nonfinite_runs(word_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("nonfinite")
    runs = {name: root / name for name in ("loss", "arch", "skip")}
    cases = [
        # NaN loss at step 7, and a SIGINT during that same step: the interrupt
        # must not save the step's state.
        {"name": "loss", "args": run_flags(word_data, runs["loss"]),
         "faults": [{"at": "nonfinite", "step": 7, "target": "loss"},
                    {"at": "step", "step": 7, "signal": "SIGINT"}]},
        {"name": "arch", "args": run_flags(word_data, runs["arch"]),
         "faults": [{"at": "nonfinite", "step": 6, "target": "arch"}]},
        {"name": "skip", "args": run_flags(
            word_data, runs["skip"], "--on_nonfinite=skip", "--max_nonfinite_steps=3",
            "--checkpoint_interval=0", "--checkpoint_every_minutes=1e-6"),
         "faults": [{"at": "nonfinite", "step": s, "target": t} for s, t in (
             (7, "loss"), (8, "weights"), (20, "loss"), (21, "loss"), (22, "loss"))]},
    ]
    code, results, err = run_child(cases)
    assert code == 0, err[-3000:]
    return runs, results


def _all_finite(prefix):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    for name in reader.get_variable_to_shape_map():
        value = np.asarray(reader.get_tensor(name))
        if np.issubdtype(value.dtype, np.floating) and "best_valid_nll" not in name:
            assert np.all(np.isfinite(value)), (prefix, name)


@pytest.mark.slow
def test_stop_names_the_step_the_quantity_and_the_fixes(nonfinite_runs):
    runs, results = nonfinite_runs
    code, err = results["loss"]
    assert code == 1, err[-2000:]
    line = err.strip().splitlines()[-1]
    assert line == (f"error: non-finite loss or gradient at step 7: the loss (nan) is not "
                    f"finite; stopped without saving; the last checkpoint ({runs['loss']}/ckpt-5) "
                    f"is intact; {FIXES}, or skip such steps with --on_nonfinite=skip")
    names = {p.name for p in runs["loss"].iterdir()}
    assert "ckpt-5.index" in names and not [n for n in names if n.startswith(("ckpt-6", "ckpt-7"))]
    _all_finite(runs["loss"] / "ckpt-5")
    assert not (runs["loss"] / ".lock").exists() and not leftovers(runs["loss"])

    code, err = results["arch"]
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: non-finite loss or gradient at step 6: the gradient of the "
                           "arch group (arch_grad_norm=nan) is not finite; stopped without "
                           f"saving; the last checkpoint ({runs['arch']}/ckpt-5) is intact"), line


@pytest.mark.slow
def test_skip_counts_skipped_steps_and_stops_after_too_many_in_a_row(nonfinite_runs):
    import glob

    import tensorflow as tf

    from training.run.loop import read_training_log

    runs, results = nonfinite_runs
    code, err = results["skip"]
    assert code == 1, err[-2000:]
    assert ("step 7: the loss (nan) is not finite: update skipped (1 in a row; the run stops "
            "after 3)") in err
    assert ("step 8: the gradient of the weights (grad_norm=nan) is not finite: update skipped "
            "(2 in a row") in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: 3 steps in a row were non-finite (--max_nonfinite_steps=3), "
                           "the last at step 22: the loss (nan) is not finite; stopped without "
                           "saving; the last "
                           f"checkpoint ({runs['skip']}/ckpt-21) is intact; {FIXES}"), line
    log = read_training_log(runs["skip"] / "training_log.log")
    skipped = {row["step"]: row["skipped"] for row in log}
    assert skipped == {3: 0, 6: 0, 9: 2, 12: 0, 15: 0, 18: 0, 21: 2}
    assert all(np.isfinite(row["loss"]) for row in log)
    # Saved by time after every step, skipped ones too, never with a NaN.
    assert err.count("minutes since the last checkpoint") >= 20
    for prefix in ("ckpt-20", "ckpt-21"):
        _all_finite(runs["skip"] / prefix)
    counts = {}
    for path in glob.glob(str(runs["skip"] / "logs" / "train" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "train/skipped_steps":
                    counts[event.step] = float(tf.make_ndarray(value.tensor))
    assert counts == {3: 0, 6: 0, 9: 2, 12: 0, 15: 0, 18: 0, 21: 2}


def test_a_checkpoint_with_a_non_finite_weight_is_never_written(tmp_path):
    import tensorflow as tf

    from runstore import checkpoints
    from tests.helpers.runs import make_model
    from training.run import checkpoint

    model = make_model()
    state = checkpoint.TrainState([], tf.float32)
    saver = checkpoint.Checkpointer(str(tmp_path), model, {}, state, 2,
                                    tf.distribute.get_strategy())
    assert saver.save([]).endswith("ckpt-0")
    model.variables[3].assign(tf.fill(model.variables[3].shape, np.nan))
    state.step.assign(1)
    with pytest.raises(checkpoint.NonFiniteError, match=r"at step 1 the model weights became "
                       r"non-finite \(.+\): not saved; the last checkpoint \(.+ckpt-0\) is intact"):
        saver.save([])
    with pytest.raises(checkpoint.NonFiniteError):
        saver.save_best()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint", "ckpt-0.data-00000-of-00001", "ckpt-0.index"]
    assert json.dumps(checkpoints.checkpoints(str(tmp_path))) == json.dumps(
        [str(tmp_path / "ckpt-0")])
