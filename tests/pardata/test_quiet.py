"""pardata.quiet: TensorFlow's start-up noise is dropped, real errors are not."""

import os
import subprocess
import sys
import textwrap

import pytest

from pardata import quiet

# Captured on the development machine (TensorFlow 2.21, no GPU), in this order.
NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = ("I0000 00:00:1795486526.885559    5661 port.cc:153] oneDNN custom operations are on. "
          "You may see slightly different numerical results due to floating-point round-off "
          "errors from different computation orders. To turn them off, set the environment "
          "variable `TF_ENABLE_ONEDNN_OPTS=0`.\n")
NO_DRIVER = ("I0000 00:00:1795486526.885906    5661 cudart_stub.cc:31] Could not find cuda "
             "drivers on your machine, GPU will not be used.\n")
CPU_GUARD = ("I0000 00:00:1795486526.926919    5661 cpu_feature_guard.cc:227] This TensorFlow "
             "binary is optimized to use available CPU instructions in performance-critical "
             "operations.\nTo enable the following instructions: AVX2 AVX512F FMA, in other "
             "operations, rebuild TensorFlow with the appropriate compiler flags.\n")
CUINIT = ("E0000 00:00:1795486532.256630    5716 cuda_platform.cc:52] failed call to cuInit: "
          "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
OLD_FORMAT = ("2025-09-17 14:44:05.157831: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] "
              "Could not find cuda drivers on your machine, GPU will not be used.\n")
FACTORY = ("E0000 00:00:1758131045.203198 3722035 cuda_dnn.cc:8579] Unable to register cuDNN "
           "factory: Attempting to register factory for plugin cuDNN when one has already been "
           "registered\n")
INT32 = ("E0000 00:00:1795938958.943145   21682 util.cc:131] oneDNN supports DT_INT32 only on "
         "platforms with AVX-512. Falling back to the default Eigen-based implementation if "
         "present.\n")
# What must survive.
WARN = "W0000 00:00:1795486532.1    5716 op_kernel.cc:1829] OP_REQUIRES failed: disk full\n"
REAL = "E0000 00:00:1795486532.2    5716 op_kernel.cc:1830] INTERNAL: real failure\n"
PY_WARNING = "/x/keras/src/foo.py:12: UserWarning: something the user should see\n"
TRACEBACK = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n"


def test_filter_keeps_everything_but_the_noise():
    text = (NOTICE + ONEDNN + PY_WARNING + NO_DRIVER + CPU_GUARD + NOTICE + ONEDNN + NO_DRIVER
            + CUINIT + WARN + REAL + FACTORY + INT32 + OLD_FORMAT + TRACEBACK)
    filtered = quiet.filter_startup_noise(text, min_level=2, no_cuda_driver=True)
    assert filtered == PY_WARNING + REAL + TRACEBACK
    # min_level 1 keeps warnings; a machine with a CUDA driver keeps the cuInit error.
    kept = quiet.filter_startup_noise(NOTICE + ONEDNN + WARN + CUINIT + REAL, min_level=1,
                                      no_cuda_driver=False)
    assert kept == WARN + CUINIT + REAL
    assert quiet.filter_startup_noise(ONEDNN + REAL, min_level=0, no_cuda_driver=True) == \
        ONEDNN + REAL
    assert quiet.cuda_driver_missing(NO_DRIVER)


FAKE_TF = '''
import os
os.write(2, {noise!r}.encode())
os.write(2, {real!r}.encode())  # a real error, written below Python as C++ code does
import warnings
warnings.warn("a Python warning during the import")
class config:
    @staticmethod
    def list_physical_devices():
        os.write(2, {cuinit!r}.encode())
        return []
if os.environ.get("FAKE_TF_FAIL"):
    raise ImportError("libcudart.so.12: cannot open shared object file")
'''


@pytest.fixture
def fake_tensorflow(tmp_path):
    """A stand-in `tensorflow` package that writes TF 2.21's start-up lines to fd 2."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(FAKE_TF.format(
        noise=NOTICE + ONEDNN + NO_DRIVER + NOTICE + ONEDNN + NO_DRIVER, real=REAL,
        cuinit=CUINIT))
    return tmp_path


def _run(code, fake, project_root, **env):
    full = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    full.update(PYTHONPATH=os.pathsep.join([str(fake), str(project_root)]), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env=full, cwd=fake)


def test_import_hook_filters_file_descriptor_2(fake_tensorflow, project_root):
    code = """
        import sys
        import pardata.quiet
        print("before", file=sys.stderr, flush=True)
        import tensorflow
        print("after", file=sys.stderr)
    """
    result = _run(code, fake_tensorflow, project_root)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "before" and lines[1] == REAL.strip() and lines[-1] == "after"
    assert "UserWarning: a Python warning during the import" in result.stderr
    for gone in ("absl::InitializeLog", "oneDNN", "cuda drivers", "cuInit"):
        assert gone not in result.stderr
    # Opting out shows everything; a failing import still shows its error.
    loud = _run(code, fake_tensorflow, project_root, TF_CPP_MIN_LOG_LEVEL="0")
    assert NOTICE.strip() in loud.stderr and ONEDNN.strip() in loud.stderr
    failed = _run(code, fake_tensorflow, project_root, FAKE_TF_FAIL="1")
    assert failed.returncode == 1 and REAL.strip() in failed.stderr
    assert failed.stderr.rstrip().endswith(
        "ImportError: libcudart.so.12: cannot open shared object file")
    assert "oneDNN" not in failed.stderr


@pytest.mark.slow
def test_entry_script_prints_no_tensorflow_noise(tmp_path, project_root):
    """build_data.py (imports TensorFlow to write shards) with the real TensorFlow."""
    text = "".join(f"line {i} with some words\n" for i in range(200))
    files = []
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(text)
        files.append(f"--{split}_file={tmp_path / f'{split}.txt'}")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "build_data.py", "--dataset=text", "--tokenizer=word",
         f"--output_dir={tmp_path / 'out'}", *files], cwd=project_root, capture_output=True,
        text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "writing test: done" in result.stderr  # TensorFlow was imported and used
    for noise in ("absl::InitializeLog", "oneDNN", "cuda drivers", "cuInit", "I0000", "E0000"):
        assert noise not in result.stderr, result.stderr
    # The premise: without pardata.quiet the same TensorFlow is noisy here.
    control = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; tf.config.list_physical_devices()"],
        capture_output=True, text=True, timeout=300, env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"))
    assert "absl::InitializeLog" in control.stderr, "TensorFlow no longer prints the noise " \
        "pardata.quiet removes: check whether it is still needed"
