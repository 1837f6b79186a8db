"""runstore.config.RunConfig: what serving reads of a run's config.json, without training/."""

import json

import pytest

from tests.helpers import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "pre_house"


@pytest.mark.parametrize("family", ["transformer_xl", "sha_rnn"])
def test_reads_the_fields_of_an_old_run_as_the_trainer_does(family):
    from runstore.config import FIELDS, RunConfig
    from training.setup.config import TrainConfig

    run = FIXTURES / family / "run"
    config, trainer = RunConfig.load(run), TrainConfig.load(run)
    for name in FIELDS:
        assert getattr(config, name) == getattr(trainer, name), name
    stored = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert config.settings == stored


def test_replace_and_to_dict_carry_the_model_config():
    from runstore.config import RunConfig

    run = FIXTURES / "transformer_xl" / "run"
    config = RunConfig.load(run)
    changed = config.replace(model=config.model.replace(clamp_len=2), seq_len=7)
    values = changed.to_dict()
    assert values["model"]["clamp_len"] == 2 and values["seq_len"] == 7
    assert values["learning_rate"] == config.settings["learning_rate"]
    assert RunConfig.from_dict(values) == changed
    assert config.model.clamp_len != 2  # frozen: the original is unchanged


def test_an_incomplete_or_unknown_config_is_refused(tmp_path):
    from runstore.config import RunConfig

    values = json.loads((FIXTURES / "sha_rnn" / "run" / "config.json").read_text("utf-8"))
    with pytest.raises(KeyError, match="seq_len"):
        RunConfig.from_dict({k: v for k, v in values.items() if k != "seq_len"})
    with pytest.raises((KeyError, ValueError), match="no_such_family"):
        RunConfig.from_dict({**values, "model_family": "no_such_family"})
    with pytest.raises(OSError):
        RunConfig.load(tmp_path)
