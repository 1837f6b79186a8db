"""Tiny real-data build shared by the trainer tests (built once per session)."""

import functools
import os
import pathlib
import subprocess
import sys

import pytest

from tests.helpers import PROJECT_ROOT


@pytest.fixture(scope="session")
def tiny_data(word_data) -> pathlib.Path:
    """A word-level build (V 256, B 4, T 16) of a slice of WikiText-2 valid: the session's
    `word_data` (tests/conftest.py), the very build these tests made for themselves before;
    made once for the whole session. Tests only read it."""
    return word_data


def tiny_config(data_dir, model_dir, **overrides):
    """A TrainConfig of the `tiny` preset on the tiny build (no dropout by default); the
    search section's fields are given flat, like their flags."""
    import data_utils
    from model.transformer_xl.presets import preset_config
    from training.plugins.par_search.config import SearchConfig
    from training.setup.config import TrainConfig

    meta = data_utils.load_meta(str(data_dir))
    model_fields = {k[len("model_"):]: overrides.pop(k) for k in list(overrides)
                    if k.startswith("model_")}
    model = preset_config("tiny", vocab_size=meta["vocab_size"], dropout=0.0, **model_fields)
    values = dict(data_dir=str(data_dir), model_dir=str(model_dir), model=model, preset="tiny",
                  batch_size=meta["batch_size"], seq_len=meta["seq_len"], eval_mem_len=8,
                  max_steps=30, learning_rate=3e-3, clip_norm=1.0, eval_interval=0,
                  checkpoint_interval=0, log_interval=5, sample_tokens=8,
                  logdir=str(pathlib.Path(model_dir) / "logs"))
    values["search"] = {k: overrides.pop(k) for k in SearchConfig.field_names()
                        if k in overrides}
    values.update(overrides)
    return TrainConfig(**values)





def _subprocess_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))


@pytest.fixture(scope="session")
def subprocess_env():
    """Environment for `python3 train.py ...` children run from the project root."""
    return _subprocess_env()


@pytest.fixture(scope="session")
def run_python():
    """run_python(args, env=None, timeout=600) -> CompletedProcess of `python3 args...`."""

    def run(args, env=None, timeout=600):
        full_env = _subprocess_env()
        full_env.update(env or {})
        return subprocess.run([sys.executable, *args], cwd=PROJECT_ROOT, env=full_env,
                              timeout=timeout, capture_output=True, text=True)

    return run


@pytest.fixture(scope="session")
def tiny_config_factory(tiny_data):
    """factory(model_dir, **overrides) -> tiny TrainConfig on the tiny build."""
    return functools.partial(tiny_config, tiny_data)


@pytest.fixture
def make_config(tiny_data, tmp_path):
    """make_config(model_dir=None, **overrides) -> tiny TrainConfig under tmp_path."""

    def make(model_dir=None, **overrides):
        return tiny_config(tiny_data, model_dir or tmp_path / "run", **overrides)

    return make
