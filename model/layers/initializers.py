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
