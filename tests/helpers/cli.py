"""Checks of a command's answer to bad input, shared by the CLI tests."""


def assert_one_error_line(out, err, message):
    """Nothing on stdout and one `error: ...` line on stderr that holds `message`."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0], lines[0]
    assert out == "", out
