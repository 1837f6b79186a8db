"""The README's quick look as the README and base_model.sh state it, for the tests that
check the other places telling it (the notebook, the docs) against them."""

import os
import re
import subprocess

# The pages that state how long the quick look takes (each must give the same figure).
TIME_PAGES = ("README.md", "docs/training.md", "docs/pretrained_and_exports.md",
              "colab.ipynb")


def readme_quick_look(project_root):
    """(command, run directory, steps) of the README's "The quick look" section."""
    text = (project_root / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## The quick look\n", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()
    run_dir = re.search(r"`(runs/[\w.-]+)`", section).group(1)
    steps = int(re.search(r"([\d,]+) steps", section).group(1).replace(",", ""))
    return command, run_dir, steps


def base_model_args(project_root, tmp_path, *args, env=None):
    """The train.py arguments base_model.sh passes (PYTHON is a stub that prints them)."""
    stub = tmp_path / "python_stub"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    done = subprocess.run(["bash", str(project_root / "base_model.sh"), *args],
                          env=dict(env or os.environ, PYTHON=str(stub)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "train.py"
    return lines[1:]


def last_flag(args, name):
    """The value of the last --name=value in args (absl: the last one wins), or None."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return values[-1] if values else None


def quick_look_minutes(text):
    """Every "<N> minutes" (or "a few minutes", "minutes") in the paragraphs of a page
    that speak of the quick look."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        if "--quick" in paragraph or re.search(r"quick look", paragraph, re.I):
            found += re.findall(r"(\d+|a few|few|several|in)\s+minutes?\b", paragraph)
    return found
