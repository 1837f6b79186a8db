"""--strategy=multi_worker stops through TensorFlow's PreemptionCheckpointHandler.

What can be tried on one machine: a real MultiWorkerMirroredStrategy with a
one-worker cluster on the loopback address (TF_CONFIG), where the handler
runs in its cluster mode (coordination service). A SIGTERM makes the
handler pick the step, call our save there and exit through our exit_fn;
the run then resumes to the end. What cannot be tried here is the same with
several workers on several machines (the handler agrees on the step through
the coordination service; docs/faults.md). TensorFlow's platform probe (an
HTTP request to the cloud metadata server) is pointed at a closed loopback
port, so the test sends nothing off the machine.
"""

import json
import re
import socket

import pytest

from tests.helpers.faults import leftovers, run_child, run_flags


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sigterm_under_multi_worker_saves_through_tensorflows_handler(word_data, tmp_path):
    run = tmp_path / "run"
    flags = run_flags(word_data, run, "--strategy=multi_worker")
    env = {"TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{_free_port()}"]},
                                    "task": {"type": "worker", "index": 0}}),
           "GCE_METADATA_IP": f"127.0.0.1:{_free_port()}"}
    # Steps slowed to 0.2 s from the signal on: the handler polls once a second.
    # One strategy per process (collectives are configured at start-up): the
    # resume runs in a second child.
    code, results, err = run_child([{"name": "sigterm", "args": flags, "faults": [
        {"at": "step", "step": 4, "signal": "SIGTERM", "pause": 0.2}]}], env=env)
    assert code == 0, err[-3000:]
    status, stderr = results["sigterm"]
    assert status == 143, stderr[-3000:]
    assert "tf.distribute.experimental.PreemptionCheckpointHandler" in stderr
    line = stderr.strip().splitlines()[-1]
    match = re.fullmatch(r"interrupted at step (\d+): checkpoint written; run the same command "
                         r"to resume", line)
    assert match, line
    step = int(match.group(1))
    assert 4 <= step < 30
    code, results, err = run_child([{"name": "resume", "args": flags}], env=env)
    assert code == 0, err[-3000:]
    status, stderr = results["resume"]
    assert status == 0, stderr[-3000:]
    assert f"resuming {run} at step {step}" in stderr
    assert (run / "ckpt-30.index").exists() and not leftovers(run)
