"""Runs and `.keras` files written before a refactor keep loading.

tests/fixtures/pre_house holds a tiny run and a `.keras` export of each
family made by the code before the model/ package moves (its README says
how); today's code must restore them to the same numbers.
"""

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from tests.helpers.families import names

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "pre_house"
# The registered families that have a fixture: those the old code had (a family added
# since has no older files to keep loading).
FAMILIES = [family for family in names() if (FIXTURES / family / "expected.json").is_file()]


def _expected(family):
    """The segment and its log-probs from the old code's initial state.

    The SHA-RNN's zero memory is now empty (masked out of the attention), as
    the old code's memory of length 0: its numbers are the old code's from
    `initial_state(1, 0)` (`log_probs_no_memory`, see the fixture README).
    """
    data = json.loads((FIXTURES / family / "expected.json").read_text())
    key = "log_probs_no_memory" if family == "sha_rnn" else "log_probs"
    return np.array(data["segment"], np.int32), np.array(data[key], np.float32)


def _log_probs(model, segment):
    hidden, _ = model(segment, model.initial_state(1, 0) if model.family == "transformer_xl"
                      else model.initial_state(1), training=False)
    return np.asarray(model.log_probs(hidden))[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_old_run_restores_to_the_same_numbers(family):
    from serving import generation

    run = generation.load_run(str(FIXTURES / family / "run"), checkpoint="latest")
    segment, expected = _expected(family)
    np.testing.assert_allclose(_log_probs(run.model, segment), expected, atol=2e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_old_keras_file_loads_to_the_same_numbers(family):
    import keras

    from model.families import register_keras_objects

    register_keras_objects()  # every registered family's layers
    loaded = keras.saving.load_model(str(FIXTURES / family / "model.keras"))
    segment, expected = _expected(family)
    np.testing.assert_allclose(_log_probs(loaded, segment), expected, atol=2e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_old_config_json_loads(family):
    from training.setup.config import TrainConfig

    raw = json.loads((FIXTURES / family / "run" / "config.json").read_text())
    config = TrainConfig.load(str(FIXTURES / family / "run"))
    assert config.model_family == family
    loaded = config.model.to_dict()
    # Every field the old file has comes back unchanged; fields added since
    # take their defaults, which keep the old behaviour (span_positions
    # "relative", init "default").
    assert {k: v for k, v in loaded.items() if k in raw["model"]} == raw["model"]
    added = set(loaded) - set(raw["model"])
    defaults = {f.name: f.default for f in dataclasses.fields(config.model)}
    if "candidates" in added:  # a new config's default is every registered type; an old
        defaults["candidates"] = "afi"  # file searched the three built-in ones
    assert {k: loaded[k] for k in added} == {k: defaults[k] for k in added}


def test_every_fixture_is_of_a_registered_family():
    fixtures = sorted(p.parent.name for p in FIXTURES.glob("*/expected.json"))
    assert fixtures and fixtures == sorted(FAMILIES)


# config.json files written when the optimizers' options were fields written in TrainConfig
# (the README says how), and what each option must make of its optimizer.
OPTION_FIXTURES = FIXTURES.parent / "optimizer_options"
OPTIONS_EXPECTED = {"lamb_sharnn": {"min_trust": 0.3, "weight_norm_clip": None},
                    "adagrad_clip": {"tensor_clip_norm": 0.05}}


def _within(values, keys_of):
    """`values` restricted to the keys of `keys_of`, recursively through dicts."""
    return {k: _within(values[k], want) if isinstance(want, dict) and isinstance(
        values.get(k), dict) else values.get(k) for k, want in keys_of.items()}


@pytest.mark.parametrize("name", sorted(OPTIONS_EXPECTED))
def test_old_config_json_with_optimizer_options_loads_to_the_same_run(name, tmp_path):
    from training.optimizers import get_optimizer
    from training.setup.config import TrainConfig

    raw = json.loads((OPTION_FIXTURES / name / "config.json").read_text())
    config = TrainConfig.load(str(OPTION_FIXTURES / name))
    # Every value comes back, the options at the top level where the old code wrote them
    # (fields added since take their defaults: only the file's own keys are compared).
    assert _within(config.to_dict(), raw) == raw
    config.save(str(tmp_path))
    assert TrainConfig.load(str(tmp_path)) == config
    optimizer = get_optimizer(config.optimizer).make(1e-3, config)
    expected = OPTIONS_EXPECTED[name]
    assert {key: getattr(optimizer, key) for key in expected} == expected
