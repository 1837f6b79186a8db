"""Ctrl-C while create_tfrecords.sh (build_data.py) writes a build: nothing is left half-built.

The build of the whole WikiText-2 training text (word level) runs until it
starts writing files; then the process group gets SIGINT, as from a
terminal. The script must say so in one line, exit with 130, and leave no
file of the build; the same command then builds it.
"""

import os
import signal
import subprocess
import time

import pytest

from tests.helpers import PROJECT_ROOT


@pytest.mark.slow
def test_ctrl_c_while_writing_a_build_leaves_nothing(wikitext2_root, tmp_path):
    raw = wikitext2_root / "wikitext-2"
    out = tmp_path / "built"
    command = ["bash", str(PROJECT_ROOT / "create_tfrecords.sh"), "text",
               f"--train_file={raw / 'wiki.train.tokens'}",
               f"--valid_file={raw / 'wiki.valid.tokens'}",
               f"--test_file={raw / 'wiki.test.tokens'}", "--tokenizer=word",
               "--vocab_size=2000", "--batch_size=4", "--seq_len=16", f"--output_dir={out}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))
    child = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 600
    seen = []
    while time.monotonic() < deadline and child.poll() is None:
        seen = os.listdir(out) if out.is_dir() else []
        if seen:  # the build is writing its files
            os.killpg(child.pid, signal.SIGINT)
            break
        time.sleep(0.005)
    _, err = child.communicate(timeout=600)
    assert seen, f"the build ended before it was interrupted: {err[-2000:]}"
    assert child.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "error: interrupted; the partial build was removed"
    assert not out.exists() or os.listdir(out) == [], os.listdir(out)
