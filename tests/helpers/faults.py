"""Fault injection for the tests: signals, kills, full disks and NaNs at chosen moments.

Nothing here is reachable from the product: no flag or environment variable
of train.py reads it. A test runs `CHILD` (`python -c CHILD <cases JSON>`),
which runs an entry script (train.py, evaluate.py, ...) once per case, in
one process, as `python <script> <args>` would, with that case's faults
installed around the run:

    {"name": "...", "script": "train.py", "args": [...],
     "before": [action, ...],      # done before the run (damage files, free space)
     "faults": [fault, ...]}       # armed during the run

Faults (patches of the trainer, of TensorFlow's CheckpointManager.save, of
runstore.run_dir and serving.export, made by this module only):

    {"at": "step", "step": N, "signal": "SIGINT"}      the signal arrives while step N runs
                                                       ("pause": seconds added to each
                                                       step from N on)
    {"at": "evaluation", "step": N, "signal": ...}     ... while the valid evaluation at N runs
    {"at": "save", "step": N, "signal": ...}           ... when the save at N starts
    {"at": "save", "step": N, "signal": ..., "again": true}
                                                       and again once TensorFlow's temporary
                                                       checkpoint directory exists (mid-write)
    {"at": "save", "step": N, "kill": true}            SIGKILL once that directory exists
    {"at": "save", "step": N, "fill": DIR}             the file system of DIR is full
    {"at": "write", "name": "metrics.json", "fill": DIR}  full when that file is written
    {"at": "call", "target": "pkg.mod.Class.method", "signal": ...}
                                                       the signal arrives when it is called
                                                       ("call": N, at its Nth call only;
                                                       "kill": true, SIGKILL instead)
    {"at": "nonfinite", "step": N, "target": T}        NaN at step N: T = "loss" (the loss
                                                       is NaN) or a variable group
                                                       ("weights", "arch": only that
                                                       group's gradient is NaN)

Actions: {"truncate": PATH}, {"corrupt": PATH} (flip bytes mid-file),
{"remove": PATH}, {"copy": PATH, "to": FILE}, {"record": DIR, "to": FILE} (the names
under DIR, as JSON).

The child prints `CASES <JSON>`: name -> [exit status, stderr]. A case that
kills the process (SIGKILL, a second signal) must be the last of its child;
its stderr can be kept in a file (`"stderr_to": PATH`).

The NaN is an extra loss of a test-only plug-in (`InjectNonFinite`), added
to the registered plug-ins only inside the child.
"""

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

from tests.helpers import PROJECT_ROOT

CHILD = r"""
import json, os, runpy, sys, tempfile, traceback
from absl import app, flags, logging  # app first: its own flags stay
from tests.helpers import faults

cases = json.loads(sys.argv[1])
results = {}
absl_flags = set(flags.FLAGS)  # absl's own; the scripts' are defined anew for each case
for case in cases:
    for name in set(flags.FLAGS) - absl_flags:
        delattr(flags.FLAGS, name)
    flags.FLAGS.unparse_flags()
    logging.set_verbosity(logging.INFO)  # as at a first start (absl keeps the last level)
    for action in case.get("before", []):
        faults.do(action)
    sys.argv = [case.get("script", "train.py"), *case["args"]]
    # A case that may kill the process keeps its stderr in a file of its own.
    kept = case.get("stderr_to")
    with (open(kept, "w+b") if kept else tempfile.TemporaryFile()) as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        code = 0
        try:
            with faults.armed(case.get("faults", [])):
                runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (1 if stop.code else 0)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        results[case["name"]] = [code, err.read().decode(errors="replace")]
    print("CASES " + json.dumps({case["name"]: results[case["name"]]}), flush=True)
"""


def parse_child_output(stdout):
    """name -> (exit status, stderr) of every case the child finished."""
    results = {}
    for line in stdout.splitlines():
        if line.startswith("CASES "):
            for name, (code, err) in json.loads(line[len("CASES "):]).items():
                results[name] = (code, err)
    return results


# ------------------------------------------------------------ runs and checks

STEPS = 30
CHECKPOINT_EVERY = 5
EVAL_EVERY = 10


def run_flags(data_dir, model_dir, *extra):
    """train.py flags of the fault runs (the reference's, in another model_dir)."""
    return ["--preset=tiny", "--num_blocks=2", f"--data_dir={data_dir}",
            f"--model_dir={model_dir}", f"--logdir={model_dir}/logs", f"--max_steps={STEPS}",
            "--dropout=0.1", "--learning_rate=3e-3", "--warmup_steps=5", "--log_interval=3",
            f"--checkpoint_interval={CHECKPOINT_EVERY}", f"--eval_interval={EVAL_EVERY}",
            "--eval_max_records=8", "--sample_tokens=0", "--arch_warmup_steps=4",
            "--checkpoint_every_minutes=0", "--keep_checkpoints=2", "--deterministic", *extra]


