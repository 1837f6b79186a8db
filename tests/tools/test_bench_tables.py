"""The benchmark tables of the documentation are generated from bench/results/*.json."""

import json
import shutil
import subprocess
import sys

import pytest

from tools import bench_tables


def _tree(tmp_path, project_root, page_text):
    """A project copy holding bench/results/ and one page."""
    shutil.copytree(project_root / "bench" / "results", tmp_path / "bench" / "results")
    page = tmp_path / "docs" / "results" / "page.md"
    page.parent.mkdir(parents=True)
    page.write_text(page_text, encoding="utf-8")
    return page


def _all_blocks():
    return "".join(f"## {name}\n\n<!-- bench_tables:begin {name} -->\n"
                   "<!-- bench_tables:end -->\n\n" for name in bench_tables.TABLES)


def test_the_pages_are_up_to_date(project_root):
    assert bench_tables.main(["--check"], root=project_root) == 0, (
        "a benchmark table is stale: run python -m tools.bench_tables --write")


def test_runs_as_a_module_from_the_project_root(project_root):
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench_tables", "--check"],
        cwd=project_root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_write_then_check_and_a_changed_result_is_stale(tmp_path, project_root, capsys):
    page = _tree(tmp_path, project_root, "# Page\n\n" + _all_blocks() + "Text after.\n")
    assert bench_tables.main(["--check"], root=tmp_path) == 1  # empty blocks
    assert bench_tables.main(["--write"], root=tmp_path) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Page\n") and text.endswith("Text after.\n")
    assert bench_tables.main(["--check"], root=tmp_path) == 0
    # The figures are the JSON's: 7,094 tokens/s of the derived 12-block network.
    assert (
        "| derived `fafaaaaaffaf` | 7:12 | 0.982 | 81.89 | 77.83 | 285.2 | 7,094 | 1.01x |" in text
    )
    # Commands are spelled as modules, links lead to the JSON from the page.
    assert "`python -m experiments.cost_sweep --search_steps=2000 --retrain_steps=2000`" in text
    assert "[bench/results/cost_sweep.json](../../bench/results/cost_sweep.json)" in text
    result = tmp_path / "bench" / "results" / "par_claim_12.json"
    data = json.loads(result.read_text())
    data["rows"][0]["tokens_per_sec"] = 9999.0
    result.write_text(json.dumps(data))
    capsys.readouterr()
    assert bench_tables.main(["--check"], root=tmp_path) == 1
    assert "+| derived `fafaaaaaffaf` | 7:12 | 0.982 | 81.89 | 77.83 | 285.2 | 9,999 |" in (
        capsys.readouterr().err)
    assert bench_tables.main(["--write"], root=tmp_path) == 0
    assert "| 9,999 | 1.01x |" in page.read_text(encoding="utf-8")


def test_unknown_and_missing_tables_are_errors(tmp_path, project_root, capsys):
    _tree(tmp_path, project_root,
          "<!-- bench_tables:begin no_such_table -->\n<!-- bench_tables:end -->\n")
    assert bench_tables.main(["--check"], root=tmp_path) == 1
    assert "unknown table 'no_such_table'" in capsys.readouterr().err
    _tree(tmp_path / "two", project_root,
          "<!-- bench_tables:begin cost_sweep -->\n<!-- bench_tables:end -->\n")
    assert bench_tables.main(["--write"], root=tmp_path / "two") == 1
    assert "no page shows the table(s)" in capsys.readouterr().err
    _tree(tmp_path / "three", project_root, "<!-- bench_tables:begin cost_sweep -->\nno end\n")
    assert bench_tables.main(["--check"], root=tmp_path / "three") == 1
    assert "has no <!-- bench_tables:end -->" in capsys.readouterr().err


@pytest.mark.parametrize("old, new", [
    ("python bench/cost_sweep.py --coefs=0", "python -m experiments.cost_sweep --coefs=0"),
    ("python bench/bench_train.py --xla", "python -m bench.bench_train --xla"),
    ("python3 bench/bench_commits.py --rounds 5", "python -m experiments.bench_commits --rounds 5"),
    ("python -m bench.bench_span", "python -m bench.bench_span"),
])
def test_commands_are_spelled_as_modules(old, new):
    assert bench_tables.module_command(old) == new
