"""experiments/speedrun.py: its runs are base_model.sh commands that differ from the
reference screen by their lever only; `report` turns a finished run into its artefacts and
its rows (wall time of the whole command, tokens/s, best valid, test)."""

import json
import shutil

from absl import flags
import pytest

from experiments import speedrun
from tests.helpers.quick_look import base_model_args


def _config(project_root, tmp_path, data_dir, command, *extra):
    """The TrainConfig of base_model.sh `command` (its argv) with `extra` flags after it."""
    import train as train_cli

    args = base_model_args(project_root, tmp_path, *command[1:], *extra)
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", *args, f"--data_dir={data_dir}", "--cutoffs=none"])
    return train_cli.config_from_flags(fv)[0]


def test_each_screen_changes_its_lever_only(project_root, tmp_path, word_data):
    base = _config(project_root, tmp_path, word_data, speedrun.RUNS_TABLE["s3_base"].command())
    assert (base.model.architecture, base.epochs, base.search.arch_warmup_steps) == (
        "aaafaf", 3, 0)
    assert (base.optimizer, base.learning_rate, base.model.dropout) == ("adam", 1e-3, 0.1)
    drop0 = _config(project_root, tmp_path, word_data,
                    speedrun.RUNS_TABLE["s3_drop0"].command())
    assert drop0.model.dropout == 0.0
    assert drop0.replace(model=drop0.model.replace(dropout=0.1),
                         model_dir=base.model_dir) == base
    lr = _config(project_root, tmp_path, word_data, speedrun.RUNS_TABLE["s3_lr2e3"].command())
    assert lr.replace(learning_rate=1e-3, model_dir=base.model_dir) == base


def test_record_runs_use_the_recipe_and_their_architecture(project_root, tmp_path, word_data):
    run = speedrun.RUNS_TABLE["record_muon_afafaf_seed2"]
    config = _config(project_root, tmp_path, word_data, speedrun._record_command(run))
    assert (config.recipe, config.model.architecture, config.model.seed) == (
        "muon", "afafaf", 2)
    assert (config.precision, config.intra_op_threads, config.inter_op_threads) == (
        "mixed_bfloat16", 1, 2)
    # A second take runs the same command as the first.
    take2 = speedrun.RUNS_TABLE["record_muon_aaafaf_seed0_take2"]
    first = speedrun.RUNS_TABLE["record_muon_aaafaf_seed0"]
    assert (speedrun._record_command(take2)[2:] == speedrun._record_command(first)[2:]
            and take2.record)


def _staged(trained_run, tmp_path, monkeypatch, name):
    """(runs, results): speedrun's directories under tmp_path, a trained tiny run as run
    `name` in runs."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    monkeypatch.setattr(speedrun, "RUNS", runs)
    monkeypatch.setattr(speedrun, "RESULTS", results)
    shutil.copytree(trained_run("transformer_xl"), runs / name)
    return runs, results


def test_report_collects_a_finished_run(trained_run, tmp_path, monkeypatch):
    name = "record_muon_aaafaf_seed1"
    runs, results = _staged(trained_run, tmp_path, monkeypatch, name)
    (runs / f"{name}.console.log").write_text(
        "I1129 02:00:00.000000 1 train.py:1] run: full config in x\n"
        "I1129 02:00:30.000000 1 run_loop.py:1] step 4 valid: nll 1 ppl 2 word ppl 3 bpb 4\n")
    speedrun._add_session(name, ["./base_model.sh"], 90.0, 0)
    speedrun._add_session(name, ["./base_model.sh"], 30.0, 0)
    rows = speedrun.report()
    metrics = json.loads((runs / name / "metrics.json").read_text())
    assert len(rows) == 1
    row = rows[0]
    assert (row["wall_min"], row["log_minutes"]) == (2.0, 0.5)  # the sessions, summed
    assert row["test_ppl"] == round(metrics["best"]["test"]["perplexity"], 2)
    assert row["best_valid_ppl"] == round(metrics["best"]["valid"]["perplexity"], 2)
    for artefact in ("config.json", "metrics.json", "console.log", "wall_time.json",
                     "sessions.json"):
        assert (results / name / artefact).is_file(), artefact
    summary = json.loads((results / "summary.json").read_text())
    assert summary["cores"] == 2 and summary["runs"] == [
        {"name": name, "architecture": row["architecture"], "seed": row["seed"],
         "wall_min": 2.0, "test_ppl": row["test_ppl"]}]
    assert summary["command"].startswith("./base_model.sh --recipe=muon ")
    # Collecting one run by name keeps the other runs' rows, in the table's order.
    earlier = {"name": "s3_base", "record": False}
    (results / "runs.json").write_text(json.dumps({"runs": [earlier, row]}))
    assert speedrun.report([name]) == [earlier, row]
    assert json.loads((results / "runs.json").read_text())["runs"] == [earlier, row]


def test_pipeline_run_is_the_one_command_with_the_record_recipe(project_root, tmp_path,
                                                                 word_data):
    run = speedrun.RUNS_TABLE["pipeline_muon_seed0"]
    command = run.command()
    assert "--pipeline" in command and not any(a.startswith("--architecture") for a in command)
    # The test's small data: a search window that fits its shorter search.
    config = _config(project_root, tmp_path, word_data, command, "--stop_window=100")
    # The search stage with the recipe's weights optimisation; the derived network then
    # trains the recipe's length (no --retrain_epochs).
    assert (config.recipe, config.optimizer, config.epochs) == ("muon", "muon", 2)
    assert config.search.then_retrain and config.search.retrain_epochs == 0
    assert (config.precision, config.intra_op_threads) == ("mixed_bfloat16", 1)


def test_report_takes_a_pipeline_row_from_its_derived_network(trained_run, tmp_path,
                                                               monkeypatch):
    name = "pipeline_muon_seed0"
    runs, results = _staged(trained_run, tmp_path, monkeypatch, name)
    (runs / f"{name}.console.log").write_text(
        "I1129 02:00:00.000000 1 train.py:1] run: full config in x\n")
    assert speedrun.report([name]) == []  # the derived network is not trained yet
    shutil.copytree(trained_run("transformer_xl"), runs / f"{name}_retrain")
    metrics = json.loads((runs / f"{name}_retrain" / "metrics.json").read_text())
    metrics["best"]["test"]["perplexity"] = 41.5
    (runs / f"{name}_retrain" / "metrics.json").write_text(json.dumps(metrics))
    speedrun._add_session(name, ["./base_model.sh", "--pipeline"], 600.0, 0)
    [row] = speedrun.report([name])
    assert (row["pipeline"], row["record"], row["test_ppl"], row["wall_min"]) == (
        True, False, 41.5, 10.0)
    assert (results / name / "console.log").is_file()
    assert (results / f"{name}_retrain" / "metrics.json").is_file()
    assert json.loads((results / "summary.json").read_text())["runs"] == []


@pytest.mark.parametrize("argv", [["run", "no_such_run"], []])
def test_bad_arguments_are_usage_errors(argv):
    with pytest.raises(SystemExit) as stop:
        speedrun.main(argv)
    assert stop.value.code == 2
