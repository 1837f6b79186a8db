"""docs/troubleshooting.md quotes the messages as the code prints them.

Each quoted message is cut at its placeholders (`D`, `F`, `N`, `DIR`, `...`)
and every remaining piece of text must appear literally in one string of the
project's code (f-string constant parts included), so a reworded message
fails here until the page follows.
"""

import ast
import re

from tests.helpers import PROJECT_ROOT, repository_files

ROOT = PROJECT_ROOT
PLACEHOLDER = re.compile(r"\.\.\.|\b(?:DIR|DATASET|[A-Z]'?)(?![\w'])")
MAX_JOINS = 2  # a message may join a few strings (e.g. an f-string and a helper's text)
MIN_PIECE = 12


def _quoted_messages():
    table = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    messages = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split(" | ", 1)[0]
        messages += [m for m in re.findall(r"`([^`]+)`", first_cell) if len(m) > 20]
    return messages


def _code_strings():
    strings = []
    files = [p for p in repository_files("*.py", root=ROOT)
             if not {"tests", "bench", "experiments"} & set(p.relative_to(ROOT).parts)]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(node.value)
    # The entry scripts' own messages (echo lines of the shell scripts and their helpers).
    strings += [p.read_text(encoding="utf-8") for p in repository_files("*.sh", root=ROOT)
                if "tests" not in p.relative_to(ROOT).parts]
    return strings


def _pieces(message):
    message = message.removeprefix("error: ").removeprefix("warning: ")
    return [p.strip(" ,;:()") for p in PLACEHOLDER.split(message)
            if len(p.strip(" ,;:()")) >= MIN_PIECE]


def _found(piece, strings, joins=MAX_JOINS):
    """The piece is in one string, or is the end of one string followed by the
    start of another (up to `joins` times: text put together from parts)."""
    if any(piece in s for s in strings):
        return True
    if joins == 0:
        return False
    for cut in range(1, len(piece)):
        head, tail = piece[:cut], piece[cut:]
        if any(s.endswith(head) for s in strings) and (
                any(s.startswith(tail) for s in strings)
                or _found_prefix(tail, strings, joins - 1)):
            return True
    return False


def _found_prefix(piece, strings, joins):
    """`piece` starts with a whole string, and the rest follows (up to `joins` more)."""
    if joins < 0:
        return False
    return any(piece.startswith(s) and len(s) >= 3 and (
        any(t.startswith(piece[len(s):]) for t in strings)
        or _found_prefix(piece[len(s):], strings, joins - 1)) for s in strings)


def test_troubleshooting_messages_match_the_code():
    messages = _quoted_messages()
    assert len(messages) >= 15
    strings = _code_strings()
    missing = [(message, piece) for message in messages for piece in _pieces(message)
               if not _found(piece, strings)]
    assert not missing, missing


def test_the_check_sees_a_reworded_message():
    strings = _code_strings()
    pieces = _pieces("error: --model_dir=D is in use by someone else (PID P); go away")
    assert any(not _found(p, strings) for p in pieces)
