"""Every script of bench/, experiments/ and tools/ imports as a module of its package, answers
--help through argparse, and documents the `python -m` command it is run with."""

import importlib
import json
import shlex

import pytest

ENTRY_POINTS = [
    "bench.bench_adaptive_softmax", "bench.bench_batch_split", "bench.bench_batched_generation",
    "bench.bench_data",
    "bench.bench_families", "bench.bench_generation", "bench.bench_lstm",
    "bench.bench_optimal_cuts",
    "bench.bench_span", "bench.bench_span_reference", "bench.bench_threads",
    "bench.bench_train", "bench.profile_step",
    "experiments.bench_commits", "experiments.bench_commits_worker",
    "experiments.baselines", "experiments.compare_families", "experiments.cost_sweep",
    "experiments.attention_cost", "experiments.frontier", "experiments.jargon_text",
    "experiments.screen", "experiments.settle",
    "experiments.span_fidelity", "experiments.speedrun",
    "tools.bench_tables", "tools.collect_run", "tools.flags_doc", "tools.freeze_replay",
    "tools.function_lengths",
    "tools.import_graph", "tools.pipeline_seeds", "tools.results_evidence",
    "tools.spm_from_vocab", "tools.wall_time",
]


def test_every_script_is_listed(project_root):
    found = {f"{path.parent.name}.{path.stem}"
             for folder in ("bench", "experiments", "tools")
             for path in (project_root / folder).glob("*.py")
             if "__main__" in path.read_text(encoding="utf-8")}
    assert found == set(ENTRY_POINTS)


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_and_documented_command(module, capsys):
    mod = importlib.import_module(module)
    assert f"python -m {module}" in mod.__doc__
    with pytest.raises(SystemExit) as exit_:
        mod.main(["--help"])
    assert exit_.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out


def recorded_commands(project_root):
    return {path.name: json.loads(path.read_text(encoding="utf-8"))["command"]
            for path in sorted((project_root / "bench" / "results").glob("*.json"))}


def test_recorded_results_name_commands_that_still_parse(project_root):
    """The command in each bench/results/*.json reproduces it: a module run from the root
    whose parser takes the recorded flags as they are."""
    commands = recorded_commands(project_root)
    assert len(commands) >= 10
    for name, command in commands.items():
        python, dash_m, module, *args = shlex.split(command)
        assert (python, dash_m) == ("python", "-m") and module in ENTRY_POINTS, (name, command)
        importlib.import_module(module).parse_args(args)
