"""TrainConfig validation, JSON round trip, and the data/replica/resume checks."""

import dataclasses
import json
import math
import os

import pytest

from model.transformer_xl.presets import preset_config
from training.setup import checks as config_checks
from training.setup import config as config_lib
from training.setup.config import ConfigError, TrainConfig


def _config(tmp_path, **overrides):
    """A TrainConfig; the search section's fields may be given flat, like their flags."""
    from training.plugins.par_search.config import SearchConfig

    values = dict(data_dir=str(tmp_path / "data"), model_dir=str(tmp_path / "run"),
                  model=preset_config("tiny", vocab_size=256), preset="tiny", batch_size=4,
                  seq_len=16, eval_mem_len=8)
    values["search"] = {k: overrides.pop(k) for k in SearchConfig.field_names()
                        if k in overrides}
    values.update(overrides)
    return TrainConfig(**values)


def _meta(**overrides):
    split = dict(ids=1000, records=10, dropped_ids=5, words=900, bytes=5000, batch_size=4)
    meta = dict(vocab_size=256, batch_size=4, seq_len=16,
                splits={s: dict(split) for s in ("train", "valid", "test")})
    meta.update(overrides)
    return meta


def test_defaults_are_valid_and_round_trip_through_json(tmp_path):
    config = _config(tmp_path, learning_rate=2e-3, strategy="mirrored", num_cpu_replicas=2)
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    os.makedirs(config.model_dir)
    config.save()
    assert TrainConfig.load(config.model_dir) == config
    assert json.load(open(os.path.join(config.model_dir, "config.json")))["model"]["d_model"] == 32


@pytest.mark.parametrize("field,value", [
    ("eval_mem_len", -1), ("tau_start", 0.0), ("tau_end", -1.0), ("tau_schedule", "cubic"),
    ("optimizer", "sgd"), ("lr_schedule", "step"), ("learning_rate", 0.0),
    ("learning_rate", math.nan), ("min_lr", 1.0), ("beta_1", 1.0), ("arch_beta_2", -0.1),
    ("keep_checkpoints", 0), ("log_interval", 0), ("max_steps", -1), ("strategy", "horovod"),
    ("num_cpu_replicas", 2), ("precision", "float8"), ("clip_norm", -1.0), ("xla", "yes"),
    ("batch_size", 0), ("warmup_steps", -5), ("epsilon", 0.0),
])
def test_invalid_values_name_their_flag(tmp_path, field, value):
    with pytest.raises(ConfigError, match=f"--{field}"):
        _config(tmp_path, **{field: value})


def test_decay_steps_must_cover_warmup_and_epochs_or_steps(tmp_path):
    with pytest.raises(ConfigError, match="--decay_steps"):
        _config(tmp_path, warmup_steps=10, decay_steps=5)
    with pytest.raises(ConfigError, match="--epochs"):
        _config(tmp_path, epochs=0, max_steps=0)
    assert _config(tmp_path, epochs=0, max_steps=7).max_steps == 7


def test_unknown_optimizer_and_schedule_list_the_choices(tmp_path):
    with pytest.raises(ConfigError, match=r"--optimizer='sgd': use one of \('adam', 'adamw', "
                       r"'lamb', 'lamb_sharnn', 'adagrad', 'adagrad_clip', 'muon', 'lion'\)"):
        _config(tmp_path, optimizer="sgd")
    with pytest.raises(ConfigError, match=r"--lr_schedule='step': use one of .*'inverse_sqrt'"):
        _config(tmp_path, lr_schedule="step")
    from training.optimizers import get_optimizer
    from training.optimizers.schedules import make_lr_schedule

    with pytest.raises(ValueError, match=r"unknown optimizer 'sgd'; choose one of \['adagrad'"):
        get_optimizer("sgd")
    with pytest.raises(ValueError, match="inverse_sqrt"):
        make_lr_schedule("step", 1.0, 1, 2)


def test_batch_split(tmp_path):
    assert _config(tmp_path).batch_split == 1
    with pytest.raises(ConfigError, match=r"--batch_split=0: must be >= 1"):
        _config(tmp_path, batch_split=0)
    with pytest.raises(ConfigError, match=r"--batch_split=3: must divide --batch_size=4 .*"
                       r"use one of \[1, 2, 4\]"):
        _config(tmp_path, batch_split=3)
    config = _config(tmp_path, batch_split=4, strategy="mirrored", num_cpu_replicas=2)
    config_checks.check_replicas(config, _meta(), 1)
    with pytest.raises(ConfigError, match=r"--batch_split=4 does not divide the 2 rows of each "
                       r"of the 2 replicas \(--batch_size=4\).*use one of \[1, 2\]"):
        config_checks.check_replicas(config, _meta(), 2)
    config_checks.check_replicas(config.replace(batch_split=2), _meta(), 2)
    # Only the training batch is split (evaluation has no backward pass).
    meta = _meta()
    meta["splits"]["valid"]["batch_size"] = 2
    config_checks.check_replicas(config, meta, 1)
    # The state is per row: another K resumes the same run.
    assert config_checks.incompatible_fields(config, config.replace(batch_split=1)) == []


