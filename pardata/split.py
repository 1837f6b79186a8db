"""One text file, three splits: valid and test are the file's last lines.

`--dataset=text --train_file=F` without `--valid_file`/`--test_file` takes
train, valid and test as byte ranges of F that end at line breaks, so nothing
is copied and the build's fingerprint (file name and byte range per split)
tells two splits apart.
"""

import numpy as np

from pardata.errors import DataError
from pardata.text import SplitSource, iter_chunks

DEFAULT_FRACTION = 0.05


def split_file(path: str, fraction: float, flag: str = "--train_file") -> tuple[dict, dict]:
    """Splits a text file by lines: train, then valid, then test.

    Args:
        path: the file.
        fraction: share of the lines in valid, and again in test (at least
            one line each), taken from the end of the file.
        flag: the flag that named the file, for error messages.

    Returns:
        ({"train", "valid", "test"} -> SplitSource, meta.json's "split":
         {"file", "fraction", "lines": split -> [first, last] 1-based line numbers}).

    Raises:
        DataError: the file is missing, empty, or has too few lines to split.
    """
    whole = SplitSource(path, flag=flag)
    size = whole.size()
    ends = [np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + (offset + 1)
            for offset, data in iter_chunks(whole, align_lines=False)]
    ends = np.concatenate(ends)  # the byte offset just after each line
    if not ends.size or ends[-1] != size:
        ends = np.append(ends, size)  # a last line without a newline
    lines = len(ends)
    held_out = max(1, round(lines * fraction))
    if lines - 2 * held_out < 1:
        raise DataError(
            f"{flag}={path} has {lines} line(s), too few to split off valid and test "
            f"({held_out} line(s) each, --split_fraction={fraction}) and keep one to train on; "
            "give a longer text, or the splits as --valid_file and --test_file")
    first_valid, first_test = lines - 2 * held_out, lines - held_out  # 0-based line indices
    cuts = [0, int(ends[first_valid - 1]), int(ends[first_test - 1]), size]
    sources = {split: SplitSource(path, cuts[k], cuts[k + 1], flag=flag)
               for k, split in enumerate(("train", "valid", "test"))}
    info = {"file": path, "fraction": fraction, "lines": {
        "train": [1, first_valid], "valid": [first_valid + 1, first_test],
        "test": [first_test + 1, lines]}}
    return sources, info
