"""The weights optimizers by name: one table, each entry owning its decay rule.

Every optimizer is a `keras.optimizers` class (none is written here):

    adam     Adam; weight decay as L2, added to the gradient (PyTorch Adam's
             `weight_decay`, the Transformer-XL reference). Keras' Adam with
             its update in one fused kernel (training/fused_adam.py).
    adamw    AdamW; decoupled weight decay (Loshchilov & Hutter); fused
             likewise.
    lamb     LAMB (You et al. 2019, arXiv 1904.00962), the SHA-RNN and
             NVIDIA Transformer-XL recipes; decoupled weight decay.
    adagrad  Adagrad, the adaptive-span reference's default; L2 decay added
             to the gradient (PyTorch Adagrad's `weight_decay`), accumulators
             start at 0 as in PyTorch.

Weight decay only ever touches `model.weight_decay_variables()` (chosen by
role, see model/interface.py). Importing this module does not load
TensorFlow, so `training.config` can validate `--optimizer` cheaply.
"""

import dataclasses
from typing import Callable

# How an optimizer applies weight decay.
L2 = "l2"                # `weight_decay * w` is added to the gradient by the trainer
DECOUPLED = "decoupled"  # the Keras optimizer decays the weights itself


def _betas(config):
    return dict(beta_1=config.beta_1, beta_2=config.beta_2, epsilon=config.epsilon)


def _adam(keras, learning_rate, config):
    from training.fused_adam import FusedAdam

    return FusedAdam(learning_rate=learning_rate, **_betas(config))


def _adamw(keras, learning_rate, config):
    from training.fused_adam import FusedAdamW

    return FusedAdamW(learning_rate=learning_rate, weight_decay=config.weight_decay,
                      **_betas(config))


def _lamb(keras, learning_rate, config):
    return keras.optimizers.Lamb(learning_rate=learning_rate,
                                 weight_decay=config.weight_decay or None, **_betas(config))


def _adagrad(keras, learning_rate, config):
    return keras.optimizers.Adagrad(learning_rate=learning_rate, initial_accumulator_value=0.0,
                                    epsilon=config.epsilon)


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """One entry of `OPTIMIZERS`.

    Attributes:
        name: the value of `--optimizer`.
        decay: L2 or DECOUPLED.
        help: one line for the flag's help.
        factory: (keras module, learning_rate, TrainConfig) -> Keras optimizer.
    """

    name: str
    decay: str
    help: str
    factory: Callable

    def make(self, learning_rate, config, not_decayed=()):
        """The Keras optimizer (not built).

        Args:
            learning_rate: float or a callable returning the current rate.
            config: TrainConfig (beta_1, beta_2, epsilon, weight_decay).
            not_decayed: weights that must not be decayed (a DECOUPLED
                optimizer excludes them; an L2 one never sees decay).
        """
        import keras

        optimizer = self.factory(keras, learning_rate, config)
        if self.decay == DECOUPLED and config.weight_decay > 0 and not_decayed:
            optimizer.exclude_from_weight_decay(var_list=list(not_decayed))
        return optimizer


OPTIMIZERS = {spec.name: spec for spec in (
    OptimizerSpec("adam", L2, "Adam, L2 weight decay added to the gradient.", _adam),
    OptimizerSpec("adamw", DECOUPLED, "AdamW, decoupled weight decay.", _adamw),
    OptimizerSpec("lamb", DECOUPLED, "LAMB (layer-wise trust ratio), decoupled weight decay.",
                  _lamb),
    OptimizerSpec("adagrad", L2, "Adagrad (accumulators from 0), L2 weight decay added to the "
                  "gradient.", _adagrad),
)}


def get_optimizer(name):
    """The `OptimizerSpec` called `name`; ValueError listing the choices otherwise."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name]