def test_capped_warmup():
    assert config_lib.capped_warmup(1000, 500, config_lib.WARMUP_FRACTION) == 50
    assert config_lib.capped_warmup(30, 500, 0.1) == 30
    assert config_lib.capped_warmup(2000, 40, 0.2) == 8
    assert config_lib.capped_warmup(5, 4, 0.2) == 0
    assert config_lib.capped_warmup(0, 10**6, 0.2) == 0


def test_unknown_fields_are_listed(tmp_path):
    values = _config(tmp_path).to_dict()
    values["learning_rat"] = 1.0
    with pytest.raises(ConfigError, match="learning_rat"):
        TrainConfig.from_dict(values)


def test_schedule_names_match_the_schedules_module():
    from training.optimizers import schedules
    from training.plugins.par_search import config as search_config
    from training.plugins.par_search import schedules as tau_schedules

    assert config_lib.LR_SCHEDULES == schedules.LR_SCHEDULES
    assert search_config.TAU_SCHEDULES == tau_schedules.TAU_SCHEDULES


def test_total_steps(tmp_path):
    assert config_lib.total_steps(_config(tmp_path, epochs=3), 100) == 300
    assert config_lib.total_steps(_config(tmp_path, epochs=3, max_steps=42), 100) == 42


def test_check_data_rejections(tmp_path):
    config = _config(tmp_path)
    config_checks.check_data(config, _meta())
    with pytest.raises(ConfigError, match="--seq_len=16.*seq_len=32"):
        config_checks.check_data(config, _meta(seq_len=32))
    with pytest.raises(ConfigError, match="--batch_size=4.*batch_size=8"):
        config_checks.check_data(config, _meta(batch_size=8))
    with pytest.raises(ConfigError, match="vocab_size"):
        config_checks.check_data(config, _meta(vocab_size=300))
    small = _config(tmp_path, model=preset_config("tiny", vocab_size=20, cutoffs=(8,)))
    with pytest.raises(ConfigError, match="--cutoffs=8.*auto"):
        config_checks.check_data(small, _meta(vocab_size=8))
    meta = _meta()
    del meta["splits"]["test"]
    with pytest.raises(ConfigError, match="'test'"):
        config_checks.check_data(config, meta)
    meta = _meta()
    meta["splits"]["valid"]["records"] = 0
    with pytest.raises(ConfigError, match="'valid'"):
        config_checks.check_data(config, meta)


def test_batch_must_split_over_replicas(tmp_path):
    config = _config(tmp_path, strategy="mirrored", num_cpu_replicas=3)
    with pytest.raises(ConfigError, match="not divisible by the 3 replicas.*--num_cpu_replicas"):
        config_checks.check_replicas(config, _meta(), 3)
    config_checks.check_replicas(config, _meta(), 2)
    meta = _meta()
    meta["splits"]["valid"]["batch_size"] = 6
    with pytest.raises(ConfigError, match="'valid'"):
        config_checks.check_replicas(config, meta, 4)


def test_resume_compatibility(tmp_path):
    config = _config(tmp_path)
    assert config_checks.check_resume(config) is False  # nothing there yet
    os.makedirs(config.model_dir)
    config.save()
    assert config_checks.check_resume(config) is True
    longer = config.replace(max_steps=500, epochs=40, eval_interval=7, eval_mem_len=64,
                            logdir="elsewhere", log_interval=3, keep_checkpoints=9,
                            checkpoint_interval=11, eval_max_records=2, sample_tokens=0)
    assert config_checks.incompatible_fields(config, longer) == []
    assert config_checks.check_resume(longer) is True
    # The same directories spelled differently are the same run.
    os.makedirs(config.data_dir)
    os.symlink(config.data_dir, tmp_path / "alias")
    respelled = config.replace(model_dir=config.model_dir + "/", data_dir=str(tmp_path / "alias"))
    assert config_checks.incompatible_fields(config, respelled) == []
    other = config.replace(learning_rate=0.5, model=config.model.replace(d_model=64))
    assert config_checks.incompatible_fields(config, other) == ["learning_rate", "model.d_model"]
    with pytest.raises(ConfigError, match="--overwrite") as error:
        config_checks.check_resume(other)
    assert "d_model: 32 -> 64" in str(error.value)
    assert config_checks.check_resume(other, overwrite=True) is False
    with open(os.path.join(config.model_dir, "config.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        config_checks.check_resume(config)


def test_every_field_is_documented():
    """Each field's help (the text of its flag) and group live in its metadata."""
    from training.setup import flags as training_flags

    sections = TrainConfig.section_fields()  # each documents its own fields
    for field in dataclasses.fields(TrainConfig.complete()):  # the optimizers' options too
        if field.name in sections:
            continue
        help_ = field.metadata.get("help", "")
        assert len(help_) > 15 and help_.endswith((".", ")")), field.name
        assert field.metadata.get("group") in training_flags.GROUPS, field.name
