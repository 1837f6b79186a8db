"""Entry scripts import this first: outside the project's environment they end in one line.

    import tools.in_environment  # noqa: F401  (before any third-party import)

Without the requirements installed, a script would die in a ModuleNotFoundError
traceback at its first third-party import; this prints the line the shell
scripts print (tools/require_python.sh) and exits with status 1. It imports
nothing but the standard library and only looks the modules up (no import).
"""

import importlib.util
import sys

# The sign of the requirements: cheap to find, and every entry script needs them.
REQUIRED = ("absl", "numpy")


def missing_requirement():
    """The first of REQUIRED this interpreter cannot import, or None."""
    return next((name for name in REQUIRED if importlib.util.find_spec(name) is None), None)


def message(missing, python=None):
    """The one line for an interpreter without module `missing`."""
    python = python or sys.executable or "python3"
    return (f"error: {python} cannot import the project's requirements (no module {missing}): "
            "activate the environment made in README's install section (. .venv/bin/activate) "
            f"or install them ({python} -m pip install -r requirements.txt)")


_missing = missing_requirement()
if _missing:
    print(message(_missing), file=sys.stderr)
    raise SystemExit(1)
