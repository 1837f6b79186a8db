"""One run per model_dir: the lock is exclusive, released, and stale locks are taken over."""

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from runstore.run_lock import LOCK_FILE, RunDirLocked, RunLock
from training.setup.config import ConfigError

HOST = socket.gethostname()
# A child that takes the lock on argv[1], says so, and holds it until stdin closes.
HOLDER = textwrap.dedent("""
    import sys
    from runstore.run_lock import RunLock
    with RunLock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.read()
""")


def _refusal(model_dir, pid, host=HOST):
    return re.escape(f"--model_dir={model_dir} is in use by another training run (PID {pid} "
                     f"on host {host}, started ") + r"[^)]+" + re.escape(
        f"); wait for it to finish, stop it (kill {pid}), or pass another --model_dir")


def _owner(model_dir):
    return json.loads((model_dir / LOCK_FILE).read_text())


def test_second_lock_refused_then_released(tmp_path):
    run = tmp_path / "run"
    with RunLock(str(run)) as lock:
        assert lock.locked and (_owner(run)["host"], _owner(run)["pid"]) == (HOST, os.getpid())
        with pytest.raises(RunDirLocked, match=_refusal(run, os.getpid())) as refused:
            RunLock(str(run)).acquire()
        assert isinstance(refused.value, ConfigError)  # train.py prints it as one error line
        assert _owner(run)["pid"] == os.getpid()  # the refused attempt changed nothing
    assert not (run / LOCK_FILE).exists() and not lock.locked
    assert not run.exists()  # created by the lock, left empty: removed again
    (run / "ckpt").mkdir(parents=True)
    with RunLock(str(run)):
        pass
    assert sorted(os.listdir(run)) == ["ckpt"]  # a directory with a run in it stays


def test_released_on_exception(tmp_path):
    with pytest.raises(KeyError):
        with RunLock(str(tmp_path)):
            assert (tmp_path / LOCK_FILE).exists()
            raise KeyError("boom")
    assert not (tmp_path / LOCK_FILE).exists()
    with RunLock(str(tmp_path)):  # free again
        assert _owner(tmp_path)["pid"] == os.getpid()


def _start_holder(run, project_root):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], cwd=project_root,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(project_root)))
    assert child.stdout.readline().strip() == "locked"
    return child


def test_other_process_refused_and_its_stale_lock_taken_over(tmp_path, project_root, caplog):
    run = tmp_path / "run"
    run.mkdir()
    child = _start_holder(run, project_root)
    try:
        with pytest.raises(RunDirLocked, match=_refusal(run, child.pid)):
            RunLock(str(run)).acquire()
    finally:
        child.kill()  # SIGKILL: no cleanup, the lock file stays behind
        child.wait()
    assert child.returncode == -signal.SIGKILL and _owner(run)["pid"] == child.pid
    caplog.set_level("INFO")
    with RunLock(str(run)):
        assert _owner(run)["pid"] == os.getpid()
    assert [r.getMessage() for r in caplog.records if "stale" in r.getMessage()] == [
        f"taking over the stale lock {run / LOCK_FILE}: the run that left it (PID {child.pid} "
        f"on host {HOST}, started {_started(caplog)}) is no longer running"]


def _started(caplog):
    message = next(r.getMessage() for r in caplog.records if "stale" in r.getMessage())
    return re.search(r"started ([^)]+)\)", message).group(1)


def test_second_process_exits_with_the_message(tmp_path, project_root):
    """The refused side is a real second process: it gets the error, the holder goes on."""
    run = tmp_path / "run"
    script = textwrap.dedent("""
        import sys
        from runstore.run_lock import RunDirLocked, RunLock
        try:
            RunLock(sys.argv[1]).acquire()
        except RunDirLocked as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
    """)
    with RunLock(str(run)):
        result = subprocess.run([sys.executable, "-c", script, str(run)], cwd=project_root,
                                capture_output=True, text=True, timeout=60,
                                env=dict(os.environ, PYTHONPATH=str(project_root)))
        assert result.returncode == 1
        assert re.fullmatch("error: " + _refusal(run, os.getpid()), result.stderr.strip())
        assert _owner(run)["pid"] == os.getpid()


def test_stale_lock_of_a_dead_pid(tmp_path, caplog):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": HOST, "pid": dead.pid,
                                                  "started": "2026-01-01T00:00:00+00:00"}))
    caplog.set_level("INFO")
    with RunLock(str(tmp_path)):
        assert _owner(tmp_path)["pid"] == os.getpid()
    assert any(f"(PID {dead.pid} on host {HOST}, started 2026-01-01T00:00:00+00:00) is no "
               "longer running" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / LOCK_FILE).exists()


def test_lock_file_from_another_host_is_not_taken_over(tmp_path):
    record = {"host": "node7.cluster", "pid": 4242, "started": "2026-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_FILE).write_text(json.dumps(record))
    with pytest.raises(RunDirLocked, match=re.escape(
            f"--model_dir={tmp_path} has a lock file from another machine (PID 4242 on host "
            "node7.cluster, started 2026-01-01T00:00:00+00:00) that this machine cannot check; "
            f"if no run is active there, delete {tmp_path / LOCK_FILE} and start again, or "
            "pass another --model_dir")):
        RunLock(str(tmp_path)).acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text()) == record  # kept as it was


def test_lock_file_replaced_while_waiting(tmp_path, monkeypatch):
    """A lock won on a file that its holder deleted on release is not a lock: retry."""
    lock = RunLock(str(tmp_path))
    real_flock = fcntl.flock
    calls = []

    def flock_then_replace(fd, op):
        real_flock(fd, op)
        calls.append(os.fstat(fd).st_ino)
        if len(calls) == 1:  # the old holder deletes the file and a newcomer creates it
            os.remove(lock.path)
            open(lock.path, "w").close()

    monkeypatch.setattr(fcntl, "flock", flock_then_replace)
    with lock:
        assert len(calls) == 2 and calls[0] != calls[1]
        assert os.fstat(lock._fd).st_ino == os.stat(lock.path).st_ino == calls[1]
