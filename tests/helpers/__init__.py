"""Helpers shared by the tests (no test module imports another test module).

    runs.py    tiny WikiText-2 builds, randomised tiny models, run directories
    layers.py  run_layer_test: the checks every Keras layer of the project passes
    imports.py the dependency-direction rules checked on the import graph
    repository_files (here): the files of the tree that tests may read
"""

import pathlib

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]


def repository_files(*patterns, root=PROJECT_ROOT):
    """The repository's files matching the git pathspecs `patterns` (e.g. "*.py"): tracked
    or new, never ignored ones, and never inside a virtual environment (a directory with
    a `pyvenv.cfg`, wherever the README's install put it). Without git (an unpacked
    archive): every file below `root` outside hidden directories and virtual environments.

    Every test that reads the tree walks it through this, so an environment created inside
    the clone (`python -m venv .venv`) is not read as project code.
    """
    import subprocess

    root = pathlib.Path(root)
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard", "--", *(patterns or ["*"])],
            capture_output=True, check=True).stdout
        paths = [root / name for name in listed.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for pattern in (patterns or ["*"]) for p in root.rglob(pattern)
                 if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    # A venv sits at the root or one level down; its own files are not searched.
    environments = {p.parent for depth in ("*", "*/*")
                    for p in root.glob(f"{depth}/pyvenv.cfg")}
    return sorted(p for p in paths if p.is_file()
                  and not any(parent in environments for parent in p.parents))
