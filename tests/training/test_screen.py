"""Settling finished searches by short retrains (training/plugins/par_search/screen.py,
python -m experiments.screen).

Each candidate trains the first steps of its own retrain's schedule; the pick is the
lowest valid NLL the screens' own metrics.json hold; the pick's screen resumed to the
retrain's length is the retrain from scratch, loss for loss; bad input is one line and
trains nothing.
"""

import json
import math

import pytest

from experiments import screen as command
from tests.helpers.cli import assert_one_error_line
from tests.helpers.runs import make_run
from training.plugins.par_search import screen
from training.plugins.par_search.derive import write_derivation

SCREEN_STEPS = 4  # of the searches' own 9 (make_run's --max_steps)


def _search(root, name, data, derived, seeds):
    """A finished search whose recipe logs every step and warms up for 2 of its 9."""
    make_run(root / name, data, derived=derived, seeds=seeds)
    path = root / name / "config.json"
    values = json.loads(path.read_text())
    values.update(log_interval=1, warmup_steps=2, sample_tokens=0)
    path.write_text(json.dumps(values))
    write_derivation(root / name, {"architecture": derived, "untrained": False})
    return str(root / name)


@pytest.fixture(scope="module")
def searches(tiny_data, tmp_path_factory):
    """Two finished tiny searches that derived afai and aafi."""
    root = tmp_path_factory.mktemp("screen_searches")
    return (_search(root, "s0", tiny_data, "afai", (1, 2)),
            _search(root, "s1", tiny_data, "aafi", (3, 4)))


def _log(model_dir):
    from training.run.loop import read_training_log

    return {row["step"]: row for row in read_training_log(f"{model_dir}/training_log.log")}


def _losses(model_dir):
    return {step: row["loss"] for step, row in _log(model_dir).items()}


@pytest.mark.slow
def test_the_pick_is_the_lowest_screen_and_its_finish_is_the_retrain(searches, tmp_path,
                                                                      capsys):
    from training.plugins.par_search.retrain import retrain_config
    from training.run.loop import train
    from training.setup.config import TrainConfig

    out = tmp_path / "screen"
    argv = [f"--runs={searches[0]},{searches[1]}", "--extra=iiii",
            f"--screen_steps={SCREEN_STEPS}", f"--out_dir={out}"]
    assert command.main(argv) == 0, capsys.readouterr().err
    result = json.loads((out / "screen.json").read_text())
    assert result["architectures"] == ["afai", "aafi", "iiii"]
    assert result["screen_steps"] == SCREEN_STEPS and result["planned_steps"] == 9
    assert "finished" not in result
    # The figures are the screens' own, read back from their files.
    on_disk = {}
    for arch in result["architectures"]:
        metrics = json.loads((out / arch / "metrics.json").read_text())
        assert metrics["step"] == SCREEN_STEPS and metrics["planned_steps"] == 9
        assert sorted(_losses(out / arch)) == list(range(1, SCREEN_STEPS + 1))
        on_disk[arch] = metrics["last"]["valid"]["nll"]
    assert result["valid_nll"] == on_disk
    # Run again with --finish: the screens are read back, the pick's goes on to step 9.
    assert command.main([*argv, "--finish"]) == 0, capsys.readouterr().err
    finished = json.loads((out / "screen.json").read_text())
    assert finished["valid_nll"] == on_disk and finished["pick"] == result["pick"]
    # One recipe and seed for every screen: the first search's.
    seed = TrainConfig.load(searches[0]).model.seed
    for arch in result["architectures"]:
        config = TrainConfig.load(str(out / arch))
        assert (config.model.architecture, config.model.seed) == (arch, seed)
    assert result["seed"] == seed
    lowest = min(on_disk.values())
    assert result["pick"] == next(a for a in result["architectures"] if on_disk[a] == lowest)
    assert result["valid_ppl"][result["pick"]] == pytest.approx(math.exp(lowest))
    # The pick's screen resumed to 9 steps against the retrain trained from scratch.
    pick = result["pick"]
    reference = retrain_config(TrainConfig.load(searches[0]), pick).replace(
        model_dir=str(tmp_path / "reference"), logdir="")
    want = train(reference)
    got, expect = _losses(out / pick), _losses(tmp_path / "reference")
    assert sorted(got) == sorted(expect) == list(range(1, 10))
    assert all(got[step] == expect[step] for step in expect)
    assert finished["finished"]["test_ppl"] == want["best"]["test"]["perplexity"]
    table = capsys.readouterr().out
    assert f"**{pick}** (pick)" in table and "written to" in table


