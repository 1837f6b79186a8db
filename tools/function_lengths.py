"""Functions longer than a limit (default 80 lines) in the repository's own Python.

    python -m tools.function_lengths            # the offenders, longest first
    python -m tools.function_lengths --max 60   # another limit

Reads every git-tracked `.py` file with `ast` (nothing is imported). A
function's length is its lines from `def` to its last line, decorators left
out, docstring and comments included; nested functions and methods count on
their own (and inside the function that holds them). tests/test_function_lengths.py
fails on the offenders.
"""

import argparse
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 80


def tracked_python_files(root=ROOT):
    """The git-tracked `.py` files below `root`, as paths relative to it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    return sorted(pathlib.PurePosixPath(name) for name in listed.split("\0") if name)


def function_lengths(source):
    """[(qualified name, first line, length)] of every function in `source`."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def offenders(root=ROOT, max_lines=MAX_LINES):
    """[(path, line, name, length)] of the functions longer than `max_lines`, longest first."""
    root = pathlib.Path(root)
    long = []
    for path in tracked_python_files(root):
        source = (root / path).read_text(encoding="utf-8")
        long += [(str(path), line, name, length)
                 for name, line, length in function_lengths(source) if length > max_lines]
    return sorted(long, key=lambda row: (-row[3], row[0], row[1]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=MAX_LINES, help="the longest allowed")
    args = parser.parse_args(argv)
    rows = offenders(max_lines=args.max)
    for path, line, name, length in rows:
        print(f"{path}:{line} {name} {length} lines")
    print(f"{len(rows)} function(s) over {args.max} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
