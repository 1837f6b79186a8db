"""Fixture of the fault-injection suite: the uninterrupted reference run.

Every scenario trains the same tiny run (tests/helpers/faults.py
`run_flags`: Transformer-XL `tiny` with 2 supernet blocks, dropout on,
--deterministic) on `word_data`, so that each one's final weights can be
compared bit for bit with this run.
"""

import pytest

from tests.helpers.faults import run_child, run_flags


@pytest.fixture(scope="session")
def reference_run(word_data, tmp_path_factory):
    """The uninterrupted run: its model_dir (ckpt-30, metrics.json)."""
    model_dir = tmp_path_factory.mktemp("fault_reference") / "run"
    code, results, err = run_child([{"name": "reference",
                                     "args": run_flags(word_data, model_dir)}])
    assert code == 0 and results["reference"][0] == 0, (results, err[-3000:])
    return model_dir
