"""The files of a run directory, by name, and the writes that never leave half a file.

Every module that reads or writes a run directory (`--model_dir`) takes the
names from here; the plug-ins declare their own files in `Plugin.RUN_FILES`
(training/plugins). Pure Python: importing it does not load TensorFlow.

    model_dir/
        config.json             the run's TrainConfig (CONFIG_FILE)
        training_log.log        one line per logged step (TRAINING_LOG)
        metrics.json            written at the end (METRICS_FILE)
        checkpoint              TensorFlow's list of the checkpoints (CHECKPOINT_STATE)
        ckpt-<step>.index       a checkpoint (CHECKPOINT_NAME), with its
        ckpt-<step>.data-*          data shard(s)
        best/ckpt-<step>.*      the best checkpoint on valid (BEST_DIR)
        data/                   meta.json and the tokenizer files (DATA_DIR)
        pending_evaluation.json an evaluation abandoned by an interruption
        .lock                   held while a trainer runs (LOCK_FILE)

Writes (`atomic_write`, `atomic_write_json`, `atomic_output`, `atomic_copy`):
the content goes to a temporary name in the same directory, is flushed and
fsync'ed, then renamed over the target (and the directory fsync'ed), so a
reader sees the old file or the new one, never a part. A failed write (full
disk, read-only file system, I/O error) removes its temporary file and raises
`WriteError`, whose message names the file, the error and its fix:
`reason_and_fix` maps an errno to the fix once for every command that writes
(build_data.py, train.py, evaluate.py, export.py), and `unwritable` finds a
read-only or forbidden output before any work. `append_line` appends one whole line or
nothing: a failed append is truncated back to the file's previous size.
Temporaries left by a killed process are removed by `remove_temporaries`.
"""

import contextlib
import errno
import json
import os
import re
import secrets

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
TRAINING_LOG = "training_log.log"
COMMAND_FILE = "command.json"  # the command line that last trained the run (model cards)
DATA_DIR = "data"  # meta.json + tokenizer files of the training data
BEST_DIR = "best"
CHECKPOINT_NAME = "ckpt"  # checkpoint prefixes are ckpt-<step>
CHECKPOINT_STATE = "checkpoint"  # TensorFlow's CheckpointState file
PENDING_EVALUATION = "pending_evaluation.json"
LOCK_FILE = ".lock"
WORKER_SCRATCH_PREFIX = ".worker_"  # multi-worker: non-chief workers' throw-away saves
DAMAGED_SUFFIX = ".damaged"  # a damaged checkpoint file moved aside

# Temporary names: ours (".<name>.tmp-<pid>-<hex>"), TensorFlow's checkpoint
# writes ("ckpt-<step>_temp/" directories, "checkpoint.tmp<hex>").
_OUR_TEMPORARY = re.compile(r"^\..+\.tmp-(\d+)-[0-9a-f]+(\.\w+)?$")
_TF_TEMPORARY = re.compile(r"^(" + re.escape(CHECKPOINT_NAME) + r"-\d+_temp.*|"
                           + re.escape(CHECKPOINT_STATE) + r"\.tmp[0-9a-f]+)$")
_CHECKPOINT_FILE = re.compile(r"^" + re.escape(CHECKPOINT_NAME)
                              + r"-(\d+)\.(index|data-\d+-of-\d+)$")


def trainer_files():
    """Names in model_dir that the trainer writes (without the plug-ins')."""
    return (CHECKPOINT_STATE, CONFIG_FILE, TRAINING_LOG, METRICS_FILE, PENDING_EVALUATION,
            COMMAND_FILE)


def checkpoint_prefix(directory, step):
    """`directory/ckpt-<step>`."""
    return os.path.join(directory, f"{CHECKPOINT_NAME}-{int(step)}")


def checkpoint_step(prefix):
    """The step of a checkpoint prefix (`.../ckpt-30` -> 30), else None."""
    match = re.fullmatch(re.escape(CHECKPOINT_NAME) + r"-(\d+)", os.path.basename(
        os.fspath(prefix)))
    return int(match.group(1)) if match else None


def checkpoint_file_step(name):
    """The step of a checkpoint file name (`ckpt-30.index` -> 30), else None."""
    match = _CHECKPOINT_FILE.match(name)
    return int(match.group(1)) if match else None


def is_checkpoint_artifact(name):
    """True for every file name a checkpoint write may leave (complete or not)."""
    return name.startswith(CHECKPOINT_NAME + "-")


class WriteError(RuntimeError):
    """A file could not be written (full disk, read-only, ...); the old file is intact.

    Attributes:
        path: the file (or directory) that could not be written.
        reason: the error, e.g. "No space left on device (ENOSPC)".
    """

    def __init__(self, path, reason, hint=None):
        self.path = os.fspath(path)
        self.reason = reason
        if hint is None:
            hint = (f"the files written before are intact: {reason_and_fix(reason, path)[1]}, "
                    "then run the same command again to resume")
        super().__init__(f"cannot write {self.path}: {reason}; {hint}")


