"""A place the commands cannot write: one line naming the path, the cause and the fix.

The read-only place is a real read-only tmpfs (`mount -o ro`: even root cannot write
there), the full one a 32 KB tmpfs. For every command that writes (create_tfrecords.sh /
build_data.py, train.py's --model_dir, --logdir and --export, export.py, evaluate.py's
--output), the user must see exactly one `error: ...` line (absl's INFO lines before it
aside), naming the absolute path, the cause (the OS's message and errno) and the fix of
`runstore.run_dir.reason_and_fix`, a non-zero exit status, no traceback, and nothing
written. generate.py writes no file.
"""

import errno
import os
import subprocess
import sys

import pytest

from runstore import run_dir, run_lock
from tests.helpers import PROJECT_ROOT
from tests.helpers.faults import leftovers, run_child, small_tmpfs

READ_ONLY = "Read-only file system (EROFS)"
READ_ONLY_FIX = "choose a writable place, or remount the file system read-write"


@pytest.fixture(scope="module")
def read_only_disk(tmp_path_factory):
    """A 1 MB tmpfs mounted read-only (unmounted at the end of the module)."""
    with small_tmpfs(tmp_path_factory.mktemp("read_only"), "1m", read_only=True) as path:
        yield path


@pytest.fixture
def full_disk(tmp_path):
    """A 32 KB tmpfs: a build of the tiny data does not fit."""
    path = tmp_path / "full"
    path.mkdir()
    with small_tmpfs(path, "32k"):
        yield path


def _error_line(code, err):
    """The one `error: ` line of a failed command (what it printed before: absl's INFO)."""
    lines = err.strip().splitlines()
    assert code not in (0, None), err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], err[-3000:]
    assert all(line.startswith("I") for line in lines[:-1]), err[-3000:]  # INFO only
    return lines[-1]


def _run(command, cwd=PROJECT_ROOT, env=None):
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))
    full_env.update(env or {})
    return subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=600)


# --------------------------------------------------------------- the errno table


def test_each_errno_has_its_cause_and_fix(tmp_path):
    (tmp_path / "a_file").write_text("x")
    here = tmp_path / "out.json"

    def fix(code, path=here):
        cause, fix = run_dir.reason_and_fix(OSError(code, os.strerror(code)), path)
        assert cause == f"{os.strerror(code)} ({errno.errorcode[code]})"
        return fix

    assert fix(errno.EROFS) == READ_ONLY_FIX
    for code in (errno.EACCES, errno.EPERM):
        assert fix(code) == ("choose a place you can write, or fix the permissions of "
                             f"{tmp_path}")
    assert fix(errno.ENOSPC) == "free some space"
    assert fix(errno.EDQUOT) == "free some space (the disk quota is full)"
    assert fix(errno.ENOENT, tmp_path / "no" / "such" / "out.json") == (
        f"the directory {tmp_path}/no/such does not exist: create it or fix the path")
    assert fix(errno.ENOENT, "/proc/x.keras") == (
        "/proc takes no new files (a virtual file system?): choose another place")
    assert fix(errno.ENOTDIR, tmp_path / "a_file" / "out.json") == (
        f"{tmp_path}/a_file is a file, not a directory: fix the path")
    assert fix(errno.EIO) == "check the path and the disk"  # anything else: the OS's message
    # Without a path (the OSError names none): the fix names no directory.
    assert run_dir.reason_and_fix(OSError(errno.ENOENT, "x"))[1] == (
        "a parent directory is missing: create it or fix the path")
    # TensorFlow's errors carry the OS's message in their text.
    tf_error = RuntimeError(f"{here}; Read-only file system [Op:WriteFile]")
    assert run_dir.reason_and_fix(tf_error, here) == (READ_ONLY, READ_ONLY_FIX)


