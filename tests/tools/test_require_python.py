"""tools/require_python.sh: the entry scripts outside the environment end in one line."""

import os
import subprocess
import sys

import pytest

from tests.helpers import PROJECT_ROOT

SCRIPTS = ["create_tfrecords.sh", "base_model.sh"]
ACTIVATE = ("activate the environment made in README's install section "
            "(. .venv/bin/activate)")


def _run(script, tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHONPATH", "DATA_DIR")}
    return subprocess.run(["bash", str(PROJECT_ROOT / script), "--output_dir=unused"],
                          cwd=tmp_path, env=dict(base, **env), capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("script", SCRIPTS)
def test_python3_without_the_requirements(script, tmp_path):
    """The python3 first on PATH has no site-packages (so no absl), as outside the venv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    done = _run(script, tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        "error: python3 cannot import the project's requirements (no module absl): "
        f"{ACTIVATE} or install them (python3 -m pip install -r requirements.txt)"]
    assert sorted(os.listdir(tmp_path)) == ["bin"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_interpreter(script, tmp_path):
    missing = tmp_path / "no_python"
    done = _run(script, tmp_path, PYTHON=str(missing))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"error: PYTHON={missing} not found: {ACTIVATE} or set PYTHON to another interpreter"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_environment_passes(script, tmp_path):
    """With the requirements the check says nothing (the interpreter is a stub that
    prints what it is given and fails unless it is the check)."""
    stub = tmp_path / "stub"
    stub.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then exec "{sys.executable}" "$@"; fi\n'
                    'printf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    done = _run(script, tmp_path, PYTHON=str(stub))
    assert done.returncode == 0 and done.stderr == ""
    assert "--output_dir=unused" in done.stdout.splitlines()


PYTHON_SCRIPTS = ["train.py", "generate.py", "evaluate.py", "export.py", "build_data.py",
                  "optimal_cuts.py"]


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_python_entry_scripts_without_the_requirements(script, tmp_path):
    """`python script.py` with an interpreter that has no site-packages (as outside the
    environment) ends in the shell scripts' one line, not a ModuleNotFoundError."""
    done = subprocess.run([sys.executable, "-S", str(PROJECT_ROOT / script), "--help"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"error: {sys.executable} cannot import the project's requirements (no module absl): "
        f"{ACTIVATE} or install them ({sys.executable} -m pip install -r requirements.txt)"]
    assert os.listdir(tmp_path) == []
