"""Named datasets: where their raw files live, and downloading them.

Layout under the raw data directory (that of the official archives):
`wikitext-2/wiki.{train,valid,test}.tokens`, `wikitext-2-raw/wiki.*.raw`, the
same for `wikitext-103[-raw]`, `enwik8/enwik8` and `text8/text8` (the last two
split 90M/5M/5M bytes as in Transformer-XL). Present files are used (and
checked where a checksum is known); missing ones are extracted from the
archive if it is in the raw data dir, else decompressed from the copy shipped
with the project (WikiText-2: `datasets/wikitext-2/*.xz`), else the archive is
downloaded first. The tables are injectable so tests can serve archives from a
local server.
"""

import contextlib
import dataclasses
import hashlib
import os
import time
import types
import urllib.error
import urllib.request
import zipfile

from absl import logging

from pardata.errors import DataError
from pardata.text import SplitSource
from runstore import run_dir

USER_AGENT = "par-transformer-data/1.0 (+python urllib)"
_M = 1_000_000
# Raw files shipped with the project (xz-compressed), under the repository root.
SHIPPED_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "datasets")


@dataclasses.dataclass(frozen=True)
class DatasetSource:
    """Where a named dataset comes from.

    Attributes:
        directory: sub-directory of the raw data dir holding the files.
        archive: archive file name (looked for in the raw data dir and in
            `directory`, downloaded into the raw data dir).
        urls: download URLs, tried in order (mirrors).
        archive_checksum: "sha256:<hex>" / "md5:<hex>" / "sha1:<hex>" or "".
        members: file name in `directory` -> member path in the archive.
        file_checksums: file name -> checksum of the extracted file.
        splits: split -> (file name, first byte, stop byte or None).
        shipped: directory (under SHIPPED_ROOT, or absolute) holding
            `<file name>.xz` for every file, or "" if the project ships none.
    """

    directory: str
    archive: str
    urls: tuple
    archive_checksum: str
    members: types.MappingProxyType
    file_checksums: types.MappingProxyType
    splits: types.MappingProxyType
    shipped: str = ""


def _wikitext(directory, archive, ext, archive_sha256, file_sha256=None, shipped=""):
    files = {s: f"wiki.{s}.{ext}" for s in ("train", "valid", "test")}
    return DatasetSource(
        directory=directory, archive=archive,
        urls=(f"https://wikitext.smerity.com/{archive}",
              f"https://s3.amazonaws.com/research.metamind.io/wikitext/{archive}"),
        archive_checksum=f"sha256:{archive_sha256}",
        members=types.MappingProxyType({f: f"{directory}/{f}" for f in files.values()}),
        file_checksums=types.MappingProxyType(
            {files[s]: f"sha256:{h}" for s, h in (file_sha256 or {}).items()}),
        splits=types.MappingProxyType({s: (f, 0, None) for s, f in files.items()}),
        shipped=shipped)


def _hutter(name, checksum, file_checksum):
    return DatasetSource(
        directory=name, archive=f"{name}.zip", urls=(f"http://mattmahoney.net/dc/{name}.zip",),
        archive_checksum=checksum, members=types.MappingProxyType({name: name}),
        file_checksums=types.MappingProxyType({name: file_checksum}),
        splits=types.MappingProxyType({"train": (name, 0, 90 * _M),
                                       "valid": (name, 90 * _M, 95 * _M),
                                       "test": (name, 95 * _M, 100 * _M)}))


