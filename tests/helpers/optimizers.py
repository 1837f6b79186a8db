"""Checks shared by the tests of the project's own Keras optimizers, and an optimizer
registered for a test."""

import contextlib
import types

import numpy as np


def check_resumes_from_slots(make_optimizer, start, grads, directory, split=3):
    """An optimizer restored from a checkpoint after `split` steps continues exactly.

    Args:
        make_optimizer: () -> a fresh optimizer (same settings each call).
        start: initial weight arrays; grads: one list of gradient arrays per step.
        directory: where the checkpoint is written.
    """
    import keras
    import tensorflow as tf

    def variables(values):
        return [keras.Variable(w, name=f"w{i}") for i, w in enumerate(values)]

    straight, want = make_optimizer(), variables(start)
    straight.build(want)
    for step_grads in grads:
        straight.apply([tf.constant(g) for g in step_grads], want)

    first, weights = make_optimizer(), variables(start)
    first.build(weights)
    for step_grads in grads[:split]:
        first.apply([tf.constant(g) for g in step_grads], weights)
    path = tf.train.Checkpoint(weights=weights, optimizer=first).write(str(directory / "ckpt"))

    second, restored = make_optimizer(), variables([np.zeros_like(w) for w in start])
    second.build(restored)
    tf.train.Checkpoint(weights=restored, optimizer=second).read(path).assert_consumed()
    assert int(second.iterations.numpy()) == split
    for step_grads in grads[split:]:
        second.apply([tf.constant(g) for g in step_grads], restored)
    for got, expected in zip(restored, want):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def run_steps(optimizer, start, grads, slots=(), jit=False):
    """Applies `optimizer` to fresh variables holding `start`, one step per entry of `grads`.

    Args:
        slots: names of the optimizer's slot lists to record (e.g. "_accumulators").
        jit: compile the update with XLA.

    Returns:
        One tuple per step: (weight arrays, then one list of arrays per slot name).
    """
    import keras
    import tensorflow as tf

    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer.build(variables)
    apply = tf.function(lambda g: optimizer.apply(g, variables), jit_compile=jit)
    seen = []
    for step_grads in grads:
        apply([tf.constant(g) for g in step_grads])
        seen.append(([v.numpy() for v in variables],
                     *[[s.numpy() for s in getattr(optimizer, name)] for name in slots]))
    return seen


@contextlib.contextmanager
def registered_optimizer(spec):
    """Adds `spec` to the optimizer table (training/optimizers/) for the `with` block.

    TrainConfig's `optimizer` field holds as its choices the optimizers of the table
    when it was defined (train.py's --optimizer takes them from there): for the block,
    they also hold the new one's name. Its options become fields and flags of their own
    (`TrainConfig.complete()` follows the table).
    """
    from training.optimizers import OPTIMIZERS
    from training.setup.config import TrainConfig

    if spec.name in OPTIMIZERS:
        raise ValueError(f"optimizer {spec.name} is registered already")
    field = TrainConfig.__dataclass_fields__["optimizer"]
    metadata = field.metadata
    OPTIMIZERS[spec.name] = spec
    try:
        field.metadata = types.MappingProxyType(
            {**metadata, "choices": (*metadata["choices"], spec.name)})
        yield spec
    finally:
        field.metadata = metadata
        del OPTIMIZERS[spec.name]
