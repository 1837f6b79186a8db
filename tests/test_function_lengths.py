"""No function of the repository's own Python is over 80 lines (tools/function_lengths.py)."""

from tools import function_lengths

# Functions in files another change owns at the moment, named until it shortens them:
# (path, qualified name). Remove an entry when its function is short again (the
# second test fails while an entry is no longer needed).
ALLOWED = set()


def test_no_function_is_over_80_lines():
    long = [row for row in function_lengths.offenders() if (row[0], row[2]) not in ALLOWED]
    assert not long, "functions over 80 lines (extract helpers):\n" + "\n".join(
        f"{path}:{line} {name}: {length} lines" for path, line, name, length in long)


def test_every_allowed_function_is_still_long():
    long = {(path, name) for path, _, name, _ in function_lengths.offenders()}
    assert ALLOWED <= long, sorted(ALLOWED - long)


def test_the_count_measures_from_def_to_the_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    method_body = body.replace("\n", "\n    ")
    source = (f"@decorator\ndef short():\n{body}\n\n\nclass A:\n    def long(self):\n"
              f"    {method_body}\n"
              "        def inner():\n            return 1\n        return inner\n")
    lengths = {name: (line, length) for name, line, length in
               function_lengths.function_lengths(source)}
    assert lengths == {"short": (2, 80), "A.long": (85, 83), "A.long.inner": (165, 2)}


def test_the_files_are_the_tracked_python_files():
    files = {str(path) for path in function_lengths.tracked_python_files()}
    assert {"train.py", "tools/function_lengths.py", "training/run/loop.py"} <= files
    assert not any(path.startswith(".venv/") or not path.endswith(".py") for path in files)
