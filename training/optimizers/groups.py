"""The optimizer groups of a run: the weights' group, then the plug-ins'.

A group (`training.plugins.base.OptimizerGroup`) is a list of variables with
its optimizer, L2 term and clipping norm. The weights' optimizer is
--optimizer's (training/optimizers) at the run's learning-rate schedule,
wrapped in a loss-scale optimizer under mixed_float16; an optimizer that
takes them (muon) is also given the hidden matrices among the weights
(`model.interface.is_hidden_matrix_by_role`). Every optimizer's own
cross-replica gradient sum is switched off: the trainer sums the gradients
once, before clipping (training/run/trainer.py documents the step).
"""

import keras

from model.interface import WEIGHTS_GROUP, is_hidden_matrix_by_role
from training import optimizers
from training.plugins.base import OptimizerGroup


def _no_aggregation(grads_and_vars):
    # Replaces the Keras optimizers' cross-replica gradient sum: our gradients
    # are summed (once) before clipping, which must see the global gradient.
    return list(grads_and_vars)


def _inner(optimizer):
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def make_groups(model, config, plugins, lr_schedule, step):
    """The weights' OptimizerGroup, then the plug-ins' (call inside strategy.scope()).

    Args:
        model: the run's model (language-model interface).
        config: TrainConfig.
        plugins: the run's plug-ins, in order.
        lr_schedule: step -> learning rate of the weights.
        step: the variable holding the index of the step being taken.
    """
    weights = list(model.variable_groups()[WEIGHTS_GROUP])
    decayed = {id(v) for v in model.weight_decay_variables()}
    not_decayed = [v for v in weights if id(v) not in decayed]
    matrices = [v for v in model.weight_decay_variables() if is_hidden_matrix_by_role(v)]
    spec = optimizers.get_optimizer(config.optimizer)

    def learning_rate():
        return lr_schedule(step)

    optimizer = spec.make(learning_rate, config, not_decayed, matrices)
    if config.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    l2 = config.weight_decay if spec.decay == optimizers.L2 else 0.0
    groups = [OptimizerGroup(
        name=WEIGHTS_GROUP, variables=weights, optimizer=optimizer, l2=l2,
        l2_variables=[v for v in weights if id(v) in decayed], clip_norm=config.clip_norm,
        learning_rate=learning_rate)]
    for plugin in plugins:
        groups.extend(plugin.optimizer_groups(step))
    for group in groups:
        _inner(group.optimizer)._all_reduce_sum_gradients = _no_aggregation
        group.optimizer.build(group.variables)
    return groups


def check_groups(model, groups):
    """Raises ValueError when a variable group of the model has no optimizer."""
    trained = {g.name for g in groups}
    untrained = sorted(set(model.variable_groups()) - trained)
    if untrained:
        raise ValueError(f"the model's variable group(s) {untrained} have no optimizer: "
                         "register a plug-in that trains them (training/plugins)")


def loss_scale(groups):
    """The weights' loss-scale optimizer (mixed_float16), or None."""
    optimizer = groups[0].optimizer
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    return None
