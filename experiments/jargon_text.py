r"""The Jargon File 4.4.7 (public domain) as one paragraph per line: finetune.md's text.

Debian's `jargon-text` package ships Eric S. Raymond's Jargon File 4.4.7, which its
copyright file declares in the public domain. This writes its prose (chapters 1-12,
appendices A-C, then the glossary's entries, so that the held-out end of the file,
valid and test, is glossary entries like the bulk of it) with each wrapped paragraph
joined into one line, as WikiText keeps them:

    apt-get download jargon-text && dpkg-deb -x jargon-text_*_all.deb /tmp/jargon
    python -m experiments.jargon_text \
        /tmp/jargon/usr/share/doc/jargon-text/jargon.txt.gz data/jargon.txt

The tests never use it (docs/results/finetune.md).
"""

import argparse
import gzip
import sys

from runstore import run_dir


def paragraphs(lines):
    """Wrapped lines -> one string per paragraph (blank lines separate them)."""
    out, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def jargon_text(lines):
    """The paragraphs in the order chapters, appendices, glossary entries (see above)."""
    def find(prefix, start=0):
        return next(i for i in range(start, len(lines)) if lines[i].startswith(prefix))

    chapters = find("Chapter 1. Hacker Slang")
    glossary = find("Glossary", chapters)
    first_entry = next(i for i in range(glossary, len(lines)) if lines[i].startswith("   :"))
    back_matter = next(i for i in range(first_entry, len(lines))  # the appendices' title
                       if lines[i].strip() == "Part III. Appendices")
    appendices = find("Appendix A.", back_matter)
    bibliography = find("Bibliography", appendices)
    parts = (lines[chapters:glossary], lines[appendices:bibliography],
             lines[first_entry:back_matter])
    return [p for part in parts for p in paragraphs(part)]


def main(argv=None):
    """Writes the paragraphs of a jargon.txt.gz to a text file; exit status 0."""
    parser = argparse.ArgumentParser(prog="python -m experiments.jargon_text",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("source", help="jargon.txt.gz of Debian's jargon-text package")
    parser.add_argument("output", help="the text file to write (one paragraph per line)")
    args = parser.parse_args(argv)
    with gzip.open(args.source, "rt", encoding="utf-8") as f:
        lines = f.read().replace("\u00a0", " ").split("\n")  # no-break spaces: spaces
    run_dir.atomic_write(args.output, "\n".join(jargon_text(lines)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