# Archive checksums: Hugging Face `datasets` (wikitext, enwik8
# dataset_infos.json) and GluonNLP (text8, sha1). File checksums: the WikiText-2
# copy shipped in datasets/wikitext-2 (its README lists the same values and
# where they were checked), enwik8's published md5, GluonNLP's text8.
SOURCES = types.MappingProxyType({
    "wikitext2": _wikitext(
        "wikitext-2", "wikitext-2-v1.zip", "tokens",
        "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c",
        {"train": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
         "valid": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
         "test": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"},
        shipped="wikitext-2"),
    "wikitext2_raw": _wikitext(
        "wikitext-2-raw", "wikitext-2-raw-v1.zip", "raw",
        "ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11",
        {"valid": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
         "test": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08"}),
    "wikitext103": _wikitext(
        "wikitext-103", "wikitext-103-v1.zip", "tokens",
        "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590"),
    "wikitext103_raw": _wikitext(
        "wikitext-103-raw", "wikitext-103-raw-v1.zip", "raw",
        "91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794"),
    "enwik8": _hutter(
        "enwik8", "sha256:547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
        "md5:a1fa5ffddb56f4953e226637dabbb36a"),
    "text8": _hutter(
        "text8", "sha1:6c70299b93b7e1f927b42cd8f6ac1a31547c7a2e",
        "sha1:0dc3edebc970dcc96137e7deda4d9995af9d93de"),
})


def file_checksum(path: str, algorithm: str) -> str:
    """Hex digest of a file with a hashlib algorithm ("sha256", "md5", "sha1")."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def checksum_ok(path: str, expected: str) -> tuple[bool, str]:
    """(matches, actual "algo:hex"); an empty `expected` always matches."""
    if not expected:
        return True, ""
    algorithm, _, hexdigest = expected.partition(":")
    actual = file_checksum(path, algorithm)
    return actual == hexdigest.lower(), f"{algorithm}:{actual}"


def download(urls, dest: str, checksum: str, timeout: float = 60.0) -> None:
    """Downloads the first URL that works into `dest`, verifying the checksum.

    The file is written under a temporary name and renamed when verified
    (`run_dir.atomic_output`); a corrupt download is removed and the next
    mirror tried.

    Raises:
        DataError: no URL worked (names every URL and error, and how to place
            the file by hand), every download failed the checksum, or `dest`
            cannot be written.
    """
    _make_dir(os.path.dirname(dest) or ".", dest)
    problem = run_dir.unwritable(dest)  # read-only, no permission: before the network
    if problem:
        raise _raw_write_error(problem, dest)
    failures = []
    for url in urls:
        logging.info("downloading %s -> %s", url, dest)
        try:
            with run_dir.atomic_output(dest) as temp:
                _fetch_verified(url, temp, checksum, timeout)
            return
        except _Failed as failure:
            failures.append(f"{url}: {failure}")
        except run_dir.WriteError as e:
            raise _raw_write_error(e, dest) from None
    if all("checksum mismatch" not in f for f in failures):
        raise DataError(
            f"could not download {os.path.basename(dest)} (no network?): "
            + "; ".join(failures)
            + f". Download it by hand from {urls[0]} and put it at {dest}, then rerun.")
    raise DataError(f"download of {os.path.basename(dest)} failed verification: "
                    + "; ".join(failures))


class _Failed(Exception):
    """A download that did not work (network, server, checksum): the next mirror is tried."""


def _fetch_verified(url: str, temp: str, checksum: str, timeout: float) -> None:
    """`url` into `temp`, checked against `checksum`; raises _Failed saying why not."""
    try:
        _fetch(url, temp, timeout)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise _Failed(getattr(e, "reason", None) or e) from None
    ok, actual = checksum_ok(temp, checksum)
    if not ok:
        raise _Failed(f"checksum mismatch (got {actual}, expected {checksum}); "
                      "the corrupt file was removed")


def _fetch(url: str, temp: str, timeout: float) -> None:
    """Streams `url` into `temp`, logging progress every few seconds."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(temp, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0)
        done, last = 0, time.monotonic()
        for block in iter(lambda: response.read(1 << 20), b""):
            out.write(block)
            done += len(block)
            if time.monotonic() - last > 5:
                last = time.monotonic()
                logging.info("downloaded %.1f/%.1f MB", done / 1e6, total / 1e6)
        if total and done != total:
            raise OSError(f"connection closed after {done} of {total} bytes")


def _unpack(open_source, dest: str, checksum: str, what: str, fix: str) -> None:
    """Copies the stream `open_source()` gives into `dest`, atomically and checked.

    The bytes go to a temporary name (`run_dir.atomic_output`) that is renamed
    to `dest` only once the checksum matches; on any failure it is removed, so
    `dest` is either absent or complete. An error opening the source passes
    through; an OSError while copying or renaming is the DataError of a raw
    file that cannot be written.
    """
    with open_source() as src:
        try:
            with run_dir.atomic_output(dest) as temp:
                with open(temp, "wb") as out:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        out.write(block)
                ok, actual = checksum_ok(temp, checksum)
                if not ok:
                    raise DataError(f"{what} has {actual}, expected {checksum}; {fix}")
        except run_dir.WriteError as e:
            raise _raw_write_error(e, dest) from None


@contextlib.contextmanager
def _zip_member(archive: str, member: str):
    with zipfile.ZipFile(archive) as z, z.open(member) as f:
        yield f


def _extract(archive: str, member: str, dest: str, checksum: str) -> None:
    """Extracts one member to `dest` via a temporary name, checking it."""
    fix = "delete the archive so it is downloaded again"
    try:
        _unpack(lambda: _zip_member(archive, member), dest, checksum,
                f"{member} extracted from {archive}", fix)
    except KeyError:
        raise DataError(f"archive {archive} has no member {member}; {fix}") from None
    except zipfile.BadZipFile as e:
        raise DataError(f"cannot extract {member} from {archive} ({e}); {fix}") from None
    except OSError as e:
        if not os.path.isfile(archive):
            raise DataError(f"cannot extract {member} from {archive} ({e}); {fix}") from None
        raise _raw_write_error(e, dest) from None


def _decompress_shipped(source: str, dest: str, checksum: str) -> None:
    """Decompresses a file shipped with the project (`.xz`) to `dest`, checking it."""
    fix = (f"the copy shipped with the project is damaged: restore it (git checkout -- "
           f"{source}) or put the official files in {os.path.dirname(dest)}")
    try:
        import lzma
    except ImportError:
        raise DataError(f"this Python has no lzma module (built without liblzma), so {source} "
                        f"cannot be read; unpack it by hand (xz -dc {source} > {dest}) or use "
                        "a Python with lzma") from None
    try:
        _unpack(lambda: lzma.open(source), dest, checksum, f"{source} (decompressed)", fix)
    except (lzma.LZMAError, EOFError) as e:
        raise DataError(f"cannot decompress {source} ({e}); {fix}") from None
    except OSError as e:
        if getattr(e, "filename", None) == source:  # reading the shipped copy failed
            raise DataError(f"cannot decompress {source} ({e}); {fix}") from None
        raise _raw_write_error(e, dest) from None


def shipped_files(spec: DatasetSource, names) -> dict | None:
    """file name -> shipped `.xz` path for every name, or None if any is not shipped."""
    if not spec.shipped:
        return None
    directory = os.path.join(SHIPPED_ROOT, spec.shipped)
    paths = {name: os.path.join(directory, f"{name}.xz") for name in names}
    return paths if all(os.path.isfile(p) for p in paths.values()) else None


def shipped_split(dataset: str, split: str, workdir: str,
                  sources=SOURCES) -> SplitSource | None:
    """A split of a named dataset from the copy shipped with the project.

    The split's file is decompressed (and checked) into `workdir`; None when
    the project ships no copy of the dataset.
    """
    spec = sources[dataset]
    name, start, stop = spec.splits[split]
    shipped = shipped_files(spec, [name])
    if not shipped:
        return None
    path = os.path.join(workdir, name)
    _decompress_shipped(shipped[name], path, spec.file_checksums.get(name, ""))
    return SplitSource(path, start, stop, flag="--split")


def raw_files_present(dataset: str, data_dir: str, sources=SOURCES) -> bool:
    """Whether every raw file of a named dataset is already in `data_dir`."""
    spec = sources[dataset]
    directory = os.path.join(data_dir, spec.directory)
    return all(os.path.isfile(os.path.join(directory, f)) for f, _, _ in spec.splits.values())


def ensure_raw_files(dataset: str, data_dir: str, *, download_missing: bool = True,
                     sources=SOURCES, timeout: float = 60.0) -> dict:
    """Makes sure a named dataset's raw files are in `data_dir`.

    Missing files come, in this order, from the official archive if it is in
    `data_dir`, from the copy shipped with the project (WikiText-2), or from
    the archive downloaded into `data_dir`. Every file is checked against its
    known checksum.

    Args:
        dataset: a key of `sources`.
        data_dir: raw data directory.
        download_missing: download the archive if files, archive and shipped
            copy are absent.
        sources: the dataset table (tests pass their own).
        timeout: seconds per network operation.

    Returns:
        split -> SplitSource.
    """
    if dataset not in sources:
        raise DataError(f"--dataset={dataset!r} is not known; choose one of "
                        f"{', '.join(sorted(sources))} or text")
    spec = sources[dataset]
    directory = os.path.join(data_dir, spec.directory)
    needed = list(dict.fromkeys(f for f, _, _ in spec.splits.values()))
    missing = [f for f in needed if not os.path.isfile(os.path.join(directory, f))]
    for name in needed:
        if name in missing:
            continue
        path = os.path.join(directory, name)
        ok, actual = checksum_ok(path, spec.file_checksums.get(name, ""))
        if not ok:
            raise DataError(f"{path} has {actual}, expected {spec.file_checksums[name]}: it "
                            "is not the official file. Delete it to fetch the official one, or "
                            "build it with --dataset=text and --train_file/--valid_file/"
                            "--test_file")
    if missing:
        archive = _find_archive(spec, data_dir, directory)
        shipped = shipped_files(spec, missing) if archive is None else None
        if shipped:
            _make_dir(directory)
            for name in missing:
                logging.info("decompressing %s (shipped with the project) into %s",
                             shipped[name], directory)
                _decompress_shipped(shipped[name], os.path.join(directory, name),
                                    spec.file_checksums.get(name, ""))
        else:
            _fetch_and_extract(spec, data_dir, directory, missing, archive, download_missing,
                               timeout)
    return {split: SplitSource(os.path.join(directory, f), start, stop, flag="--data_dir")
            for split, (f, start, stop) in spec.splits.items()}


def _make_dir(directory: str, named: str | None = None) -> None:
    """Creates `directory`; a DataError naming `named` (default: the directory) if it
    cannot be."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise _raw_write_error(e, named or directory) from None


def _raw_write_error(error, path: str) -> DataError:
    """A raw file (or its directory) that cannot be written (an OSError, or a
    `run_dir.WriteError`): the path, cause and fix."""
    if isinstance(error, run_dir.WriteError):
        error = error.reason
    cause, fix = run_dir.reason_and_fix(error, path)
    return DataError(f"cannot write {os.path.abspath(path)} (the raw files: DATA_DIR or "
                     f"--data_dir): {cause}; {fix}")


def _fetch_and_extract(spec, data_dir, directory, missing, archive, download_missing, timeout):
    """Extracts the missing files from the archive, downloading it first if absent."""
    if archive is None:
        archive = os.path.join(data_dir, spec.archive)
        if not download_missing:
            raise DataError(f"{os.path.join(directory, missing[0])} is missing; put the "
                            f"files there or the archive at {archive}, or allow downloads "
                            "(drop --nodownload)")
        download(spec.urls, archive, spec.archive_checksum, timeout)
    else:
        ok, actual = checksum_ok(archive, spec.archive_checksum)
        if not ok:
            raise DataError(f"{archive} has {actual}, expected {spec.archive_checksum}; "
                            "delete it so it is downloaded again")
    _make_dir(directory)
    for name in missing:
        logging.info("extracting %s from %s", name, archive)
        _extract(archive, spec.members[name], os.path.join(directory, name),
                 spec.file_checksums.get(name, ""))


def _find_archive(spec: DatasetSource, data_dir: str, directory: str) -> str | None:
    for path in (os.path.join(data_dir, spec.archive), os.path.join(directory, spec.archive)):
        if os.path.isfile(path):
            return path
    return None
