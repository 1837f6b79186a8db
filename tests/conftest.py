"""Shared fixtures: the real WikiText-2 copy in ../shared/data, quiet TF, trained runs."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """Directory holding wikitext-2/ and wikitext-2-raw/ (never downloaded)."""
    if not (SHARED_DATA / "wikitext-2" / "wiki.valid.tokens").exists():
        pytest.fail(f"real WikiText-2 expected in {SHARED_DATA}; see its SOURCES.md")
    return SHARED_DATA


@pytest.fixture(scope="session")
def project_root() -> pathlib.Path:
    return PROJECT_ROOT


@pytest.fixture(scope="session")
def word_data(tmp_path_factory, shared_data) -> pathlib.Path:
    """A word build (V 256, B 4, T 16) of WikiText-2 slices; valid has a 50-id tail."""
    from test_generation import build_data

    return build_data(tmp_path_factory.mktemp("word_data"), shared_data, "word")


# The settings of the runs `trained_run` makes.
TRAINED_RUN_STEPS = 4
TRAINED_RUN_EVAL_MEM_LEN = 8


def _train_tiny_run(data_dir, model_dir, family):
    import data_utils
    from model.families import get_family
    from training.config import TrainConfig
    from training.loop import train

    meta = data_utils.load_meta(str(data_dir))
    preset = "tiny" if family == "transformer_xl" else "sha_rnn_tiny"
    # A fixed Transformer-XL (afaf): a 4-step supernet search may derive no attention.
    fixed = {"architecture": "transformer_xl"} if family == "transformer_xl" else {}
    model = get_family(family).preset_config(preset, vocab_size=meta["vocab_size"], **fixed)
    config = TrainConfig(
        data_dir=str(data_dir), model_dir=str(model_dir), model=model, model_family=family,
        preset=preset, batch_size=meta["batch_size"], seq_len=meta["seq_len"],
        eval_mem_len=TRAINED_RUN_EVAL_MEM_LEN, max_steps=TRAINED_RUN_STEPS,
        learning_rate=3e-3, eval_interval=0, eval_max_records=0, checkpoint_interval=0,
        sample_tokens=0, log_interval=TRAINED_RUN_STEPS, logdir=str(model_dir) + "_logs")
    return train(config)


@pytest.fixture(scope="session")
def trained_run(word_data, tmp_path_factory):
    """trained_run(family) -> model_dir of a run of the family's tiny preset on `word_data`.

    Trained TRAINED_RUN_STEPS steps by training.loop.train (Transformer-XL as
    a fixed afaf), evaluated on every record, eval_mem_len
    TRAINED_RUN_EVAL_MEM_LEN. Made once per session, on first use: tests only
    read it.
    """
    root = tmp_path_factory.mktemp("trained_runs")
    runs = {}

    def get(family):
        if family not in runs:
            _train_tiny_run(word_data, root / family, family)
            runs[family] = root / family
        return runs[family]

    return get

