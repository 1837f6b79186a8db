"""--ema_decay: the moving average of the weights that evaluations use (training/run/ema.py).

The average after real training steps equals a NumPy transcription of
`ema = d ema + (1 - d) w`, `d = min(D, (1 + n) / (10 + n))` over the weights
recorded after each step (a skipped step and gradient accumulation included).
Three short runs of `train` share one build: with the average, without it, and
with it killed after its checkpoint at step 4 and started again. Without it the
run trains exactly as with it (the average never touches the live weights) and
its checkpoints hold nothing more; with it every evaluation and sample sees the
averages, the best checkpoint holds them, and the resumed run ends bit for bit
as the uninterrupted one. Two mirrored CPU replicas average as one device does.
"""

import json
import os

import numpy as np
import pytest

from tests.helpers.faults import InjectNonFinite
from tests.helpers.trainers import (
    StopAfter,
    Stopped,
    as_arrays,
    assert_close,
    first_batches,
    make_trainer,
)

DECAY = 0.9
STEPS = 8
_RUN = dict(ema_decay=DECAY, model_num_blocks=2, max_steps=STEPS, eval_interval=4,
            checkpoint_interval=4, eval_max_records=4, log_interval=5, sample_tokens=8)
_AVERAGE_KEY = "weight_average/"


