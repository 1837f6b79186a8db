"""The sampler registry: name -> `Sampler` subclass (KerasHub's `keras_hub.samplers.get`).

    register_sampler(cls)          adds a subclass under `cls.name` (SamplerError
                                   if the name is taken, unless replace=True)
    unregister_sampler(name)       removes it (a test's sampler, in a finally)
    get_sampler(name, **params)    an instance, its parameters checked
    sampler_names()                the registered names, in registration order
    registered()                   the classes, in the same order

The built-ins reproduce generate.py's sampling exactly: "greedy" (the
argmax), "sample" (temperature, top-k, top-p, then one draw: the keyword
options), and KerasHub's single-option names "temperature", "top_k" and
"top_p" (the same draw with the other filters off).

Everything that generates looks samplers up here when it runs (the compiled
decoding loop, `serving.decoder.Decoder`) or is exported (a SavedModel's
`generate_with_sampler` dispatches over the samplers registered then).
"""

from samplers.base import Sampler, SamplerError
from samplers.greedy import GreedySampler
from samplers.sampler import RandomSampler, TemperatureSampler, TopKSampler, TopPSampler

_SAMPLERS = {}


def register_sampler(cls, replace=False):
    """Registers a `Sampler` subclass under `cls.name`; returns it (usable as a decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Sampler)):
        raise SamplerError(f"{cls!r} is not a Sampler subclass")
    if not isinstance(cls.name, str) or not cls.name.isidentifier():
        raise SamplerError(f"sampler name {cls.name!r} must be an identifier")
    if cls.name in _SAMPLERS and not replace and _SAMPLERS[cls.name] is not cls:
        raise SamplerError(f"sampler {cls.name!r} is already registered "
                           f"({_SAMPLERS[cls.name].__name__})")
    _SAMPLERS[cls.name] = cls
    return cls


def unregister_sampler(name):
    """Removes a registered sampler (nothing if it is not registered)."""
    _SAMPLERS.pop(name, None)


def sampler_names():
    """tuple of the registered names, in registration order."""
    return tuple(_SAMPLERS)


def registered():
    """tuple of the registered classes, in registration order."""
    return tuple(_SAMPLERS.values())


def get_sampler(name, **params):
    """The sampler `name` with `params` (SamplerError: unknown name or bad parameter)."""
    if name not in _SAMPLERS:
        raise SamplerError(f"sampler={name!r} must be one of {', '.join(_SAMPLERS)} (the "
                           "registered samplers)")
    return _SAMPLERS[name](**params)


for _builtin in (GreedySampler, RandomSampler, TemperatureSampler, TopKSampler, TopPSampler):
    register_sampler(_builtin)
