"""Initializer helpers shared by the layers (Keras 3)."""

import keras


def clone_initializer(initializer, offset):
    """A fresh copy of a Keras initializer for the `offset`-th weight of a layer.

    A Keras 3 random initializer draws from a fixed seed (its own, or one
    picked once at construction when unseeded), so calling one object for
    several weights gives them the same random stream: equal kernels, or a
    smaller weight that is a scaled prefix of a larger one. A seeded
    initializer's copy has its seed shifted by `offset` (reproducible and
    distinct per weight); an unseeded one's copy picks a new seed.

    Args:
        initializer: a Keras initializer.
        offset: int, distinct for each weight of the layer.

    Returns:
        A new initializer of the same class.
    """
    config = keras.initializers.serialize(initializer)
    seed = config.get("config", {}).get("seed")
    if isinstance(seed, int):
        config["config"]["seed"] = seed + offset
    return keras.initializers.get(config)


# PyTorch's defaults by the last part of a weight's path: the input width
# (fan_in) of the weight from its shape. nn.Linear draws its kernel and bias
# from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5));
# nn.Embedding draws N(0, 1).
_PYTORCH_FAN_IN = {
    "query_kernel": lambda shape: shape[0],    # [D, N, H]
    "key_kernel": lambda shape: shape[0],      # [D, N, H]
    "value_kernel": lambda shape: shape[0],    # [D, N, H]
    # [N, H, D] in attention
    "output_kernel": lambda shape: shape[0] * shape[1] if len(shape) == 3 else shape[0],
    "kernel": lambda shape: shape[0],          # Dense [in, out]
    "head_kernel": lambda shape: shape[0],     # [D, S]
}
_PYTORCH_NORMAL = ("embeddings", "key_positions")


def pytorch_defaults(variables, seed=0):
    """Re-initialises weights as PyTorch's defaults would (in place).

    Linear kernels (by name, see `_PYTORCH_FAN_IN`; adaptive-softmax tail
    projections and kernels too) and the bias beside each are drawn from
    `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`; embedding tables and key position
    tables from N(0, 1). Other weights (layer norms, relative biases, spans,
    architecture logits) keep their values.

    Args:
        variables: Keras variables with their paths (`model.weights`).
        seed: int; each variable draws from `(seed, its index)`.

    Returns:
        The paths re-initialised, in order.
    """
    import numpy as np

    by_path = {v.path: v for v in variables}
    done = []
    for index, variable in enumerate(variables):
        path, shape = variable.path, tuple(variable.shape)
        name = path.rsplit("/", 1)[-1]
        rng = np.random.default_rng([seed, index])
        fan_in = None
        if name in _PYTORCH_FAN_IN or (name.startswith("tail_") and
                                       name.endswith(("_projection", "_kernel"))):
            fan_in = _PYTORCH_FAN_IN.get(name, lambda s: s[0])(shape)
        elif name.endswith("bias") and len(shape) == 1:
            kernel = by_path.get(path[: -len(name)] + name.replace("bias", "kernel"))
            if kernel is not None and kernel.shape[-1] == shape[0]:
                fan_in = _PYTORCH_FAN_IN.get(kernel.path.rsplit("/", 1)[-1],
                                             lambda s: s[0])(tuple(kernel.shape))
        if fan_in is not None:
            bound = 1.0 / np.sqrt(fan_in)
            value = rng.uniform(-bound, bound, size=shape)
        elif name in _PYTORCH_NORMAL:
            value = rng.normal(size=shape)
        else:
            continue
        variable.assign(value.astype(variable.dtype))
        done.append(path)
    return done