def _checkpoint(path):
    """name -> value of every tensor of a checkpoint (its object graph aside)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
            if "OBJECT_GRAPH" not in n}


def _holds_averages(trainer):
    weights = trainer.model.variable_groups()["weights"]
    return all(np.array_equal(np.asarray(w), np.asarray(a.read_value()))
               for w, a in zip(weights, trainer.weight_average.averages))


@pytest.mark.slow
def test_average_after_real_steps_is_the_formula(make_config, monkeypatch):
    """D 0.2: d is 0.1 and 0.18 at the first two updates (warm-up), then D. Step 3's loss
    is NaN: it applies nothing and moves nothing. Each step is two micro-batches."""
    from training import plugins

    decay, skipped = 0.2, 3
    registered = plugins.registered
    monkeypatch.setattr(InjectNonFinite, "SPEC", [(skipped, "loss")])
    monkeypatch.setattr(plugins, "registered", lambda: (*registered(), InjectNonFinite))
    config = make_config(ema_decay=decay, model_num_blocks=2, batch_split=2)
    trainer = make_trainer(config)
    groups = trainer.model.variable_groups()
    weights, average = groups["weights"], trainer.weight_average
    # The weights group only: the architecture logits are not averaged.
    assert "arch" in groups and len(average.averages) == len(weights)
    assert all(a.name.startswith(f"ema/{w.path}") and a.shape == w.shape
               for a, w in zip(average.averages, weights))
    expected, updates = as_arrays(weights), 0
    for step, (inputs, targets) in enumerate(first_batches(config, 5), start=1):
        before = as_arrays(weights)
        out = trainer.train_step(inputs, targets)
        after = as_arrays(weights)
        if step == skipped:
            assert not out["finite"] and all(np.array_equal(a, b) for a, b in zip(after, before))
        else:
            assert out["finite"]
            d = min(decay, (1 + updates) / (10 + updates))
            expected = [d * e + (1 - d) * w for e, w in zip(expected, after)]
            updates += 1
        assert_close(as_arrays(average.averages), expected, 1e-6, f"step {step}")
    assert int(average.num_updates.numpy()) == updates == 4
    # The averages lag the weights (else the comparison would prove nothing).
    assert not all(np.array_equal(a, w) for a, w in zip(expected, as_arrays(weights)))


@pytest.fixture(scope="module")
def runs(tiny_config_factory, tmp_path_factory):
    """The three runs: name -> (model_dir, metrics); and what each evaluation and sample
    of the averaged run saw: (method, whether the model held the averages)."""
    from training.run.loop import train
    from training.run.trainer import Trainer

    root = tmp_path_factory.mktemp("ema")
    seen = []

    def spying(name):
        original = getattr(Trainer, name)

        def call(self, *args, **kwargs):
            seen.append((name, _holds_averages(self)))
            return original(self, *args, **kwargs)

        return call

    out = {}
    with pytest.MonkeyPatch.context() as patch:
        for name in ("evaluate", "sample_text"):
            patch.setattr(Trainer, name, spying(name))
        config = tiny_config_factory(root / "on", **_RUN)
        out["on"] = (root / "on", train(config))
    config = tiny_config_factory(root / "off", **dict(_RUN, ema_decay=0.0))
    out["off"] = (root / "off", train(config))
    config = tiny_config_factory(root / "resumed", **_RUN)
    with pytest.raises(Stopped):  # killed at step 5, after the checkpoint of step 4
        train(config, callbacks=[StopAfter(5)])
    assert not (root / "resumed" / "metrics.json").exists()
    out["resumed"] = (root / "resumed", train(config))
    return out, seen


def _losses(model_dir):
    from training.run.loop import read_training_log

    return [(row["step"], row["loss"]) for row in read_training_log(model_dir / "training_log.log")
            if "loss" in row]


@pytest.mark.slow
def test_off_trains_exactly_as_on_and_saves_nothing_more(runs):
    (on, _), (off, _) = runs[0]["on"], runs[0]["off"]
    assert _losses(off) == _losses(on) and len(_losses(on)) == 2
    for step in (4, STEPS):
        with_average, without = _checkpoint(on / f"ckpt-{step}"), _checkpoint(off / f"ckpt-{step}")
        averages = {k for k in with_average if k.startswith(_AVERAGE_KEY)}
        assert averages and not [k for k in without if k.startswith(_AVERAGE_KEY)]
        assert set(without) == set(with_average) - averages
        # Live weights, optimizer moments, memories, counters: bit for bit (the swaps at the
        # evaluations of steps 4 and 8 gave the live weights back exactly). Not the best
        # valid loss: the runs evaluated different weights.
        for key, value in without.items():
            if "best_" not in key:
                np.testing.assert_array_equal(with_average[key], value, err_msg=key)
        assert with_average[f"{_AVERAGE_KEY}num_updates/.ATTRIBUTES/VARIABLE_VALUE"] == step
    # The best checkpoint keeps the model's layout.
    assert set(_checkpoint(on / "best" / f"ckpt-{STEPS}")) == set(
        _checkpoint(off / "best" / f"ckpt-{STEPS}"))


@pytest.mark.slow
def test_evaluations_samples_and_the_best_checkpoint_use_the_averages(runs,
                                                                      tiny_config_factory):
    from model.families import build_model

    (on, metrics), seen = runs[0]["on"], runs[1]
    # valid and its sample at steps 4 and 8, then test at step 8: all with the averages
    # (after them the best checkpoint's weights are loaded to evaluate it, if not step 8's).
    assert seen[:5] == [("evaluate", True), ("sample_text", True)] * 2 + [("evaluate", True)]
    best = metrics["best"]["step"]
    assert best in (4, STEPS) and len(seen) == (5 if best == STEPS else 7)
    saved, best_saved = _checkpoint(on / f"ckpt-{best}"), _checkpoint(on / "best" / f"ckpt-{best}")
    model = build_model(tiny_config_factory(on, **_RUN).model)
    average_of = {id(w): i for i, w in enumerate(model.variable_groups()["weights"])}
    for i, variable in enumerate(model.variables):
        key = f"model/{i}/.ATTRIBUTES/VARIABLE_VALUE"
        if id(variable) in average_of:  # the average, in its weight's place
            want = saved[f"{_AVERAGE_KEY}{average_of[id(variable)]}/.ATTRIBUTES/VARIABLE_VALUE"]
        else:  # architecture logits, dropout RNG states: the live ones
            want = saved[key]
        np.testing.assert_array_equal(best_saved[key], want, err_msg=key)
    assert len(average_of) < len(model.variables)
    # The live weights of that step are not what the best checkpoint holds.
    assert not all(np.array_equal(best_saved[f"model/{i}/.ATTRIBUTES/VARIABLE_VALUE"],
                                  saved[f"model/{i}/.ATTRIBUTES/VARIABLE_VALUE"])
                   for i in range(len(model.variables)))


@pytest.mark.slow
def test_resume_with_the_average_is_bit_exact(runs):
    (on, metrics), (resumed, resumed_metrics) = runs[0]["on"], runs[0]["resumed"]
    assert _losses(resumed) == _losses(on)
    reference, got = _checkpoint(on / f"ckpt-{STEPS}"), _checkpoint(resumed / f"ckpt-{STEPS}")
    assert got.keys() == reference.keys()
    for key, value in reference.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    for which in ("last", "best"):
        assert resumed_metrics[which] == metrics[which], which


# Child: the same global batches through a one-device and a two-replica mirrored trainer
# from the same weights and averages (--ema_decay=0.5), then the swap and a checkpoint
# round trip on the mirrored one. Prints what to compare as JSON.
_MIRRORED_CHILD = r"""
import json, sys
from training.run.strategy import make_strategy
mirrored = make_strategy("mirrored", 2)  # before any TensorFlow op
import keras
import numpy as np
import tensorflow as tf
import data_utils
from tests.helpers.trainers import family_config, first_batches
from training.run.trainer import Trainer

