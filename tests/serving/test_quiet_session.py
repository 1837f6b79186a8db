"""A Python session that follows the README (`import par`, load, generate, score) prints
only what it asks for: no TensorFlow start-up lines, no warning about a short text."""

import os
import re
import subprocess
import sys

import pytest


def _readme_snippet(project_root):
    text = (project_root / "README.md").read_text(encoding="utf-8")
    section = text.split("In Python, one import", 1)[1]
    return re.search(r"```python\n(.+?)\n```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_python_session_is_quiet(project_root):
    snippet = _readme_snippet(project_root)
    assert snippet.splitlines()[0].startswith("import par ")  # before keras imports TF
    # The snippet's last values, printed, show that it ran.
    lines = snippet.splitlines()
    code = "\n".join(lines[:-2] + [f"print({line.split('#')[0].strip()})" for line in lines[-2:]])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "PYTHONWARN"))}
    done = subprocess.run([sys.executable, "-c", code], cwd=project_root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()
    assert len(printed) == 2 and printed[0].startswith("['The game") and float(printed[1]) > 1
    assert done.stderr == ""
