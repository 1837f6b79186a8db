"""Muon on the hidden matrices chosen by role, rank-3 attention kernels included.

Muon (K. Jordan et al. 2024, github.com/KellerJordan/Muon; with the update
scale of Liu et al. 2025, "Muon is scalable for LLM training", arXiv
2502.16982) steps each hidden matrix W, gradient G, along its orthogonalised
Nesterov momentum:

    m = momentum * m + G                          # momentum 0.95
    u = G + momentum * m                          # Nesterov
    O = NewtonSchulz5(reshape(u, [A, B]))         # about U V^T of u's SVD
    W = W - lr * rms_rate * sqrt(max(A, B)) * reshape(O, W.shape)

    NewtonSchulz5(X): X = X / (||X||_F + 1e-7), transposed when A > B; 5 times
        S = X X^T;  X = a X + (b S + c S S) X      (a, b, c) = (3.4445, -4.7750, 2.0315)

`rms_rate` 0.2 (Moonlight) gives the update about the RMS of Adam's, so one
--learning_rate and --weight_decay serve both parts. Every other weight
(embedding tables, the adaptive softmax, biases, norms, relative biases,
spans, gates) takes Adam with bias correction (Keras' Muon's AdamW step:
--beta_1, --beta_2, --epsilon). Momentum 0.95, Nesterov, 5 steps and the
quintic's coefficients are Keras' defaults, which are the reference's.

`RoleMuon` is `keras.optimizers.Muon` with these changes:

* which weights take the Muon step is given (`matrices`: the model's hidden
  matrices, `model.interface.is_hidden_matrix_by_role`), not guessed from
  rank 2 and the word "embedding" in the path (which here would send the
  adaptive softmax's matrices to Muon and the attention kernels to Adam);
* a matrix of rank >= 3 (the attention kernels [D, N, H] and [N, H, D]) is
  orthogonalised as the 2-D matrix [A, B] made by splitting its axes where
  A and B are closest (`matrix_shape`: [D, N*H] and [N*H, D], the
  projections as dense layers), and the sqrt(max(A, B)) scale uses [A, B];
* one decoupled weight decay for both parts, `W -= lr * weight_decay * W`
  before the step on the weights not excluded (`exclude_from_weight_decay`),
  default none (Keras' Muon: 0.004 on every weight, and a separate
  `adam_weight_decay`);
* the Adam step is TensorFlow's fused `ResourceApplyAdam` (one op and one
  pass per weight, the same formula term for term: training/optimizers/
  fused_adam.py) instead of Keras' ten element-wise ops;
* with `ns_bfloat16` the Newton-Schulz iteration runs in bfloat16, as the
  Muon reference runs it, on the direction normalised in float32; the
  update is cast back to the weight's dtype. It is faster where bfloat16
  matrix products are (CPUs with AVX512_BF16 or AMX, GPUs) and is off by
  default.

Slots are Keras' Muon's: `momentum` for every weight, `velocity` for the
Adam ones only, so checkpoints hold them and a resumed run continues
exactly. Importing this module loads Keras and TensorFlow.
"""

import math

import keras
from keras import ops

from training.optimizers.fused_adam import apply_adam


def matrix_shape(shape):
    """The most nearly square 2-D matricisation of a weight of rank >= 2.

    Args:
        shape: the weight's shape, e.g. (128, 4, 32).

    Returns:
        (A, B): the products of the leading and trailing axes, split where
        max(A, B) is smallest (the first such split on a tie), e.g.
        (128, 4, 32) -> (128, 128), (4, 32, 128) -> (128, 128); a matrix's
        own shape.
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2:
        raise ValueError(f"Muon steps weights of rank >= 2, got shape {shape}")
    splits = [(math.prod(shape[:i]), math.prod(shape[i:])) for i in range(1, len(shape))]
    return min(splits, key=max)


# Keras' Muon arguments that `matrices` and the one weight decay replace.
_REPLACED = ("exclude_layers", "exclude_embeddings", "adam_weight_decay")


@keras.saving.register_keras_serializable(package="par")
class RoleMuon(keras.optimizers.Muon):
    """Muon on the given matrices, AdamW on the rest (see the module docstring).

    Args:
        learning_rate: float, schedule or callable (both parts).
        matrices: the weights that take the Muon step (rank >= 2), as
            variables or their paths; every other weight takes Adam.
        weight_decay: decoupled decay coefficient of both parts (None or 0:
            none); `exclude_from_weight_decay` exempts weights.
        ns_bfloat16: run the Newton-Schulz iteration in bfloat16.
        name: optimizer name (its variables are named after it).
        **kwargs: the other `keras.optimizers.Muon` arguments (adam_beta_1,
            adam_beta_2, epsilon, momentum, ns_steps, nesterov, rms_rate,
            muon_a/b/c, ...), not those in `_REPLACED`.
    """

    def __init__(self, learning_rate=0.001, matrices=(), weight_decay=None, ns_bfloat16=False,
                 name="muon", **kwargs):
        replaced = sorted(set(kwargs) & set(_REPLACED))
        if replaced:
            raise ValueError(f"RoleMuon takes `matrices` and one `weight_decay`, not {replaced}")
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay or None,
                         adam_weight_decay=weight_decay or None, exclude_layers=None,
                         exclude_embeddings=False, name=name, **kwargs)
        self.matrices = tuple(dict.fromkeys(m if isinstance(m, str) else m.path
                                            for m in matrices))
        self.ns_bfloat16 = bool(ns_bfloat16)

    def _should_use_adamw(self, variable):
        return variable.path not in self.matrices

    def build(self, var_list):
        if self.built:
            return
        paths = [v.path for v in var_list]
        unknown = [p for p in self.matrices if paths.count(p) != 1]
        if unknown:
            raise ValueError(f"Muon matrices not among the optimizer's variables exactly once: "
                             f"{unknown}")
        low = [v.path for v in var_list if v.path in self.matrices and len(v.shape) < 2]
        if low:
            raise ValueError(f"Muon matrices must have rank >= 2: {low}")
        super().build(var_list)

    def _muon_update_step(self, gradient, variable, lr, m):
        shape = tuple(variable.shape)
        lr = ops.cast(lr, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        self.assign_add(m, ops.add(gradient, m * (self.momentum - 1)))
        direction = ops.add(gradient, self.momentum * m) if self.nesterov else m
        direction = ops.reshape(direction, matrix_shape(shape))
        if self.ns_bfloat16:
            direction = direction / (ops.norm(direction) + 1e-7)
            update = ops.cast(self.zeropower_via_newtonschulz5(
                ops.cast(direction, "bfloat16"), self.ns_steps), variable.dtype)
        else:
            update = self.zeropower_via_newtonschulz5(direction, self.ns_steps)
        self.assign_sub(variable, ops.reshape(self.lr_adjust(lr * update), shape))

    def _adamw_update_step(self, gradient, variable, learning_rate, m, v):
        # Keras' Muon's Adam step, term for term, as one fused kernel (module docstring).
        apply_adam(variable, m, v, gradient, learning_rate, self.iterations, self.adam_beta_1,
                   self.adam_beta_2, self.epsilon)

    def get_config(self):
        config = super().get_config()
        for key in _REPLACED:
            config.pop(key)
        config["matrices"] = list(self.matrices)
        config["ns_bfloat16"] = self.ns_bfloat16
        return config
