"""The family registry (model/registry.py, re-exported by model/families.py).

The built-in families declare themselves in their own packages (`<package>.family`);
`register_family` refuses a taken name, another family's preset or config class in one
ValueError, and `unregister_family` an unknown name. A family registered at run time,
without editing a product file, is a family like the others: "lstm_copy", the SHA-RNN
code under another name, with a config class of its own (a subclass: `family_of` finds
a config's family by its class) and its own preset, gets train.py's flags, trains
through training.run.loop.train, evaluates through serving.evaluation and generates
through serving.decoder; unregistered, its run is unknown again.
"""

import dataclasses
import importlib

import numpy as np
import pytest

from model import families, registry
from model.families import (
    DEFAULT_FAMILY,
    FAMILIES,
    Family,
    family_of,
    get_family,
    preset_family,
    register_family,
    unregister_family,
)
from model.sha_rnn.config import ShaRnnConfig
from tests.helpers.families import registered, tiny_flags

NAME = "lstm_copy"
PRESET = "lstm_copy_tiny"


@dataclasses.dataclass(frozen=True)
class LstmCopyConfig(ShaRnnConfig):
    """The SHA-RNN's config under the lstm_copy family: the same fields, a class of its own."""


def _build_lstm_copy(config, dtype=None):
    model = get_family("sha_rnn").builder(config, dtype=dtype)
    model.family = NAME  # the interface's registry name
    return model


def lstm_copy(**changes):
    """The lstm_copy family (the SHA-RNN's tiny LSTM preset as its own), with `changes`."""
    sha_rnn = get_family("sha_rnn")
    family = Family(
        name=NAME, description="the SHA-RNN code as a plain LSTM, registered by a test",
        config_class=LstmCopyConfig, presets={PRESET: dict(sha_rnn.presets["lstm_tiny"])},
        default_preset=PRESET, builder=_build_lstm_copy,
        register_keras_objects=sha_rnn.register_keras_objects, tiny_preset=PRESET,
        summary_fields=("d_model", "num_layers"))
    return dataclasses.replace(family, **changes)


def _snapshot():
    return list(FAMILIES.items())


def test_the_built_in_families_register_themselves_in_their_packages():
    assert FAMILIES is registry.FAMILIES and families.get_family is registry.get_family
    assert next(iter(FAMILIES)) == DEFAULT_FAMILY
    for name, family in FAMILIES.items():
        assert family.name == name
        assert importlib.import_module(f"{family.package}.family").FAMILY is family
        assert family.default_preset in family.presets and family.tiny_preset in family.presets
        assert family_of(family.preset_config(family.tiny_preset, vocab_size=64)) is family
    assert get_family("sha_rnn").tiny_preset == "sha_rnn_tiny"
    assert get_family("transformer_xl").tiny_preset == "tiny"
    assert tiny_flags("sha_rnn") == ["--model_family=sha_rnn", "--preset=sha_rnn_tiny",
                                     "--optimizer=lamb_sharnn"]


@pytest.mark.parametrize("changes,problem", [
    ({"name": "sha_rnn"}, "the name 'sha_rnn' is taken"),
    ({"presets": {"lstm_tiny": {}, PRESET: {}}},
     "the sha_rnn family has the preset(s) ['lstm_tiny']"),
    ({"config_class": ShaRnnConfig}, "the sha_rnn family has the config class ShaRnnConfig"),
    ({"default_preset": "wt2_base"}, "its default_preset 'wt2_base' is not one of its presets"),
    ({"tiny_preset": "lstm_tiny"}, "its tiny_preset 'lstm_tiny' is not one of its presets"),
])
def test_register_refuses_a_taken_name_preset_or_config_class(changes, problem):
    before = _snapshot()
    with pytest.raises(ValueError, match="cannot register the model family") as raised:
        register_family(lstm_copy(**changes))
    assert problem in str(raised.value)
    assert _snapshot() == before


def test_one_error_names_every_problem():
    family = lstm_copy(name="transformer_xl", presets={"tiny": {}}, default_preset="tiny",
                       tiny_preset="tiny", config_class=get_family("transformer_xl").config_class)
    with pytest.raises(ValueError) as raised:
        register_family(family)
    assert str(raised.value) == (
        "cannot register the model family 'transformer_xl': the name 'transformer_xl' is "
        "taken; the transformer_xl family has the preset(s) ['tiny']; the transformer_xl "
        "family has the config class ModelConfig (subclass it for a family of its own)")
    with pytest.raises(TypeError, match="expects a Family, got dict"):
        register_family({"name": NAME})


def test_unregister_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="cannot unregister the model family 'lstm_copy': it "
                                         r"is not registered; registered: \['sha_rnn', "):
        unregister_family(NAME)


