"""A training command run again after it finished is answered from its files: nothing
trained, evaluated or rewritten; a changed setting resumes as before."""

import json

from absl import flags
import pytest

import train as train_cli
from training import plugins
from training.setup.finished import finished_command


def _args(data_dir, model_dir, steps):
    return [f"--data_dir={data_dir}", f"--model_dir={model_dir}", f"--logdir={model_dir}/logs",
            "--preset=tiny", "--num_blocks=2", f"--max_steps={steps}", "--eval_interval=2",
            "--log_interval=2", "--sample_tokens=0", "--eval_max_records=2"]


def _config(args):
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", *args])
    return train_cli.config_from_flags(fv)[0]


def _files(root):
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.slow
def test_a_finished_command_answers_from_its_files(tiny_data, tmp_path, run_python):
    from training.run.loop import train

    run = tmp_path / "run"
    args = _args(tiny_data, run, 4)
    config = _config(args)
    assert finished_command(config) is None  # nothing there yet
    results = train(config)
    before = _files(tmp_path)
    assert finished_command(config) == (results, str(run))
    assert finished_command(config, overwrite=True) is None

    done = run_python(["train.py", *args])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(x.startswith(f"best valid (step {results['best']['step']}): perplexity "
                            f"{results['best']['valid']['perplexity']:.2f}") for x in lines)
    assert any(x.startswith("this command had finished: ") for x in lines)
    assert _files(tmp_path) == before  # nothing written, not even a log line

    # A longer run of the same command is unfinished: it resumes (and trains), and
    # records its command line for the model card.
    longer = _args(tiny_data, run, 6)
    assert finished_command(_config(longer)) is None
    assert not (run / "command.json").exists()  # the library call had no command
    done = run_python(["train.py", *longer])
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads((run / "command.json").read_text(encoding="utf-8"))
    assert recorded["argv"][1:] == longer and recorded["argv"][0].endswith("train.py")
    # A damaged metrics.json: training decides what to do, not the shortcut.
    (run / "metrics.json").write_text("{", encoding="utf-8")
    assert finished_command(_config(longer)) is None


def test_a_later_stage_must_have_finished_too(tmp_path, tiny_data):
    """A search with --then_retrain is finished only once its retrain is."""
    search = tmp_path / "search"
    config = _config([f"--data_dir={tiny_data}", f"--model_dir={search}", "--preset=tiny",
                      "--num_blocks=2", "--max_steps=4", "--then_retrain"])
    assert plugins.later_runs(config) == [str(search) + "_retrain"]
    assert plugins.later_runs(config.replace(model=config.model.replace(
        architecture="af"))) == []
    search.mkdir()
    config.save()
    (search / "metrics.json").write_text(json.dumps({"step": 4}), encoding="utf-8")
    assert finished_command(config) is None  # the retrain has not run
    retrain = tmp_path / "search_retrain"
    retrain.mkdir()
    config.replace(model_dir=str(retrain), max_steps=2).save()
    (retrain / "metrics.json").write_text(json.dumps({"step": 2}), encoding="utf-8")
    results, final = finished_command(config)
    assert results == {"step": 4} and final == str(retrain)


def test_the_whole_commands_later_steps_are_the_retrains(tmp_path, tiny_data):
    """The ETA of a search with --then_retrain counts its retrain's steps too (none for a
    run without a later stage)."""
    from pardata.meta import load_meta
    from training.setup.plan import total_steps

    records = load_meta(str(tiny_data))["splits"]["train"]["records"]
    search = _config([f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 's'}",
                      "--preset=tiny", "--num_blocks=2", "--max_steps=4", "--then_retrain",
                      "--retrain_epochs=3"])
    assert plugins.later_steps(search, records) == 3 * records
    assert total_steps(search, records) == 4
    assert plugins.later_steps(search.replace(model=search.model.replace(
        architecture="af")), records) == 0


def test_a_finished_search_names_its_retrain_from_its_files(tmp_path, tiny_data):
    """The follow-up of a search that finished in an earlier process comes from its
    config and metrics.json (no model): what the plug-in instance retrains."""
    from training.plugins.par_search.plugin import ParSearch
    from training.plugins.par_search.retrain import retrain_config

    config = _config([f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 's'}",
                      "--preset=tiny", "--num_blocks=2", "--max_steps=4", "--then_retrain"])
    decided = {"architecture": "af", "derivation": {"decided_step": 3}}
    follow = ParSearch.finished_follow_up(config, decided)
    assert follow == retrain_config(config, "af") and follow.model.architecture == "af"
    undecided = {"architecture": "fa", "derivation": {"decided_step": None}}
    assert ParSearch.finished_follow_up(config, undecided) is None
    stable = config.replace(search=config.search.replace(stop_rule="stable"))
    assert ParSearch.finished_follow_up(stable, undecided).model.architecture == "fa"
    alone = config.replace(search=config.search.replace(then_retrain=False))
    assert ParSearch.finished_follow_up(alone, decided) is None
