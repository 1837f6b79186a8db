"""README.md is a short guide; the rest lives in docs/ and bench/README.md."""

import pathlib
import re
import tomllib

from tests.helpers.docs import doc_pages

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEST_COMMAND = "python -m pip install -r requirements-dev.txt && python -m pytest -q"
MAX_LINES = 300


def test_readme_is_a_short_guide():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES})"


def test_readme_holds_the_test_command_ci_runs():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert TEST_COMMAND in lines


def test_one_python_spelling_no_issue_numbers_no_paths_outside():
    """Commands say `python` (inside the virtual environment), text names things
    rather than tracker numbers, and nothing points outside the repository."""
    problems = []
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT)
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bpython3\b", line):
                problems.append(f"{name}:{number}: python3 (write python)")
            if re.search(r"\bissues?\s+#?\d+", line, flags=re.IGNORECASE):
                problems.append(f"{name}:{number}: an issue number")
            if "../shared" in line or "/work/" in line:
                problems.append(f"{name}:{number}: a path outside the repository")
            if re.search(r"python bench/\w+\.py|python tools/\w+\.py", line):
                problems.append(f"{name}:{number}: run bench/ and tools/ scripts as modules "
                                "(python -m bench.x, python -m tools.x)")
    assert not problems, "\n".join(problems)


def test_ci_follows_the_readme():
    """.ci/run installs where the README does (a virtual environment inside the clone) and
    runs the README's test command, so a tree-walking test that reads the environment
    fails in CI as it would for a user."""
    readme = README.read_text(encoding="utf-8").splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    install = "python -m venv .venv && . .venv/bin/activate"
    assert install in readme
    assert install.replace("python -m venv", "python3 -m venv") in ci
    assert TEST_COMMAND in ci
    clone, venv, test = (next(i for i, line in enumerate(ci) if text in line) for text in (
        "git clone", "-m venv .venv", TEST_COMMAND))
    assert clone < venv < test  # the environment is made inside the fresh clone


def test_the_test_command_runs_on_two_workers():
    """The README's test command runs on two pytest-xdist workers, each test file whole in
    one worker (pyproject.toml's addopts, the plug-in pinned in requirements-dev.txt), and
    the README says how to run in the one pytest process (`-p no:xdist` cannot: pytest
    would not know the `-n` of addopts)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = project["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert [addopts[addopts.index("-n") + 1], addopts[addopts.index("--dist") + 1]] == [
        "2", "loadfile"]
    requirements = (ROOT / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
    assert any(re.fullmatch(r"pytest-xdist==[\d.]+", line) for line in requirements)
    readme = README.read_text(encoding="utf-8")
    assert "`-n 2 --dist loadfile`" in readme and "python -m pytest -q -n 0 tests/" in readme
    assert "no:xdist" not in readme
