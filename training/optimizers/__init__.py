"""The weights optimizers by name: one table, each entry owning its decay rule.

A new optimizer is a registry entry below plus, if it needs code, its own
module in this package:

    adam         Adam; weight decay as L2, added to the gradient (PyTorch
                 Adam's `weight_decay`, the Transformer-XL reference). Keras'
                 Adam with its update in one fused kernel (fused_adam.py).
    adamw        AdamW; decoupled weight decay (Loshchilov & Hutter); fused
                 likewise.
    lamb         Keras' LAMB (You et al. 2019, arXiv 1904.00962): bias
                 correction, no trust-ratio floor; decoupled weight decay.
    lamb_sharnn  the SHA-RNN reference's LAMB (lamb_sharnn.py): trust ratio
                 floored at --min_trust, weight norm clamped at
                 --weight_norm_clip, no bias correction, weight decay coupled
                 into the update of every weight. The SHA-RNN/LSTM presets'
                 default.
    adagrad      Keras' Adagrad (epsilon inside the square root); L2 decay
                 added to the gradient (PyTorch Adagrad's `weight_decay`),
                 accumulators start at 0 as in PyTorch. A global --clip_norm
                 before it barely throttles the step (the clipped squares are
                 also what it accumulates): see adagrad_clip.
    adagrad_clip the adaptive-span reference's AdagradWithGradClip
                 (adagrad_clip.py): each tensor's learning rate scaled by
                 min(1, --tensor_clip_norm / ||g||) (default 0.03, the
                 reference's experiments), the accumulator summing
                 the unclipped squares, epsilon after the square root. The
                 adaptive_span_* presets' default.
    muon         Muon (muon.py): Nesterov momentum orthogonalised by
                 Newton-Schulz on the model's hidden matrices (chosen by role,
                 rank-3 attention kernels matricised), Adam on the other
                 weights; decoupled weight decay. Its factory also takes the
                 matrices (`OptimizerSpec.takes_matrices`).
    lion         Keras' Lion (Chen et al. 2023, arXiv 2302.06675): the sign of
                 interpolated momentum; decoupled weight decay.

Decay rules (`OptimizerSpec.decay`): L2 and DECOUPLED only ever touch
`model.weight_decay_variables()` (chosen by role, see model/interface.py);
IN_UPDATE decays every weight, inside the optimizer's update, as the
reference that rule reproduces does. Importing this package does not load
TensorFlow, so `training.setup.config` can validate `--optimizer` cheaply.
"""

import dataclasses
from typing import Callable

# How an optimizer applies weight decay.
L2 = "l2"                # `weight_decay * w` is added to the gradient by the trainer
DECOUPLED = "decoupled"  # the Keras optimizer decays the weights itself
IN_UPDATE = "in_update"  # the optimizer adds `weight_decay * w` to its update, every weight

# TrainConfig fields that only some optimizers take (`OptimizerSpec.options`).
OPTION_FIELDS = ("min_trust", "weight_norm_clip", "tensor_clip_norm")


def _betas(config):
    return dict(beta_1=config.beta_1, beta_2=config.beta_2, epsilon=config.epsilon)


def _adam(keras, learning_rate, config):
    from training.optimizers.fused_adam import FusedAdam

    return FusedAdam(learning_rate=learning_rate, **_betas(config))


def _adamw(keras, learning_rate, config):
    from training.optimizers.fused_adam import FusedAdamW

    return FusedAdamW(learning_rate=learning_rate, weight_decay=config.weight_decay,
                      **_betas(config))


def _lamb(keras, learning_rate, config):
    return keras.optimizers.Lamb(learning_rate=learning_rate,
                                 weight_decay=config.weight_decay or None, **_betas(config))


def _lamb_sharnn(keras, learning_rate, config):
    from training.optimizers.lamb_sharnn import LambSharnn

    clip = 10.0 if config.weight_norm_clip is None else config.weight_norm_clip
    return LambSharnn(
        learning_rate=learning_rate, beta_1=config.beta_1, beta_2=config.beta_2,
        epsilon=config.epsilon, weight_decay=config.weight_decay,
        min_trust=0.25 if config.min_trust is None else config.min_trust,
        weight_norm_clip=clip or None)


def _muon(keras, learning_rate, config, matrices):
    from training.optimizers.muon import RoleMuon

    if not matrices:
        raise ValueError("--optimizer=muon needs the model's hidden matrices: "
                         "OptimizerSpec.make(..., matrices=...) (training/optimizers/groups.py)")
    return RoleMuon(learning_rate=learning_rate, matrices=matrices, adam_beta_1=config.beta_1,
                    adam_beta_2=config.beta_2, epsilon=config.epsilon,
                    weight_decay=config.weight_decay)


def _lion(keras, learning_rate, config):
    if not config.beta_1 > 0:
        raise ValueError(f"--beta_1={config.beta_1:g} makes --optimizer=lion sign descent on "
                         "the raw gradient: use --beta_1 > 0 (the paper's 0.9)")
    return keras.optimizers.Lion(learning_rate=learning_rate, beta_1=config.beta_1,
                                 beta_2=config.beta_2, weight_decay=config.weight_decay or None)


