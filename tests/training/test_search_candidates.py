"""A search run records its candidates in config.json, and the PAR plug-in's history,
summaries and derivation name those and no others (model/transformer_xl/config.py
`candidates`; tests/model/transformer_xl/test_candidates.py has the model's side)."""

import json

import numpy as np
import pytest

from model.transformer_xl import blocks

EXTRA = blocks.BlockSpec("extra_dense", "e", blocks.DENSE.make_layer, False,
                         blocks.DENSE.flops_per_token, blocks.DENSE.param_count, "#9467bd")
SHORT = dict(max_steps=4, log_interval=2, sample_tokens=0, eval_max_records=2,
             arch_warmup_steps=0, arch_learning_rate=0.3, freeze_threshold=0.0)


def _run_files(run):
    config = json.loads((run / "config.json").read_text())
    history = json.loads((run / "arch_history.json").read_text())
    architecture = json.loads((run / "architecture.json").read_text())
    return config, history, architecture


@pytest.mark.slow
def test_a_registered_type_is_searched_and_recorded_by_a_run(make_config, tmp_path):
    from training.run.loop import train
    from training.setup.config import TrainConfig

    blocks.register(EXTRA)
    try:
        config = make_config(**SHORT)
        assert config.model.candidates == "afie"
        results = train(config)
        saved, history, architecture = _run_files(tmp_path / "run")
        assert saved["model"]["candidates"] == "afie"
        assert TrainConfig.load(str(tmp_path / "run")).model == config.model
        names = ["attention", "dense", "identity", "extra_dense"]
        assert history["choices"] == names
        assert [len(row) for e in history["entries"] for row in e["probs"]] == [4] * 4 * 2
        assert architecture["counts"].keys() == set(names)
        assert np.asarray(architecture["probabilities"]).shape == (4, 4)
        assert results["architecture"] == architecture["architecture"]
    finally:
        blocks.unregister(EXTRA.letter)
    # Without its type, the run's config names what is missing.
    with pytest.raises(ValueError, match=r"candidates='afie' has unregistered letters \['e'\]"):
        TrainConfig.load(str(tmp_path / "run"))


@pytest.mark.slow
def test_a_two_candidate_search_derives_and_reports_them_only(make_config, tmp_path):
    from training.plugins.par_search import plots
    from training.run.loop import train

    config = make_config(model_candidates="af", **SHORT)
    results = train(config)
    saved, history, architecture = _run_files(tmp_path / "run")
    assert saved["model"]["candidates"] == "af"
    assert history["choices"] == ["attention", "dense"]
    probs = np.asarray(history["entries"][-1]["probs"])
    assert probs.shape == (4, 2)
    derived = "".join("af"[k] for k in np.argmax(probs, axis=1))
    assert architecture["architecture"] == results["architecture"] == derived
    assert set(derived) <= {"a", "f"}
    assert architecture["counts"] == {"attention": derived.count("a"),
                                      "dense": derived.count("f")}
    np.testing.assert_array_equal(architecture["probabilities"], probs)
    assert plots.ArchHistory.load(tmp_path / "run").choices == ("attention", "dense")
    assert (tmp_path / "run" / "arch_history.png").stat().st_size > 0


def test_the_summaries_name_the_given_candidates(tmp_path):
    from training.plugins.par_search.plots import ArchHistory
    from training.plugins.par_search.summaries import arch_image, check_probs, write_architecture
    from training.report.tensorboard import TrainSummaries

    probs = np.array([[0.25, 0.75], [1.0, 0.0]])
    with TrainSummaries(tmp_path) as summaries:
        write_architecture(summaries, 1, probs, ("attention", "dense"))
    np.testing.assert_array_equal(check_probs(probs, ("attention", "dense")), probs)
    assert arch_image(probs, choices=("attention", "dense")).shape == (48, 48, 3)
    with pytest.raises(ValueError, match=r"\[num_blocks, 3\]"):
        check_probs(probs)  # a new config's candidates: the three registered types
    history = ArchHistory(choices=("attention", "dense"))
    history.append(1, probs)
    with pytest.raises(ValueError, match="attention, dense"):
        history.append(2, np.full((2, 3), 1 / 3))
