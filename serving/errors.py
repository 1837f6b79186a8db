"""The error of serving a user can fix (no trained model, a bad argument, an unusable prompt)."""


class GenerationError(ValueError):
    """A user-fixable problem: no trained model, bad argument, unusable prompt."""
