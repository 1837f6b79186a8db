"""A plug-in registers itself: its config section, its flag and its hooks reach a run.

The plug-in here (`StepCounter`, section "counting", flag --count_every) is
registered inside the test, as a new plug-in package would be by one line of
the registry (training/plugins/__init__.py): nothing else of the trainer, the
config or train.py is changed for it. It counts the steps on the host, writes a
TensorBoard scalar of its own every --count_every steps and adds its count to
metrics.json; the test trains the tiny preset a few steps and checks each of
those against the loop's own record (training_log.log, the step count).
"""

import dataclasses
import glob
import json
import os

from absl import flags
import pytest

from model.config_base import ConfigBase, field
from runstore.errors import ConfigError
from tests.helpers.trainers import family_config
import train as train_cli
from training import plugins
from training.plugins.base import Plugin, Registration
from training.setup import flags as training_flags
from training.setup.checks import check_resume
from training.setup.config import TrainConfig

SECTION = "counting"


@dataclasses.dataclass(frozen=True)
class CountingConfig(ConfigBase):
    """The test plug-in's config section: one field, one flag."""

    FLAG_PREFIX = "--"

    count_every: int = field(2, "Write the step count to TensorBoard every this many steps.",
                             group=SECTION)

    def validate(self):
        if self.count_every < 1:
            raise ValueError(f"--count_every={self.count_every}: must be >= 1")


class StepCounter(Plugin):
    """Counts the steps on the host; a scalar every --count_every steps; the count at the end."""

    RUN_FILES = ("counter.json",)
    made = []  # every instance, for the test to read

    def __init__(self, config):
        self.every = config.counting.count_every
        self.steps, self.written, self.started = [], [], None
        StepCounter.made.append(self)

    @classmethod
    def create(cls, model, config, horizon):
        return cls(config)

    def on_start(self, model_dir, resumed_step):
        self.started = resumed_step

    def after_step(self, step):
        self.steps.append(int(step))
        return []

    def on_log(self, step, summaries, model_dir):
        if step % self.every == 0:
            summaries.tagged_scalars(step, {"counting/steps": float(len(self.steps))})
            self.written.append(int(step))

    def on_finish(self, results, model_dir, chief):
        results["counting"] = {"steps": len(self.steps)}
        if chief:
            with open(os.path.join(model_dir, "counter.json"), "w", encoding="utf-8") as f:
                json.dump({"steps": self.steps}, f)


REGISTRATION = Registration(name="step_counter", load=lambda: StepCounter, section=SECTION,
                            config=CountingConfig, resumable=frozenset({"count_every"}))


@pytest.fixture
def registered():
    plugins.register(REGISTRATION)
    StepCounter.made = []
    try:
        yield
    finally:
        plugins.unregister(REGISTRATION.name)


def _config(tiny_data, model_dir, *extra):
    return family_config(tiny_data, model_dir, "transformer_xl", "--max_steps=6",
                         "--log_interval=1", "--eval_max_records=2", "--sample_tokens=0",
                         f"--logdir={model_dir}_logs", *extra)


def test_the_section_and_its_flag_come_from_the_registration(registered, tiny_data, tmp_path):
    fv = train_cli.define_flags(flags.FlagValues())
    assert "count_every" in fv and fv["count_every"].help.startswith(f"[{SECTION}] Write")
    # The plug-ins' groups follow "model" in registry order: the PAR search's, then this one.
    assert training_flags.flag_groups()[1:4] == ("model", "search", SECTION)
    config = _config(tiny_data, tmp_path / "run", "--count_every=3")
    assert config.counting == CountingConfig(count_every=3) == config.sections[SECTION]
    assert config.to_dict()[SECTION] == {"count_every": 3}
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert config.replace(counting={"count_every": 5}).counting.count_every == 5
    assert config.replace(seq_len=config.seq_len).counting == config.counting
    with pytest.raises(ConfigError, match="--count_every=0"):
        _config(tiny_data, tmp_path / "run", "--count_every=0")
    # A config.json written before the plug-in existed takes the section's defaults.
    old = config.to_dict()
    del old[SECTION]
    assert TrainConfig.from_dict(old).counting == CountingConfig()
    with pytest.raises(ValueError, match="taken"):
        plugins.register(REGISTRATION)


