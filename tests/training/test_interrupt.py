"""training.run.interrupt.run_guarded: the one error and interrupt wrapper of the serving
scripts."""

import pytest

from training.run import interrupt


def _raises(error):
    def body():
        raise error

    return body


def test_statuses_and_lines():
    calls = []
    assert interrupt.run_guarded(lambda: calls.append(1), (ValueError,)) == (0, None)
    assert calls == [1]
    assert interrupt.run_guarded(_raises(ValueError("bad --x")), (ValueError,)) == (
        1, "error: bad --x")
    assert interrupt.run_guarded(_raises(KeyboardInterrupt()), (ValueError,), "stopped") == (
        130, "stopped")
    assert interrupt.run_guarded(_raises(interrupt.Terminated()), (ValueError,)) == (
        143, "interrupted")
    with pytest.raises(TypeError):  # not the user's to fix: a traceback
        interrupt.run_guarded(_raises(TypeError("bug")), (ValueError,))
