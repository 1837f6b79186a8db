"""An exponential moving average of the weights, used for evaluation (Polyak averaging).

`WeightAverage` keeps a shadow copy of every weight of the model's weights group
(`model.interface.WEIGHTS_GROUP`: not the PAR architecture logits nor any other
plug-in group) and moves it after every optimizer update the compiled training
step applies (training/run/trainer.py):

    ema = d * ema + (1 - d) * w,    d = min(D, (1 + n) / (10 + n))

with D = --ema_decay and n the number of updates averaged before this one: the
`num_updates` warm-up of TensorFlow's `tf.train.ExponentialMovingAverage`, so
that the early average is not held back by the initial weights (d is 0.1 at the
first update, 0.5 at the ninth, D from n = (10 D - 1) / (1 - D) on). A step whose
update was skipped (a non-finite loss or gradient) moves nothing; a step with
gradient accumulation (--batch_split) applies one update and moves it once.

The evaluations of a run (valid, test, the text samples, the best checkpoint)
happen inside `swapped_in()`: the averages are copied into the model's weights,
and the live weights are put back, bit for bit, afterwards. Averaged iterates
(Polyak & Juditsky 1992) usually evaluate better than the last one at the same
step.

Placement: the averages and the update counter are non-trainable variables of
this module, which the trainer's checkpoints hold as `weight_average` beside the
model (`Checkpointer(weight_average=...)`), never among the model's own
variables: the model's checkpoint layout, the best checkpoint's and a `.keras`
export are the same with or without it, and the best checkpoint holds the
averaged weights in the model's places. Under a tf.distribute strategy the
averages are made in its scope as ON_READ variables with ONLY_FIRST_REPLICA
aggregation: every replica holds the same weights (they apply the same summed
gradients), so each one moves its own copy from its own weights with no
communication, a read outside the replicas (the swap, a checkpoint) takes the
first replica's copy, and a restore writes every copy. The counter is a host
variable, as `TrainState.step` is.
"""

import contextlib

import keras
import tensorflow as tf

# The warm-up of tf.train.ExponentialMovingAverage: d = min(D, (1 + n) / (10 + n)).
WARMUP_OFFSET = 10.0


def warmup_decay(decay, num_updates):
    """The decay of the update after `num_updates` earlier ones (tensors or numbers)."""
    n = tf.cast(num_updates, tf.float32)
    return tf.minimum(tf.constant(decay, tf.float32), (1.0 + n) / (WARMUP_OFFSET + n))


class WeightAverage(tf.Module):
    """Exponential moving averages of a model's weights (see the module docstring).

    Create it after the model and its optimizers; the averages start at the
    weights' current values (`reset` starts them again, e.g. after weights were
    loaded into the model).

    Args:
        weights: the variables to average (the weights group, in order).
        decay: D, in (0, 1).
        strategy: the run's tf.distribute strategy (the averages are made in
            its scope).
    """

    def __init__(self, weights, decay, strategy):
        super().__init__(name="weight_average")
        if not 0 < decay < 1:
            raise ValueError(f"the decay of a weight average must be in (0, 1), got {decay}")
        self.decay = float(decay)
        self._strategy = strategy
        # The tf.Variables under the Keras variables (mirrored under a strategy).
        self._weights = [w.value if isinstance(w, keras.Variable) else w for w in weights]
        with strategy.scope():
            self.averages = [
                tf.Variable(tf.convert_to_tensor(w), trainable=False, name=f"ema/{_name(named)}",
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                for named, w in zip(weights, self._weights)]
        # Host variable (outside the scope): never mirrored.
        self.num_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="ema_updates")

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # The averages (index keys, as the model's `model/<i>`) and the counter; never
        # the live weights, which the checkpoint holds under `model/` already.
        children = {str(i): v for i, v in enumerate(self.averages)}
        children["num_updates"] = self.num_updates
        return children

    def update(self):
        """Moves every average towards its weight (inside the compiled step, in the
        cross-replica context, after the optimizer applied its update)."""
        decay = warmup_decay(self.decay, self.num_updates)

        def move(decay):
            # Each replica its own copies: its weights equal every other replica's.
            for average, weight in zip(self.averages, self._weights):
                d = tf.cast(decay, average.dtype)
                average.assign(d * tf.convert_to_tensor(average)
                               + (1.0 - d) * tf.convert_to_tensor(weight))

        self._strategy.run(move, args=(decay,))
        self.num_updates.assign_add(1)

    def reset(self):
        """Starts the averages again at the weights' current values (host side)."""
        for average, weight in zip(self.averages, self._weights):
            average.assign(weight.read_value())
        self.num_updates.assign(0)

    @contextlib.contextmanager
    def swapped_in(self):
        """Context in which the model's weights are the averages (host side).

        The live weights are kept as tensors and assigned back on exit, also
        when the body raises: afterwards they are bit for bit what they were.
        """
        live = [w.read_value() for w in self._weights]
        for average, weight in zip(self.averages, self._weights):
            weight.assign(average.read_value())
        try:
            yield
        finally:
            for value, weight in zip(live, self._weights):
                weight.assign(value)


def _name(variable):
    """The weight's path (Keras) or name, without TensorFlow's ':0'."""
    name = getattr(variable, "path", None) or variable.name
    return name.split(":")[0]
