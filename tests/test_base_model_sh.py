"""base_model.sh: the 20-epoch search and the quick look have their own run directories,
and the quick look's schedules are planned for its own 3,000 steps."""

from absl import flags
import pytest

from tests.helpers.quick_look import (
    TIME_PAGES,
    last_flag,
    quick_look_minutes,
    readme_quick_look,
)
from tests.helpers.quick_look import (
    base_model_args as _train_args,
)


def _config(args, data_dir):
    import train as train_cli

    fv = train_cli.define_flags(flags.FlagValues())
    # The last flag wins, as in absl; the tiny build needs no adaptive-softmax cutoffs.
    fv(["train.py", *args, f"--data_dir={data_dir}", "--cutoffs=none"])
    return train_cli.config_from_flags(fv)[0]


@pytest.mark.parametrize("quick", [False, True])
def test_quick_look_has_its_own_run_and_plan(project_root, tmp_path, word_data, quick):
    import data_utils
    from training.setup.config import capped_warmup, total_steps

    args = _train_args(project_root, tmp_path, *(["--quick"] if quick else []))
    assert "--quick" not in args
    config = _config(args, word_data)
    records = data_utils.load_meta(str(word_data))["splits"]["train"]["records"]
    if quick:
        assert config.model_dir == "runs/wt2_base_quick"
        assert config.max_steps == total_steps(config, records) == 3000
        assert (config.eval_interval, config.checkpoint_interval) == (500, 500)
        # The warm-ups fit the 3,000 planned steps without being capped.
        assert capped_warmup(config.warmup_steps, 3000, 0.1) == config.warmup_steps == 300
        arch_warmup = config.search.arch_warmup_steps
        assert capped_warmup(arch_warmup, 3000, 0.2) == arch_warmup
    else:
        assert config.model_dir == "runs/wt2_base_supernet"
        assert (config.epochs, config.max_steps) == (20, 0)
        assert (config.warmup_steps, config.search.arch_warmup_steps) == (1000, 2000)
        assert (config.eval_interval, config.checkpoint_interval) == (2500, 2500)
    # Everything else is the same recipe.
    assert (config.preset, config.optimizer, config.learning_rate, config.lr_schedule,
            config.min_lr, config.clip_norm, config.search.tau_start, config.search.tau_end) == (
        "wt2_base", "adam", 1e-3, "cosine", 1e-5, 0.25, 1.0, 0.1)


def test_user_flags_win(project_root, tmp_path, word_data):
    args = _train_args(project_root, tmp_path, "--quick", "--max_steps=100",
                       "--model_dir=runs/other")
    config = _config(args, word_data)
    assert (config.model_dir, config.max_steps) == ("runs/other", 100)


def test_readme_quick_look_is_base_model_quick(project_root, tmp_path):
    command, run_dir, steps = readme_quick_look(project_root)
    assert command == "./base_model.sh --quick"
    args = _train_args(project_root, tmp_path, "--quick")
    assert last_flag(args, "model_dir") == run_dir == "runs/wt2_base_quick"
    assert int(last_flag(args, "max_steps")) == steps == 3000


def test_quick_look_time_is_one_figure(project_root):
    import nbformat

    figures = {}
    for page in TIME_PAGES:
        if page.endswith(".ipynb"):
            notebook = nbformat.read(project_root / page, as_version=4)
            text = "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
        else:
            text = (project_root / page).read_text(encoding="utf-8")
        figures[page] = quick_look_minutes(text)
    assert all(figures.values()), f"a page gives no time for the quick look: {figures}"
    assert {f for found in figures.values() for f in found} == {"16"}, figures


def _run_base_model(project_root, cwd, *args, stub_dir=None, script="base_model.sh"):
    import os
    import subprocess

    stub = (stub_dir or cwd) / "python_stub"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    return subprocess.run(["bash", str(project_root / script), *args], cwd=cwd,
                          env=dict(os.environ, PYTHON=str(stub)), capture_output=True,
                          text=True, timeout=60)


def test_user_paths_mean_the_callers_directory(project_root, tmp_path):
    """Run from another directory, the user's relative paths resolve there (as
    create_tfrecords.sh's do), the defaults stay the repository's."""
    (tmp_path / "runs" / "search").mkdir(parents=True)
    done = _run_base_model(project_root, tmp_path, "--quick", "--data_dir=data/x",
                           "--model_dir", "runs/x", "--logdir=logs/x", "--export=m.keras",
                           "--architecture=runs/search", "--flagfile=/abs/f")
    assert done.returncode == 0, done.stderr
    args = done.stdout.splitlines()[1:]
    assert last_flag(args, "data_dir") == f"{tmp_path}/data/x"
    assert args[args.index("--model_dir") + 1] == f"{tmp_path}/runs/x"
    assert last_flag(args, "logdir") == f"{tmp_path}/logs/x"
    assert last_flag(args, "export") == f"{tmp_path}/m.keras"
    assert last_flag(args, "architecture") == f"{tmp_path}/runs/search"
    assert last_flag(args, "flagfile") == "/abs/f"
    # Letters are not a path; the script's own defaults are the repository's.
    done = _run_base_model(project_root, tmp_path, "--architecture=aaafaf")
    args = done.stdout.splitlines()[1:]
    assert last_flag(args, "architecture") == "aaafaf"
    assert "--data_dir=data/wikitext2" in args
    # From the repository itself nothing is rewritten (config.json stays as before).
    done = _run_base_model(project_root, project_root, "--data_dir=data/x", stub_dir=tmp_path)
    assert last_flag(done.stdout.splitlines()[1:], "data_dir") == "data/x"


