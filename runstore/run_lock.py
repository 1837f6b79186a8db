"""One training process per run directory: an exclusive lock on `model_dir/.lock`.

    with run_lock.RunLock(config.model_dir):
        ...  # check, resume or start the run, train

Two trainers on one `--model_dir` would double every log line and interleave
checkpoint writes. The lock is `fcntl.flock(LOCK_EX | LOCK_NB)` on
`model_dir/.lock`, which holds the owner's host, PID and start time (JSON) for
the messages:

- flock, not an O_EXCL file: the kernel releases the lock when its process
  ends in any way (exception, SIGTERM, SIGKILL, crash), so a dead run never
  keeps the directory locked, and a recycled PID can never make a dead lock
  look alive. Two opens of the file conflict even inside one process.
- A lock file that is present but not locked was left by a run that ended
  without cleaning up. From this host it is taken over with a logged message.
  From another host the file is kept and the run refused: a filesystem shared
  between machines may not carry flock between them, so the other machine's
  run may still be alive; the message says how to check and what to delete.
- Released on exit from the `with` block (normal or exception): the file is
  deleted while still locked, then closed. A process that opened the file
  just before the deletion finds, once it holds the lock, that the path no
  longer names its file, and starts over, so two holders are impossible.

Only the chief of a multi-worker job should take the lock (the other
workers write nothing into model_dir).
"""

import datetime
import errno
import fcntl
import json
import os
import socket
import time

from absl import logging

from runstore import run_dir
from runstore.errors import ConfigError
from runstore.run_dir import LOCK_FILE


class RunDirLocked(ConfigError):
    """model_dir is in use by another run (or its lock cannot be judged safely)."""


def _pid_alive(pid) -> bool:
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _read_owner(fd: int) -> dict:
    """The owner record in the lock file ({} if empty or unreadable)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
        owner = json.loads(data.decode("utf-8")) if data.strip() else {}
        return owner if isinstance(owner, dict) else {}
    except (OSError, ValueError):
        return {}


def _wait_owner(fd: int) -> dict:
    """The owner record of a held lock; its holder may still be writing it."""
    for _ in range(10):
        owner = _read_owner(fd)
        if owner:
            return owner
        time.sleep(0.02)
    return {}


def _describe(owner: dict) -> str:
    if not owner:
        return "an unknown process (the lock file holds no owner yet)"
    return (f"PID {owner.get('pid', '?')} on host {owner.get('host', '?')}, started "
            f"{owner.get('started', '?')}")


class RunLock:
    """Exclusive lock on a run directory (a context manager; also acquire/release).

    Args:
        model_dir: the run directory; created if absent, with its missing parents
            (and removed again on release if still empty, so a refused or failed
            start leaves nothing behind).

    Raises (from acquire / __enter__):
        RunDirLocked: another live run holds the directory, or a stale lock
            from another host cannot be checked; the message names the
            directory, the owner's PID and host, and the fix.
        runstore.run_dir.WriteError: the directory or its lock file cannot be
            written (read-only or full file system, no permission, a file on
            the path); the message names the directory, the cause and the fix.
    """

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self.path = os.path.join(model_dir, LOCK_FILE)
        self._fd = None
        self._created_dir = False
        self._created_below = None  # the deepest directory that existed before

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this RunLock")
        try:
            if not os.path.isdir(self.model_dir):
                self._created_below = run_dir.deepest_directory(self.model_dir)
                self._created_dir = True  # a failed makedirs may have made some of them
                os.makedirs(self.model_dir, exist_ok=True)
            self._fd = self._lock()
        except OSError as error:  # read-only, full, no permission, a file on the path
            self._remove_created_dir()
            cause, fix = run_dir.reason_and_fix(error)
            raise run_dir.WriteError(
                f"{os.path.abspath(self.model_dir)} (--model_dir)", cause,
                f"{fix}; nothing was written") from None
        except BaseException:
            self._remove_created_dir()
            raise
        return self

    def _lock(self) -> int:
        host, pid = socket.gethostname(), os.getpid()
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                        raise
                    owner = _wait_owner(fd)
                    stop = f" (kill {owner['pid']})" if owner.get("pid") else ""
                    raise RunDirLocked(
                        f"--model_dir={self.model_dir} is in use by another training run "
                        f"({_describe(owner)}); wait for it to finish, stop it{stop}, or "
                        "pass another --model_dir") from None
                if not self._still_linked(fd):
                    os.close(fd)  # released and deleted meanwhile: lock the new file
                    continue
                owner = _read_owner(fd)
                if owner and (owner.get("host"), owner.get("pid")) != (host, pid):
                    self._judge_stale(owner, host)
                record = {"host": host, "pid": pid,
                          "started": datetime.datetime.now().astimezone().isoformat(
                              timespec="seconds")}
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
                os.fsync(fd)
                return fd
            except BaseException:
                os.close(fd)
                raise

    def _still_linked(self, fd: int) -> bool:
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _judge_stale(self, owner: dict, host: str) -> None:
        """The file names a run that holds no lock: take over, or refuse if unsure."""
        if owner.get("host") != host:
            raise RunDirLocked(
                f"--model_dir={self.model_dir} has a lock file from another machine "
                f"({_describe(owner)}) that this machine cannot check; if no run is "
                f"active there, delete {self.path} and start again, or pass another "
                "--model_dir")
        state = "is no longer running" if not _pid_alive(owner.get("pid")) \
            else "no longer holds the lock (its PID now belongs to another process)"
        logging.warning("taking over the stale lock %s: the run that left it (%s) %s",
                        self.path, _describe(owner), state)

    def release(self) -> None:
        """Deletes the lock file and releases the lock (idempotent)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._still_linked(fd):
                os.remove(self.path)
        finally:
            os.close(fd)  # releases the flock
            self._remove_created_dir()

    def _remove_created_dir(self) -> None:
        """Removes the directories `acquire` created, those still empty."""
        if self._created_dir:
            self._created_dir = False
            run_dir.remove_empty_directories(self.model_dir, self._created_below)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
