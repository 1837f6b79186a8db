"""Helpers shared by the tests (no test module imports another test module).

    runs.py    tiny WikiText-2 builds, randomised tiny models, run directories
    layers.py  run_layer_test: the checks every Keras layer of the project passes
    imports.py the dependency-direction rules checked on the import graph
"""

import pathlib

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
