"""Quiet TensorFlow start-up: import this before TensorFlow is imported.

    import pardata.quiet  # noqa: F401  (before anything imports TensorFlow)

Importing it (entry scripts do, first) installs `install()`; it prints nothing
itself and costs nothing until TensorFlow is imported.

Why TF_CPP_MIN_LOG_LEVEL alone is not enough (TensorFlow 2.21, CPU machine):
TensorFlow's C++ code logs through Abseil, and the lines logged while its
shared libraries load, before Abseil's logging is initialised, bypass the
level and go straight to stderr, each batch after Abseil's notice `WARNING:
All log messages before absl::InitializeLog() is called are written to
STDERR` (twice: libtensorflow_framework and libtensorflow_cc each carry an
Abseil). On a CPU machine they are INFO lines (the oneDNN notice, "Could not
find cuda drivers on your machine, GPU will not be used.") and, when the
device list is first built, `E... cuda_platform.cc:...] failed call to cuInit:
INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)`: the CUDA
platform probing for a driver that is not installed. TF_CPP_MIN_LOG_LEVEL=3
would hide that one, and every real error with it.

So `install()` sets TF_CPP_MIN_LOG_LEVEL to 2 unless it is set (INFO and
WARNING hidden, ERROR and FATAL shown) and hooks the first `import
tensorflow`: while the import and the device probe run, file descriptor 2 goes
to a temporary file, then everything is written back to stderr, in order,
except what `filter_startup_noise` recognises: Abseil's notice, log lines
below the level, the cuInit error when no CUDA driver is installed, and the
duplicate cuDNN/cuFFT/cuBLAS factory registrations of some GPU builds. Python
warnings, tracebacks and real errors pass unchanged.
TF_CPP_MIN_LOG_LEVEL=0 turns all of this off.
"""

import contextlib
import ctypes.util
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

_ABSL_NOTICE = re.compile(
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$")
# Abseil (`I0000 00:00:1795486526.885559    5661 port.cc:153] ...`) and the older
# TensorFlow format (`2025-09-17 14:44:05.157831: I external/.../x.cc:32] ...`).
_LOG_LINE = re.compile(r"^(?:([IWEF])\d{4} [\d:.]+\s+\d+ \S+:\d+\]"
                       r"|\d{4}-\d\d-\d\d [\d:.]+: ([IWEF]) \S+:\d+\])")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
# cpu_feature_guard's INFO message runs over two lines.
_CONTINUATION = re.compile(r"^To enable the following instructions: ")
_NO_DRIVER = "Could not find cuda drivers on your machine"
_CUINIT = re.compile(r"\] failed call to cuInit: ")
# Harmless on the GPU builds that print them (two copies of a plugin registry).
_DUPLICATE_FACTORY = re.compile(r"\] Unable to register cu(DNN|FFT|BLAS) factory: Attempting "
                                r"to register factory for plugin \S+ when one has already "
                                r"been registered")


# oneDNN's notice when a graph it optimises holds an int32 op it leaves to Eigen (the
# compiled decoding loop's first run, samplers/decoding.py): harmless, logged as an error.
_ONEDNN_INT32 = re.compile(r"\] oneDNN supports DT_INT32 only on platforms with AVX-512\. "
                           r"Falling back to the default Eigen-based implementation")


def min_log_level() -> int:
    """TF_CPP_MIN_LOG_LEVEL as TensorFlow reads it (0 if unset or not a number)."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def cuda_driver_missing(text: str = "") -> bool:
    """True on a machine without a CUDA driver (libcuda), where cuInit must fail."""
    return _NO_DRIVER in text or ctypes.util.find_library("cuda") is None


def filter_startup_noise(text: str, min_level: int, no_cuda_driver: bool) -> str:
    """`text` (what TensorFlow wrote to stderr while starting) without its noise.

    Args:
        text: captured stderr, lines ending in "\\n".
        min_level: TF_CPP_MIN_LOG_LEVEL; log lines below it are dropped.
        no_cuda_driver: also drop the cuInit failure (expected without a driver).

    Returns:
        The remaining lines, unchanged and in order.
    """
    kept, dropped_previous = [], False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        match = _LOG_LINE.match(body)
        severity = _SEVERITY[match.group(1) or match.group(2)] if match else None
        drop = bool(
            _ABSL_NOTICE.match(body)
            or (severity is not None and severity < min_level)
            or (severity == 2 and no_cuda_driver and _CUINIT.search(body))
            or (severity == 2 and _DUPLICATE_FACTORY.search(body))
            or (severity == 2 and _ONEDNN_INT32.search(body))
            or (severity is None and dropped_previous and _CONTINUATION.match(body)))
        dropped_previous = drop
        if not drop:
            kept.append(line)
    return "".join(kept)


@contextlib.contextmanager
def filtered_stderr():
    """Sends fd 2 to a temporary file inside the block, then writes back what is not noise.

    Yields the capture file (None if there is no usable stderr to redirect).
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield None  # no usable stderr: nothing to filter
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield capture
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "surrogateescape")
            kept = filter_startup_noise(text, min_log_level(), cuda_driver_missing(text))
            data = kept.encode("utf-8", "surrogateescape")
            while data:
                data = data[os.write(2, data):]


class _QuietLoader(importlib.abc.Loader):
    """Runs the real loader of `tensorflow` with stderr filtered."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with filtered_stderr() as capture:
            self._loader.exec_module(module)
            if capture is not None:
                capture.flush()
                capture.seek(0)
                if cuda_driver_missing(capture.read().decode("utf-8", "replace")):
                    # The cuInit failure is logged when the device list is first
                    # built: build it now, while stderr is filtered. Physical
                    # devices only, so logical devices can still be configured.
                    with contextlib.suppress(Exception):
                        module.config.list_physical_devices()


class _QuietImport(importlib.abc.MetaPathFinder):
    """Intercepts the first `import tensorflow`, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Sets TF_CPP_MIN_LOG_LEVEL (default 2) and hooks the first TensorFlow import.

    Does nothing with TF_CPP_MIN_LOG_LEVEL=0 or once TensorFlow is imported.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if min_log_level() <= 0 or "tensorflow" in sys.modules:
        return
    if not any(isinstance(finder, _QuietImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())


install()
