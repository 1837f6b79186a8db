"""Every number of the results pages' tables (and README's results table) is in their files."""

import decimal
import json
import pathlib

import pytest

from tools import results_evidence as ev
from tools import wall_time

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Pages another change is rewriting: their check is expected to fail until it lands (strict,
# so the mark must go once the page passes).
PENDING = {}


def _param(page):
    reason = PENDING.get(page.name)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(page, marks=marks, id=page.stem)


# ------------------------------------------------------------------ the committed pages


@pytest.mark.parametrize("page", [_param(page) for page in ev.results_pages()])
def test_results_page_numbers_are_in_its_files(page):
    assert ev.check_page(page) == []


def _readme_pages():
    return sorted({page for _, _, page in ev.readme_rows(ROOT / "README.md")})


@pytest.mark.parametrize("page", [_param(ROOT / page) for page in _readme_pages()])
def test_readme_results_row_numbers_are_in_the_pages_files(page, tmp_path):
    rows = [line for _, line, linked in ev.readme_rows(ROOT / "README.md")
            if ROOT / linked == page]
    readme = tmp_path / "README.md"
    readme.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert ev.check_readme(readme, ROOT) == []


def test_readme_results_table_has_a_row_per_page_it_links():
    assert len(_readme_pages()) >= 10  # the table was found, not silently empty


@pytest.mark.parametrize("path", sorted(ROOT.glob("docs/results/*/wall_time.json")),
                         ids=lambda path: path.parent.name)
def test_committed_wall_times_recompute_from_the_console_logs(path):
    committed = json.loads(path.read_text(encoding="utf-8"))
    again = wall_time.wall_time(path.parent / "console.log", committed["gap_minutes"])
    for key in ("sessions", "running_minutes", "evaluations"):
        assert committed[key] == again[key]
    if "median_tokens_per_sec" in committed:
        assert committed["median_tokens_per_sec"] == wall_time.median_tokens_per_sec(
            path.parent / "training_log.log")


# ------------------------------------------------------------------ the checker itself


def _page(root, text, files):
    """A results page docs/results/x.md with artefacts docs/results/x/<name> = content."""
    results = root / "docs" / "results"
    (results / "x").mkdir(parents=True)
    for name, content in files.items():
        (results / "x" / name).write_text(content, encoding="utf-8")
    page = results / "x.md"
    page.write_text(text, encoding="utf-8")
    return page


def _assert_one_failure(root, text, files, start):
    """The page `text` with its artefacts `files` fails the check once, at `start`."""
    failures = ev.check_page(_page(root, text, files), root)
    assert len(failures) == 1, failures
    assert failures[0].startswith(start), failures[0]


def test_planted_number_is_reported_with_page_and_line(tmp_path):
    _assert_one_failure(tmp_path, "# x\n\n| run | ppl | steps |\n|---|---:|---:|\n"
                                  "| a | 42.15 | 54,520 |\n| b | 99.99 | 3,000 |\n",
                        {"metrics.json": '{"ppl": 42.1483, "steps": 54520, "other": 3000}'},
                        "docs/results/x.md:6: 99.99 is in no artefact")


def test_bold_prose_figures_are_checked_plain_prose_is_not(tmp_path):
    page = _page(tmp_path, "# x\n\nThe run ends at **42.15** (valid), test **12.34**;\n"
                           "an aside of 77.7 is not a headline.\n",
                 {"metrics.json": '{"ppl": 42.1483}'})
    failures = ev.check_page(page, tmp_path)
    assert [f.split(" is ")[0] for f in failures] == ["docs/results/x.md:3: 12.34"]


def test_generated_bench_tables_are_left_to_their_own_check(tmp_path):
    page = _page(tmp_path, "<!-- bench_tables:begin x -->\n| 5.55 |\n|---|\n"
                           "<!-- bench_tables:end -->\n| 6.66 |\n",
                 {"a.json": "{}"})
    assert [f.split(" is ")[0] for f in ev.check_page(page, tmp_path)] == [
        "docs/results/x.md:5: 6.66"]


def test_rounding_is_the_pages_last_digit():
    numbers = sorted(decimal.Decimal(x) for x in ("42.1483", "2478916", "8500"))
    assert ev.in_numbers(ev.Figure("42.15"), numbers)
    assert ev.in_numbers(ev.Figure("42.1"), numbers)
    assert not ev.in_numbers(ev.Figure("42.16"), numbers)
    assert ev.in_numbers(ev.Figure("2.48", "M"), numbers)
    assert not ev.in_numbers(ev.Figure("2.47", "M"), numbers)
    assert ev.in_numbers(ev.Figure("8.5", "k"), numbers)


def test_page_figures_skip_code_links_and_names():
    figures = ev.page_figures("| `a2b` [run 7](x/9.md) WikiText-2 | 0.15-0.69 | 1.50x | +1.5% |")
    assert [f.text for f in figures] == ["7", "0.15", "0.69", "1.50x", "+1.5%"]


def test_derived_figure_is_recomputed(tmp_path):
    _assert_one_failure(tmp_path, "<!-- derived: 1.17x = 10740 / 9181 -->\n"
                                  "<!-- derived: 0.60 = 83 / 144 -->\n\n| a | b |\n|---|---|\n"
                                  "| 1.17x | 0.60 |\n",
                        {"bench.json": '{"ours": 10740.2, "ref": 9181, "min": [83, 144]}'},
                        "docs/results/x.md:2: 0.60 is printed but 83 / 144 = 0.576")


def test_derived_formula_literals_must_be_in_the_files(tmp_path):
    page = _page(tmp_path, "<!-- derived: 2.00x = 200 / 100 -->\n\n| a |\n|---|\n| 2.00x |\n",
                 {"bench.json": '{"ours": 200}'})
    assert ev.check_page(page, tmp_path) == [
        "docs/results/x.md:1: 100 (in the formula of 2.00x) is in no artefact of the page"]


def test_derived_formula_must_be_arithmetic(tmp_path):
    page = _page(tmp_path, "<!-- derived: 2 = __import__('os') -->\n", {"a.json": "{}"})
    with pytest.raises(ev.EvidenceError, match="not a formula"):
        ev.check_page(page, tmp_path)
    assert ev.evaluate("ln(100) / ln(10)").quantize(decimal.Decimal("0.0001")) == 2


def test_quoted_figure_needs_its_declaration(tmp_path):
    table = "\n| ours | original |\n|---|---|\n| 28.53 | 39.41 |\n"
    files = {"metrics.json": '{"ppl": 28.5311}'}
    assert len(ev.check_page(_page(tmp_path / "a", table, files), tmp_path / "a")) == 1
    quoted = "<!-- quoted: 39.41 -- the original implementation's report -->\n" + table
    assert ev.check_page(_page(tmp_path / "b", quoted, files), tmp_path / "b") == []


def test_declared_evidence_must_exist(tmp_path):
    page = _page(tmp_path, "<!-- evidence: docs/results/missing -->\n", {"a.json": "{}"})
    with pytest.raises(ev.EvidenceError, match="docs/results/missing does not exist"):
        ev.check_page(page, tmp_path)


def test_readme_row_is_checked_against_its_page(tmp_path):
    _page(tmp_path, "# x\n", {"metrics.json": '{"ppl": 44.3211}'})
    readme = tmp_path / "README.md"
    readme.write_text("| experiment 3 | data 12k | valid ppl 44.32, test 42.63 | "
                      "[x](docs/results/x.md) |\n", encoding="utf-8")
    assert ev.check_readme(readme, tmp_path) == [
        "README.md:1: 42.63 is in no artefact of docs/results/x.md"]


def test_main_exits_1_and_prints_the_failure(tmp_path, capsys):
    page = _page(tmp_path, "| a |\n|---|\n| 7.25 |\n", {"a.json": '{"v": 7.2}'})
    assert ev.main([str(page)]) == 1
    assert "x.md:3: 7.25 is in no artefact" in capsys.readouterr().out


# ------------------------------------------------------------------ wall times


def test_wall_time_splits_sessions_and_times_evaluations(tmp_path):
    log = tmp_path / "console.log"
    log.write_text(
        "I1124 10:00:00.000000 1 train.py:369] runs/a: ... full config in runs/a/config.json\n"
        "sample text without a timestamp\n"
        "I1124 10:08:18.500000 1 loop.py:319] step 3000 valid: nll 4.4 ppl 86.13\n"
        "I1124 10:15:00.000000 1 loop.py:1] working\n"
        "I1124 10:20:00.000000 1 loop.py:1] end\n"
        "I1124 11:00:00.000000 1 train.py:369] runs/a: ... full config in runs/a/config.json\n"
        "I1124 11:08:00.000000 1 loop.py:1] working\n"
        "I1124 11:16:00.000000 1 loop.py:1] working\n"
        "I1124 11:24:00.000000 1 loop.py:1] working\n"
        "I1124 11:30:00.000000 1 loop.py:319] step 6000 valid: nll 4.0 ppl 55.0\n"
        "I1124 11:45:00.000000 1 loop.py:1] after a pause of 15 minutes: a third session\n",
        encoding="utf-8")
    result = wall_time.wall_time(log)
    assert [s["minutes"] for s in result["sessions"]] == [20.0, 30.0, 0.0]
    assert result["running_minutes"] == 50.0
    assert result["evaluations"] == [
        {"step": 3000, "minutes": 8.31, "clock": "8:18"},   # 8:18.5 rounds to 8:18 (banker's)
        {"step": 6000, "minutes": 50.0, "clock": "50:00"}]


def test_wall_time_cli_refuses_a_missing_log(tmp_path, capsys):
    assert wall_time.main([str(tmp_path / "nope.log")]) == 2
    assert "pass a run's console.log" in capsys.readouterr().err
