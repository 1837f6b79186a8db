"""Progressive freezing of the PAR search (training/plugins/par_search/, docs/freezing.md).

A frozen block computes its chosen candidate alone: training the supernet
on from a freeze equals training the derived fixed network with the carried
weights and optimizer slots; the traced graph of a frozen block holds no op
of its other candidates; freezing waits for the architecture warm-up and a
whole window of steps; the trainer traces again once per change of the
frozen set; the frozen set survives loading the run, export and derivation.
(Exact resume across a freeze: tests/training/test_resume.py.)
"""

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.trainers import family_config, first_batches, make_trainer

STEPS_BEFORE, STEPS_AFTER = 3, 4
CHOICES = (0, 1)  # block 0 frozen to attention, block 1 to dense: "af"


def _key(path):
    """A variable's path without the model's name, a supernet candidate's as the fixed block's."""
    path = path.split("/", 1)[1] if path.startswith("transformer_xllm") else path
    return re.sub(r"^block_(\d+)/([a-z]+)/", r"block_\1_\2/", path)


@pytest.fixture(scope="module")
def frozen_and_derived(tiny_data, tmp_path_factory):
    """The supernet trained STEPS_BEFORE steps, frozen to "af", then STEPS_AFTER steps;
    the derived network "af" given the supernet's weights, optimizer slots, step and
    memories at the freeze, then the same STEPS_AFTER steps."""
    root = tmp_path_factory.mktemp("freezing")
    supernet = make_trainer(family_config(tiny_data, root / "supernet", "transformer_xl",
                                          "--freeze_threshold=0"))
    batches = first_batches(supernet.config, STEPS_BEFORE + STEPS_AFTER)
    for inputs, targets in batches[:STEPS_BEFORE]:
        supernet.train_step(inputs, targets)
    traces_before = supernet.traces
    for block, choice in enumerate(CHOICES):
        supernet.model.freeze_block(block, choice)
    # Variables and slots of the supernet's candidates by the derived network's names.
    weights = supernet.optimizers["weights"]
    carried = {_key(v.path): v for v in supernet.model.weight_variables}
    derived = make_trainer(family_config(tiny_data, root / "derived", "transformer_xl",
                                         "--architecture=af"))
    target = derived.optimizers["weights"]
    for v in derived.model.weight_variables:
        source = carried[_key(v.path)]
        v.assign(source)
        for slots in ("_momentums", "_velocities"):
            getattr(target, slots)[target._get_variable_index(v)].assign(
                getattr(weights, slots)[weights._get_variable_index(source)])
    target.iterations.assign(weights.iterations)
    derived.state.step.assign(supernet.state.step)
    # The derived network's memories are those of the blocks frozen to attention.
    derived.model_state = [m for m, choice in zip(supernet.model_state, CHOICES) if choice == 0]
    frozen_weights = {k: v.numpy().copy() for k, v in carried.items()}
    losses = {"supernet": [], "derived": []}
    for inputs, targets in batches[STEPS_BEFORE:]:
        losses["supernet"].append(supernet.train_step(inputs, targets)["loss"])
        losses["derived"].append(derived.train_step(inputs, targets)["loss"])
    return dict(supernet=supernet, derived=derived, losses=losses, carried=carried,
                frozen_weights=frozen_weights, traces_before=traces_before)


@pytest.mark.slow
def test_training_on_from_a_freeze_equals_training_the_derived_network(frozen_and_derived):
    run = frozen_and_derived
    np.testing.assert_allclose(run["losses"]["supernet"], run["losses"]["derived"], rtol=1e-6)
    assert len(set(run["losses"]["derived"])) == STEPS_AFTER  # the steps did train
    moved = 0
    for v in run["derived"].model.weight_variables:
        got = run["carried"][_key(v.path)].numpy()
        np.testing.assert_allclose(got, v.numpy(), rtol=1e-5, atol=1e-7, err_msg=v.path)
        moved += not np.array_equal(got, run["frozen_weights"][_key(v.path)])
    assert moved > 10
    # The unchosen candidates (block 0's dense, block 1's attention) and the frozen
    # logits were not touched after the freeze.
    model = run["supernet"].model
    for v in model.blocks[0].dense_layer.variables + model.blocks[1].attention_layer.variables \
            + [b.arch_logits for b in model.blocks]:
        np.testing.assert_array_equal(v.numpy(), run["frozen_weights"].get(_key(v.path),
                                                                           v.numpy()))


@pytest.mark.slow
def test_retraced_once_for_the_freeze_and_derivation_follows_it(frozen_and_derived):
    supernet = frozen_and_derived["supernet"]
    assert supernet.traces == frozen_and_derived["traces_before"] + 1
    assert supernet._step_fn.experimental_get_tracing_count() == 1
    assert supernet.model.derived_architecture == "af"
    plugin = supernet.plugins[0]
    assert plugin.all_frozen and plugin.inactive_variables()


def _op_names(model, frozen):
    model.set_frozen(frozen)
    inputs = tf.zeros([2, 5], tf.int32)
    fn = tf.function(lambda: model(inputs, model.initial_state(2), training=True))
    return [f"{op.name}:{op.type}" for op in fn.get_concrete_function().graph.get_operations()]