def _adagrad(keras, learning_rate, config):
    return keras.optimizers.Adagrad(learning_rate=learning_rate, initial_accumulator_value=0.0,
                                    epsilon=config.epsilon)


def _adagrad_clip(keras, learning_rate, config):
    from training.optimizers.adagrad_clip import AdagradClip

    clip = 0.03 if config.tensor_clip_norm is None else config.tensor_clip_norm
    return AdagradClip(learning_rate=learning_rate, epsilon=config.epsilon,
                       tensor_clip_norm=clip)


_ADAGRAD_CLIP_NOTE = (
    "the clipped gradients are also what Adagrad accumulates, so the clip barely throttles "
    "the step (with the adaptive-span recipe it let the model collapse); for the reference's "
    "throttle use --optimizer=adagrad_clip --tensor_clip_norm=C --clip_norm=0")


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """One entry of `OPTIMIZERS`.

    Attributes:
        name: the value of `--optimizer`.
        decay: L2, DECOUPLED or IN_UPDATE.
        help: one line for the flag's help.
        factory: (keras module, learning_rate, TrainConfig) -> Keras optimizer.
        options: the `OPTION_FIELDS` this optimizer reads (given to another
            one they are an error).
        clip_note: logged as a warning when a run combines this optimizer
            with a global --clip_norm (empty: nothing to say).
        takes_matrices: the factory also takes `matrices=`, the weights
            that are hidden matrices (model/interface.py).
    """

    name: str
    decay: str
    help: str
    factory: Callable
    options: tuple = ()
    clip_note: str = ""
    takes_matrices: bool = False

    def make(self, learning_rate, config, not_decayed=(), matrices=()):
        """The Keras optimizer (not built).

        Args:
            learning_rate: float or a callable returning the current rate.
            config: TrainConfig (beta_1, beta_2, epsilon, weight_decay).
            not_decayed: weights that must not be decayed by role (a
                DECOUPLED optimizer excludes them; an L2 one never sees
                decay; IN_UPDATE decays every weight, as its reference).
            matrices: the weights that are hidden matrices
                (`model.interface.is_hidden_matrix_by_role`), for an optimizer
                that `takes_matrices`; ignored by the others.
        """
        import keras

        if self.clip_note and config.clip_norm > 0:
            from absl import logging

            logging.warning("--optimizer=%s with --clip_norm=%g: %s", self.name,
                            config.clip_norm, self.clip_note)
        extra = dict(matrices=list(matrices)) if self.takes_matrices else {}
        optimizer = self.factory(keras, learning_rate, config, **extra)
        if self.decay == DECOUPLED and config.weight_decay > 0 and not_decayed:
            optimizer.exclude_from_weight_decay(var_list=list(not_decayed))
        return optimizer


OPTIMIZERS = {spec.name: spec for spec in (
    OptimizerSpec("adam", L2, "Adam, L2 weight decay added to the gradient.", _adam),
    OptimizerSpec("adamw", DECOUPLED, "AdamW, decoupled weight decay.", _adamw),
    OptimizerSpec("lamb", DECOUPLED, "Keras' LAMB (layer-wise trust ratio, bias correction), "
                  "decoupled weight decay.", _lamb),
    OptimizerSpec("lamb_sharnn", IN_UPDATE, "The SHA-RNN reference's LAMB: trust ratio floored "
                  "at --min_trust, weight norm clamped at --weight_norm_clip, no bias "
                  "correction, weight decay added to the update of every weight.", _lamb_sharnn,
                  options=("min_trust", "weight_norm_clip")),
    OptimizerSpec("adagrad", L2, "Adagrad (accumulators from 0), L2 weight decay added to the "
                  "gradient.", _adagrad, clip_note=_ADAGRAD_CLIP_NOTE),
    OptimizerSpec("adagrad_clip", L2, "The adaptive-span reference's Adagrad: each tensor's "
                  "learning rate scaled by min(1, --tensor_clip_norm / ||g||), accumulator of "
                  "the unclipped squares, epsilon after the square root; L2 weight decay added "
                  "to the gradient.", _adagrad_clip, options=("tensor_clip_norm",),
                  clip_note=_ADAGRAD_CLIP_NOTE),
    OptimizerSpec("muon", DECOUPLED, "Muon: Nesterov momentum 0.95 orthogonalised by 5 "
                  "Newton-Schulz steps, scaled by 0.2 sqrt(max(rows, cols)) (Moonlight: Adam's "
                  "learning rate fits), on the hidden matrices (attention kernels as "
                  "[D, heads*head_dim]); Adam (--beta_1, --beta_2, --epsilon) on embeddings, "
                  "softmax, biases and norms; decoupled weight decay.", _muon,
                  takes_matrices=True),
    OptimizerSpec("lion", DECOUPLED, "Lion: sign of interpolated momentum (--beta_1, --beta_2; "
                  "the paper's 0.9, 0.99), decoupled weight decay. Wants a learning rate 3-10x "
                  "smaller than Adam's (and a weight decay as much larger).", _lion),
)}


def get_optimizer(name):
    """The `OptimizerSpec` called `name`; ValueError listing the choices otherwise."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name]