def test_the_section_is_a_field_of_the_dataclass(tiny_data, tmp_path):
    before = _config(tiny_data, tmp_path / "run")  # made before the plug-in is registered
    plugins.register(REGISTRATION)
    try:
        config = _config(tiny_data, tmp_path / "run", "--count_every=3")
        older = TrainConfig.from_dict(before.to_dict())
    finally:
        plugins.unregister(REGISTRATION.name)
    (field,) = [f for f in dataclasses.fields(config) if f.name == SECTION]
    assert field.type is CountingConfig and field.default_factory is CountingConfig
    assert type(config) is not type(before) and isinstance(config, TrainConfig)
    assert not hasattr(before, SECTION) and older.counting == CountingConfig()
    # The dataclass's own __init__, __eq__, __repr__ and replace cover the section.
    assert not hasattr(TrainConfig, "__getattr__")
    assert f"{SECTION}=CountingConfig(count_every=3)" in repr(config)
    changed = dataclasses.replace(config, counting=CountingConfig(count_every=5))
    assert changed.counting.count_every == 5 and changed != config
    assert dataclasses.replace(changed, counting={"count_every": 3}) == config
    assert type(config)(**{f.name: getattr(config, f.name)
                           for f in dataclasses.fields(config)}) == config
    with pytest.raises(ConfigError, match="--count_every=0"):
        dataclasses.replace(config, counting={"count_every": 0})
    with pytest.raises(ConfigError, match="counting must be a CountingConfig or its dict"):
        dataclasses.replace(config, counting=3)


def test_unregistered_the_section_and_its_flag_are_gone(tiny_data, tmp_path):
    assert SECTION not in TrainConfig.section_fields()
    assert "count_every" not in train_cli.define_flags(flags.FlagValues())
    config = _config(tiny_data, tmp_path / "run")
    assert SECTION not in config.to_dict() and not hasattr(config, SECTION)
    with pytest.raises(ConfigError, match=SECTION):
        TrainConfig.from_dict({**config.to_dict(), SECTION: {"count_every": 3}})


def _events(logdir, tag):
    import tensorflow as tf

    found = []
    for path in sorted(glob.glob(os.path.join(logdir, "train", "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            found += [(event.step, float(tf.make_ndarray(v.tensor)))
                      for v in event.summary.value if v.tag == tag]
    return found


@pytest.mark.slow
def test_a_registered_plugin_runs_in_training(registered, tiny_data, tmp_path):
    from training.run.loop import read_training_log, train

    model_dir = tmp_path / "run"
    config = _config(tiny_data, model_dir, "--count_every=3")
    results = train(config)
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved[SECTION] == {"count_every": 3}
    assert TrainConfig.load(str(model_dir)) == config
    # The hooks ran once per step, the loop's steps: its log has one line per step.
    (counter,) = StepCounter.made
    logged = [row["step"] for row in read_training_log(str(model_dir / "training_log.log"))]
    assert counter.started is None and counter.steps == logged == list(range(1, 7))
    assert counter.written == [3, 6]
    assert _events(f"{model_dir}_logs", "counting/steps") == [(3, 3.0), (6, 6.0)]
    assert results["counting"] == {"steps": 6}
    assert json.loads((model_dir / "metrics.json").read_text())["counting"] == {"steps": 6}
    assert json.loads((model_dir / "counter.json").read_text()) == {"steps": counter.steps}
    assert "counter.json" in plugins.run_files()
    # Its section field is resumable: the run resumes with another --count_every.
    assert check_resume(_config(tiny_data, model_dir, "--count_every=2"))
