"""--recipe: a named set of flag values (training/setup/recipes.py), through train.py's flags,
base_model.sh, config.json, resume and the PAR pipeline's second stage."""

import os

from absl import flags
import pytest

from tests.helpers.quick_look import base_model_args
import train as train_cli
from training.setup import recipes
from training.setup.config import ConfigError, TrainConfig


@pytest.fixture
def parse(tiny_data, tmp_path):
    """parse(*flags) -> TrainConfig on the tiny build, the tiny preset."""

    def run(*args):
        fv = train_cli.define_flags(flags.FlagValues())
        fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'run'}",
            "--preset=tiny", *args])
        return train_cli.config_from_flags(fv)[0]

    return run


def _model_field(config, name):
    return getattr(config.model, name)


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_a_recipe_sets_every_value_it_names(parse, name):
    recipe = recipes.RECIPES[name]
    config = parse(f"--recipe={name}")
    assert config.recipe == name
    for field, value in recipe.values.items():
        got = getattr(config, field) if hasattr(config, field) else _model_field(config, field)
        assert got == value, field
    # Without the recipe the same flags give the defaults: the recipe did the setting.
    plain = parse()
    assert plain.recipe == ""
    assert any((getattr(plain, f) if hasattr(plain, f) else _model_field(plain, f)) != v
               for f, v in recipe.values.items())


def test_the_fast_recipe_differs_from_the_seed_one():
    assert recipes.RECIPES["fast"].values != recipes.RECIPES["seed"].values


def test_length_flags_win_and_settings_may_be_repeated(parse):
    fast = recipes.RECIPES["fast"]
    config = parse("--recipe=fast", "--epochs=3", "--warmup_steps=7",
                   f"--learning_rate={fast.settings['learning_rate']}",
                   f"--optimizer={fast.settings['optimizer']}")
    assert (config.epochs, config.warmup_steps) == (3, 7)
    assert config.learning_rate == fast.settings["learning_rate"]
    # Flags the recipe does not name keep their own meaning.
    assert parse("--recipe=fast", "--eval_interval=7").eval_interval == 7


@pytest.mark.parametrize("flag", ["--optimizer=adamw", "--learning_rate=0.5",
                                  "--lr_schedule=linear", "--dropout=0.3"])
def test_a_contradicting_flag_is_one_clear_error(parse, flag):
    name, value = flag[2:].split("=")
    assert name in recipes.RECIPES["fast"].settings
    with pytest.raises(ConfigError) as error:
        parse("--recipe=fast", flag)
    message = str(error.value)
    assert message.startswith(f"--{name}={value} contradicts --recipe=fast")
    assert f"drop --{name}" in message and "\n" not in message


def test_unknown_recipe_is_a_flag_error(tiny_data, tmp_path):
    fv = train_cli.define_flags(flags.FlagValues())
    with pytest.raises(flags.IllegalFlagValueError, match="recipe"):
        fv(["train.py", "--recipe=turbo"])
    with pytest.raises(ValueError, match="unknown recipe 'turbo'"):
        recipes.get_recipe("turbo")


def test_a_recipe_rejects_misplaced_length_values():
    with pytest.raises(ValueError, match="not run-length fields"):
        recipes.Recipe("x", "", settings={}, length={"optimizer": "adam"})
    with pytest.raises(ValueError, match="both settings and length"):
        recipes.Recipe("x", "", settings={"epochs": 1}, length={"epochs": 2})


def test_config_json_keeps_the_recipe_and_resume_checks_it(parse, tmp_path):
    from training.setup.checks import check_resume

    config = parse("--recipe=fast")
    os.makedirs(config.model_dir)
    config.save()
    loaded = TrainConfig.load(config.model_dir)
    assert loaded == config and loaded.recipe == "fast"
    assert check_resume(parse("--recipe=fast"))  # the same command resumes
    with pytest.raises(ConfigError, match="different config"):
        check_resume(parse("--recipe=seed"))


def test_a_config_written_before_recipes_loads_without_one(parse):
    values = parse().to_dict()
    del values["recipe"]
    assert TrainConfig.from_dict(values).recipe == ""


def test_pipeline_retrain_takes_the_recipe_length(parse):
    from training.plugins.par_search.retrain import retrain_config

    fast = recipes.RECIPES["fast"]
    search = parse("--recipe=fast", "--epochs=2", "--warmup_steps=5", "--then_retrain",
                   "--freeze_threshold=0", "--stop_rule=stable", "--stop_window=10")
    retrain = retrain_config(search, "afaf")
    assert (retrain.epochs, retrain.max_steps) == (fast.length["epochs"], 0)
    assert retrain.warmup_steps == fast.length["warmup_steps"]
    assert (retrain.learning_rate, retrain.recipe) == (fast.settings["learning_rate"], "fast")
    # An explicit --retrain_epochs still wins; without a recipe the search's own length.
    explicit = parse("--recipe=fast", "--epochs=2", "--then_retrain", "--freeze_threshold=0",
                     "--stop_rule=stable", "--stop_window=10", "--retrain_epochs=4")
    assert retrain_config(explicit, "afaf").epochs == 4
    plain = parse("--epochs=2", "--then_retrain", "--freeze_threshold=0", "--stop_rule=stable",
                  "--stop_window=10")
    assert retrain_config(plain, "afaf").epochs == 2