@pytest.mark.slow
def test_a_frozen_block_computes_only_its_candidate():
    from model.families import build_model
    from model.transformer_xl.presets import preset_config

    def count(names, block, candidate):
        scope = re.compile(rf"(^|/)block_{block}(_\d+)?/{candidate}(_\d+)?/")
        return sum(bool(scope.search(name)) for name in names)

    def own(names, block):  # the block's ops outside its candidates: noise, mixing
        scope = re.compile(rf"(^|/)block_{block}(_\d+)?/(?!(attention|dense)(_\d+)?/)")
        return [name for name in names if scope.search(name)]

    # Soft search computes every candidate in the step's graph.
    model = build_model(preset_config("tiny", num_blocks=2, search_mode="soft"))
    searching = _op_names(model, [None, None])
    frozen = _op_names(model, [1, 0])  # block 0: dense, block 1: attention
    assert count(searching, 0, "attention") > 20 and count(searching, 0, "dense") > 20
    assert count(frozen, 0, "attention") == 0 and count(frozen, 1, "dense") == 0
    assert count(frozen, 0, "dense") > 20 and count(frozen, 1, "attention") > 20
    assert len(frozen) < 0.7 * len(searching)
    # No Gumbel noise, mixing or switch left in a frozen block.
    assert any("random" in name for name in own(searching, 0))
    assert not [n for b in (0, 1) for n in own(frozen, b) if "random" in n or "Softmax" in n]
    # Hard search runs the sampled candidate in a switch; a frozen block has none.
    model = build_model(preset_config("tiny", num_blocks=2, search_mode="hard"))
    assert any("Case" in n for n in own(_op_names(model, [None, None]), 0))
    assert not [n for b in (0, 1) for n in own(_op_names(model, [1, 0]), b)
                if "Case" in n or "random" in n]


def _plugin_at(tiny_data, tmp_path, **flags):
    args = [f"--{k}={v}" for k, v in flags.items()]
    trainer = make_trainer(family_config(tiny_data, tmp_path, "transformer_xl", *args))
    return trainer, trainer.plugins[0]


def test_freezing_waits_for_the_warm_up_and_a_whole_window(tiny_data, tmp_path):
    trainer, plugin = _plugin_at(tiny_data, tmp_path, arch_warmup_steps=10, max_steps=100,
                                 freeze_threshold=0.9, freeze_window=5)
    model = trainer.model
    # Logits as decided as they get, from the start: still nothing may freeze
    # during the warm-up (they are untrained) nor before 5 observed steps.
    model.blocks[0].arch_logits.assign([0.0, 9.0, 0.0])
    model.blocks[1].arch_logits.assign([9.0, 0.0, 0.0])
    for step in range(1, 11):
        assert plugin.after_step(step) == [], step
    for step in range(11, 15):
        assert plugin.after_step(step) == [], step
    events = plugin.after_step(15)
    assert [(e["frozen_block"], e["frozen_choice"]) for e in events] == [(0, 1), (1, 0)]
    assert model.frozen_blocks == (1, 0)
    assert [f["step"] for f in plugin.freezes()] == [15, 15]


def test_a_dip_below_the_threshold_or_a_changed_choice_restarts_the_window(tiny_data, tmp_path):
    trainer, plugin = _plugin_at(tiny_data, tmp_path, arch_warmup_steps=0, max_steps=100,
                                 freeze_threshold=0.9, freeze_window=3, num_blocks=1,
                                 architecture="supernet")
    logits = trainer.model.blocks[0].arch_logits
    for step, value in [(1, [9, 0, 0]), (2, [9, 0, 0]), (3, [1, 0, 0]),  # dip at 3
                        (4, [9, 0, 0]), (5, [0, 9, 0]),  # another choice at 5
                        (6, [0, 9, 0])]:
        logits.assign(np.array(value, np.float32))
        assert plugin.after_step(step) == [], step
    logits.assign([0.0, 9.0, 0.0])
    assert [e["frozen_choice"] for e in plugin.after_step(7)] == [1]
    # The counters are saved with the checkpoints.
    assert plugin.freeze_state.frozen_step.numpy().tolist() == [7]


def test_freezing_off_and_uniform_logits_never_freeze(tiny_data, tmp_path):
    trainer, plugin = _plugin_at(tiny_data, tmp_path / "off", arch_warmup_steps=0,
                                 freeze_threshold=0, freeze_window=1)
    trainer.model.blocks[0].arch_logits.assign([9.0, 0.0, 0.0])
    assert all(plugin.after_step(s) == [] for s in range(1, 5))
    trainer, plugin = _plugin_at(tiny_data, tmp_path / "uniform", arch_warmup_steps=0,
                                 freeze_threshold=0.51, freeze_window=1)
    assert all(plugin.after_step(s) == [] for s in range(1, 5))  # 1/3 each
    assert trainer.model.frozen_blocks == (None, None)


