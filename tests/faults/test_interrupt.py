"""Interrupting training: SIGINT/SIGTERM, during a step, an evaluation, a save; a second
SIGINT and SIGKILL while a checkpoint is written. After each, the same command resumes,
and the run ends with the weights of the uninterrupted run, bit for bit.

One run directory goes through every interruption in turn (each restart is
also the resume of the previous interruption), in three child processes: the
graceful stops share one, and each kill ends its own. The steps of the first
two signals are drawn from a seed. The stops at more random steps (each with its
resume, in run directories of their own) go first in the graceful stops' child.
"""

import json
import os
import random
import signal

import pytest

from tests.helpers.faults import STEPS, assert_same_checkpoint, leftovers, run_child, run_flags

LINE = "interrupted at step {}: checkpoint written; run the same command to resume"


def _steps(seed):
    rng = random.Random(seed)
    first = rng.randint(1, 4)
    return first, rng.choice([s for s in range(first + 1, 10) if s % 5])


def _random_stops(word_data, root):
    """More seeds: a random signal (SIGINT or SIGTERM) at a random step, then a resume, each
    in a run directory of its own. Returns (cases, seed -> (step, exit status, run))."""
    cases, expected = [], {}
    for seed in (5, 7):  # SIGTERM at step 20 (an evaluation step), SIGINT at 11
        rng = random.Random(seed)
        step, name = rng.randint(1, STEPS - 1), rng.choice(["SIGINT", "SIGTERM"])
        flags = run_flags(word_data, root / f"seed{seed}")
        cases += [{"name": f"stop{seed}", "args": flags,
                   "faults": [{"at": "step", "step": step, "signal": name}]},
                  {"name": f"resume{seed}", "args": flags}]
        expected[seed] = (step, 128 + getattr(signal, name), root / f"seed{seed}")
    return cases, expected


