"""The layout every entry point relies on: scripts run as modules from the project root
(`python -m bench.bench_train`), so no file edits the import path; tests import their
shared helpers from tests/helpers, never from another test module (pytest imports test
files with --import-mode=importlib, pyproject.toml)."""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
PATH_EDIT = "sys.path" + ".insert"  # spelled apart, so that this file does not match


def python_files():
    """The repository's .py files (tracked or new, not ignored); every one below the root
    outside hidden and ignored directories when git is not there."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard", "--", "*.py"], capture_output=True, check=True).stdout
        return [ROOT / name for name in listed.decode().split("\0")
                if name and (ROOT / name).exists()]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*.py")
                if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]


def test_no_file_edits_the_import_path():
    files = python_files()
    assert len(files) > 50 and ROOT / "bench" / "common.py" in files
    offenders = [f"{path.relative_to(ROOT)}:{number}"
                 for path in files
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if PATH_EDIT in line]
    assert not offenders, (f"{PATH_EDIT} in {offenders}: run scripts as modules from the "
                           "project root (python -m package.module) and import by package")


def test_tests_import_no_other_test_module():
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            words = line.split()
            if words[:1] in (["from"], ["import"]) and len(words) > 1 and (
                    words[1].split(".")[-1].startswith("test_") or words[1] == "conftest"):
                offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert not offenders, f"tests import other test modules: {offenders} (use tests/helpers)"


def test_no_test_directory_shadows_a_package():
    # A tests/<package>/__init__.py would shadow the project's package of that name.
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    shadowing = [p for p in (ROOT / "tests").rglob("__init__.py")
                 if p.parent.name in packages]
    assert not shadowing, shadowing
