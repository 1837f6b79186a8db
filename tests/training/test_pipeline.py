"""PAR in one command (`./base_model.sh --pipeline`; docs/results/par_pipeline.md):
a search that stops once decided (`--stop_rule=stable`), its derived network
trained next (`--then_retrain`, `--retrain_epochs`, `--retrain_recipe`), exported (`--export`) and
summarised; a command interrupted between the stages resumes the right stage.
"""

import json
import pathlib

import numpy as np
import pytest

from tests.helpers.trainers import family_config

PIPELINE = ("--num_blocks=2", "--arch_warmup_steps=4", "--arch_learning_rate=0.5",
            "--freeze_threshold=0", "--stop_rule=stable", "--stop_window=10",
            "--stop_min_lead=0.05", "--then_retrain", "--max_steps=80", "--eval_interval=0",
            "--deterministic")


# The second stage of the pipeline fixture: its length and its own recipe (dropout 0.1,
# Muon), not the search's.
STAGE_TWO = ("--retrain_epochs=2", "--retrain_recipe=muon")


def _config(data_dir, model_dir, *extra):
    return family_config(data_dir, model_dir, "transformer_xl", *PIPELINE, *extra)


def _checkpoint_step(model_dir):
    import tensorflow as tf

    return int(tf.train.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])


@pytest.fixture(scope="module")
def pipeline(short_word_data, tmp_path_factory):
    """The whole command, uninterrupted: search, retrain, export (on the short build:
    its retrain runs whole epochs)."""
    import train as train_cli
    from training.run.loop import train

    root = tmp_path_factory.mktemp("pipeline")
    config = _config(short_word_data, root / "search", *STAGE_TWO)
    results = train(config)
    exported = train_cli._export(results["final_model_dir"], str(root / "model.keras"), False)
    return config, results, exported, root


@pytest.mark.slow
def test_the_search_stops_when_decided_and_its_derived_network_trains_next(pipeline):
    import data_utils

    config, results, _, root = pipeline
    decided = results["derivation"]["decided_step"]
    # Not during the warm-up nor before a whole window after it; before the planned end.
    assert 4 + 10 <= decided < 80
    assert results["step"] == decided == _checkpoint_step(root / "search")
    log = (root / "search" / "training_log.log").read_text()
    assert f"step={decided} search_decided=1" in log
    retrain = results["retrain"]
    assert retrain["architecture"] == results["architecture"] != "supernet"
    # The command ended with the retrain: that is the run an --export packages.
    assert results["final_model_dir"] == str(root / "search_retrain") == retrain["model_dir"]
    metrics = json.loads((root / "search_retrain" / "metrics.json").read_text())
    # --retrain_epochs=2 sets the second stage's length, not the search's --max_steps;
    # --retrain_recipe its optimisation, not the search's.
    records = data_utils.load_meta(config.data_dir)["splits"]["train"]["records"]
    assert metrics["step"] == 2 * records
    written = json.loads((root / "search_retrain" / "config.json").read_text())
    assert (written["recipe"], written["optimizer"]) == ("muon", "muon") != (
        config.recipe, config.optimizer)
    assert "derivation" not in metrics and np.isfinite(metrics["best"]["test"]["perplexity"])


