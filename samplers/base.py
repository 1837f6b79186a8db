"""The `Sampler` base class: a named strategy with declared, checked parameters.

A sampler turns the log-probabilities of the next token into one token per
row: `sampler(log_probs [B, V], seeds int64 [B, 2]) -> int32 [B]`, in
TensorFlow ops, traceable inside a `tf.function` or a `tf.while_loop` (the
compiled decoding loop, `samplers.decoding`). The excluded ids (the
unknown-word token) are already -inf when it is called: a sampler never sees
them as candidates. Row b draws with its own stateless seed `seeds[b]`.

A subclass declares `name` and `params`, a tuple of `Param` (name, default,
bounds); its parameters are then attributes, Python numbers or scalar tensors:

    class MinP(Sampler):
        name = "min_p"
        params = (Param("p", 0.1, low=0.0, high=1.0, condition="in [0, 1]"),)

        def __call__(self, log_probs, seeds):
            ...

and one `samplers.registry.register_sampler(MinP)` makes it a name every
generation path takes (Python API, generate.py, a SavedModel exported while
it is registered). A SavedModel passes the parameters as one float32 vector
in `params` order (`from_vector`): integer parameters go through float32,
exact up to 2**24.
"""

import dataclasses
import math

import numpy as np


class SamplerError(ValueError):
    """An unknown sampler or parameter, or a parameter out of its bounds (named first)."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One sampler parameter: its default (None: required), bounds and their text.

    `low` / `high` are the bounds (open when `low_open` / `high_open`);
    `integer` parameters take ints (an int32 tensor in the graph);
    `condition` is the text after "must be" in the error message.
    """

    name: str
    default: object = None
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    condition: str = ""

    def describe(self):
        """The condition text (built from the bounds when not given)."""
        if self.condition:
            return self.condition
        parts = []
        if self.low > -math.inf:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high < math.inf:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        kind = "an integer " if self.integer else "a number "
        return kind + (" and ".join(parts) if parts else "")

    def ok(self, value):
        """Whether a Python value is valid."""
        if isinstance(value, bool) or not isinstance(
                value, (int, np.integer) if self.integer else (int, float, np.integer,
                                                               np.floating)):
            return False
        value = float(value)
        if math.isnan(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def check(self, value):
        """The value, or SamplerError "<name>=<value> must be <condition>"."""
        if not self.ok(value):
            raise SamplerError(f"{self.name}={value!r} must be {self.describe()}")
        return int(value) if self.integer else float(value)

    def graph_ok(self, value):
        """bool scalar tensor: float32 `value` in bounds (False for NaN)."""
        import tensorflow as tf

        value = tf.cast(value, tf.float32)
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        ok = tf.logical_and(above, below)
        if self.integer:
            ok = tf.logical_and(ok, tf.equal(value, tf.round(value)))
        return ok


class Sampler:
    """A sampling strategy with its parameter values (see the module docstring).

    Args:
        **values: parameter name -> Python number (checked) or scalar tensor
            (checked in the graph by `graph_checks`); missing ones take their
            default, a required one (default None) must be given.

    Raises:
        SamplerError: an unknown or missing parameter, or a value out of bounds.
    """

    name = None
    params = ()

    def __init__(self, **values):
        known = [p.name for p in self.params]
        unknown = sorted(set(values) - set(known))
        if unknown:
            takes = f"takes {', '.join(known)}" if known else "takes no parameters"
            raise SamplerError(f"{unknown[0]}: sampler {self.name!r} has no parameter "
                               f"{unknown[0]!r} (it {takes})")
        for param in self.params:
            value = values.get(param.name, param.default)
            if value is None:
                raise SamplerError(f"{param.name}: sampler {self.name!r} needs "
                                   f"{param.name} ({param.describe()})")
            if isinstance(value, (bool, int, float, np.integer, np.floating)):
                value = param.check(value)
            setattr(self, param.name, value)

    def __call__(self, log_probs, seeds):
        """int32 [B]: one token per row of float32 log_probs [B, V]; seeds int64 [B, 2]."""
        raise NotImplementedError

    def values(self):
        """dict name -> value of the parameters, in `params` order."""
        return {p.name: getattr(self, p.name) for p in self.params}

    def vector(self):
        """The parameters as the float32 list a SavedModel's `params` input takes."""
        return [float(v) for v in self.values().values()]

    @classmethod
    def defaults_vector(cls):
        """float32 list of the defaults (NaN for a required parameter: fails its check)."""
        return [math.nan if p.default is None else float(p.default) for p in cls.params]

    @classmethod
    def from_vector(cls, vector):
        """The sampler of a float32 tensor [P] of its parameters in `params` order
        (P < len(params): the rest take their defaults), inside a graph."""
        import tensorflow as tf

        vector = tf.cast(tf.reshape(vector, [-1]), tf.float32)
        defaults = tf.constant(cls.defaults_vector(), tf.float32, shape=[len(cls.params)])
        full = tf.concat([vector, defaults[tf.minimum(tf.size(vector), len(cls.params)):]], 0)
        values = {}
        for i, param in enumerate(cls.params):
            values[param.name] = tf.cast(full[i], tf.int32) if param.integer else full[i]
        return cls(**values)

    @classmethod
    def graph_checks(cls, vector):
        """Assertions (a list of ops) that a float32 vector [P] fits this sampler."""
        import tensorflow as tf

        vector = tf.cast(tf.reshape(vector, [-1]), tf.float32)
        count = len(cls.params)
        checks = [tf.debugging.assert_less_equal(
            tf.size(vector), count, message=f"sampler {cls.name!r} takes {count} parameters "
            f"({', '.join(p.name for p in cls.params) or 'none'})")]
        defaults = tf.constant(cls.defaults_vector(), tf.float32, shape=[count])
        full = tf.concat([vector, defaults[tf.minimum(tf.size(vector), count):]], 0)
        for i, param in enumerate(cls.params):
            checks.append(tf.debugging.Assert(param.graph_ok(full[i]), [
                f"{param.name} must be {param.describe()} (sampler {cls.name!r})"]))
        return checks

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.values().items())
        return f"{type(self).__name__}({args})"
