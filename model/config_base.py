"""What every frozen config of the project shares: fields with help, JSON, checks.

A config is a frozen dataclass deriving from `ConfigBase`. Each field is made
with `field(default, help, choices=...)`: its help text and choices live in
the field's metadata, and the entry scripts generate their flags from it.
`ConfigBase.__post_init__` turns JSON lists into tuples and checks every
field's type (and choices) once, from its annotation, before the subclass's
`validate()` checks the values.

Also here: the adaptive-softmax facts shared by every model family
(`tail_dims`, `check_softmax_fields`). Importing this module does not load
TensorFlow.
"""

import dataclasses
import math
import types
import typing
from typing import Any, Callable


def field(default=dataclasses.MISSING, help="", choices=None, **metadata):  # noqa: A002
    """A dataclass field whose help text (and choices) generate its flag.

    Args:
        default: the default value (MISSING: a required field).
        help: one or two sentences for --help and the flags reference.
        choices: allowed values of an enum field (checked by ConfigBase).
        **metadata: more metadata (e.g. "flag": False for fields that are
            not flags).
    """
    metadata = {"help": help, **metadata}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return dataclasses.field(default=default, metadata=metadata)


def is_int(value):
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    """True for a finite int or float that is not a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _allows_none(kind):
    return isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind)


def _base_type(kind):
    """int | None -> int; tuple[int, ...] -> tuple; other types unchanged."""
    if isinstance(kind, types.UnionType):
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    return typing.get_origin(kind) or kind


_WANT = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string",
         tuple: "a list of integers"}


def type_error(config, field_):
    """The problem with a field's value given its annotation, or None if it fits.

    The text follows the field's name: " must be an integer, got 'x'" or
    "='x': use one of ('a', 'b')".
    """
    value = getattr(config, field_.name)
    if value is None and _allows_none(field_.type):
        return None
    kind = _base_type(field_.type)
    checks = {int: is_int, float: is_number, bool: lambda v: isinstance(v, bool),
              str: lambda v: isinstance(v, str),
              tuple: lambda v: isinstance(v, tuple) and all(is_int(x) for x in v)}
    if kind not in checks:
        return None  # nested configs and free-form values check themselves
    if not checks[kind](value):
        return f" must be {_WANT[kind]}{' or None' if _allows_none(field_.type) else ''}, " \
               f"got {value!r}"
    choices = field_.metadata.get("choices")
    if choices is not None and value not in choices:
        return f"={value!r}: use one of {tuple(choices)!r}"
    return None


class ConfigBase:
    """JSON round trip, validated copies and type checks for a frozen config dataclass.

    Subclasses are frozen dataclasses; they override `validate()` for value
    checks and may set `ERROR` (the exception class) and `FLAG_PREFIX` ("--"
    when field names are flag names, so messages name the flag).
    """

    ERROR: type = ValueError
    FLAG_PREFIX: str = ""

    def __post_init__(self):
        for f in dataclasses.fields(self):  # lists (JSON, flags) become tuples
            value = getattr(self, f.name)
            if isinstance(value, list) and _base_type(f.type) is tuple:
                object.__setattr__(self, f.name, tuple(value))
        for f in dataclasses.fields(self):
            problem = type_error(self, f)
            if problem:
                raise self.ERROR(f"{self.FLAG_PREFIX}{f.name}{problem}")
        self.validate()

    def validate(self):
        """Value checks of the subclass (raise ERROR naming the field and the fix)."""

    @classmethod
    def tuple_fields(cls):
        """Names of the tuple-valued fields (lists in JSON)."""
        return tuple(f.name for f in dataclasses.fields(cls) if _base_type(f.type) is tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (tuples become lists, nested configs dicts)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, ConfigBase):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def check_known(cls, names):
        """Raises ERROR listing any name that is not a field."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(names) - known)
        if unknown:
            raise cls.ERROR(f"unknown {cls.__name__} field(s) {unknown}; valid fields are "
                            f"{sorted(known)}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        """Inverse of `to_dict`; unknown keys raise ERROR listing them."""
        cls.check_known(values)
        return cls(**values)

    def replace(self, **changes):
        """A copy with some fields changed (validated again)."""
        self.check_known(changes)
        return dataclasses.replace(self, **changes)


def tail_dims(d_model, num_tails, proj_factor=4.0, proj_dims=()):
    """Projection dimension of each tail cluster of the adaptive softmax.

    `d_i = max(1, int(d_model // proj_factor ** i))` for tails `i = 1..K`
    (Grave et al. 2017 write `d_model / proj_factor^(i+1)` with tails counted
    from 0: the same numbers). Explicit `proj_dims` override the formula.

    Args:
        d_model: model width D, >= 1.
        num_tails: number of tail clusters K, >= 0.
        proj_factor: shrink factor per tail, >= 1.
        proj_dims: explicit dims, either empty or K ints >= 1.

    Returns:
        Tuple of K Python ints.

    Raises:
        ValueError: naming the argument that is out of range.
    """
    if int(d_model) != d_model or d_model < 1:
        raise ValueError(f"d_model must be an integer >= 1, got {d_model!r}.")
    if int(num_tails) != num_tails or num_tails < 0:
        raise ValueError(f"num_tails must be an integer >= 0, got {num_tails!r}.")
    proj_dims = tuple(proj_dims or ())
    if proj_dims:
        if len(proj_dims) != num_tails:
            raise ValueError(
                f"proj_dims has {len(proj_dims)} entries but there are "
                f"{num_tails} tail clusters (one per cutoff); give one dim per "
                "tail or leave proj_dims empty to use proj_factor."
            )
        for dim in proj_dims:
            if isinstance(dim, bool) or int(dim) != dim or dim < 1:
                raise ValueError(
                    f"proj_dims must be integers >= 1, got {proj_dims!r}."
                )
        return tuple(int(dim) for dim in proj_dims)
    if not proj_factor >= 1.0:
        raise ValueError(f"proj_factor must be >= 1, got {proj_factor!r}.")
    return tuple(
        max(1, int(d_model // proj_factor**i)) for i in range(1, num_tails + 1)
    )


def cutoffs_problem(cutoffs, vocab_size):
    """Why adaptive-softmax `cutoffs` do not fit `vocab_size`, or None.

    The one statement of the rule: strictly increasing, each in
    [1, vocab_size) (the vocabulary size itself is implied).
    """
    if any(c < 1 or c >= vocab_size for c in cutoffs):
        return (f"cutoffs={tuple(cutoffs)} must lie in [1, vocab_size={vocab_size}) "
                "(the vocabulary size itself is implied, do not list it)")
    if any(b <= a for a, b in zip(cutoffs, cutoffs[1:])):
        return f"cutoffs={tuple(cutoffs)} must be strictly increasing"
    return None


def check_softmax_fields(config):
    """Validates the adaptive-softmax fields every family's config shares.

    Args:
        config: an object with vocab_size, d_model, cutoffs, proj_factor and
            proj_dims.

    Raises:
        ValueError: naming the field and the fix.
    """
    cutoffs = config.cutoffs
    problem = cutoffs_problem(cutoffs, config.vocab_size)
    if problem:
        raise ValueError(problem)
    if config.proj_dims:
        if len(config.proj_dims) != len(cutoffs):
            raise ValueError(
                f"proj_dims={config.proj_dims} needs one width per tail cluster, i.e. "
                f"len(cutoffs)={len(cutoffs)} values; or leave it empty to use proj_factor"
            )
        if any(d < 1 for d in config.proj_dims):
            raise ValueError(f"proj_dims={config.proj_dims} must be positive integers")
    if not (config.proj_factor >= 1.0 and math.isfinite(config.proj_factor)):
        raise ValueError(f"proj_factor must be a finite number >= 1, got {config.proj_factor}")


@dataclasses.dataclass(frozen=True)
class ModelFlag:
    """A model flag a family parses by hand instead of generating it from its config field
    (e.g. Transformer-XL's --architecture, a string checked against the depth).

    Attributes:
        name: the flag's and the config field's name.
        help: the flag's help text.
        parse: `(value, fields, preset) -> field value`: `value` is the flag's string
            (after the plug-ins' readers, training.plugins.read_model_flag), `fields` the
            model config's values so far (the preset's with the other flags'), `preset`
            its name; raises ValueError with the rest of a sentence that starts with
            "--name=value".
    """

    name: str
    help: str
    parse: Callable


def flag_kind(field):
    """absl DEFINE_ kind of a config field, from its type (`flags.DEFINE_<kind>`): the
    train.py and evaluate.py flags of config fields."""
    kind = str(field.type) if not isinstance(field.type, type) else field.type.__name__
    if "choices" in field.metadata:
        return "enum"
    for name, define in (("bool", "boolean"), ("float", "float"), ("tuple", "list"),
                         ("int", "integer"), ("str", "string")):
        if kind.startswith(name) or kind.startswith(f"typing.{name}"):
            return define
    raise TypeError(f"config field {field.name} has a type ({kind}) with no flag kind")