@pytest.mark.slow
def test_the_exported_package_generates_and_evaluates_like_the_retrained_run(pipeline):
    from serving import decoder, evaluation, runs
    from serving.packaged import load_package

    config, results, exported, root = pipeline
    package = load_package(exported)
    run = runs.load_run(str(root / "search_retrain"), checkpoint="best")
    assert package.model.derived_architecture == results["architecture"]
    # The weights (the dropout's random state is not one: it moves as the run trains).
    assert len(package.model.weight_variables) == len(run.model.weight_variables)
    for a, b in zip(package.model.weight_variables, run.model.weight_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    out = [decoder.generate(r.model, [1, 2, 3], 8, seed=3) for r in (package, run)]
    np.testing.assert_array_equal(np.asarray(out[0]), np.asarray(out[1]))
    text = pathlib.Path(config.data_dir).parent / "test.txt"  # the tiny build's test text
    figures = [evaluation.evaluate_run(r, text_file=text, batch_size=2, seq_len=8)
               for r in (package, run)]
    assert figures[0]["tokens"] == figures[1]["tokens"] > 0
    assert figures[0]["perplexity"] == pytest.approx(figures[1]["perplexity"], rel=1e-6)


@pytest.mark.slow
def test_the_end_of_run_summary_names_both_stages_and_the_package(pipeline):
    from training.report.summary import closing_summary

    _, results, exported, _ = pipeline
    summary = closing_summary(results, exported)
    assert summary.splitlines()[0] == "PAR pipeline:"
    assert f"search (supernet) {results['architecture']}" in summary
    test = results["retrain"]["best"]["test"]["perplexity"]
    assert f"derived network {results['architecture']}" in summary
    assert f"test perplexity {test:.2f}" in summary
    assert f"decided at step {results['derivation']['decided_step']}" in summary
    assert exported in summary


@pytest.mark.slow
def test_the_decided_search_is_not_called_cut_short_nor_told_to_retrain(pipeline):
    """Its summary says the search ended by design and lists no retrain command (the
    derived network was trained in the same command); metrics.json says why it ended."""
    from training.report.summary import run_summary

    config, results, _, _ = pipeline
    assert results["step"] < results["planned_steps"] and results["ended_by_plugin"] is True
    summary = run_summary(config, results)
    decided = results["derivation"]["decided_step"]
    assert (f"the search was decided at step {decided} (--stop_rule=stable) and ends there "
            "by design") in summary.splitlines()
    assert "cut short" not in summary and "retrain the derived network" not in summary
    alone = {k: v for k, v in results.items() if k != "retrain"}  # as a search alone
    assert "retrain the derived network" in run_summary(config, alone)


class _KilledBetweenStages(Exception):
    pass


@pytest.mark.slow
def test_a_pipeline_resumed_with_another_retrain_recipe_names_the_flag(pipeline):
    """The second stage started with --retrain_recipe=muon: the finished command given
    another recipe for it stops in one line naming the flag, and changes nothing."""
    from runstore.errors import ConfigError
    from training.run.loop import train

    config, _, _, root = pipeline
    files = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    for recipe, named in (("seed", "--recipe=seed"), ("", "the search's own flags")):
        with pytest.raises(ConfigError) as error:
            train(config.replace(search=config.search.replace(retrain_recipe=recipe)))
        assert str(error.value) == (
            f"{root / 'search'}_retrain holds the derived network's training started with "
            f"--recipe=muon, but this command trains it with {named}: give "
            "--retrain_recipe=muon to finish it, or start the pipeline in another --model_dir")
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == files


@pytest.mark.slow
def test_a_command_stopped_between_the_stages_resumes_the_retrain_not_the_search(
        pipeline, short_word_data, tmp_path, monkeypatch):
    """As a kill right after the search's last checkpoint: the same command again
    trains no more search steps and ends as the uninterrupted command."""
    from training.run import loop

    _, expected, _, _ = pipeline
    config = _config(short_word_data, tmp_path / "search", *STAGE_TWO)
    original = loop.train

    def stop_at_follow_up(follow, *args, **kwargs):
        raise _KilledBetweenStages(follow.model_dir)

    monkeypatch.setattr(loop, "train", stop_at_follow_up)
    with pytest.raises(_KilledBetweenStages):
        original(config)
    monkeypatch.setattr(loop, "train", original)
    decided = _checkpoint_step(tmp_path / "search")
    assert decided == expected["derivation"]["decided_step"]
    assert not (tmp_path / "search_retrain").exists()
    log_before = (tmp_path / "search" / "training_log.log").read_text()
    results = original(config)
    assert _checkpoint_step(tmp_path / "search") == decided  # no search step more
    train_lines = [line for line in (tmp_path / "search" / "training_log.log").read_text()
                   .splitlines() if line not in log_before.splitlines()]
    assert not any(" loss=" in line for line in train_lines)
    # Nor evaluated again: the finished search is read from its files, its log untouched.
    assert train_lines == []
    assert results["retrain"]["architecture"] == expected["retrain"]["architecture"]
    for which in ("best", "last"):
        for split in ("valid", "test"):
            assert results["retrain"][which][split]["perplexity"] == pytest.approx(
                expected["retrain"][which][split]["perplexity"], rel=1e-6)


@pytest.mark.slow
def test_a_derived_network_seeded_from_the_supernet_computes_what_the_frozen_supernet_does(
        pipeline):
    """--retrain_init=supernet: each block takes its chosen candidate's weights, so the
    derived network equals the supernet with every block frozen to its choice."""
    import tensorflow as tf

    from model.families import build_model
    from serving import runs
    from training.plugins.par_search.retrain import seed_from_search

    _, results, _, root = pipeline
    search = runs.load_run(str(root / "search"), checkpoint="best")
    architecture = results["architecture"]
    derived = build_model(search.config.model.replace(architecture=architecture),
                          dtype="float32")
    seed_from_search(derived, str(root / "search"))
    for index, (block, letter) in enumerate(zip(search.model.blocks, architecture)):
        search.model.freeze_block(index, [c.letter for c in block.candidates].index(letter))
    inputs = tf.constant(np.random.default_rng(0).integers(0, 256, size=(2, 9)), tf.int32)
    (h_supernet, _), (h_derived, _) = search.model(inputs), derived(inputs)
    np.testing.assert_allclose(h_derived.numpy(), h_supernet.numpy(), rtol=1e-5, atol=1e-6)
    targets = tf.roll(inputs, -1, axis=1)
    np.testing.assert_allclose(derived.token_nll(h_derived, targets).numpy(),
                               search.model.token_nll(h_supernet, targets).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_retrain_init_supernet_sets_the_second_stage_to_start_from_the_search(
        short_word_data, tmp_path):
    from training.plugins.par_search.retrain import retrain_config

    config = _config(short_word_data, tmp_path / "search", "--retrain_init=supernet")
    follow = retrain_config(config, "af")
    assert follow.search.init_from == str(tmp_path / "search")
    second = _config(short_word_data, tmp_path / "s2")
    assert retrain_config(second, "af").search.init_from == ""


def test_the_command_announces_both_stages_up_front(short_word_data, tmp_path):
    from training import plugins

    config = _config(short_word_data, tmp_path / "search", "--retrain_epochs=2")
    records = json.loads((short_word_data / "meta.json").read_text())["splits"]["train"][
        "records"]
    assert plugins.plan_lines(config, records) == [
        f"this command runs two stages: 1. the search in {tmp_path / 'search'}, at most 80 "
        "steps (it ends once every block's choice is stable); 2. the derived network trained "
        f"from scratch for {2 * records:,} steps in {tmp_path / 'search'}_retrain, then "
        "evaluated on test"]
    own = _config(short_word_data, tmp_path / "search", *STAGE_TWO)
    assert "the derived network trained from scratch with --recipe=muon for " in \
        plugins.plan_lines(own, records)[0]
    # A search without a second stage, and a fixed network, announce nothing.
    assert plugins.plan_lines(config.replace(search=config.search.replace(
        then_retrain=False, retrain_epochs=0, stop_rule="frozen")), records) == []
    fixed = config.replace(model=config.model.replace(architecture="af"),
                           search=config.search.replace(then_retrain=False, retrain_epochs=0,
                                                        stop_rule="frozen"))
    assert plugins.plan_lines(fixed, records) == []