tf.config.experimental.enable_op_determinism()
data_dir, root = sys.argv[1], sys.argv[2]
config = family_config(data_dir, f"{root}/run", "transformer_xl", "--ema_decay=0.5")
meta = data_utils.load_meta(data_dir)
one = Trainer(config, meta, tf.distribute.get_strategy())
two = Trainer(config.replace(strategy="mirrored", num_cpu_replicas=2), meta, mirrored)
for a, b in zip(two.model.variables, one.model.variables):
    a.assign(b)
two.reset_average()
for inputs, targets in first_batches(config, 3):
    one.train_step(inputs, targets)
    two.train_step(inputs, targets)

def copies(variable):  # each replica's copy (of a Keras variable: of its tf.Variable)
    if isinstance(variable, keras.Variable):
        variable = variable.value
    found = [np.asarray(c) for c in mirrored.experimental_local_results(variable)]
    assert len(found) == 2 and found[0].dtype == np.float32, found
    return found

def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))

weights = two.model.variable_groups()["weights"]
averages = [np.asarray(a.read_value()) for a in two.weight_average.averages]
reference = [np.asarray(a.read_value()) for a in one.weight_average.averages]
live = [copies(w) for w in weights]
report = {
    "replicas": two.replicas,
    "updates": [int(t.weight_average.num_updates.numpy()) for t in (one, two)],
    "diff": max(float(np.max(np.abs(a - b))) for a, b in zip(averages, reference)),
    "scale": max(float(np.max(np.abs(b))) for b in reference),
    "copies_equal": all(same(c, [c[0]] * len(c)) for c in map(copies, two.weight_average.averages)),
    "moved": not same(averages, [c[0] for c in live]),
}
with two.evaluation_weights():
    report["swapped_in"] = all(same(copies(w), [a, a]) for w, a in zip(weights, averages))
    report["valid"] = [two.evaluate("valid", 4)["nll"]]
with one.evaluation_weights():
    report["valid"].append(one.evaluate("valid", 4)["nll"])
report["swapped_back"] = all(same(copies(w), c) for w, c in zip(weights, live))
path = two.save()
two.reset_average()
two.restore(path)
report["restored"] = all(same(copies(a), [b, b]) for a, b in zip(two.weight_average.averages,
                                                                  averages))
report["restored_updates"] = int(two.weight_average.num_updates.numpy())
print("REPORT " + json.dumps(report))
"""


@pytest.mark.slow
def test_two_mirrored_replicas_average_as_one_device(tiny_data, tmp_path, run_python):
    done = run_python(["-c", _MIRRORED_CHILD, str(tiny_data), str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")][-1]
    report = json.loads(line[len("REPORT "):])
    assert report["replicas"] == 2 and report["updates"] == [3, 3]
    assert report["diff"] <= 1e-5 * max(report["scale"], 1.0), report
    # Each replica moved its own copy from its own weights: the copies agree bit for bit.
    assert report["copies_equal"] and report["moved"]
    assert report["swapped_in"] and report["swapped_back"]
    assert report["valid"][0] == pytest.approx(report["valid"][1], rel=1e-6)
    # A checkpoint holds one copy and a restore writes it to both replicas.
    assert report["restored"] and report["restored_updates"] == 3


@pytest.mark.parametrize("value", [1.0, -0.1])
def test_an_ema_decay_outside_0_1_is_one_line_naming_the_flag(make_config, tiny_data, tmp_path,
                                                              value):
    from absl import flags

    import train as train_cli
    from training.setup.config import ConfigError

    message = f"--ema_decay={value!r}: must be in [0, 1) (0: off; the usual values are 0.99 "
    with pytest.raises(ConfigError) as error:
        make_config(ema_decay=value)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'run'}",
        "--preset=tiny", f"--ema_decay={value:g}"])
    with pytest.raises(ConfigError) as error:
        train_cli.config_from_flags(fv)
    assert str(error.value).startswith(message)


def test_resuming_with_another_ema_decay_is_refused_in_one_line(make_config):
    from training.setup.checks import check_resume
    from training.setup.config import ConfigError

    first = make_config(ema_decay=0.9)
    os.makedirs(first.model_dir)
    first.save()
    assert check_resume(make_config(ema_decay=0.9))
    for value, shown in ((0.99, "ema_decay: 0.9 -> 0.99"), (0.0, "ema_decay: 0.9 -> 0.0")):
        with pytest.raises(ConfigError) as error:
            check_resume(make_config(ema_decay=value))
        line = str(error.value)
        assert "\n" not in line and f"different config ({shown})" in line, line
        assert "--overwrite" in line
    assert check_resume(make_config(ema_decay=0.0), overwrite=True) is False
