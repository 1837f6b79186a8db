"""The PAR search's config section (training/plugins/par_search/config.py) in TrainConfig.

Its fields are flags of their own (--tau_start, ...), config.json keeps them
under "search", and config.json files written before the section (the
search fields at the top level) still load and resume.
"""

import json
import pathlib

import pytest

from training.plugins.par_search.config import SearchConfig
from training.setup.checks import check_resume
from training.setup.config import ConfigError, TrainConfig

FIXTURE_RUN = (pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "pre_house"
               / "transformer_xl" / "run")


def _flatten(values):
    """config.json in the form before the section: search keys at the top, no freezing."""
    values = dict(values)
    search = values.pop("search")
    for name in ("freeze_threshold", "freeze_window", "then_retrain"):
        search.pop(name)
    values.update(search)
    return values


def test_an_old_flat_config_json_loads_into_the_section():
    raw = json.loads((FIXTURE_RUN / "config.json").read_text())
    assert "arch_learning_rate" in raw and "search" not in raw
    config = TrainConfig.load(str(FIXTURE_RUN))
    assert config.search.arch_learning_rate == raw["arch_learning_rate"]
    assert config.search.tau_schedule == raw["tau_schedule"]
    # Written before progressive freezing existed: the run did not freeze.
    assert config.search.freeze_threshold == 0
    saved = config.to_dict()
    assert "arch_learning_rate" not in saved and saved["search"]["tau_end"] == raw["tau_end"]
    assert TrainConfig.from_dict(saved) == config


def test_section_round_trip_and_errors_name_the_flag(make_config):
    config = make_config(tau_start=2.0, freeze_window=7)
    assert isinstance(config.search, SearchConfig)
    assert (config.search.tau_start, config.search.freeze_window) == (2.0, 7)
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    for values, flag in (({"tau_end": 0.0}, "--tau_end"), ({"arch_beta_1": 1.0}, "--arch_beta_1"),
                         ({"then_retrain": True, "freeze_threshold": 0.0}, "--then_retrain")):
        with pytest.raises(ConfigError, match=flag):
            make_config(**values)
    with pytest.raises(ConfigError, match="unknown SearchConfig field"):
        TrainConfig.from_dict({**config.to_dict(), "search": {"tau_begin": 1.0}})


def test_freezing_may_change_on_resume_the_rest_of_the_section_may_not(make_config, tmp_path):
    old = make_config(tmp_path / "run")
    (tmp_path / "run").mkdir()
    old.save()
    assert check_resume(make_config(tmp_path / "run", freeze_threshold=0.0, freeze_window=5))
    with pytest.raises(ConfigError, match=r"search\.tau_end: 0\.1 -> 0\.2"):
        check_resume(make_config(tmp_path / "run", tau_end=0.2))


@pytest.mark.slow
def test_a_run_whose_config_json_is_flat_resumes(make_config, tmp_path, caplog):
    from training.run.loop import train

    model_dir = tmp_path / "run"
    first = train(make_config(model_dir, max_steps=4, checkpoint_interval=2, sample_tokens=0))
    assert first["step"] == 4
    path = model_dir / "config.json"
    path.write_text(json.dumps(_flatten(json.loads(path.read_text())), indent=2))
    caplog.set_level("INFO")
    resumed = train(make_config(model_dir, max_steps=6, checkpoint_interval=2, sample_tokens=0))
    assert resumed["step"] == 6
    assert f"resuming {model_dir} at step 4" in caplog.text
    saved = json.loads(path.read_text())  # written again in today's form
    assert "search" in saved and "tau_start" not in saved
