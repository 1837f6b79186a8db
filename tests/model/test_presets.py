"""Every preset of every family builds and takes a real training step.

Steps with the family's interface only (state in, state out, token NLL,
extra losses, the weights group), tiny batch, dropout as the preset has it:
the loss is finite and of the size of log(V) at the start (an adaptive
softmax puts more than log(V) on uniform random targets, most of which fall
in its tails), every weight that the loss reaches gets a finite gradient, a
step changes the weights, and three steps lower the deterministic loss of
the batch.
"""

import math

import numpy as np
import pytest

from model.families import FAMILIES

PRESETS = [(family.name, preset) for family in FAMILIES.values() for preset in family.presets]


@pytest.mark.slow
@pytest.mark.parametrize("family_name,preset", PRESETS)
def test_preset_takes_a_training_step(family_name, preset):
    import keras
    import tensorflow as tf

    family = FAMILIES[family_name]
    config = family.preset_config(preset)
    model = family.build(config)
    weights = model.variable_groups()["weights"]
    optimizer = keras.optimizers.Lamb(learning_rate=1e-3)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, (2, 9)).astype(np.int32)
    inputs, targets = tf.constant(ids[:, :-1]), tf.constant(ids[:, 1:])
    state = model.initial_state(2)

    def eval_loss():
        hidden, _ = model(inputs, state, training=False)
        return float(tf.reduce_mean(model.token_nll(hidden, targets)))

    start = eval_loss()
    log_v = math.log(config.vocab_size)
    assert math.isfinite(start) and 0.5 * log_v < start < 2.0 * log_v
    for step in range(3):
        with tf.GradientTape() as tape:
            hidden, new_state = model(inputs, state, training=True)
            loss = tf.reduce_mean(model.token_nll(hidden, targets))
            extra = model.extra_losses(hidden)
            if extra:
                loss += tf.add_n(extra)
        grads = tape.gradient(loss, weights)
        assert math.isfinite(float(loss))
        reached = [(g, v) for g, v in zip(grads, weights) if g is not None]
        assert len(reached) >= 0.9 * len(weights)
        assert all(np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g, _ in reached)
        before = [v.numpy().copy() for _, v in reached]
        optimizer.apply([g for g, _ in reached], [v for _, v in reached])
        if step == 0:
            changed = sum(not np.array_equal(b, v.numpy()) for b, (_, v) in zip(before, reached))
            assert changed >= 0.9 * len(reached)
    assert eval_loss() < start
    assert [tuple(s.shape) for s in new_state] == [tuple(s.shape) for s in state]
