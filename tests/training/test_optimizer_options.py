"""The optimizers' own options (training/optimizers/: `OptimizerSpec.options`).

An option declared in an optimizer's entry is a train.py flag and a TrainConfig
field of its name, None when not given (the factory then takes the option's
default), refused with another optimizer in one line naming the flag and the fix.
The test optimizer here is added to the table inside the test
(tests/helpers/optimizers.py), as a new entry would be: nothing of
training/setup/ is changed for it.
"""

from absl import flags
import pytest

from runstore.errors import ConfigError
from tests.helpers.optimizers import registered_optimizer
import train as train_cli
from training.optimizers import (
    L2,
    MIN_TRUST,
    MUON_NS_BFLOAT16,
    MUON_RMS_RATE,
    TENSOR_CLIP_NORM,
    WEIGHT_NORM_CLIP,
    OptimizerOption,
    OptimizerSpec,
    option_owners,
)
from training.setup.config import TrainConfig

NAME = "floored_sgd"
FLOOR = OptimizerOption("step_floor", 0.5, "smallest step of a weight (0: none; default "
                        "{default}).")
received = []  # the options the factory was given, one dict per optimizer made


def _floored_sgd(keras, learning_rate, config, step_floor):
    received.append({"step_floor": step_floor})
    return keras.optimizers.SGD(learning_rate=learning_rate)


SPEC = OptimizerSpec(NAME, L2, "SGD with a step floor (a test's).", _floored_sgd,
                     options=(FLOOR,))


def _parse(tiny_data, tmp_path, *args):
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'run'}",
        "--preset=tiny", *args])
    return train_cli.config_from_flags(fv)[0]


def test_the_table_declares_the_options_their_owners_and_help():
    assert option_owners() == {"min_trust": (MIN_TRUST, ("lamb_sharnn",)),
                               "weight_norm_clip": (WEIGHT_NORM_CLIP, ("lamb_sharnn",)),
                               "tensor_clip_norm": (TENSOR_CLIP_NORM, ("adagrad_clip",)),
                               "muon_rms_rate": (MUON_RMS_RATE, ("muon",)),
                               "muon_ns_bfloat16": (MUON_NS_BFLOAT16, ("muon",))}
    fv = train_cli.define_flags(flags.FlagValues())
    assert fv["min_trust"].help == (
        "[optimisation] lamb_sharnn only: floor of the trust ratio (0: none; default 0.25, "
        "the SHA-RNN reference's).")
    assert fv["weight_norm_clip"].help.endswith("(0: no clamp; default 10, the SHA-RNN "
                                                "reference's).")
    assert fv["tensor_clip_norm"].help.startswith("[optimisation] adagrad_clip only: ")
    for name in option_owners():
        assert fv[name].default is None and fv[name].flag_type() == "float"


def test_a_new_optimizer_brings_its_option_as_a_field_and_a_flag(tiny_data, tmp_path):
    from training.optimizers import get_optimizer

    assert "step_floor" not in {f.name for f in TrainConfig.flag_fields()}
    with registered_optimizer(SPEC):
        assert "step_floor" in {f.name for f in TrainConfig.flag_fields()}
        fv = train_cli.define_flags(flags.FlagValues())
        assert fv["step_floor"].help == (
            f"[optimisation] {NAME} only: smallest step of a weight (0: none; default 0.5).")
        config = _parse(tiny_data, tmp_path, f"--optimizer={NAME}", "--step_floor=0.2")
        assert config.step_floor == 0.2 and config.to_dict()["step_floor"] == 0.2
        assert TrainConfig.from_dict(config.to_dict()) == config
        received.clear()
        get_optimizer(NAME).make(1e-3, config)
        get_optimizer(NAME).make(1e-3, _parse(tiny_data, tmp_path, f"--optimizer={NAME}"))
        assert received == [{"step_floor": 0.2}, {"step_floor": 0.5}]  # not given: default
        with pytest.raises(ConfigError, match=r"^--step_floor=0\.2: does not apply to "
                           rf"--optimizer=adam: drop it or use --optimizer={NAME}$"):
            _parse(tiny_data, tmp_path, "--optimizer=adam", "--step_floor=0.2")
        with pytest.raises(ConfigError, match=r"^--step_floor=-1\.0: must be >= 0"):
            config.replace(step_floor=-1.0)
    assert "step_floor" not in train_cli.define_flags(flags.FlagValues())
    with pytest.raises(ConfigError, match="step_floor"):
        TrainConfig.from_dict(config.to_dict())


def test_optimizers_share_an_option_but_not_its_name(tiny_data, tmp_path):
    sharing = OptimizerSpec("lamb_sharing", L2, "A test's.", _floored_sgd, options=(MIN_TRUST,))
    with registered_optimizer(sharing):
        assert option_owners()["min_trust"] == (MIN_TRUST, ("lamb_sharnn", "lamb_sharing"))
        fv = train_cli.define_flags(flags.FlagValues())
        assert fv["min_trust"].help.startswith("[optimisation] lamb_sharnn/lamb_sharing only: ")
        with pytest.raises(ConfigError, match="use --optimizer=lamb_sharnn/lamb_sharing$"):
            _parse(tiny_data, tmp_path, "--optimizer=adam", "--min_trust=0.3")
    other = OptimizerSpec("lamb_other", L2, "A test's.", _floored_sgd,
                          options=(OptimizerOption("min_trust", 0.5, "another floor."),))
    with registered_optimizer(other):
        with pytest.raises(ValueError, match="lamb_sharnn and lamb_other declare different "
                           "options --min_trust"):
            option_owners()


def test_a_switch_takes_0_or_1(tiny_data, tmp_path):
    config = _parse(tiny_data, tmp_path, "--optimizer=muon", "--muon_ns_bfloat16=1")
    assert config.muon_ns_bfloat16 == 1.0 and config.to_dict()["muon_ns_bfloat16"] == 1.0
    with pytest.raises(ConfigError, match=r"^--muon_ns_bfloat16=0\.5: must be one of 0, 1$"):
        _parse(tiny_data, tmp_path, "--optimizer=muon", "--muon_ns_bfloat16=0.5")
