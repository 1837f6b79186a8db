"""The one exception type for problems a user can fix."""


class DataError(ValueError):
    """Bad input data, flags or files.

    The message names the file or flag at fault and how to fix it; entry
    scripts print it as a single `error: ...` line without a traceback.
    """


class NotUtf8Error(DataError):
    """A text file that is not valid UTF-8 (raised by `pardata.text.decode_utf8`).

    Attributes:
        path: the file.
        line: 1-based line of the first bad byte.
        position: byte offset of the first bad byte in the file.
    """

    def __init__(self, message: str, path: str, line: int, position: int):
        super().__init__(message)
        self.path = path
        self.line = line
        self.position = position