STABLE = ("--then_retrain", "--freeze_threshold=0", "--stop_rule=stable", "--stop_window=10")


def test_pipeline_retrain_takes_its_own_recipe(parse):
    from training.plugins.par_search.retrain import retrain_config

    muon = recipes.RECIPES["muon"]
    search = parse("--epochs=2", "--learning_rate=1e-3", "--dropout=0.2", *STABLE,
                   "--retrain_recipe=muon")
    assert (search.optimizer, search.model.dropout, search.recipe) == ("adam", 0.2, "")
    retrain = retrain_config(search, "afaf")
    # The derived network trains as a run started with --recipe=muon would, every value
    # the recipe names (settings and length), model fields included.
    alone = parse("--recipe=muon", "--architecture=afaf")
    for name in muon.values:
        got, want = ((getattr(retrain, name), getattr(alone, name)) if hasattr(alone, name)
                     else (getattr(retrain.model, name), getattr(alone.model, name)))
        assert got == want == muon.values[name], name
    assert (retrain.recipe, retrain.max_steps, retrain.search.retrain_recipe) == ("muon", 0, "")
    # The search's other flags carry over; an explicit --retrain_epochs still wins.
    assert retrain.model.d_model == search.model.d_model
    shorter = parse("--epochs=2", *STABLE, "--retrain_recipe=muon", "--retrain_epochs=3")
    assert (retrain_config(shorter, "afaf").epochs,
            retrain_config(shorter, "afaf").optimizer) == (3, "muon")


def test_a_retrain_started_without_a_recipe_is_finished_with_an_empty_one(parse, tmp_path):
    from training.plugins.par_search.config import check_started_retrain
    from training.plugins.par_search.retrain import retrain_config

    follow = retrain_config(parse("--epochs=2", *STABLE, "--retrain_recipe=muon"), "afaf")
    check_started_retrain(follow.model_dir, "muon")  # nothing started yet
    os.makedirs(follow.model_dir)
    follow.replace(recipe="").save()  # a second stage started with the search's own flags
    with pytest.raises(ConfigError, match=r"^.+_retrain holds the derived network's training "
                       r"started with the search's own flags, but this command trains it "
                       r"with --recipe=muon: give --retrain_recipe= \(empty: the search's own "
                       r"flags\) to finish it, or start the pipeline in another --model_dir$"):
        check_started_retrain(follow.model_dir, "muon")
    check_started_retrain(follow.model_dir, "")


def test_the_retrain_command_names_the_retrain_recipe(parse):
    from training.plugins.par_search.retrain import retrain_command

    command = retrain_command(parse("--epochs=2", "--learning_rate=3e-3", "--log_interval=7",
                                    *STABLE, "--retrain_recipe=muon"))
    assert "--recipe=muon" in command and "--log_interval=7" in command
    assert "--learning_rate" not in command and "--epochs" not in command


@pytest.mark.parametrize("args, message", [
    (("--retrain_recipe=nope", *STABLE), "--retrain_recipe='nope': is not a recipe: choose "
                                         "one of fast, finetune, muon, seed"),
    (("--retrain_recipe=muon",), "--retrain_recipe='muon': sets the recipe of the "
                                 "--then_retrain stage: add --then_retrain (or drop it)"),
])
def test_a_bad_retrain_recipe_is_refused_naming_the_flag(parse, args, message):
    with pytest.raises((ConfigError, ValueError)) as error:
        parse(*args)
    assert message in str(error.value)


def _train_config(args, data_dir):
    fv = train_cli.define_flags(flags.FlagValues())
    # The tiny build is too short for the pipeline's 1,000-step stability window.
    fv(["train.py", *args, f"--data_dir={data_dir}", "--cutoffs=none", "--stop_window=10"])
    return train_cli.config_from_flags(fv)[0]


@pytest.mark.parametrize("mode", [[], ["--pipeline"]])
def test_base_model_sh_seed_recipe_is_its_default(project_root, tmp_path, word_data, mode):
    # The pipeline in a run directory of its own (one started in runs/ before the derived
    # network's recipe became muon would keep its old default).
    mode = [*mode, f"--model_dir={tmp_path / 'pipeline'}"] if mode else mode
    plain = _train_config(base_model_args(project_root, tmp_path, *mode), word_data)
    seeded = _train_config(base_model_args(project_root, tmp_path, *mode, "--recipe=seed"),
                           word_data)
    assert seeded.recipe == "seed" and plain.recipe == ""
    if mode:  # the search's recipe either way; the derived network's: muon, or the seed's
        from training.plugins.par_search.retrain import retrain_config

        assert (plain.search.retrain_recipe, plain.search.retrain_epochs) == ("muon", 0)
        assert (seeded.search.retrain_recipe, seeded.search.retrain_epochs) == ("", 0)
        assert (retrain_config(plain, "aaafaf").recipe,
                retrain_config(seeded, "aaafaf").epochs) == ("muon", 20)
        seeded = seeded.replace(search=seeded.search.replace(retrain_recipe="muon"))
    assert seeded.replace(recipe="") == plain


