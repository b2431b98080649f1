"""The functions a formula term may call, as inert records: each names its parameters, the kind of value each
accepts and the bounds checked before it runs.

:mod:`bayesvm.formula.interpreter` evaluates formula terms over this table and nothing else: a call of a name that
is not here is refused, so is a keyword a record does not list (``out=``, ``hash_func=``), so is an argument of
the wrong kind (a function where data belong) or out of bounds (``poly(x, 10**7)``, ``hashed(g, levels=10**12)``).
The callables are formulaic's transforms (``C``, ``center``, ``scale``, ``poly``, ``bs``, ``cr``, ``cs``, ``cc``,
``hashed``, ``lag``), its contrast codings and element-wise numpy functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import pandas as pd
from formulaic.materializers.types import FactorValues
from formulaic.transforms import (
    C,
    center,
    cyclic_cubic_spline,
    hashed,
    lag,
    natural_cubic_spline,
    poly,
    scale,
)
from formulaic.transforms.basis_spline import basis_spline
from formulaic.transforms.contrasts import (
    Contrasts,
    CustomContrasts,
    DiffContrasts,
    HelmertContrasts,
    PolyContrasts,
    SASContrasts,
    SumContrasts,
    TreatmentContrasts,
)
from formulaic.transforms.patsy_compat import standardize

from ..errors import FormulaError
from ..memory import available_memory

#: Largest polynomial degree, spline degree of freedom or knot count a term may ask for (also bounded by the data's
#: distinct values when a fit learns the transform).
MAX_BASIS = 100
#: Largest spline degree.
MAX_SPLINE_DEGREE = 10
#: Largest number of levels ``hashed()`` may hash into.
MAX_HASHED_LEVELS = 100_000
#: Longest list a term may spell out (factor levels, knots, contrast rows).
MAX_LIST = 10_000
#: Longest string constant.
MAX_TEXT = 1_000


class Refusal(FormulaError):
    """An argument outside what its transform accepts."""


# ----- argument kinds: each returns the value to pass, or raises Refusal --------------------------------------------
def is_data(value) -> bool:
    """Array-like values a transform may take as its data: columns, arrays, encoded factors and numbers."""
    return isinstance(value, pd.Series | np.ndarray | FactorValues | pd.Categorical | Real | np.number | np.bool_)


def data(name: str, value):
    if not is_data(value):
        raise Refusal(f"argument {name!r} must be a column or an expression of columns, not {_describe(value)}")
    return value


def integer(low: int, high: int | None = None):
    def check(name: str, value):
        if isinstance(value, bool | np.bool_) or not isinstance(value, Integral):
            raise Refusal(f"argument {name!r} must be a whole number, not {_describe(value)}")
        value = int(value)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high:,}" if high is not None else f"at least {low}"
            raise Refusal(f"argument {name!r} is {value:,}; it must be {bound}")
        return value

    return check


def number(name: str, value):
    if isinstance(value, bool | np.bool_) or not isinstance(value, Real):
        raise Refusal(f"argument {name!r} must be a number, not {_describe(value)}")
    if not math.isfinite(float(value)):
        raise Refusal(f"argument {name!r} must be finite, not {value!r}")
    return float(value)


def flag(name: str, value):
    if not isinstance(value, bool | np.bool_):
        raise Refusal(f"argument {name!r} must be True or False, not {_describe(value)}")
    return bool(value)


def choice(*options: str):
    def check(name: str, value):
        if value not in options:
            raise Refusal(f"argument {name!r} must be one of {list(options)}, not {_describe(value)}")
        return value

    return check


def optional(kind):
    def check(name: str, value):
        return None if value is None else kind(name, value)

    return check


def labels(name: str, value):
    """A list of level labels (text, numbers, booleans)."""
    if not isinstance(value, list | tuple):
        raise Refusal(f"argument {name!r} must be a list of levels, not {_describe(value)}")
    for item in value:
        if not isinstance(item, str | Real | bool) or isinstance(item, float) and not math.isfinite(item):
            raise Refusal(f"argument {name!r} holds {_describe(item)}; levels are text or numbers")
    return list(value)


def numbers(name: str, value):
    """A list of finite numbers (knots, scores)."""
    if not isinstance(value, list | tuple):
        raise Refusal(f"argument {name!r} must be a list of numbers, not {_describe(value)}")
    return [number(name, item) for item in value]


def matrix(name: str, value):
    """A list of rows of numbers (a custom contrast matrix)."""
    if not isinstance(value, list | tuple) or not value:
        raise Refusal(f"argument {name!r} must be a list of rows of numbers, not {_describe(value)}")
    rows = [numbers(name, row) for row in value]
    if len({len(row) for row in rows}) != 1:
        raise Refusal(f"argument {name!r} has rows of different lengths")
    return rows


def contrasts(name: str, value):
    """A contrast coding: a coding (``contr.sum``, ``Sum``), one made with its options (``Treatment('b')``), or the
    rows of a matrix."""
    if isinstance(value, Contrasts) or isinstance(value, type) and issubclass(value, Contrasts):
        return value
    if isinstance(value, list | tuple):
        return matrix(name, value)
    raise Refusal(
        f"argument {name!r} must be a contrast coding such as contr.sum or Treatment('a'), not {_describe(value)}"
    )


def _describe(value) -> str:
    if isinstance(value, pd.Series | np.ndarray):
        return "a column"
    if callable(value):
        return f"the function {getattr(value, '__name__', type(value).__name__)!r}"
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


# ----- bounds that depend on the data -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """What a bound sees: the transform's name, its arguments by parameter, the rows, and whether the transform is
    learning its state from these rows (a fit) or applying a learned state (a prediction)."""

    name: str
    arguments: dict
    rows: int
    learning: bool

    def distinct(self, parameter: str) -> int:
        values = np.asarray(self.arguments[parameter], dtype=float).ravel()
        return int(np.unique(values[np.isfinite(values)]).size)


def _poly_bound(call: Call) -> None:
    degree = call.arguments.get("degree", 1)
    if call.learning and degree >= max(call.distinct("x"), 1):
        raise Refusal(
            f"poly(): degree {degree} needs more than {degree} distinct values of its input; the data have "
            f"{call.distinct('x')}"
        )


def _spline_bound(call: Call) -> None:
    df = call.arguments.get("df")
    knots = call.arguments.get("knots") or []
    if call.learning and df is not None and df > call.distinct("x"):
        raise Refusal(f"{call.name}(): df={df} is more than the {call.distinct('x')} distinct values of its input")
    if len(knots) > MAX_BASIS:
        raise Refusal(f"{call.name}(): {len(knots):,} knots; at most {MAX_BASIS}")


def _hashed_bound(call: Call) -> None:
    """``hashed()`` encodes every one of its ``levels`` as a column: their cells must fit in memory."""
    levels = call.arguments.get("levels", 1)
    needed = 3 * 8.0 * max(call.rows, 1) * levels
    if needed > available_memory():
        raise Refusal(
            f"hashed(): levels={levels:,} makes {levels:,} columns of {call.rows:,} rows, about {needed / 2**30:,.1f} GiB; "
            "use fewer levels"
        )


def _lag_bound(call: Call) -> None:
    if abs(call.arguments.get("k", 1)) > max(call.rows, 1):
        raise Refusal(f"lag(): k={call.arguments['k']:,} is more than the {call.rows:,} rows")


@dataclass(frozen=True)
class Transform:
    """One callable a formula may name.

    Attributes
    ----------
    function
        What runs.
    parameters
        Its parameters in positional order, each with the kind of value it accepts (the first is the data, for a
        transform of data).
    keyword_only
        Parameters that may only be passed by keyword.
    stateful
        A formulaic stateful transform: it learns its state (a mean, knots, polynomial coefficients) when a fit
        builds the design and reuses it when new rows are predicted.
    bound
        A check of the arguments against the data, run before the call.
    positional_only
        Called with its arguments in order (numpy's functions), not by their names.
    """

    function: Callable
    parameters: tuple[tuple[str, Callable], ...]
    keyword_only: frozenset[str] = frozenset()
    stateful: bool = False
    bound: Callable[[Call], None] | None = None
    positional_only: bool = False
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(name for name, _ in self.parameters))

    def bind(self, label: str, args: list, kwargs: dict) -> dict:
        """The arguments by parameter name, each checked by its kind."""
        positional = [name for name in self.names if name not in self.keyword_only]
        if len(args) > len(positional):
            raise Refusal(f"{label}() takes at most {len(positional)} positional argument(s), got {len(args)}")
        bound = dict(zip(positional, args))
        for name, value in kwargs.items():
            if name not in self.names:
                raise Refusal(
                    f"{label}() has no argument {name!r} that a formula may set (it takes {list(self.names)})"
                )
            if name in bound:
                raise Refusal(f"{label}() got argument {name!r} twice")
            bound[name] = value
        kinds = dict(self.parameters)
        return {name: kinds[name](name, value) for name, value in bound.items()}

    def call(self, arguments: dict, **extra):
        """Run the function on bound arguments (``extra``: a stateful transform's state, metadata and spec)."""
        if self.positional_only:
            return self.function(*(arguments[name] for name in self.names if name in arguments))
        if not self.names or self.names[0] not in arguments:
            return self.function(**arguments, **extra)
        rest = {name: value for name, value in arguments.items() if name != self.names[0]}
        return self.function(arguments[self.names[0]], **rest, **extra)  # formulaic's wrapper names it ``data``


def _elementwise(function, arity: int = 1) -> Transform:
    return Transform(function, tuple((f"x{i + 1}" if i else "x", data) for i in range(arity)), positional_only=True)


def _hashed(data, levels, contrasts=None, spans_intercept=False):
    return hashed(data, levels, contrasts, spans_intercept=spans_intercept)


def _exp10(x):
    return np.power(10.0, x)


def _round(x, decimals=0):
    return np.round(x, decimals)


_SPLINE = (
    ("x", data),
    ("df", optional(integer(1, MAX_BASIS))),
    ("knots", optional(numbers)),
)
_BOUNDS = (("lower_bound", optional(number)), ("upper_bound", optional(number)))

#: Transforms called by name (``C(x)``, ``poly(x, 2)``).
TRANSFORMS: dict[str, Transform] = {
    "I": Transform(lambda x: x, (("x", data),)),
    "C": Transform(
        C,
        (("data", data), ("contrasts", optional(contrasts)), ("levels", optional(labels)), ("spans_intercept", flag)),
        keyword_only=frozenset({"levels", "spans_intercept"}),
    ),
    "hashed": Transform(
        _hashed,
        (
            ("data", data),
            ("levels", integer(1, MAX_HASHED_LEVELS)),
            ("contrasts", optional(contrasts)),
            ("spans_intercept", flag),
        ),
        bound=_hashed_bound,
    ),
    "center": Transform(center, (("data", data),), stateful=True),
    "scale": Transform(
        scale, (("data", data), ("center", flag), ("scale", flag), ("ddof", integer(0, 1))), stateful=True
    ),
    "standardize": Transform(
        standardize, (("x", data), ("center", flag), ("rescale", flag), ("ddof", integer(0, 1))), stateful=True
    ),
    "poly": Transform(
        poly, (("x", data), ("degree", integer(1, MAX_BASIS)), ("raw", flag)), stateful=True, bound=_poly_bound
    ),
    "bs": Transform(
        basis_spline,
        (
            *_SPLINE,
            ("degree", integer(0, MAX_SPLINE_DEGREE)),
            ("include_intercept", flag),
            *_BOUNDS,
            ("extrapolation", choice("raise", "clip", "na", "zero", "extend")),
        ),
        stateful=True,
        bound=_spline_bound,
    ),
    **{
        name: Transform(
            function,
            (
                *_SPLINE,
                *_BOUNDS,
                ("constraints", optional(choice("center"))),
                ("extrapolation", choice("raise", "clip", "na", "zero", "extend")),
            ),
            stateful=True,
            bound=_spline_bound,
        )
        for name, function in (("cr", natural_cubic_spline), ("cs", natural_cubic_spline), ("cc", cyclic_cubic_spline))
    },
    "lag": Transform(lag, (("x", data), ("k", integer(-(10**9), 10**9))), bound=_lag_bound),
    "log": _elementwise(np.log),
    "log2": _elementwise(np.log2),
    "log10": _elementwise(np.log10),
    "exp": _elementwise(np.exp),
    "exp2": _elementwise(np.exp2),
    "exp10": _elementwise(_exp10),
    "abs": _elementwise(np.abs),
    "round": Transform(_round, (("x", data), ("decimals", integer(-15, 15)))),
}


def _level(name: str, value):
    if not isinstance(value, str | Real | bool):
        raise Refusal(f"argument {name!r} must be a level (text or a number), not {_describe(value)}")
    return value


def _treatment(reference=None):
    return TreatmentContrasts() if reference is None else TreatmentContrasts(base=reference)


def _custom(contrasts, names=None):
    return CustomContrasts(np.asarray(contrasts, dtype=float), names)


#: Contrast codings: called with options (``Treatment('b')``, ``contr.treatment('b')``) or named as values
#: (``C(g, contr.sum)``, ``C(g, Sum)``).  patsy's names, then R's ``contr.*`` names.
CONTRAST_CODINGS: dict[str, tuple[type, Transform]] = {
    "Treatment": (TreatmentContrasts, Transform(_treatment, (("reference", optional(_level)),))),
    "Sum": (SumContrasts, Transform(SumContrasts, ())),
    "Helmert": (HelmertContrasts, Transform(HelmertContrasts, (("reverse", flag), ("scale", flag)))),
    "Diff": (DiffContrasts, Transform(DiffContrasts, (("backward", flag),))),
    "Poly": (PolyContrasts, Transform(PolyContrasts, (("scores", optional(numbers)),))),
}
CONTR: dict[str, tuple[type, Transform]] = {
    "treatment": CONTRAST_CODINGS["Treatment"],
    "sum": CONTRAST_CODINGS["Sum"],
    "helmert": CONTRAST_CODINGS["Helmert"],
    "diff": CONTRAST_CODINGS["Diff"],
    "poly": CONTRAST_CODINGS["Poly"],
    "SAS": (SASContrasts, Transform(SASContrasts, ())),
    "custom": (CustomContrasts, Transform(_custom, (("contrasts", matrix), ("names", optional(labels))))),
}

#: Element-wise numpy functions, called as ``np.<name>`` (or ``numpy.<name>``), with how many arguments they take.
NUMPY_FUNCTIONS: dict[str, Transform] = {
    **{
        name: _elementwise(getattr(np, name))
        for name in (
            "log",
            "log1p",
            "log2",
            "log10",
            "exp",
            "expm1",
            "exp2",
            "sqrt",
            "cbrt",
            "square",
            "abs",
            "absolute",
            "fabs",
            "sign",
            "floor",
            "ceil",
            "rint",
            "trunc",
            "sin",
            "cos",
            "tan",
            "arcsin",
            "arccos",
            "arctan",
            "sinh",
            "cosh",
            "tanh",
            "arcsinh",
            "arccosh",
            "arctanh",
            "reciprocal",
            "isnan",
            "isfinite",
            "logical_not",
            "deg2rad",
            "rad2deg",
        )
    },
    **{
        name: _elementwise(getattr(np, name), 2)
        for name in (
            "power",
            "minimum",
            "maximum",
            "fmin",
            "fmax",
            "arctan2",
            "logical_and",
            "logical_or",
            "mod",
            "hypot",
        )
    },
    "round": Transform(_round, (("x", data), ("decimals", integer(-15, 15)))),
    "clip": _elementwise(np.clip, 3),
    "where": _elementwise(np.where, 3),
}
#: numpy constants, named as ``np.<name>``.
NUMPY_CONSTANTS = {"pi": np.pi, "e": np.e, "inf": np.inf, "nan": np.nan}
