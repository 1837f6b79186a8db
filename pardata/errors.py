"""The one exception type for problems a user can fix."""


class DataError(ValueError):
    """Bad input data, flags or files.

    The message names the file or flag at fault and how to fix it; entry
    scripts print it as a single `error: ...` line without a traceback.
    """
