r"""Checks that every number in the results pages' tables is in the page's committed files.

    python -m tools.results_evidence          # every docs/results/*.md and README's results table
    python -m tools.results_evidence PAGE.md  # one page

A results page `docs/results/<name>.md` is backed by its artefacts: every file under
`docs/results/<name>/`, the bench JSON its generated tables name (`from bench/results/X.json`
in a `bench_tables` block) and any path a comment in the page declares:

    <!-- evidence: docs/results/other_run bench/results/x.json -->

Every number in a table row of the page (header rows included) and in a bold span of its
prose (text in backticks and link targets excluded) must match a number of those files at
the page's rounding: 42.15 matches 42.1483 (within half a unit of its last printed digit),
54,520 matches 54520, 2.48M matches 2478916 and 8.5k matches 8500. Tables between
`bench_tables` markers are generated from their JSON and checked by `tools.bench_tables`.
A figure the page computes from artefact numbers is declared with its formula (numbers,
+ - * /, parentheses, ln()); the check recomputes it, and every literal of the formula must
itself be in the artefacts or quoted:

    <!-- derived: 0.58 = 83 / 144 -->

A figure quoted from elsewhere (a paper, another implementation's report) is declared
with its source after `--`, and the page must say so where it prints it:

    <!-- quoted: 39.41 62.33 -- the original PAR implementation's reported valid perplexities -->

A README.md results-table row is checked against the artefacts and declarations of the page
it links to. Each failure is reported as `page:line: <number> ...`.
"""

import argparse
import ast
import bisect
import decimal
import operator
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = "docs/results"
TEXT_SUFFIXES = {".json", ".log", ".md", ".csv", ".txt", ".tsv", ".jsonl"}

# A number as a page prints it: optional sign, thousands commas or plain digits, decimals,
# an exponent, then a unit suffix (M, k, x, %) that scales or is dropped.
PAGE_NUMBER = re.compile(
    r"(?<![\w.+-])([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?)([Mk](?![a-zA-Z])|x|%)?")
FILE_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
DERIVED = re.compile(r"<!--\s*derived:\s*(\S+)\s*=\s*(.+?)\s*-->")
QUOTED = re.compile(r"<!--\s*quoted:\s*(.+?)\s*--\s*(\S.*?)\s*-->")
EVIDENCE = re.compile(r"<!--\s*evidence:\s*(.+?)\s*-->")
BENCH_JSON = re.compile(r"from (bench/results/[\w.-]+\.json)")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
RANGE_DASH = re.compile(r"(\d)-(?=\d)")
SCALE = {"M": 6, "k": 3}
BOLD = re.compile(r"\*\*([^*]+)\*\*")


class EvidenceError(RuntimeError):
    """A page's declaration is malformed (a derived formula that does not parse, a missing path)."""


class Figure:
    """One printed number: its value and the half-unit of its last printed digit."""

    def __init__(self, text, suffix=""):
        self.text = text + (suffix or "")
        plain = text.replace(",", "").lstrip("+")
        value = decimal.Decimal(plain)
        exponent = value.as_tuple().exponent
        shift = SCALE.get(suffix, 0)
        self.value = value.scaleb(shift)
        self.half_unit = decimal.Decimal(5).scaleb(exponent - 1 + shift)

    def matches(self, number):
        return abs(number - self.value) <= self.half_unit * decimal.Decimal("1.0000001")


def page_figures(line):
    """The figures printed in one line of a table (code spans and link targets removed)."""
    text = LINK_TARGET.sub("]", CODE_SPAN.sub("", line))
    text = RANGE_DASH.sub(r"\1 ", text)  # 0.15-0.69: two figures; WikiText-2: none
    return [Figure(match.group(1), match.group(2)) for match in PAGE_NUMBER.finditer(text)]


def file_numbers(paths):
    """Every number in the files `paths` names and the text files under its directories, sorted."""
    numbers = set()
    for path in paths:
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and (file.suffix in TEXT_SUFFIXES or not path.is_dir()):
                text = file.read_text(encoding="utf-8", errors="replace")
                for match in FILE_NUMBER.finditer(text):
                    try:
                        numbers.add(decimal.Decimal(match.group(0)))
                    except decimal.InvalidOperation:
                        continue
    return sorted(numbers)


def in_numbers(figure, numbers):
    """Whether a sorted list of file numbers holds one that rounds to the figure."""
    low = bisect.bisect_left(numbers, figure.value - figure.half_unit * 2)
    high = bisect.bisect_right(numbers, figure.value + figure.half_unit * 2)
    return any(figure.matches(number) for number in numbers[low:high])


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv}


