"""What the repository promises about itself: one pinned dependency set, code and
documents free of tracker numbers and of paths outside the repository, no unsafe
deserialization."""

import pathlib
import re
import tomllib

from tests.helpers import PROJECT_ROOT, repository_files

# Text files a user reads or runs; generated data, fixtures and datasets are not.
TEXT_SUFFIXES = {".py", ".sh", ".md", ".toml", ".txt", ".cfg", ".ipynb", ".cff"}
SKIPPED_DIRS = {".git", "datasets", "data", "runs", "logs", "__pycache__", ".ruff_cache",
                ".pytest_cache", "fixtures", "results"}


def _text_files():
    for path in repository_files():
        parts = set(path.relative_to(PROJECT_ROOT).parts[:-1])
        if path.suffix in TEXT_SUFFIXES and not parts & SKIPPED_DIRS:
            yield path


def _requirements(name):
    lines = (PROJECT_ROOT / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines
            if line.strip() and not line.startswith("#") and not line.startswith("-r")]


def test_pyproject_pins_the_requirements_files():
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["dependencies"] == _requirements("requirements.txt")
    assert project["project"]["optional-dependencies"]["dev"] == _requirements(
        "requirements-dev.txt")
    for requirement in _requirements("requirements.txt") + _requirements("requirements-dev.txt"):
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.]*", requirement), (
            f"{requirement}: pin an exact version")


# The tests that look for these strings spell them.
CHECKERS = {"tests/test_project.py", "tests/test_readme_guide.py"}


def test_no_issue_numbers_and_no_paths_outside_the_repository():
    problems = []
    for path in _text_files():
        if path.relative_to(PROJECT_ROOT).as_posix() in CHECKERS:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{path.relative_to(PROJECT_ROOT)}:{number}"
            if re.search(r"\bissues?\s+#?\d+\b", line, flags=re.IGNORECASE):
                problems.append(f"{where}: an issue number")
            if "../shared" in line or re.search(r"(?<![\w.])/work/", line):
                problems.append(f"{where}: a path outside the repository")
    assert not problems, "\n".join(problems)


def test_nothing_unpickles():
    pattern = re.compile(r"\bimport pickle\b|\bpickle\.loads?\b|allow_pickle\s*=\s*True|"
                         r"\bimport dill\b|\bcloudpickle\b|safe_mode\s*=\s*False")
    this_file = pathlib.Path(__file__).resolve()
    found = [f"{path.relative_to(PROJECT_ROOT)}: {m.group(0)}"
             for path in _text_files() if path.suffix == ".py" and path.resolve() != this_file
             for m in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_the_checks_see_the_code():
    """The walk above must reach the packages and the documents (a wrong skip list
    would make both checks pass on nothing)."""
    names = {path.relative_to(PROJECT_ROOT).as_posix() for path in _text_files()}
    for expected in ("train.py", "training/run/loop.py", "model/transformer_xl/model.py",
                     "README.md", "docs/training.md", "bench/README.md", "base_model.sh"):
        assert expected in names
