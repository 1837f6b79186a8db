r"""Generates the documentation's benchmark tables from bench/results/*.json.

    python -m tools.bench_tables            # print every table
    python -m tools.bench_tables --write    # rewrite the tables in the pages
    python -m tools.bench_tables --check    # exit 1 with a diff if a page is stale

A page (bench/README.md or any docs/**/*.md) asks for a table with a block

    <!-- bench_tables:begin NAME -->
    (generated: the table, then the result file and the command that wrote it)
    <!-- bench_tables:end -->

where NAME is a key of `TABLES`. `--write` replaces each block's content;
`--check` fails when a block is stale, names an unknown table, or when a
table of `TABLES` appears on no page. The numbers come from the JSON the
benchmark or experiment wrote; the command is the JSON's own `command`,
spelled as the project runs it today (`python -m bench.<script>`,
`python -m experiments.<script>`; flags unchanged).
"""

import argparse
import difflib
import json
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"<!-- bench_tables:begin (\S+) -->\n")
END = "<!-- bench_tables:end -->"
PAGE_GLOBS = ("bench/README.md", "docs/**/*.md")

# Scripts that moved from bench/ to experiments/ (experiment drivers, not benchmarks).
EXPERIMENTS = ("cost_sweep", "compare_families", "bench_commits")


class BenchTablesError(RuntimeError):
    """A page asks for an unknown table, or a block is malformed."""


# ------------------------------------------------------------------ helpers


def module_command(command):
    """`python bench/x.py ...` as `python -m bench.x ...` (or `experiments.x`), flags kept."""
    def replace(match):
        script = match.group(1)
        package = "experiments" if script in EXPERIMENTS else "bench"
        return f"python -m {package}.{script}"

    return re.sub(r"\bpython3? bench/(\w+)\.py", replace, command)


def _int(value):
    return f"{value:,.0f}"


def _ratio(value, bold=False):
    text = f"{value:.2f}x"
    return f"**{text}**" if bold else text


