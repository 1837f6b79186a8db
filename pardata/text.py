"""Reading source text: byte ranges of files, UTF-8 checks, word/line counts,
bounded pieces of long lines.

Large corpora (WikiText-103 is 540 MB) are read in chunks that end at a line
break, so memory does not grow with the file and a UTF-8 character is never
cut (a newline byte never occurs inside a multi-byte sequence).
"""

import dataclasses
import os
import threading
import time
from typing import Iterator

from absl import logging
import numpy as np

from pardata.errors import DataError, NotUtf8Error

CHUNK_BYTES = 1 << 24
# ASCII whitespace, as bytes.split() sees it: the word count uses these so it
# is the same whatever tokenizer reads the text.
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """The bytes `[start, stop)` of a file that make up one split.

    Attributes:
        path: the file.
        start: first byte.
        stop: one past the last byte; None means the end of the file.
        flag: the flag or setting that named the file, for error messages.
    """

    path: str
    start: int = 0
    stop: int | None = None
    flag: str = "--data_dir"

    def describe(self) -> str:
        if self.start == 0 and self.stop is None:
            return self.path
        return f"{self.path} bytes [{self.start}, {self.stop})"

    def size(self) -> int:
        """Number of bytes in the split; raises DataError if missing, a directory or empty."""
        if os.path.isdir(self.path):
            fix = (f"pass the text file itself to {self.flag}" if self.flag.endswith("_file")
                   else f"check {self.flag}")
            raise DataError(f"input file {self.path} is a directory, not a text file; {fix}")
        if not os.path.isfile(self.path):
            raise DataError(f"input file {self.path} does not exist; check {self.flag}")
        file_size = os.path.getsize(self.path)
        stop = file_size if self.stop is None else self.stop
        if stop > file_size:
            raise DataError(
                f"input file {self.path} has {file_size} bytes but the split needs "
                f"bytes [{self.start}, {stop}); the file is truncated: delete it "
                "so it is downloaded again")
        if stop - self.start <= 0:
            raise DataError(f"input file {self.describe()} is empty; check {self.flag}")
        return stop - self.start


def iter_chunks(source: SplitSource, chunk_bytes: int = CHUNK_BYTES,
                align_lines: bool = True) -> Iterator[tuple[int, bytes]]:
    """Yields `(offset, data)` pieces of the split, in order.

    Args:
        source: the split.
        chunk_bytes: approximate piece size.
        align_lines: end every piece but the last just after a newline.

    Returns:
        An iterator of (byte offset within the split, bytes).
    """
    total = source.size()
    offset = 0
    carry = b""
    with open(source.path, "rb") as f:
        f.seek(source.start)
        while offset + len(carry) < total:
            block = f.read(min(chunk_bytes, total - offset - len(carry)))
            if not block:
                raise DataError(f"input file {source.path} shrank while it was read")
            data = carry + block
            carry = b""
            if align_lines and offset + len(data) < total:
                cut = data.rfind(b"\n") + 1
                if cut > 0:
                    data, carry = data[:cut], data[cut:]
                else:  # one line longer than a chunk: keep reading
                    carry, data = data, b""
            if data:
                yield offset, data
                offset += len(data)
        if carry:
            yield offset, carry


def decode_utf8(data: bytes, offset: int, source: SplitSource) -> str:
    """Decodes a piece of the split, naming file, line and byte on failure."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        position = source.start + offset + e.start
        with open(source.path, "rb") as f:
            line = f.read(position).count(b"\n") + 1
        raise NotUtf8Error(
            f"input file {source.path} is not valid UTF-8 (line {line}, byte "
            f"{position}: {data[e.start:e.start + 4]!r}); convert it to UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8) or use --tokenizer=byte",
            source.path, line, position) from None


def bounded_pieces(line: str, max_bytes: int) -> Iterator[str]:
    """Pieces of a line, each at most `max_bytes` long in UTF-8.

    A line that fits is yielded whole. A longer one is cut at its last space
    within the bound (the space is dropped); a stretch of `max_bytes` without
    a space is cut before the UTF-8 character that would cross the bound, so
    no character is ever split.

    Args:
        line: text without newlines.
        max_bytes: the bound, at least 4 (the longest UTF-8 character).

    Returns:
        An iterator of non-empty str pieces (nothing for an empty line).
    """
    if max_bytes < 4:
        raise ValueError(f"max_bytes must be >= 4, got {max_bytes}")
    if len(line) <= max_bytes // 4:  # at most 4 bytes per character: it fits
        if line:
            yield line
        return
    data = line.encode("utf-8")
    pos = 0
    while len(data) - pos > max_bytes:
        cut = data.rfind(b" ", pos, pos + max_bytes + 1)
        if cut > pos:
            yield data[pos:cut].decode("utf-8")
            pos = cut + 1
        elif cut == pos:  # a space right at the start: skip it
            pos += 1
        else:
            end = pos + max_bytes
            while data[end] & 0xC0 == 0x80:  # a continuation byte: inside a character
                end -= 1
            yield data[pos:end].decode("utf-8")
            pos = end
    if pos < len(data):
        yield data[pos:].decode("utf-8")


def count_words_lines(data: bytes, at_end: bool) -> tuple[int, int]:
    """Whitespace-separated words and lines of a piece of text.

    A line is a newline; the final line of the split counts even without one.

    Args:
        data: bytes; a piece that is not the last should end with a newline.
        at_end: whether this is the last piece of the split.

    Returns:
        (words, lines).
    """
    if not data:
        return 0, 0
    space = _WHITESPACE[np.frombuffer(data, dtype=np.uint8)]
    words = int(np.count_nonzero(~space[1:] & space[:-1])) + int(not space[0])
    lines = data.count(b"\n")
    if at_end and data[-1:] != b"\n":
        lines += 1
    return words, lines


class Progress:
    """Logs `label: done/total` (with an ETA) every `interval` seconds and a final line."""

    def __init__(self, label: str, total: int, unit: str = "MB", interval: float = 5.0):
        self.label = label
        self.total = total
        self.unit = unit
        self.interval = interval
        self.start = time.monotonic()
        self._last = self.start

    def _amount(self, n: int) -> str:
        return f"{n / 1e6:.1f}" if self.unit == "MB" else str(n)

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            pct = 100.0 * done / max(self.total, 1)
            elapsed = now - self.start
            # Remaining time at the average rate so far (none before any progress).
            eta = f", ETA {elapsed * (self.total - done) / done:.0f} s" if 0 < done else ""
            logging.info("%s: %s/%s %s (%.0f%%), %.1f s%s", self.label, self._amount(done),
                         self._amount(self.total), self.unit, pct, elapsed, eta)

    def finish(self, detail: str = "") -> float:
        seconds = time.monotonic() - self.start
        logging.info("%s: done in %.1f s%s", self.label, seconds,
                     f" ({detail})" if detail else "")
        return seconds


class Heartbeat:
    """Logs `label: still running, N s` every `interval` seconds inside a `with`.

    For one long call that reports no progress of its own (sentencepiece
    training): a daemon thread logs while the call runs (it releases the
    GIL) and is stopped and joined when the block ends, however it ends.
    """

    def __init__(self, label: str, interval: float = 10.0):
        self.label = label
        self.interval = interval
        self._stop = threading.Event()
        self._thread = None

    def _run(self, start: float) -> None:
        while not self._stop.wait(self.interval):
            logging.info("%s: still running, %.0f s", self.label, time.monotonic() - start)

    def __enter__(self) -> "Heartbeat":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(time.monotonic(),),
                                        name=f"heartbeat: {self.label}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
