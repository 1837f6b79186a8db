"""The layout every entry point relies on: scripts run as modules from the project root
(`python -m bench.bench_train`), so no file edits the import path; tests import their
shared helpers from tests/helpers, never from another test module (pytest imports test
files with --import-mode=importlib, pyproject.toml)."""

import pathlib

from tests.helpers import repository_files

ROOT = pathlib.Path(__file__).resolve().parents[1]
PATH_EDIT = "sys.path" + ".insert"  # spelled apart, so that this file does not match


def test_no_file_edits_the_import_path():
    files = repository_files("*.py", root=ROOT)
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


def test_tree_walks_skip_virtual_environments(tmp_path):
    """The README's install puts `.venv` inside the clone: repository_files, which every
    tree-walking test uses, never lists an environment's files, git or no git; it still
    lists the project's own files, tracked or new."""
    import shutil
    import subprocess

    repo = tmp_path / "repo"
    planted = PATH_EDIT + "(0, '')\n"  # what the check above forbids
    files = {".gitignore": ".venv/\n", "pkg/tracked.py": "x = 1\n", "pkg/new.py": "y = 2\n",
             ".venv/pyvenv.cfg": "home = /usr\n", ".venv/lib/site.py": planted,
             "env/pyvenv.cfg": "home = /usr\n", "env/lib/other.py": planted}
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", ".gitignore", "pkg/tracked.py"], check=True)
    wanted = [repo / "pkg" / "new.py", repo / "pkg" / "tracked.py"]
    assert repository_files("*.py", root=repo) == wanted
    shutil.rmtree(repo / ".git")  # an unpacked archive
    assert repository_files("*.py", root=repo) == wanted
    # And the real tree: the project's own files are there.
    listed = repository_files("*.py")
    assert ROOT / "tests" / "helpers" / "__init__.py" in listed and len(listed) > 100
