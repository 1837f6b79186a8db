"""Every relative link of the documentation leads somewhere.

Checked pages: README.md, docs/**/*.md, bench/README.md and pretrained/README.md
(when present). A link `[text](path)` or `![alt](path)` must name an existing
file or directory (relative to the page); `(path#anchor)` and `(#anchor)` must
also name a heading of that Markdown file, by GitHub's anchor rules. Links
inside code spans and fenced code blocks are text, not links; absolute URLs
are not followed (the suite never uses the network).
"""

import pytest

from tests.helpers.docs import ROOT, broken_links, doc_pages, slug


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