def evaluate(formula):
    """The value of a formula of numbers, + - * /, parentheses and ln() (a Decimal)."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return decimal.Decimal(repr(node.value))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "ln" and len(node.args) == 1 and not node.keywords):
            return walk(node.args[0]).ln()
        raise EvidenceError(f"not a formula of numbers, + - * / and ln(): {formula!r}")
    try:
        tree = ast.parse(formula.replace(",", ""), mode="eval")
    except SyntaxError as error:
        raise EvidenceError(f"formula does not parse: {formula!r}") from error
    return walk(tree)


class PageEvidence:
    """The artefact numbers and the declarations of one results page."""

    def __init__(self, page, root=ROOT):
        self.page = page
        self.root = root
        self.lines = page.read_text(encoding="utf-8").splitlines()
        text = "\n".join(self.lines)
        self.paths = self._artefact_paths(text)
        self.numbers = file_numbers(self.paths)
        self.quoted = [Figure(*PAGE_NUMBER.fullmatch(token).groups())
                       for match in QUOTED.finditer(text) for token in match.group(1).split()]
        self.derived = [(Figure(*PAGE_NUMBER.fullmatch(match.group(1)).groups()), match.group(2),
                         self._line_of(match.start(), text)) for match in DERIVED.finditer(text)]

    def _line_of(self, offset, text):
        return text.count("\n", 0, offset) + 1

    def _artefact_paths(self, text):
        paths = []
        own = self.page.parent / self.page.stem
        if own.is_dir():
            paths.append(own)
        declared = [token for match in EVIDENCE.finditer(text) for token in match.group(1).split()]
        declared += BENCH_JSON.findall(text)
        for name in declared:
            path = self.root / name
            if not path.exists():
                raise EvidenceError(f"{self.page}: declared evidence {name} does not exist")
            paths.append(path)
        return paths

    def check_derived(self):
        """Failures of the page's derived declarations: (line, message)."""
        failures = []
        for figure, formula, line in self.derived:
            for literal in FILE_NUMBER.findall(formula.replace(",", "")):  # ln( has none
                if not self.backs(Figure(literal), derived=False):
                    failures.append((line, f"{literal} (in the formula of {figure.text}) is in "
                                           f"no artefact of the page"))
            value = evaluate(formula)
            if not figure.matches(value):
                failures.append((line, f"{figure.text} is printed but {formula} = {value:.6g}"))
        return failures

    def backs(self, figure, derived=True):
        """Whether an artefact, a quoted or (if `derived`) a derived declaration backs it."""
        if in_numbers(figure, self.numbers):
            return True
        declared = self.quoted + ([item for item, _, _ in self.derived] if derived else [])
        return any(item.value == figure.value and item.half_unit == figure.half_unit
                   for item in declared)


def table_lines(lines):
    """(line number, text) a page's figures are read from: its table rows (separator rows and
    generated blocks out) and the bold spans of its prose (the headline figures)."""
    rows = []
    generated = False
    for number, line in enumerate(lines, 1):
        if line.startswith("<!-- bench_tables:begin"):
            generated = True
        elif line.startswith("<!-- bench_tables:end"):
            generated = False
        elif line.startswith("|") and not generated and not re.fullmatch(r"[|:\- ]+", line):
            rows.append((number, line))
        elif not generated and BOLD.search(line):
            rows.append((number, " ".join(BOLD.findall(line))))
    return rows


def check_page(page, root=ROOT):
    """Failures of one results page: a list of `page:line: message` strings."""
    evidence = PageEvidence(page, root)
    name = page.relative_to(root) if page.is_relative_to(root) else page
    failures = [f"{name}:{line}: {message}" for line, message in evidence.check_derived()]
    sources = ", ".join(str(path.relative_to(root) if path.is_relative_to(root) else path)
                        for path in evidence.paths) or "it has none"
    for line, text in table_lines(evidence.lines):
        for figure in page_figures(text):
            if not evidence.backs(figure):
                failures.append(f"{name}:{line}: {figure.text} is in no artefact of the page "
                                f"({sources})")
    return failures


def readme_rows(readme):
    """(line number, text, linked page) of the README's results table rows."""
    rows = []
    lines = readme.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        link = re.search(r"\]\((docs/results/[\w.-]+\.md)\)\s*\|\s*$", line)
        if line.startswith("|") and link:
            rows.append((number, line, link.group(1)))
    return rows


def check_readme(readme, root=ROOT):
    """Failures of the README's results table: each row against its page's evidence."""
    failures = []
    pages = {}
    for line, text, page in readme_rows(readme):
        if page not in pages:
            pages[page] = PageEvidence(root / page, root)
        cells = text.strip("|").split("|")
        claim = "|".join(cells[2:-1])  # the experiment and data columns name, not measure
        for figure in page_figures(claim):
            if not pages[page].backs(figure):
                failures.append(f"{readme.name}:{line}: {figure.text} is in no artefact of "
                                f"{page}")
    return failures


def results_pages(root=ROOT):
    return sorted((root / RESULTS).glob("*.md"))


def _root_of(page):
    """The repository a page lies in (the project's root for a page outside it)."""
    path = pathlib.Path(page).resolve()
    for parent in path.parents:
        if parent.name == "docs" and parent.parent.joinpath(RESULTS) == path.parent:
            return parent.parent
    return ROOT


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", help="pages to check (default: every results page "
                                                 "and README.md's results table)")
    args = parser.parse_args(argv)
    try:
        if args.pages:
            failures = [f for page in args.pages
                        for f in check_page(pathlib.Path(page).resolve(), _root_of(page))]
        else:
            failures = [f for page in results_pages() for f in check_page(page)]
            failures += check_readme(ROOT / "README.md")
    except EvidenceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for failure in failures:
        print(failure)
    print(f"{len(failures)} figure(s) without evidence", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