@pytest.mark.parametrize("spelling", [["--architecture=afafaf"], ["--architecture", "afafaf"]])
def test_pipeline_with_an_architecture_is_one_clear_error(project_root, tmp_path, spelling):
    done = _run_base_model(project_root, tmp_path, "--pipeline", *spelling)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: --pipeline searches the architecture, then trains the one it finds: drop "
        "--architecture=afafaf to search, or train that architecture without --pipeline "
        "(./base_model.sh --architecture=afafaf --arch_warmup_steps=0 --model_dir=runs/NAME)"]


def test_a_pipeline_in_another_run_directory_exports_beside_it(project_root, tmp_path):
    """--model_dir=DIR exports to DIR.keras, not over the default pipeline's package;
    an --export the user gives wins; the default run exports where the README says."""
    for spelling in (["--model_dir=runs/mine/"], ["--model_dir", "runs/mine"]):
        done = _run_base_model(project_root, tmp_path, "--pipeline", *spelling)
        assert done.returncode == 0, done.stderr
        assert last_flag(done.stdout.splitlines()[1:], "export") == f"{tmp_path}/runs/mine.keras"
    done = _run_base_model(project_root, tmp_path, "--pipeline", "--model_dir=runs/mine",
                           "--export=elsewhere.keras")
    assert last_flag(done.stdout.splitlines()[1:], "export") == f"{tmp_path}/elsewhere.keras"
    done = _run_base_model(project_root, tmp_path, "--pipeline")
    assert last_flag(done.stdout.splitlines()[1:], "export") == "runs/wt2_base_pipeline.keras"


@pytest.mark.parametrize("written, flag", [
    ('"then_retrain": true, "retrain_epochs": 20', "--retrain_epochs=20"),
    ('"retrain_recipe": "", "retrain_epochs": 20', "--retrain_epochs=20"),
    ('"retrain_recipe": "muon", "retrain_epochs": 0', "--retrain_recipe=muon")])
def test_a_pipeline_resumes_with_the_retrain_recipe_it_started_with(project_root, tmp_path,
                                                                     written, flag):
    """A pipeline run directory started before the derived network's default recipe became
    muon (its config.json names no retrain recipe) keeps the seed recipe's 20 epochs and
    says so; one started since keeps muon; a new one takes muon."""
    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    (run / "config.json").write_text('{\n  "search": {\n    ' + written + "\n  }\n}\n")
    done = _run_base_model(project_root, tmp_path, "--pipeline", f"--model_dir={run}")
    args = done.stdout.splitlines()[1:]
    name, value = flag[2:].split("=")
    assert done.returncode == 0 and last_flag(args, name) == value, done.stderr
    old = flag == "--retrain_epochs=20"
    assert (last_flag(args, "retrain_recipe"), "note:" in done.stderr) == (
        (None, True) if old else ("muon", False)), done.stderr
    assert done.stderr.startswith(f"note: {run} was started before --pipeline trained") == old
    fresh = _run_base_model(project_root, tmp_path, "--pipeline",
                            f"--model_dir={tmp_path / 'runs' / 'new'}")
    fresh_args = fresh.stdout.splitlines()[1:]
    assert (last_flag(fresh_args, "retrain_recipe"), last_flag(fresh_args, "retrain_epochs"),
            fresh.stderr) == ("muon", None, "")


def test_finetune_sh_resolves_the_users_paths_as_base_model_sh_does(project_root, tmp_path):
    """One from_caller (tools/caller_paths.sh) for both scripts: spaced and = forms,
    absolute paths and other flags unchanged."""
    done = _run_base_model(project_root, tmp_path, "--from", "runs/m.keras", "--text=mine.txt",
                           "--output=/abs/out.keras", "--max_steps=5", script="finetune.sh")
    assert done.returncode == 0, done.stderr
    args = done.stdout.splitlines()[1:]
    assert args == ["--from", f"{tmp_path}/runs/m.keras", f"--text={tmp_path}/mine.txt",
                    "--output=/abs/out.keras", "--max_steps=5"]