def test_threshold_flags_are_checked(tiny_data, tmp_path):
    from training.setup.config import ConfigError

    for flag, message in (("--freeze_threshold=0.4", "freeze_threshold"),
                          ("--freeze_threshold=1.5", "freeze_threshold"),
                          ("--freeze_window=0", "freeze_window")):
        with pytest.raises(ConfigError, match=message):
            family_config(tiny_data, tmp_path, "transformer_xl", flag)


@pytest.mark.slow
def test_the_frozen_set_survives_loading_export_and_derivation(tiny_data, tmp_path):
    import keras

    from serving import export, generation
    from training.run.loop import read_training_log, train

    config = family_config(tiny_data, tmp_path / "run", "transformer_xl",
                           "--num_blocks=3", "--arch_warmup_steps=2", "--arch_learning_rate=0.5",
                           "--freeze_threshold=0.6", "--freeze_window=2", "--max_steps=24",
                           "--checkpoint_interval=8", "--eval_interval=8",
                           f"--logdir={tmp_path / 'logs'}")
    results = train(config)
    frozen = results["derivation"]["freezes"]
    assert frozen, "the flags should freeze a block within 24 steps"
    architecture = json.loads((tmp_path / "run" / "architecture.json").read_text())
    assert architecture["freezes"] == frozen
    log = read_training_log(tmp_path / "run" / "training_log.log")
    events = [(r["step"], r["frozen_block"]) for r in log if "frozen_block" in r]
    assert events == [(f["step"], f["block"]) for f in frozen]
    scalars = [(e.step, v.tag) for path in (tmp_path / "logs" / "train").iterdir()
               for e in tf.compat.v1.train.summary_iterator(str(path)) for v in e.summary.value]
    assert [s for s, tag in scalars if tag == "train/frozen_block"] == [f["step"] for f in frozen]
    assert sum(tag == "train/frozen_probability" for _, tag in scalars) == len(frozen)
    pattern = {f["block"]: "afi".index(f["choice"]) for f in frozen}
    expected = tuple(pattern.get(b) for b in range(3))
    for checkpoint in ("latest", "best"):
        run = generation.load_run(str(tmp_path / "run"), checkpoint=checkpoint)
        assert run.model.frozen_blocks == expected, checkpoint
    path = export.export_keras(run, str(tmp_path / "model.keras"))
    loaded = keras.saving.load_model(path).lm  # the language model of the exported package
    assert loaded.frozen_blocks == expected
    for f in frozen:
        assert loaded.derived_architecture[f["block"]] == f["choice"]
    assert results["architecture"] == loaded.derived_architecture


@pytest.mark.slow
def test_then_retrain_trains_the_derived_architecture_from_scratch(tiny_data, tmp_path):
    from training.plugins.par_search.retrain import retrain_config
    from training.run.loop import train
    from training.setup.config import TrainConfig

    config = family_config(tiny_data, tmp_path / "search", "transformer_xl",
                           "--arch_warmup_steps=2", "--arch_learning_rate=0.5",
                           "--freeze_threshold=0.6", "--freeze_window=2", "--max_steps=40",
                           "--then_retrain", f"--logdir={tmp_path / 'logs'}")
    results = train(config)
    freezes = results["derivation"]["freezes"]
    assert len(freezes) == 2, "both blocks should freeze well within 40 steps"
    # The search ended at the last freeze, evaluated and saved there.
    assert results["step"] == max(f["step"] for f in freezes) < 40
    retrain = results["retrain"]
    assert retrain["model_dir"] == str(tmp_path / "search") + "_retrain"
    assert retrain["architecture"] == results["architecture"]
    saved = json.loads((tmp_path / "search" / "metrics.json").read_text())
    assert saved["retrain"]["best"]["valid"]["perplexity"] == retrain["best"]["valid"]["perplexity"]
    retrained = TrainConfig.load(str(tmp_path / "search_retrain"))
    assert retrained == retrain_config(config, results["architecture"])
    assert retrained.model.architecture == results["architecture"]
    assert retrained.search.arch_warmup_steps == 0 and not retrained.search.then_retrain
    assert retrained.logdir == str(tmp_path / "logs") + "_retrain"
    metrics = json.loads((tmp_path / "search_retrain" / "metrics.json").read_text())
    assert metrics["step"] == 40 and "derivation" not in metrics  # trained from scratch, whole


@pytest.mark.slow
def test_under_xla_the_step_is_compiled_again_once_per_change_of_the_frozen_set(tiny_data,
                                                                                tmp_path):
    trainer = make_trainer(family_config(tiny_data, tmp_path, "transformer_xl", "--xla",
                                         "--freeze_threshold=0"))
    batches = first_batches(trainer.config, 5)
    losses = [trainer.train_step(*batches[0])["loss"]]
    trainer.model.freeze_block(0, 1)
    losses += [trainer.train_step(*b)["loss"] for b in batches[1:3]]
    trainer.model.freeze_block(1, 0)
    losses += [trainer.train_step(*b)["loss"] for b in batches[3:]]
    assert trainer.traces == 3  # the start and two freezes, not one per step
    assert trainer._step_fn.experimental_get_tracing_count() == 1
    assert np.all(np.isfinite(losses)) and trainer.model.derived_architecture == "fa"
