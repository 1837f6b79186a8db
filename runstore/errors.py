"""The error a user can fix by changing a flag, the data or the run directory.

It lives here, below training/ and serving/, because the run store raises it
too (`run_lock.RunDirLocked`); `training.setup.config` exports it under the same name.
"""


class ConfigError(ValueError):
    """A user-fixable problem with the flags, the data or the model directory."""
