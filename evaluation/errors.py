"""The error of an evaluation a user can fix (its message names the setting and the fix)."""


class EvaluationError(ValueError):
    """A user-fixable problem: bad setting, unusable text file, data that does not fit."""
