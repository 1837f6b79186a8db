"""The layout every entry point relies on: scripts run as modules from the project root
(`python -m bench.bench_train`), so no file edits the import path, and test files keep
unique names (pytest.ini keeps pytest's default import mode, which imports a test file by
its base name)."""

import collections
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


def test_test_files_have_unique_names():
    names = collections.Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1], (
        "two test files share a name: pytest's default import mode (pytest.ini) cannot "
        "import both")
    # A tests/<package>/__init__.py would shadow the package of the same name.
    assert not list((ROOT / "tests").rglob("__init__.py"))
