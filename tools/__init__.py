"""Developer tools (README generation, results checks), and the entry scripts' check that
they run in the project's environment (in_environment.py, require_python.sh); the library
imports none of it."""