# What to do about a failed write, by errno (the cause is the OS's message). The first
# fix is used when the path is not known; the second names the directory concerned.
_FIXES = {
    errno.EROFS: ("choose a writable place, or remount the file system read-write",) * 2,
    errno.EACCES: ("choose a place you can write, or fix its permissions",
                   "choose a place you can write, or fix the permissions of {existing}"),
    errno.ENOSPC: ("free some space",) * 2,
    errno.EDQUOT: ("free some space (the disk quota is full)",) * 2,
    errno.ENOENT: ("a parent directory is missing: create it or fix the path",
                   "the directory {parent} does not exist: create it or fix the path"),
    errno.ENOTDIR: ("a part of the path is a file, not a directory: fix the path",
                    "{existing} is a file, not a directory: fix the path"),
}
_FIXES[errno.EPERM] = _FIXES[errno.EACCES]
_OTHER_FIX = "check the path and the disk"
_TEXT_ERRORS = (*_FIXES, errno.EIO)  # found by their message in TensorFlow's errors


def _error_code(error):
    """The errno of an OSError, or the one whose message or name a text holds, else None."""
    if isinstance(error, OSError) and error.errno:
        return error.errno
    text = str(error)
    for code in _TEXT_ERRORS:
        if f"({errno.errorcode[code]})" in text or os.strerror(code) in text:
            return code
    return None


def reason_and_fix(error, path=None):
    """The cause of a failed write and its fix: the one table of the project's write errors.

    Args:
        error: an OSError, a TensorFlow error, or the text of either (e.g. a `reason`).
        path: what was written; default: the OSError's file name. With it, the fix
            names the directory to create or fix.

    Returns:
        (cause, fix): cause the OS's message and the errno's name ("Read-only file
        system (EROFS)"); fix an imperative phrase ("choose a writable place, or remount
        the file system read-write"; for an errno not in the table, "check the path and
        the disk").
    """
    code = _error_code(error)
    if isinstance(error, OSError) and error.strerror:
        name = errno.errorcode.get(error.errno, "")
        cause = f"{error.strerror} ({name})" if name else error.strerror
    elif isinstance(error, str):
        cause = error
    else:  # a TensorFlow error: its text holds the OS's message, or is the cause
        text = str(error).strip()
        cause = f"{os.strerror(code)} ({errno.errorcode[code]})" if code else (
            text.splitlines()[0][:300] if text else type(error).__name__)
    general, located = _FIXES.get(code, (_OTHER_FIX, _OTHER_FIX))
    path = path if path is not None else getattr(error, "filename", None)
    if path is None:
        return cause, general
    path = os.path.abspath(os.fspath(path))
    parent, existing = os.path.dirname(path), _deepest_existing(path)
    if code == errno.ENOENT and existing == parent:  # e.g. /proc: no new files there
        located = "{parent} takes no new files (a virtual file system?): choose another place"
    elif (code == errno.ENOENT and existing == path) or (
            code == errno.ENOTDIR and os.path.isdir(existing)):
        located = general  # the path is there (it was removed, or the error is elsewhere)
    return cause, located.format(parent=parent, existing=existing)


def _deepest_existing(path):
    """`path` if it exists, else its deepest existing parent."""
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def deepest_directory(path):
    """The deepest existing directory on the absolute `path` (`path` itself if it is one):
    what a `makedirs(path)` would start below, for `remove_empty_directories`."""
    path = os.path.abspath(os.fspath(path))
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    return path


def remove_empty_directories(directory, stop):
    """Removes `directory` and its parents up to (not including) `stop` while they are
    empty: undoes the directories a failed or refused start created below `stop`."""
    directory = os.path.abspath(os.fspath(directory))
    while directory != stop and directory.startswith(stop):
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = os.path.dirname(directory)


def unwritable(path):
    """The error writing `path` (a file or directory to create or replace) would meet,
    found without writing: an OSError (EROFS, EACCES, ENOTDIR) naming the directory at
    fault, or None.

    Checks the deepest existing directory on the path, so that a command refuses an
    output it cannot write before its work (a full disk is found only by writing).
    """
    path = os.path.abspath(os.fspath(path))
    existing = _deepest_existing(path)
    if existing == path and not os.path.isdir(path):
        existing = os.path.dirname(path)  # an existing file is replaced in its directory
    if not os.path.isdir(existing):
        code = errno.ENOTDIR
    elif os.access(existing, os.W_OK | os.X_OK):
        return None
    else:
        code = errno.EROFS if os.statvfs(existing).f_flag & os.ST_RDONLY else errno.EACCES
    return OSError(code, os.strerror(code), existing)