def default_signals():
    """A child's preexec_fn: SIGINT and SIGTERM back to their default actions.

    A test session started in the background by a non-interactive shell
    (`pytest &`, nohup) inherits SIGINT ignored, and Python leaves an ignored
    SIGINT ignored, so a child would never see the Ctrl-C a test sends it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_child(cases, env=None, timeout=900):
    """Runs the fault child on `cases`; returns (returncode, name -> (status, stderr), stderr)."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))
    full_env.update(env or {})
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases)], cwd=PROJECT_ROOT,
                           env=full_env, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=default_signals)
    return child.returncode, parse_child_output(child.stdout), child.stderr


def checkpoint_variables(prefix):
    """Every tensor of a checkpoint by name: the training state, without the object
    graph and tf.train.Checkpoint's `save_counter` (how many saves the process made)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
            if "OBJECT_GRAPH" not in n and not n.startswith("save_counter/")}


def assert_same_checkpoint(actual, expected):
    """The two checkpoints hold the same tensors, bit for bit."""
    import numpy as np

    a, b = checkpoint_variables(actual), checkpoint_variables(expected)
    assert a.keys() == b.keys()
    for name, value in b.items():
        np.testing.assert_array_equal(a[name], value, err_msg=name)


def leftovers(directory):
    """Temporaries of unfinished writes under `directory` (recursively)."""
    found = []
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            if ".tmp" in name or name.endswith("_temp") or "_temp/" in name or ".partial" in name:
                found.append(os.path.join(root, name))
    return found


# --------------------------------------------------------------------- actions


@contextlib.contextmanager
def small_tmpfs(path, size, read_only=False):
    """Mounts a tmpfs of `size` (mount's spelling, e.g. "16m"; `read_only`: mounted ro) on
    the directory `path` for the block; skips the test where mounting is not allowed."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the suite runs as root in CI)")
    options = f"ro,size={size}" if read_only else f"size={size}"
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                           capture_output=True, text=True)
    if mount.returncode:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mount.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_disk(directory):
    """Fills the file system of `directory` (a file `filler` there) until ENOSPC."""
    path = os.path.join(directory, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for size in (1 << 16, 512, 1):  # big chunks, then the last partial pages
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return path


def do(action):
    """Damages or frees files before a case (see the module docstring)."""
    if "truncate" in action:
        path = action["truncate"]
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif "corrupt" in action:
        path = action["corrupt"]
        with open(path, "r+b") as f:
            size = os.path.getsize(path)
            f.seek(size // 2)
            chunk = f.read(16)
            f.seek(size // 2)
            f.write(bytes(b ^ 0xFF for b in chunk))
    elif "record" in action:  # what a directory holds now, for the test to read later
        directory = action["record"]
        names = sorted(os.path.relpath(os.path.join(root, n), directory)
                       for root, dirs, files in os.walk(directory) for n in dirs + files)
        with open(action["to"], "w", encoding="utf-8") as f:
            json.dump(names, f)
    elif "copy" in action:
        with open(action["copy"], "rb") as src, open(action["to"], "wb") as dst:
            dst.write(src.read())
    elif "remove" in action:
        with contextlib.suppress(FileNotFoundError):
            os.remove(action["remove"])
    else:
        raise ValueError(f"unknown action {action}")


# ---------------------------------------------------------------------- faults


def _signal(name):
    return getattr(signal, name)


def _when_exists(path, act, timeout=60.0):
    """Runs `act()` in a thread as soon as `path` exists (polling without sleep)."""

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(path):
                act()
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _kill_self(signum):
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def armed(faults):
    """Installs the faults (patches) for the duration of one case."""
    from unittest import mock

    with contextlib.ExitStack() as stack:
        for fault in faults:
            stack.enter_context(_ARM[fault["at"]](fault, mock))
        yield


@contextlib.contextmanager
def _at_step(fault, mock):
    from training.run.trainer import Trainer

    original = Trainer.train_step

    def train_step(self, inputs, targets):
        step = int(self.state.step.numpy()) + 1
        if step == fault["step"]:
            _kill_self(_signal(fault["signal"]))
        if step >= fault["step"] and fault.get("pause"):
            time.sleep(fault["pause"])  # slower steps from the signal on
        return original(self, inputs, targets)

    with mock.patch.object(Trainer, "train_step", train_step):
        yield


@contextlib.contextmanager
def _at_evaluation(fault, mock):
    from training.run.trainer import Trainer

    original = Trainer.evaluate

    def evaluate(self, split, *args, **kwargs):
        if split == "valid" and int(self.state.step.numpy()) == fault["step"]:
            _kill_self(_signal(fault["signal"]))
        return original(self, split, *args, **kwargs)

    with mock.patch.object(Trainer, "evaluate", evaluate):
        yield


@contextlib.contextmanager
def _at_save(fault, mock):
    import tensorflow as tf
    from tensorflow.python.checkpoint import functional_saver

    from runstore import run_dir

    manager_class = tf.train.CheckpointManager
    original = manager_class.save

    def save(self, checkpoint_number=None, *args, **kwargs):
        best = os.path.basename(os.path.normpath(self.directory)) == run_dir.BEST_DIR
        if best or checkpoint_number != fault["step"]:
            return original(self, checkpoint_number, *args, **kwargs)
        temp = run_dir.checkpoint_prefix(self.directory, checkpoint_number) + "_temp"
        if "fill" in fault:
            fill_disk(fault["fill"])
        if "signal" in fault:
            signum = _signal(fault["signal"])
            _kill_self(signum)
            if fault.get("again"):
                mid_write.append(lambda: _kill_self(signum))
        if fault.get("kill"):
            mid_write.append(lambda: _kill_self(signal.SIGKILL))
        # A watcher thread too, in case the save runs as one traced function.
        for act in mid_write:
            _when_exists(temp, act)
        try:
            return original(self, checkpoint_number, *args, **kwargs)
        finally:
            mid_write.clear()

    # An eager save writes the shards into <prefix>_temp, then merges them into
    # <prefix> by this op: the signal goes out between the two, while the
    # checkpoint is half written (a watcher thread alone can miss the moment on
    # a loaded machine).
    mid_write = []
    merge = functional_saver.gen_io_ops.merge_v2_checkpoints

    def merge_v2_checkpoints(*args, **kwargs):
        for act in list(mid_write):
            act()
        return merge(*args, **kwargs)

    with mock.patch.object(manager_class, "save", save), mock.patch.object(
            functional_saver.gen_io_ops, "merge_v2_checkpoints", merge_v2_checkpoints):
        yield


@contextlib.contextmanager
def _at_write(fault, mock):
    from runstore import run_dir

    original = run_dir.atomic_write

    def atomic_write(path, data, hint=None):
        if os.path.basename(os.fspath(path)) == fault["name"]:
            fill_disk(fault["fill"])
        return original(path, data, hint)

    with mock.patch.object(run_dir, "atomic_write", atomic_write):
        yield


@contextlib.contextmanager
def _at_call(fault, mock):
    import importlib

    module_name, _, attribute = fault["target"].rpartition(".")
    owner, path = None, module_name.split(".")
    for i in range(len(path), 0, -1):  # the longest importable module prefix
        try:
            owner = importlib.import_module(".".join(path[:i]))
        except ImportError:
            continue
        for name in path[i:]:
            owner = getattr(owner, name)
        break
    original = getattr(owner, attribute)

    calls = [0]

    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == fault.get("call", 1):
            _kill_self(signal.SIGKILL if fault.get("kill") else _signal(fault["signal"]))
        return original(*args, **kwargs)

    with mock.patch.object(owner, attribute, call):
        yield


@contextlib.contextmanager
def _at_nonfinite(fault, mock):
    from training import plugins

    original = plugins.registered
    InjectNonFinite.SPEC = InjectNonFinite.SPEC + [(int(fault["step"]), fault["target"])]

    def registered():
        return (*original(), InjectNonFinite)

    try:
        with mock.patch.object(plugins, "registered", registered):
            yield
    finally:
        InjectNonFinite.SPEC = []


_ARM = {"step": _at_step, "evaluation": _at_evaluation, "save": _at_save, "write": _at_write,
        "call": _at_call, "nonfinite": _at_nonfinite}


def _plugin_base():
    from training.plugins.base import Plugin

    return Plugin


class InjectNonFinite(_plugin_base()):
    """Test-only plug-in: a NaN loss, or a NaN gradient of one variable group, at given steps.

    `SPEC`: list of (step number, target); target "loss" adds a NaN to the
    loss (its gradients stay finite), a group name adds `0 * sqrt(0 * |v|)`
    of the group's first variable, whose value is 0 and whose gradient is
    NaN (0 * inf), so only that group's gradient norm becomes NaN.
    """

    SPEC = []

    def __init__(self, model):
        self.model = model
        self._step = None

    @classmethod
    def create(cls, model, config, horizon):
        return cls(model) if cls.SPEC else None

    def before_step(self, step):
        self._step = step

    def extra_losses(self):
        import tensorflow as tf

        terms = []
        for step, target in self.SPEC:
            hit = tf.equal(tf.cast(self._step, tf.int64) + 1, step)
            if target == "loss":
                terms.append(tf.where(hit, tf.constant(float("nan")), tf.constant(0.0)))
                continue
            variable = self.model.variable_groups()[target][0]

            def poisoned(variable=variable):
                value = tf.cast(tf.convert_to_tensor(variable), tf.float32)
                return tf.reduce_sum(tf.sqrt(tf.abs(value) * 0.0))

            terms.append(tf.cond(hit, poisoned, lambda: tf.constant(0.0)))
        return terms
