"""Ctrl-C while create_tfrecords.sh (build_data.py) writes a build: nothing is left half-built.

The build of the whole WikiText-2 training text (word level) runs until it
has written its training shard; then the process group gets SIGINT, as from a
terminal. The script must say so in one line, exit with 130, and leave no
file of the build; the same command then builds it.

The whole write takes under a second, less than a loaded machine may take to
notice the first file, so the child's Python holds the moment open: a
`sitecustomize` module on its path wraps `pardata.records.write_split` to
leave a marker after the training shard and wait (interruptibly) there; the
test signals when the marker appears.
"""

import os
import signal
import subprocess
import time

import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.faults import default_signals

# The child's sitecustomize: after the training shard, leave the marker and wait to be
# interrupted (60 s at most; the signal raises KeyboardInterrupt inside the sleep).
_HOLD_AFTER_TRAIN_SHARD = """
from pardata import records
_write_split = records.write_split

def write_split(directory, split, *args, **kwargs):
    info = _write_split(directory, split, *args, **kwargs)
    if split == "train":
        import pathlib, time
        pathlib.Path({marker!r}).touch()
        time.sleep(60)
    return info

records.write_split = write_split
"""


@pytest.mark.slow
def test_ctrl_c_while_writing_a_build_leaves_nothing(wikitext2_root, tmp_path):
    raw = wikitext2_root / "wikitext-2"
    out = tmp_path / "built"
    command = ["bash", str(PROJECT_ROOT / "create_tfrecords.sh"), "text",
               f"--train_file={raw / 'wiki.train.tokens'}",
               f"--valid_file={raw / 'wiki.valid.tokens'}",
               f"--test_file={raw / 'wiki.test.tokens'}", "--tokenizer=word",
               "--vocab_size=2000", "--batch_size=4", "--seq_len=16", f"--output_dir={out}"]
    hook = tmp_path / "hook"
    hook.mkdir()
    marker = tmp_path / "train_written"
    (hook / "sitecustomize.py").write_text(_HOLD_AFTER_TRAIN_SHARD.format(marker=str(marker)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([str(hook), str(PROJECT_ROOT)]))
    child = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=default_signals)
    deadline = time.monotonic() + 600
    seen = []
    while time.monotonic() < deadline and child.poll() is None:
        if marker.exists():  # the build is between its files
            seen = os.listdir(out)
            os.killpg(child.pid, signal.SIGINT)
            break
        time.sleep(0.01)
    _, err = child.communicate(timeout=600)
    assert seen, f"the build ended before it was interrupted: {err[-2000:]}"
    assert child.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "error: interrupted; the partial build was removed"
    assert not out.exists() or os.listdir(out) == [], os.listdir(out)
    env["PYTHONPATH"] = str(PROJECT_ROOT)  # the same command, without the hold
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "meta.json").is_file()