def _table(header, align, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- renderers
# Each takes the loaded JSON and returns the Markdown table(s).


def _commits(data):
    base, cand = data["sides"]
    rows = [(r["case"], _int(r["tokens_per_sec"][base]), _int(r["tokens_per_sec"][cand]),
             _ratio(r["ratio"], bold=True), "{:.2f}-{:.2f}".format(*r["ratio_range"]))
            for r in data["rows"]]
    return _table(("wt2_base, `Trainer.train_step`", f"A {base.removeprefix('A ')} tokens/s",
                   f"B {cand.removeprefix('B ')} tokens/s", "B / A (paired median)", "range"),
                  ("---", "---:", "---:", "---:", "---:"), rows)


def _commits_losscheck(data):
    base, cand = data["sides"]
    diff = data["loss_check"]["max_relative_difference"]
    rows = [(r["case"], _int(r["tokens_per_sec"][base]), _int(r["tokens_per_sec"][cand]),
             _ratio(r["ratio"]), f"{diff[r['case']]:.1e}") for r in data["rows"]]
    steps = data["loss_check"]["steps"]
    return _table(("wt2_base, `Trainer.train_step`", f"A {base.removeprefix('A ')} tokens/s",
                   f"B {cand.removeprefix('B ')} tokens/s", "B / A",
                   f"max relative loss difference over {steps} steps"),
                  ("---", "---:", "---:", "---:", "---:"), rows)


def _train_xla(data):
    by_name = {r["name"]: r for r in data["rows"]}
    rows = []
    for r in data["rows"]:
        if r["name"].endswith(" xla"):
            continue
        xla = by_name[r["name"] + " xla"]
        label = r["name"].removeprefix("wt2_base ").removesuffix(" " + r["precision"])
        label = re.sub(r" ([afi]{4,})$", r" `\1`", label)
        rows.append((label, _int(r["tokens_per_sec"]), _int(xla["tokens_per_sec"]),
                     _ratio(xla["xla_speedup"])))
    precision = data["rows"][0]["precision"]
    return _table((f"wt2_base, {precision}, `Trainer.train_step`", "tokens/s", "with `--xla`",
                   "XLA / plain (paired)"), ("---", "---:", "---:", "---:"), rows)


def _speed_pivot(data, row_key, col_key, first, col_header, ratio_key, ratio_header, bold=None):
    """One table row per value of row_key, a tokens/s and ratio column pair per value of
    col_key (col_header(value) names the pair; bold(ratio) marks a ratio)."""
    row_values = list(dict.fromkeys(r[row_key] for r in data["rows"]))
    col_values = list(dict.fromkeys(r[col_key] for r in data["rows"]))
    cell = {(r[row_key], r[col_key]): r for r in data["rows"]}
    header, align = [first], ["---"]
    for value in col_values:
        header += [f"{col_header(value)} tokens/s", ratio_header]
        align += ["---:", "---:"]
    rows = []
    for row_value in row_values:
        row = [row_value]
        for col_value in col_values:
            r = cell[(row_value, col_value)]
            row += [_int(r["tokens_per_sec"]),
                    _ratio(r[ratio_key], bold=bool(bold and bold(r[ratio_key])))]
        rows.append(row)
    return _table(header, align, rows)


def _threads(data):
    """One row per setting, a tokens/s and ratio column pair per case."""
    return _speed_pivot(data, "setting", "case", "setting",
                        lambda case: case.removeprefix("wt2_base ").removesuffix(" float32"),
                        "vs_default", "vs default", bold=lambda ratio: ratio > 1.1)


def _families_speed(data):
    return _speed_pivot(data, "label", "precision", "model", str, "vs_transformer_xl",
                        "vs Transformer-XL")


def _generation(data):
    rows = [(f"{p['preset']} `{p['architecture']}`", _int(p["params"]), p["batch"],
             f"{p['cache_ms']:.1f}", f"{p['recompute_ms']:.1f}", _int(p["cache_tokens_per_sec"]),
             _int(p["recompute_tokens_per_sec"]), f"{p['speedup']:.1f}x") for p in data["pairs"]]
    return _table(("model", "params", "batch", "cache ms/step", "recompute ms/step",
                   "cache tokens/s", "recompute tokens/s", "cache speed-up"),
                  ("---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"), rows)


def _span(data):
    rows = [(r["name"], "" if r["mean_span"] is None else f"{r['mean_span']:.0f}",
             ", ".join(map(str, r["kept_memory"])), _int(r["tokens_per_sec"]),
             _ratio(r["vs_fixed"]), f"{r['peak_bytes'] / 2**20:.1f}",
             _ratio(r["peak_vs_fixed"])) for r in data["rows"]]
    return _table(("network", "mean span", "memory kept per layer", "tokens/s", "vs fixed",
                   "peak step memory (MiB)", "vs fixed"),
                  ("---", "---:", "---", "---:", "---:", "---:", "---:"), rows)


def _profile(data):
    """The summary tables profile_step.py itself printed (the per-case details stay in the JSON)."""
    return data["markdown"].split("\n#### ", 1)[0].strip()


def _sweep(data):
    rows = [(r["mode"], f"{r['coef']:g}", f"`{r['architecture']}`", r["attention"]["ratio"],
             f"{r['relative_flops']:.3f}", f"{r['retrain']['valid_perplexity']:.2f}",
             f"{r['retrain']['valid_word_perplexity']:.1f}", _int(r["tokens_per_sec"]),
             _ratio(r["tokens_per_sec_vs_transformer_xl"])) for r in data["rows"]]
    return _table(("search", "C", "derived", "attention:total", "FLOPs vs TXL",
                   "valid ppl (retrained)", "valid word ppl", "tokens/s", "vs TXL"),
                  ("---", "---:", "---", "---:", "---:", "---:", "---:", "---:", "---:"), rows)


def _claim(data):
    rows = []
    for r in data["rows"]:
        name = "Transformer-XL" if r["mode"] == "transformer_xl" else "derived"
        rows.append((f"{name} `{r['architecture']}`", r["attention"]["ratio"],
                     f"{r['relative_flops']:.3f}", f"{r['retrain']['valid_perplexity']:.2f}",
                     f"{r['retrain']['test_perplexity']:.2f}",
                     f"{r['retrain']['test_word_perplexity']:.1f}", _int(r["tokens_per_sec"]),
                     _ratio(r["tokens_per_sec_vs_transformer_xl"])))
    return _table(("network", "attention:total", "FLOPs vs TXL", "valid ppl", "test ppl",
                   "test word ppl", "tokens/s", "vs TXL"),
                  ("---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"), rows)


def _compare_families(data):
    rows = [(f"{r['label']} ({r['shape']})", f"{r['params'] / 1e6:.2f}M",
             f"{r['valid_bits_per_byte']:.3f}", f"{r['valid_perplexity']:.1f}",
             f"{r['valid_word_perplexity']:.1f}", _int(r["steps"]), f"{r['train_s'] / 60:.1f}",
             _int(r["tokens_per_sec"])) for r in data["rows"]]
    return _table(("model", "params", "valid bits/byte", "valid ppl", "valid word ppl", "steps",
                   "training min", "tokens/s"),
                  ("---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"), rows)


# Table name -> (result file, renderer).
TABLES = {
    "bench_commits": ("bench/results/bench_commits.json", _commits),
    "bench_commits_losscheck": ("bench/results/bench_commits_losscheck.json",
                                _commits_losscheck),
    "bench_train_xla": ("bench/results/bench_train_xla.json", _train_xla),
    "bench_families": ("bench/results/bench_families.json", _families_speed),
    "bench_threads": ("bench/results/bench_threads.json", _threads),
    "bench_generation": ("bench/results/bench_generation.json", _generation),
    "bench_span": ("bench/results/bench_span.json", _span),
    "profile_step": ("bench/results/profile_step.json", _profile),
    "cost_sweep": ("bench/results/cost_sweep.json", _sweep),
    "sweep_rows_check": ("bench/results/sweep_rows_check.json", _sweep),
    "par_claim_12": ("bench/results/par_claim_12.json", _claim),
    "par_claim_16": ("bench/results/par_claim_16.json", _claim),
    "compare_families": ("bench/results/compare_families.json", _compare_families),
}


def render(name, page, root=ROOT):
    """The content of block `name` on `page` (a path under `root`), without markers."""
    if name not in TABLES:
        raise BenchTablesError(f"{page}: unknown table {name!r} (tools/bench_tables.py knows "
                               f"{', '.join(sorted(TABLES))})")
    result, renderer = TABLES[name]
    data = json.loads((root / result).read_text(encoding="utf-8"))
    link = pathlib.PurePosixPath(os.path.relpath(root / result, (root / page).parent))
    return (f"<!-- Generated by `python -m tools.bench_tables --write` from {result}; "
            "edit the JSON's producer, not this table. -->\n\n"
            f"{renderer(data)}\n\n"
            f"Data: [{result}]({link}), written by `{module_command(data['command'])}`.\n\n")


def update_page(text, page, root=ROOT):
    """(new text, names of the tables found) with every block of `text` regenerated."""
    out, names, pos = [], [], 0
    for match in BEGIN.finditer(text):
        if match.start() < pos:
            raise BenchTablesError(f"{page}: a bench_tables block starts inside another")
        end = text.find(END, match.end())
        nested = BEGIN.search(text, match.end())
        if end < 0 or (nested and nested.start() < end):
            raise BenchTablesError(f"{page}: the block {match.group(1)!r} has no {END}")
        names.append(match.group(1))
        out += [text[pos:match.end()], render(match.group(1), page, root)]
        pos = end
    if text.count(END) != len(names):
        raise BenchTablesError(f"{page}: {END} without a begin marker")
    out.append(text[pos:])
    return "".join(out), names


def pages(root=ROOT):
    """The pages that may hold tables, as paths relative to `root`."""
    found = set()
    for pattern in PAGE_GLOBS:
        found.update(p.relative_to(root) for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def main(argv=None, root=ROOT):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 with a diff if a block is stale")
    parser.add_argument("--root", default=str(root), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = pathlib.Path(args.root)
    try:
        if not (args.write or args.check):
            for name in TABLES:
                print(f"## {name}\n\n{render(name, 'bench/README.md', root)}")
            return 0
        stale, used = [], set()
        for page in pages(root):
            path = root / page
            text = path.read_text(encoding="utf-8")
            new, names = update_page(text, page, root)
            used.update(names)
            if new == text:
                continue
            if args.check:
                sys.stderr.writelines(difflib.unified_diff(
                    text.splitlines(True), new.splitlines(True), str(page), "generated"))
                stale.append(str(page))
            else:
                tmp = path.with_name(path.name + ".bench_tables.tmp")
                tmp.write_text(new, encoding="utf-8")
                tmp.replace(path)
                print(f"updated the tables of {page}")
        unused = sorted(set(TABLES) - used)
        if unused:
            print(f"error: no page shows the table(s) {', '.join(unused)}: add a block "
                  "<!-- bench_tables:begin NAME --> ... <!-- bench_tables:end --> to a page",
                  file=sys.stderr)
            return 1
        if stale:
            print(f"\nstale benchmark tables in {', '.join(stale)}: run "
                  "python -m tools.bench_tables --write", file=sys.stderr)
            return 1
        return 0
    except BenchTablesError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