def test_a_write_error_says_the_fix_of_its_errno_not_free_space(tmp_path):
    config = tmp_path / "gone" / "config.json"
    message = str(run_dir.WriteError(config, "No such file or directory (ENOENT)"))
    assert message == (
        f"cannot write {config}: No such file or directory (ENOENT); the files written before "
        f"are intact: the directory {tmp_path}/gone does not exist: create it or fix the path, "
        "then run the same command again to resume")
    assert "free some space" not in str(run_dir.WriteError(config, READ_ONLY))
    assert "free some space, then run the same command again to resume" in str(
        run_dir.WriteError(config, "No space left on device (ENOSPC)"))


def test_unwritable_finds_a_read_only_or_forbidden_place_without_writing(
        read_only_disk, tmp_path, monkeypatch):
    problem = run_dir.unwritable(read_only_disk / "a" / "b")
    assert (problem.errno, problem.filename) == (errno.EROFS, str(read_only_disk))
    (tmp_path / "lm.keras").write_text("old")
    assert run_dir.unwritable(tmp_path / "lm.keras") is None  # replaced in its directory
    assert run_dir.unwritable(tmp_path / "new" / "run") is None
    problem = run_dir.unwritable(tmp_path / "lm.keras" / "run")
    assert (problem.errno, problem.filename) == (errno.ENOTDIR, str(tmp_path / "lm.keras"))
    # Root may write anywhere but on a read-only mount: a user's missing permission.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    problem = run_dir.unwritable(tmp_path / "new" / "run")
    assert (problem.errno, problem.filename) == (errno.EACCES, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["lm.keras"]


def test_the_run_lock_on_an_unwritable_place_is_a_write_error_and_leaves_no_directory(
        read_only_disk, tmp_path, monkeypatch):
    with pytest.raises(run_dir.WriteError) as caught:
        run_lock.RunLock(str(read_only_disk / "run")).acquire()
    assert str(caught.value) == (f"cannot write {read_only_disk}/run (--model_dir): "
                                 f"{READ_ONLY}; {READ_ONLY_FIX}; nothing was written")

    def full(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)

    monkeypatch.setattr(run_lock.RunLock, "_lock", full)
    with pytest.raises(run_dir.WriteError, match=r"\(ENOSPC\); free some space; nothing was "
                                                 "written$"):
        run_lock.RunLock(str(tmp_path / "a" / "b" / "run")).acquire()
    assert os.listdir(tmp_path) == []  # the directories it made are removed again


# ------------------------------------------------------------- the commands


def test_a_data_build_into_a_read_only_place_is_one_line_before_any_work(
        read_only_disk, word_data):
    texts = word_data.parent
    # A relative --output_dir, from a directory on the read-only disk: the line names the
    # absolute path.
    build = _run([str(PROJECT_ROOT / "create_tfrecords.sh"), "text",
                  f"--train_file={texts / 'train.txt'}", "--output_dir=mine"],
                 cwd=read_only_disk)
    line = _error_line(build.returncode, build.stderr)
    assert line == (f"error: cannot write {read_only_disk}/mine (--output_dir): {READ_ONLY}; "
                    f"{READ_ONLY_FIX}; nothing was written")
    assert build.stderr.strip() == line  # refused before tokenizing: no other line
    # Raw files unpacked into a read-only DATA_DIR.
    raw = _run([str(PROJECT_ROOT / "create_tfrecords.sh"), "wikitext2",
                f"--output_dir={texts}/never"], env={"DATA_DIR": str(read_only_disk)})
    line = _error_line(raw.returncode, raw.stderr)
    assert line == (f"error: cannot write {read_only_disk}/wikitext-2 (the raw files: DATA_DIR "
                    f"or --data_dir): {READ_ONLY}; {READ_ONLY_FIX}")
    assert os.listdir(read_only_disk) == [] and not (texts / "never").exists()


@pytest.mark.slow
def test_a_data_build_on_a_full_disk_is_one_line_and_removes_the_partial_build(
        full_disk, word_data):
    texts = word_data.parent
    out = full_disk / "built" / "word"
    build = _run([sys.executable, "build_data.py", "--dataset=text", "--tokenizer=word",
                  *(f"--{split}_file={texts / f'{split}.txt'}" for split in ("train", "valid",
                                                                             "test")),
                  "--vocab_size=256", "--batch_size=4", "--seq_len=16", f"--output_dir={out}"])
    line = _error_line(build.returncode, build.stderr)
    assert line.startswith(f"error: cannot write {out}/"), line
    assert line.endswith(f" (in --output_dir={out}): No space left on device (ENOSPC); free "
                         "some space; the partial build was removed"), line
    assert os.listdir(full_disk) == []  # the files and the directories it made


@pytest.mark.slow
def test_train_export_and_evaluate_on_unwritable_places_are_one_line(
        read_only_disk, word_data, tmp_path):
    ro = read_only_disk
    run = tmp_path / "run"
    train = ["--preset=tiny", "--num_blocks=2", f"--data_dir={word_data}", "--max_steps=2",
             "--eval_interval=0", "--sample_tokens=0", "--checkpoint_every_minutes=0"]
    model = [f"--model_dir={run}"]
    relative_model_dir = os.path.relpath(ro / "run", PROJECT_ROOT)  # named absolute
    cases = [
        {"name": "model_dir", "args": [*train, f"--model_dir={relative_model_dir}"]},
        {"name": "logdir", "args": [*train, f"--model_dir={tmp_path}/never",
                                    f"--logdir={ro}/logs"]},
        {"name": "train_export", "args": [*train, f"--model_dir={tmp_path}/never",
                                          f"--logdir={tmp_path}/logs",
                                          f"--export={ro}/lm.keras"]},
        {"name": "train", "args": [*train, *model, f"--logdir={tmp_path}/logs"]},
        {"name": "export_keras", "script": "export.py",
         "args": [*model, f"--output={ro}/lm.keras"]},
        {"name": "export_saved_model", "script": "export.py",
         "args": [*model, "--format=saved_model", f"--output={ro}/saved"]},
        {"name": "export_proc", "script": "export.py",
         "args": [*model, "--output=/proc/lm.keras"]},
        # No such build: the output is refused before the evaluation reads anything.
        {"name": "evaluate", "script": "evaluate.py",
         "args": [*model, f"--output={ro}/eval.json", f"--data_dir={tmp_path}/no_build"]},
    ]
    code, results, err = run_child(cases)
    assert code == 0, err[-3000:]
    assert results["train"][0] == 0, results["train"][1][-3000:]
    read_only = f"{READ_ONLY}; {READ_ONLY_FIX}; nothing was written"
    expected = {
        "model_dir": f"error: cannot write {ro}/run (--model_dir): {read_only}",
        "logdir": f"error: cannot write {ro}/logs (--logdir): {read_only}",
        "train_export": f"error: cannot write {ro}/lm.keras (--export): {read_only}",
        "export_keras": f"error: cannot write {ro}/lm.keras: {read_only}",
        "export_saved_model": f"error: cannot write {ro}/saved: {read_only}",
        "export_proc": ("error: cannot write /proc/lm.keras: No such file or directory "
                        "(ENOENT); nothing was written (the temporary files are removed): "
                        "/proc takes no new files (a virtual file system?): choose another "
                        "place, then export again"),
        "evaluate": f"error: --output={ro}/eval.json: cannot write {ro}/eval.json: {read_only}",
    }
    wrong = {name: results[name][1][-2000:] for name, message in expected.items()
             if _error_line(*results[name]) != message}
    assert not wrong, wrong
    # Refused before any work: no run directory, no log, nothing beside the run.
    assert sorted(os.listdir(tmp_path)) == ["logs", "run"]
    assert os.listdir(ro) == [] and not leftovers(run)
    assert not [n for n in os.listdir(run) if n.startswith(("eval_", "lm."))]
