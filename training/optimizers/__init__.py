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

Options (`OptimizerSpec.options`): a hyper-parameter that only some optimizers
take is an `OptimizerOption` (name, default, help, range check) in their
entries below: lamb_sharnn's --min_trust and --weight_norm_clip,
adagrad_clip's --tensor_clip_norm, muon's --muon_rms_rate. Each is a train.py flag and a field of
`TrainConfig` of its name (`option_owners`), None in the config when not
given (the factory then takes the option's default) and refused with another
optimizer. An optimizer with an option of its own is one entry here, nothing
in training/setup/.

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


@dataclasses.dataclass(frozen=True)
class OptimizerOption:
    """A hyper-parameter of the optimizers whose entries list it (`OptimizerSpec.options`).

    It is the train.py flag and the TrainConfig field `name` (a float, None when
    not given); its factory receives it as the keyword `name`, `default` when not
    given.

    Attributes:
        name: the flag's, the config field's and the factory's keyword's name.
        default: the value used when the flag is not given.
        help: the flag's help text after "<optimizer> only: "; "{default}" in it
            stands for `default`.
        minimum: the smallest value allowed (0 conventionally means off).
        choices: the only values allowed, if any (e.g. (0, 1) for a switch).
    """

    name: str
    default: float
    help: str
    minimum: float = 0.0
    choices: tuple = ()

    def text(self):
        """The help text with its default filled in."""
        return self.help.format(default=f"{self.default:g}")

    def problem(self, value):
        """Why `value` is refused (the rest of a sentence after "--name=value: "), or None."""
        if self.choices and value not in self.choices:
            return "must be one of " + ", ".join(f"{c:g}" for c in self.choices)
        if value < self.minimum:
            return f"must be >= {self.minimum:g}" + (" (0: off)" if self.minimum == 0 else "")
        return None

    def value(self, config):
        """The option's value in a TrainConfig: the given one, else the default."""
        given = getattr(config, self.name)
        return self.default if given is None else given


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


def _lamb_sharnn(keras, learning_rate, config, min_trust, weight_norm_clip):
    from training.optimizers.lamb_sharnn import LambSharnn

    return LambSharnn(
        learning_rate=learning_rate, beta_1=config.beta_1, beta_2=config.beta_2,
        epsilon=config.epsilon, weight_decay=config.weight_decay, min_trust=min_trust,
        weight_norm_clip=weight_norm_clip or None)


def _muon(keras, learning_rate, config, matrices, muon_rms_rate, muon_ns_bfloat16):
    from training.optimizers.muon import RoleMuon

    if not matrices:
        raise ValueError("--optimizer=muon needs the model's hidden matrices: "
                         "OptimizerSpec.make(..., matrices=...) (training/optimizers/groups.py)")
    return RoleMuon(learning_rate=learning_rate, matrices=matrices, adam_beta_1=config.beta_1,
                    adam_beta_2=config.beta_2, epsilon=config.epsilon,
                    weight_decay=config.weight_decay, rms_rate=muon_rms_rate,
                    ns_bfloat16=bool(muon_ns_bfloat16))


def _lion(keras, learning_rate, config):
    if not config.beta_1 > 0:
        raise ValueError(f"--beta_1={config.beta_1:g} makes --optimizer=lion sign descent on "
                         "the raw gradient: use --beta_1 > 0 (the paper's 0.9)")
    return keras.optimizers.Lion(learning_rate=learning_rate, beta_1=config.beta_1,
                                 beta_2=config.beta_2, weight_decay=config.weight_decay or None)


def _adagrad(keras, learning_rate, config):
    return keras.optimizers.Adagrad(learning_rate=learning_rate, initial_accumulator_value=0.0,
                                    epsilon=config.epsilon)


def _adagrad_clip(keras, learning_rate, config, tensor_clip_norm):
    from training.optimizers.adagrad_clip import AdagradClip

    return AdagradClip(learning_rate=learning_rate, epsilon=config.epsilon,
                       tensor_clip_norm=tensor_clip_norm)


# The options of the SHA-RNN reference's LAMB and the adaptive-span reference's Adagrad.
MIN_TRUST = OptimizerOption(
    "min_trust", 0.25, "floor of the trust ratio (0: none; default {default}, the SHA-RNN "
    "reference's).")
WEIGHT_NORM_CLIP = OptimizerOption(
    "weight_norm_clip", 10.0, "clamp of the weight norm in the trust ratio (0: no clamp; "
    "default {default}, the SHA-RNN reference's).")
TENSOR_CLIP_NORM = OptimizerOption(
    "tensor_clip_norm", 0.03, "each weight tensor's learning rate is scaled by min(1, this / "
    "its gradient norm), the accumulator keeping the unclipped squares (0: off; default "
    "{default}, the adaptive-span reference's --grad-clip).")


# Muon's update scale: 0.2 makes its RMS about Adam's (Moonlight), so one learning rate
# serves both parts; larger values step the hidden matrices further than the Adam part.
MUON_RMS_RATE = OptimizerOption(
    "muon_rms_rate", 0.2, "the Muon update of a hidden matrix is scaled by this x "
    "sqrt(max(rows, cols)) x the learning rate (default {default}: its RMS about Adam's, "
    "Moonlight's; larger steps the matrices further than the Adam-trained weights).",
    minimum=1e-3)


# The reference runs Muon's Newton-Schulz iteration in bfloat16; float32 is the default
# here, so that a float32 run is float32 throughout.
MUON_NS_BFLOAT16 = OptimizerOption(
    "muon_ns_bfloat16", 0.0, "1: the Newton-Schulz iteration of the hidden matrices in "
    "bfloat16 (the Muon reference's; faster on CPUs with bfloat16 instructions and on GPUs), "
    "0: in float32 (default {default}).", choices=(0.0, 1.0))


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
        factory: (keras module, learning_rate, TrainConfig, **options) -> Keras
            optimizer; each of `options` is given as a keyword of its name.
        options: the `OptimizerOption`s this optimizer takes (given to another
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
        extra.update({option.name: option.value(config) for option in self.options})
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
                  options=(MIN_TRUST, WEIGHT_NORM_CLIP)),
    OptimizerSpec("adagrad", L2, "Adagrad (accumulators from 0), L2 weight decay added to the "
                  "gradient.", _adagrad, clip_note=_ADAGRAD_CLIP_NOTE),
    OptimizerSpec("adagrad_clip", L2, "The adaptive-span reference's Adagrad: each tensor's "
                  "learning rate scaled by min(1, --tensor_clip_norm / ||g||), accumulator of "
                  "the unclipped squares, epsilon after the square root; L2 weight decay added "
                  "to the gradient.", _adagrad_clip, options=(TENSOR_CLIP_NORM,),
                  clip_note=_ADAGRAD_CLIP_NOTE),
    OptimizerSpec("muon", DECOUPLED, "Muon: Nesterov momentum 0.95 orthogonalised by 5 "
                  "Newton-Schulz steps, scaled by --muon_rms_rate sqrt(max(rows, cols)) "
                  "(0.2, Moonlight's: Adam's learning rate fits), on the hidden matrices "
                  "(attention kernels as [D, heads*head_dim]); Adam (--beta_1, --beta_2, "
                  "--epsilon) on embeddings, softmax, biases and norms; decoupled weight "
                  "decay.", _muon,
                  options=(MUON_RMS_RATE, MUON_NS_BFLOAT16), takes_matrices=True),
    OptimizerSpec("lion", DECOUPLED, "Lion: sign of interpolated momentum (--beta_1, --beta_2; "
                  "the paper's 0.9, 0.99), decoupled weight decay. Wants a learning rate 3-10x "
                  "smaller than Adam's (and a weight decay as much larger).", _lion),
)}


def option_owners():
    """Option name -> (its `OptimizerOption`, the names of the optimizers that take it), in
    table order: the TrainConfig fields and train.py flags of the options.

    Raises:
        ValueError: two entries declare different options of the same name.
    """
    owners = {}
    for spec in OPTIMIZERS.values():
        for option in spec.options:
            known, names = owners.get(option.name, (option, ()))
            if known != option:
                raise ValueError(f"optimizers {', '.join(names)} and {spec.name} declare "
                                 f"different options --{option.name}: share one "
                                 "OptimizerOption")
            owners[option.name] = (option, (*names, spec.name))
    return owners


def get_optimizer(name):
    """The `OptimizerSpec` called `name`; ValueError listing the choices otherwise."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name]