def test_a_registered_family_is_found_like_the_built_in_ones():
    before = _snapshot()
    family = lstm_copy()
    config = family.preset_config(vocab_size=64)
    assert register_family(family) is family
    try:
        assert list(FAMILIES)[-1] == NAME and get_family(NAME) is family
        module = LstmCopyConfig.__module__  # no package given: its config class's
        assert family.package == (module.rpartition(".")[0] or module)
        assert preset_family(PRESET) is family
        # The most specific class wins: the subclass is lstm_copy's, its base sha_rnn's.
        assert family_of(config) is family
        assert family_of(ShaRnnConfig(**config.to_dict())) is get_family("sha_rnn")
        with pytest.raises(ValueError, match=f"--preset={PRESET} is a {NAME} preset but "
                                             "--model_family=sha_rnn"):
            get_family("sha_rnn").check_preset(PRESET)
        with pytest.raises(ValueError, match="the name 'lstm_copy' is taken"):
            register_family(family)
    finally:
        assert unregister_family(NAME) is family
    assert _snapshot() == before
    assert preset_family(PRESET) is None
    assert family_of(config) is get_family("sha_rnn")  # its base class's family again
    with pytest.raises(TypeError, match="expects a model family's config .*, got dict"):
        family_of({})


def test_registered_unregisters_after_an_error():
    from training.setup.config import TrainConfig

    field = TrainConfig.__dataclass_fields__["model_family"]
    before, metadata = _snapshot(), field.metadata
    with pytest.raises(RuntimeError):
        with registered(lstm_copy()):
            assert NAME in FAMILIES
            raise RuntimeError
    assert _snapshot() == before and field.metadata is metadata


def test_a_registered_family_gets_train_py_flags(word_data, tmp_path):
    from tests.helpers.trainers import family_config
    from training.setup.config import ConfigError, TrainConfig

    with registered(lstm_copy()):
        config = family_config(word_data, tmp_path / "run", NAME, "--num_layers=3")
        assert (config.model_family, config.preset) == (NAME, PRESET)
        assert type(config.model) is LstmCopyConfig and config.model.num_layers == 3
        assert config.model.dropout == 0.0 and config.model.attention_layers == ()
        assert TrainConfig.from_dict(config.to_dict()) == config
        with pytest.raises(ConfigError, match="--num_heads is a flag of "
                                              "--model_family=transformer_xl"):
            family_config(word_data, tmp_path / "run", NAME, "--num_heads=2")
        with pytest.raises(ConfigError, match=f"--preset=lstm_tiny is a sha_rnn preset but "
                                              f"--model_family={NAME}"):
            family_config(word_data, tmp_path / "run", NAME, "--preset=lstm_tiny")
    with pytest.raises(ValueError, match=f"unknown model family '{NAME}'"):
        TrainConfig.from_dict(config.to_dict())


@pytest.mark.slow
def test_a_family_registered_at_run_time_trains_evaluates_and_generates(word_data, tmp_path):
    import data_utils
    from serving.decoder import Decoder
    from serving.evaluation import evaluate_run
    from serving.generation import generate_text, load_run
    from tests.helpers.trainers import family_config
    from training.run.loop import read_training_log, train
    from training.setup.config import TrainConfig

    model_dir = tmp_path / "run"
    meta = data_utils.load_meta(str(word_data))
    with registered(lstm_copy()):
        config = family_config(word_data, model_dir, NAME, "--max_steps=12", "--log_interval=2",
                               "--eval_interval=0", "--checkpoint_interval=0")
        metrics = train(config)
        # Trains: a finite loss that falls.
        losses = [row["loss"] for row in read_training_log(model_dir / "training_log.log")]
        assert len(losses) == 6 and np.isfinite(losses).all()
        assert losses[-1] < losses[0] - 0.3, losses
        # Evaluates: the run loads as the family's and scores every transition of the split,
        # to the figure the trainer wrote for the same checkpoint.
        run = load_run(str(model_dir))
        assert run.config.model_family == NAME and type(run.config.model) is LstmCopyConfig
        assert run.model.family == NAME
        result = evaluate_run(run, split="valid")
        trainer = metrics["best"]["valid"]
        assert result["model_family"] == NAME
        assert result["tokens"] == trainer["tokens"] == meta["splits"]["valid"]["ids"] - 1
        np.testing.assert_allclose(result["nll"], trainer["nll"], rtol=1e-12)
        assert np.isfinite(result["nll"]) and result["nll"] < np.log(meta["vocab_size"])
        # Generates: ids in [0, V), the greedy first token the model's own argmax.
        prompt = [5, 17, 3, 40, 8]
        decoder = Decoder(run.model)
        tokens = decoder.generate(prompt, 6, num_samples=2, seed=3)
        assert tokens.shape == (2, 6) and ((0 <= tokens) & (tokens < meta["vocab_size"])).all()
        np.testing.assert_array_equal(tokens, decoder.generate(prompt, 6, num_samples=2, seed=3))
        hidden, _ = run.model(np.array([prompt], np.int32), run.model.initial_state(1, 0),
                              training=False)
        expected = int(np.argmax(np.asarray(run.model.log_probs(hidden[:, -1:]))[0, 0]))
        assert decoder.generate(prompt, 1, greedy=True)[0, 0] == expected
        assert isinstance(generate_text(run, "the game", 4, greedy=True), str)
        print(f"{NAME}: losses {np.round(losses, 3).tolist()}; valid nll {result['nll']!r} "
              f"over {result['tokens']} tokens (metrics.json {trainer['nll']!r}); "
              f"generated {tokens.tolist()}")
    assert NAME not in FAMILIES
    with pytest.raises(ValueError, match=f"unknown model family '{NAME}'"):
        TrainConfig.load(str(model_dir))