@pytest.fixture(scope="module")
def chain(word_data, reference_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupt_chain")
    run = root / "run"
    first, second = _steps(seed=1)
    flags = run_flags(word_data, run)
    record = [{"record": str(run), "to": str(root / "listing.json")}]
    # The random stops first, in the same child (one TensorFlow start less): the chain's
    # last graceful case ends the process.
    random_cases, random_expected = _random_stops(word_data, root)
    graceful = [
        *random_cases,
        {"name": "sigint_step", "args": flags,
         "faults": [{"at": "step", "step": first, "signal": "SIGINT"}]},
        {"name": "sigterm_step", "args": flags,
         "faults": [{"at": "step", "step": second, "signal": "SIGTERM"}]},
        {"name": "sigint_evaluation", "args": flags,
         "faults": [{"at": "evaluation", "step": 10, "signal": "SIGINT"}]},
        {"name": "sigint_save", "args": flags,
         "faults": [{"at": "save", "step": 15, "signal": "SIGINT"}]},
        # Killed by the second SIGINT while ckpt-20 is being written.
        {"name": "second_sigint", "args": flags, "stderr_to": str(root / "second_sigint.err"),
         "faults": [{"at": "save", "step": 20, "signal": "SIGINT", "again": True}]},
    ]
    out = {"steps": (first, second), "run": run, "random": random_expected}
    out["graceful"] = run_child(graceful)
    out["second_sigint_stderr"] = (root / "second_sigint.err").read_text(errors="replace")
    out["after_second_sigint"] = json.loads((root / "listing.json").read_text()) if (
        root / "listing.json").exists() else None
    out["kill"] = run_child([{"name": "sigkill_save", "args": flags, "before": record,
                              "faults": [{"at": "save", "step": 25, "kill": True}]}])
    out["listing_before_kill"] = json.loads((root / "listing.json").read_text())
    out["final"] = run_child([{"name": "final", "args": flags, "before": record}])
    out["listing_before_final"] = json.loads((root / "listing.json").read_text())
    return out


@pytest.mark.slow
def test_graceful_stops_write_a_checkpoint_and_say_how_to_resume(chain):
    first, second = chain["steps"]
    code, results, err = chain["graceful"]
    expected = {"sigint_step": (130, first), "sigterm_step": (143, second),
                "sigint_evaluation": (130, 10), "sigint_save": (130, 15)}
    for name, (status, step) in expected.items():
        assert name in results, (name, err[-3000:])
        got, stderr = results[name]
        assert got == status, (name, stderr[-3000:])
        # One line says what happened and what to do; no traceback.
        assert stderr.strip().splitlines()[-1] == LINE.format(step), name
        assert "Traceback" not in stderr, name
    # Each restart resumed from the interruption's checkpoint (so the lock was
    # released and the checkpoint written), the evaluation it abandoned redone.
    resumes = {"sigterm_step": first, "sigint_evaluation": second, "sigint_save": 10,
               "second_sigint": 15}
    for name, step in resumes.items():
        stderr = results[name][1] if name in results else chain["second_sigint_stderr"]
        assert f"resuming {chain['run']} at step {step}" in stderr, name
    assert "redoing the evaluation the interruption abandoned" in results["sigint_save"][1]
    # --eval_max_records=8: the first 8 records of valid, no tail (evaluation/stream.py).
    assert "evaluating valid abandoned after 1/8 segments" in results["sigint_evaluation"][1]


@pytest.mark.slow
def test_second_sigint_and_sigkill_during_a_save_leave_the_last_checkpoint_intact(chain):
    code, results, err = chain["graceful"]
    assert code == -signal.SIGINT, ("the second SIGINT did not end the process", code,
                                    err[-3000:])
    assert "second_sigint" not in results  # it never finished
    # Killed mid-write: TensorFlow's temporary directory of ckpt-20 was there,
    # and ckpt-20 was never listed; ckpt-15 stayed.
    listing = chain["listing_before_kill"]
    assert "ckpt-20_temp" in listing, listing
    assert "ckpt-15.index" in listing
    kill_code, kill_results, kill_err = chain["kill"]
    assert kill_code == -signal.SIGKILL, (kill_code, kill_err[-3000:])
    assert "ckpt-25_temp" in chain["listing_before_final"], chain["listing_before_final"]


@pytest.mark.slow
def test_after_every_interruption_the_run_ends_as_the_uninterrupted_one(chain, reference_run):
    from training.run.loop import read_training_log

    code, results, err = chain["final"]
    assert code == 0 and results["final"][0] == 0, err[-3000:]
    stderr = results["final"][1]
    assert "removed unfinished writes of an earlier process" in stderr
    assert f"resuming {chain['run']} at step 20" in stderr
    run = chain["run"]
    # Whatever of ckpt-25 the kill left was removed (a save that never
    # completed), not kept as a damaged checkpoint.
    assert not leftovers(run), leftovers(run)
    assert not [n for n in os.listdir(run) if n.endswith(".damaged")]
    assert not (run / ".lock").exists() and not (run / "pending_evaluation.json").exists()
    assert_same_checkpoint(run / f"ckpt-{STEPS}", reference_run / f"ckpt-{STEPS}")
    reference_log = read_training_log(reference_run / "training_log.log")
    resumed_log = read_training_log(run / "training_log.log")
    for key in ("step", "loss", "lr", "tau"):
        assert [r[key] for r in resumed_log] == [r[key] for r in reference_log], key
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics == json.loads((reference_run / "metrics.json").read_text())


@pytest.mark.slow
def test_a_signal_at_a_random_step_then_the_same_command_ends_as_the_uninterrupted_run(
        chain, reference_run):
    """More seeds: a random signal (SIGINT or SIGTERM) at a random step, then a resume
    (cases of the chain's first child, before its own)."""
    code, results, err = chain["graceful"]
    for seed, (step, status, run) in chain["random"].items():
        assert f"stop{seed}" in results and f"resume{seed}" in results, (seed, err[-3000:])
        got, stderr = results[f"stop{seed}"]
        assert got == status, (seed, stderr[-2000:])
        assert stderr.strip().splitlines()[-1] == LINE.format(step)
        got, stderr = results[f"resume{seed}"]
        assert got == 0 and f"resuming {run} at step {step}" in stderr
        assert_same_checkpoint(run / f"ckpt-{STEPS}", reference_run / f"ckpt-{STEPS}")