@pytest.mark.slow
def test_own_schedules_with_another_recipe_and_a_retrain_from_scratch(searches, tmp_path):
    """--schedule=own --screen_recipe=fast: each screen the fast recipe over its own 4
    steps (warm-up capped, cosine decayed by step 4); the pick retrains from scratch."""
    from training.plugins.par_search.retrain import retrain_config
    from training.run.loop import train
    from training.setup.config import TrainConfig
    from training.setup.recipes import FAST

    out = tmp_path / "screen"
    argv = [f"--runs={searches[0]},{searches[1]}", f"--screen_steps={SCREEN_STEPS}",
            "--schedule=own", "--screen_recipe=fast", f"--out_dir={out}", "--finish"]
    assert command.main(argv) == 0
    result = json.loads((out / "screen.json").read_text())
    assert (result["schedule"], result["planned_steps"], result["screen_recipe"]) == (
        "own", SCREEN_STEPS, "fast")
    for arch in result["architectures"]:
        config = TrainConfig.load(str(out / arch))
        assert (config.recipe, config.optimizer, config.learning_rate, config.model.dropout) \
            == ("fast", FAST.settings["optimizer"], FAST.settings["learning_rate"], 0.0)
        metrics = json.loads((out / arch / "metrics.json").read_text())
        assert (metrics["step"], metrics["planned_steps"]) == (SCREEN_STEPS, SCREEN_STEPS)
        assert metrics["last"]["valid"]["nll"] == result["valid_nll"][arch]
        # Decayed by its own end (the retrain's 9-step cosine would still be near its peak).
        last_lr = _log(out / arch)[SCREEN_STEPS]["lr"]
        assert FAST.settings["min_lr"] <= last_lr < 0.5 * FAST.settings["learning_rate"]
    pick = result["pick"]
    reference = retrain_config(TrainConfig.load(searches[0]), pick).replace(
        model_dir=str(tmp_path / "reference"), logdir="")
    train(reference)
    got, expect = _losses(out / f"{pick}_retrain"), _losses(tmp_path / "reference")
    assert sorted(got) == sorted(expect) == list(range(1, 10))
    assert all(got[step] == expect[step] for step in expect)
    assert result["finished"]["model_dir"] == str(out / f"{pick}_retrain")


def test_an_interrupted_screen_says_how_to_resume_and_writes_nothing(searches, tmp_path,
                                                                     capsys, monkeypatch):
    import signal

    from training.run import loop

    def interrupted(config, *args, **kwargs):
        raise loop.TrainingInterrupted(3, signal.SIGINT)

    monkeypatch.setattr(loop, "train", interrupted)
    out = tmp_path / "screen"
    argv = [f"--runs={searches[0]}", f"--screen_steps={SCREEN_STEPS}", f"--out_dir={out}"]
    assert command.main(argv) == 128 + signal.SIGINT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "interrupted at step 3: checkpoint written; run the same command to resume"
    assert not (out / "screen.json").exists()


def test_ties_go_to_the_first_architecture_in_order():
    assert screen.pick({"aafi": 4.0, "afai": 4.0, "iiii": 5.0}, ["afai", "aafi", "iiii"]) \
        == "afai"
    assert screen.pick({"aafi": 3.9, "afai": 4.0}, ["afai", "aafi"]) == "aafi"


BAD_INPUTS = [
    (["--runs=", "--screen_steps=4"], "--runs is empty"),
    (["--runs={s0}", "--screen_steps=9"], "--screen_steps=9 must be at least 1 and fewer than "
     "the retrain's 9 steps"),
    (["--runs={s0}", "--screen_steps=0"], "--screen_steps=0 must be at least 1"),
    (["--runs={s0}", "--screen_steps=4", "--retrain_epochs=-1"], "--retrain_epochs=-1 must be"),
    (["--runs={s0},{s0}", "--screen_steps=4"], "is given twice"),
    (["--runs={s0}", "--screen_steps=4", "--extra=afa"], "'afa' has 3 blocks"),
    (["--runs={s0}", "--screen_steps=4", "--out_dir={file}"], "is a file"),
    (["--runs={s0}", "--screen_steps=4", "--screen_recipe=fast"], "--screen_recipe=fast trains "
     "the screens with another recipe than the retrain"),
    (["--runs={s0}", "--screen_steps=4", "--schedule=own", "--screen_recipe=quick"],
     "--screen_recipe=quick: unknown recipe 'quick'"),
    (["--runs={s0}", "--screen_steps=4", "--schedule=later"], "--schedule=later is not one of"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line_and_trains_nothing(searches, argv, message, tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    names = {"s0": searches[0], "file": tmp_path / "a_file"}
    argv = [arg.format(**names) for arg in argv]
    if not any(arg.startswith("--out_dir=") for arg in argv):
        argv.append(f"--out_dir={tmp_path / 'out'}")
    assert command.main(argv) == 2
    captured = capsys.readouterr()
    assert_one_error_line(captured.out, captured.err, message)
    assert not (tmp_path / "out").exists()
