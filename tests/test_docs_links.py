"""Every relative link of the documentation leads somewhere.

Checked pages: README.md, docs/**/*.md, bench/README.md and pretrained/README.md
(when present). A link `[text](path)` or `![alt](path)` must name an existing
file or directory (relative to the page); `(path#anchor)` and `(#anchor)` must
also name a heading of that Markdown file, by GitHub's anchor rules. Links
inside code spans and fenced code blocks are text, not links; absolute URLs
are not followed (the suite never uses the network).
"""

import pathlib
import re
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def doc_pages(root=ROOT):
    pages = [root / "README.md", root / "bench" / "README.md",
             root / "pretrained" / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [p for p in pages if p.is_file()]


def _prose_lines(text):
    """(line number, line) outside fenced code blocks, with code spans blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group()), line)


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[*_]{1,3}(\S(?:.*?\S)?)[*_]{1,3}", r"\1", text)  # emphasis markers
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """The anchors of a Markdown file's headings (duplicates get -1, -2, ...)."""
    seen, out = {}, set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path):
    """(line number, target) of every link of a page."""
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            yield number, match.group(1)


def broken_links(path, root=ROOT):
    """Messages for the links of `path` that lead nowhere."""
    problems = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(root)}:{number}: ({target})"
        if file_part:
            dest = (path.parent / urllib.parse.unquote(file_part)).resolve()
            if not dest.exists():
                problems.append(f"{where}: no such file")
                continue
            if root.resolve() not in (dest, *dest.parents):
                problems.append(f"{where}: outside the repository")
                continue
        else:
            dest = path
        if anchor:
            if dest.is_dir() or dest.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif urllib.parse.unquote(anchor) not in anchors(dest):
                problems.append(f"{where}: no heading #{anchor} in {dest.name}")
    return problems


def test_the_pages_exist():
    names = {str(p.relative_to(ROOT)) for p in doc_pages()}
    assert {"README.md", "bench/README.md", "docs/flags.md", "docs/troubleshooting.md"} <= names


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert not broken_links(page), "\n".join(broken_links(page))


def test_slugs_follow_github():
    assert slug("Several GPUs, several machines, TPU") == "several-gpus-several-machines-tpu"
    assert slug("train.py: model") == "trainpy-model"
    assert slug("`--xla` and mixed precision") == "--xla-and-mixed-precision"
    assert slug("Time to the original's 45-minute quality") == (
        "time-to-the-originals-45-minute-quality")
    assert slug("SHA-RNN and LSTM (`sha_rnn`)") == "sha-rnn-and-lstm-sha_rnn"


def test_a_broken_link_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## A section\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n## Here, too\n\n"
        "[ok](other.md) [ok](other.md#a-section) [ok](#here-too) [ok](../docs)\n"
        "[web](https://example.com/x.md) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n"
        "[gone](missing.md) [bad anchor](other.md#no-such) [bad](#nowhere)\n"
        "![img](missing.png) [out](../../outside.md)\n")
    problems = broken_links(page, tmp_path)
    assert len(problems) == 5, problems
    for text in ("(missing.md): no such file", "(other.md#no-such): no heading",
                 "(#nowhere): no heading", "(missing.png): no such file",
                 "(../../outside.md)"):
        assert any(text in p for p in problems), (text, problems)
