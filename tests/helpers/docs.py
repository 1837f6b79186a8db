"""The documentation's pages, headings (GitHub anchors) and relative links."""

import re
import urllib.parse

from tests.helpers import PROJECT_ROOT

ROOT = PROJECT_ROOT

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
