"""The errors of serving a user can fix (each message names the thing and the fix)."""


class GenerationError(ValueError):
    """A user-fixable problem: no trained model, bad argument, unusable prompt."""


class EvaluationError(ValueError):
    """A user-fixable problem: bad setting, unusable text file, data that does not fit."""