def test_base_model_sh_pipeline_with_the_seed_retrain_recipe_is_the_old_default(
        project_root, tmp_path, word_data):
    """--retrain_recipe=seed: the derived network trains as base_model.sh's pipeline trained
    it before its default became muon (the seed recipe's flags and --retrain_epochs=20)."""
    from training.plugins.par_search.retrain import retrain_config

    run = f"--model_dir={tmp_path / 'pipeline'}"
    seed = _train_config(base_model_args(project_root, tmp_path, "--pipeline", run,
                                         "--retrain_recipe=seed"), word_data)
    old = _train_config(base_model_args(project_root, tmp_path, "--pipeline", run,
                                        "--retrain_recipe=", "--retrain_epochs=20"), word_data)
    assert old.search.retrain_recipe == "" and old.recipe == ""
    assert retrain_config(seed, "aaafaf").replace(recipe="") == retrain_config(old, "aaafaf")
    assert retrain_config(seed, "aaafaf").epochs == 20


def test_base_model_sh_takes_a_recipe(project_root, tmp_path, word_data):
    fast = recipes.RECIPES["fast"]
    args = base_model_args(project_root, tmp_path, "--pipeline", "--recipe=fast")
    config = _train_config(args, word_data)
    assert config.learning_rate == fast.settings["learning_rate"]
    assert config.search.retrain_epochs == 0 and config.epochs == 2  # the search's own
    from training.plugins.par_search.retrain import retrain_config

    assert retrain_config(config, "aaafaf").epochs == fast.length["epochs"]


def test_base_model_sh_pipeline_takes_a_retrain_recipe(project_root, tmp_path, word_data):
    from training.plugins.par_search.retrain import retrain_config

    config = _train_config(base_model_args(project_root, tmp_path, "--pipeline",
                                           f"--model_dir={tmp_path / 'pipeline'}",
                                           "--retrain_recipe=muon"), word_data)
    # The search keeps the seed recipe; base_model.sh leaves the length to the recipe.
    assert (config.optimizer, config.learning_rate, config.epochs) == ("adam", 1e-3, 2)
    assert config.search.retrain_epochs == 0
    retrain = retrain_config(config, "aaafaf")
    assert (retrain.optimizer, retrain.epochs) == ("muon", recipes.RECIPES["muon"].length["epochs"])


@pytest.mark.parametrize("flag", ["--recipe", "--retrain_recipe"])
def test_base_model_sh_refuses_a_spaced_recipe(project_root, flag):
    import subprocess

    done = subprocess.run(["bash", str(project_root / "base_model.sh"), flag, "fast"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"error: give the recipe as {flag}=NAME (one word), "
                                   f"e.g. {flag}=muon")


def test_the_muon_recipe_sets_muons_options(parse):
    config = parse("--recipe=muon")
    assert (config.optimizer, config.muon_rms_rate, config.muon_ns_bfloat16,
            config.weight_decay) == ("muon", 0.15, 1.0, 0.05)
    assert config.model.dropout == 0.1 and config.epochs == 10
    with pytest.raises(ConfigError, match="--muon_rms_rate=0.2 contradicts --recipe=muon"):
        parse("--recipe=muon", "--muon_rms_rate=0.2")
    with pytest.raises(ConfigError, match="--optimizer=adam contradicts --recipe=muon"):
        parse("--recipe=muon", "--optimizer=adam")
    assert parse("--recipe=muon", "--muon_ns_bfloat16=1").muon_ns_bfloat16 == 1.0


@pytest.mark.slow
def test_the_muon_recipe_trains_the_tiny_preset_and_resumes_with_it(tiny_data, tmp_path,
                                                                       run_python):
    import json
    import math

    from training.run.loop import read_training_log

    model_dir = tmp_path / "run"
    common = ["train.py", "--preset=tiny", "--recipe=muon", f"--data_dir={tiny_data}",
              f"--model_dir={model_dir}", f"--logdir={tmp_path / 'logs'}", "--log_interval=5",
              "--eval_interval=0", "--eval_max_records=4", "--sample_tokens=0",
              "--warmup_steps=5", "--checkpoint_interval=10"]
    ran = run_python([*common, "--max_steps=10"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    saved = json.loads((model_dir / "config.json").read_text())
    assert (saved["recipe"], saved["optimizer"], saved["muon_rms_rate"],
            saved["muon_ns_bfloat16"], saved["weight_decay"]) == ("muon", "muon", 0.15, 1.0, 0.05)
    ran = run_python([*common, "--max_steps=20"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "resum" in ran.stderr.lower()
    assert json.loads((model_dir / "config.json").read_text())["recipe"] == "muon"
    rows = [row for row in read_training_log(model_dir / "training_log.log") if "loss" in row]
    assert [row["step"] for row in rows] == [5, 10, 15, 20]
    assert all(math.isfinite(row["loss"]) for row in rows)
    assert rows[-1]["loss"] < rows[0]["loss"]