def reason(error):
    """A short description of an OSError or a TensorFlow error (`reason_and_fix`'s cause)."""
    return reason_and_fix(error)[0]


def temporary_name(path, suffix=""):
    """A fresh hidden name beside `path` (same file system: renaming is atomic)."""
    parent, base = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(parent, f".{base}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}")


def _fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename is done
    finally:
        os.close(fd)


def remove_if_present(path):
    """Removes the file `path`; one that is not there (or cannot be removed) is left alone."""
    try:
        os.remove(path)
    except OSError:
        pass


@contextlib.contextmanager
def atomic_output(path, suffix="", hint=None):
    """Yields a temporary path to write; renamed to `path` when the block succeeds.

    Args:
        path: the target file.
        suffix: ending of the temporary name (e.g. ".png", for writers that
            choose the format from it).
        hint: the end of the `WriteError` message (default: free space and
            run the same command again).

    Raises:
        WriteError: the block or the rename failed with an OSError; the
            temporary file is removed and `path` is as it was.
    """
    path = os.fspath(path)
    tmp = temporary_name(path, suffix)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as error:
        raise WriteError(path, reason(error), hint) from None
    finally:
        if os.path.lexists(tmp):
            remove_if_present(tmp)
    _fsync_directory(os.path.dirname(os.path.abspath(path)))


def atomic_write(path, data, hint=None):
    """Writes `data` (str: UTF-8, or bytes) to `path` atomically; returns path."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with atomic_output(path, hint=hint) as tmp:
        with open(tmp, "wb") as f:
            f.write(payload)
    return os.fspath(path)


def atomic_write_json(path, value, hint=None, **dump_kwargs):
    """Writes `value` as JSON (indent 2, sorted keys, final newline) atomically."""
    dump_kwargs = {"indent": 2, "sort_keys": True, **dump_kwargs}
    return atomic_write(path, json.dumps(value, **dump_kwargs) + "\n", hint)


def atomic_copy(source, path, hint=None):
    """Copies the file `source` to `path` atomically (content only)."""
    with atomic_output(path, hint=hint) as tmp:
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
    return os.fspath(path)


def same_content(path, data):
    """True when the file `path` exists and holds exactly `data` (str or bytes)."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        if os.path.getsize(path) != len(payload):
            return False
        with open(path, "rb") as f:
            return f.read() == payload
    except OSError:
        return False


def append_line(path, line, hint=None):
    """Appends `line` plus a newline as one whole line, or nothing.

    The line goes out in one write on an O_APPEND descriptor and is fsync'ed;
    if the write fails or is short, the file is truncated back to its size
    before the write, so it never ends in half a line.

    Raises:
        WriteError: naming the file and the error.
    """
    payload = (line.rstrip("\n") + "\n").encode("utf-8")
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as error:
        raise WriteError(path, reason(error), hint) from None
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, payload)
            if written != len(payload):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except OSError as error:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise WriteError(path, reason(error), hint) from None
    finally:
        os.close(fd)


def _alive(pid):
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_entries(directory, wanted):
    """Removes the entries of `directory` whose name `wanted(name)` accepts (not recursive):
    files, and directories with what they hold (a link is removed, not followed).

    The one sweeper of the run store: `remove_temporaries` and
    `runstore.checkpoints.remove_partial` differ only in what they want.

    Returns:
        The names removed (a file that cannot be removed is left out).
    """
    import shutil

    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not wanted(name):
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:
                continue
        removed.append(name)
    return removed


def remove_stale_temporaries(path):
    """Removes the temporaries of `path` (`temporary_name(path, ...)`, beside it) that
    processes no longer alive left (a writer killed mid-write); returns their names."""
    parent, base = os.path.split(os.path.abspath(os.fspath(path)))
    return remove_entries(
        parent, lambda name: name.startswith(f".{base}.tmp-") and _left_by_the_dead(name))


def remove_temporaries(directory):
    """Removes the temporaries of interrupted writes in `directory` (not recursive).

    Our `.<name>.tmp-<pid>-<hex>` files of processes no longer alive, and TensorFlow's
    `ckpt-<step>_temp*`
    directories and `checkpoint.tmp<hex>` files: left only by a process that
    was killed while writing (a failed write removes its own).

    Returns:
        The names removed.
    """

    def wanted(name):
        if _OUR_TEMPORARY.match(name):  # unless another live process is writing it
            return _left_by_the_dead(name)
        return bool(_TF_TEMPORARY.match(name))

    return remove_entries(directory, wanted)


def _left_by_the_dead(name):
    """Whether `name` is our temporary (`.<name>.tmp-<pid>-<hex>`) of a process no longer
    alive: a writer killed mid-write."""
    ours = _OUR_TEMPORARY.match(name)
    return bool(ours) and not _alive(int(ours.group(1)))
