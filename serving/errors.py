"""The errors of serving a user can fix (each message names the thing and the fix).

`EvaluationError` is the stream evaluator's (evaluation/errors.py), which
training shares; serving raises the same class.
"""

from evaluation.errors import EvaluationError

__all__ = ["GenerationError", "EvaluationError"]


class GenerationError(ValueError):
    """A user-fixable problem: no trained model, bad argument, unusable prompt."""
