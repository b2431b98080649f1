"""Restricted evaluation of formula terms: only the transforms a model formula needs.

formulaic evaluates any term that is not a plain column name as Python.  Formulas are often taken from
configuration files or web forms, so before formulaic sees one, every such term is parsed with
:mod:`ast` and refused unless it is built from

- column names (backtick-quoted names included) and numeric, string or boolean constants;
- arithmetic (``+ - * / // % **``, unary minus), comparisons and ``and`` / ``or`` / ``not``;
- calls of the formula transforms :data:`TRANSFORMS` (``C``, ``I``, ``center``, ``scale``, ``poly``,
  ``bs``, ``log``, ...), the contrasts ``contr.treatment`` etc., and the element-wise numpy functions
  :data:`NUMPY_FUNCTIONS` as ``np.log`` (or ``numpy.log``), with constants, lists or tuples as options.

Anything else (attribute access, subscripts, lambdas, comprehensions, names with double underscores,
calls of other functions such as ``open`` or ``np.save``) is refused with a :class:`FormulaError` that
names the term and what it used.  Saved fits are checked with the same rules when they are loaded.
"""

from __future__ import annotations

import ast
import re

import formulaic
from formulaic.errors import FormulaicError

from ..errors import FormulaError

#: Formula transforms that may be called by name.
TRANSFORMS = frozenset(
    {
        "C", "I", "Q", "center", "scale", "standardize", "poly", "bs", "cs", "cr", "cc", "te", "hashed", "lag",
        "log", "log2", "log10", "exp", "exp2", "exp10", "Treatment", "Sum", "Helmert", "Diff", "Poly", "abs",
        "round",
    }
)  # fmt: skip
#: Element-wise numpy functions that may be called as ``np.<name>``.
NUMPY_FUNCTIONS = frozenset(
    {
        "log", "log1p", "log2", "log10", "exp", "expm1", "exp2", "sqrt", "cbrt", "square", "power", "abs",
        "absolute", "fabs", "sign", "floor", "ceil", "round", "rint", "trunc", "clip", "minimum", "maximum",
        "fmin", "fmax", "where", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh",
        "tanh", "arcsinh", "arccosh", "arctanh", "reciprocal", "isnan", "isfinite", "logical_and", "logical_or",
        "logical_not", "mod", "hypot", "deg2rad", "rad2deg",
    }
)  # fmt: skip
#: numpy constants that may appear as ``np.<name>``.
NUMPY_CONSTANTS = frozenset({"pi", "e", "inf", "nan"})
#: Contrast codings that may appear as ``contr.<name>``.
CONTRASTS = frozenset({"treatment", "sum", "helmert", "diff", "poly", "custom"})

_ALLOWED_NODES = (
    ast.Expression, ast.Name, ast.Load, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
    ast.Call, ast.keyword, ast.Attribute, ast.List, ast.Tuple,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Not,
    ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
)  # fmt: skip
_BACKTICKED = re.compile(r"`[^`]*`")


def _refuse(term: str, what: str) -> FormulaError:
    return FormulaError(
        f"formula term {term!r} uses {what}, which bayesvm does not evaluate: formula terms may use column names, "
        "constants, arithmetic, the formula transforms (C, I, center, scale, poly, bs, log, ...) and element-wise "
        "numpy functions such as np.log or np.sqrt"
    )


def check_expression(expr: str) -> None:
    """Refuse a Python term outside the restricted grammar (module docstring).

    Raises
    ------
    FormulaError
        Naming the term and the construct it used.
    """
    if not isinstance(expr, str):
        raise FormulaError(f"a formula term must be text, got {type(expr).__name__}")
    code = _BACKTICKED.sub("_quoted_name", expr)
    try:
        tree = ast.parse(code.strip(), mode="eval")
    except SyntaxError:
        raise FormulaError(f"formula term {expr!r} is not a valid expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise _refuse(expr, f"a {type(node).__name__} construct")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise _refuse(expr, f"the name {node.id!r}")
        if isinstance(node, ast.Attribute):
            _check_attribute(node, expr)
        if isinstance(node, ast.Call):
            _check_call(node, expr)


def _check_attribute(node: ast.Attribute, expr: str) -> None:
    owner = node.value.id if isinstance(node.value, ast.Name) else None
    if owner in ("np", "numpy") and node.attr in NUMPY_FUNCTIONS | NUMPY_CONSTANTS:
        return
    if owner == "contr" and node.attr in CONTRASTS:
        return
    raise _refuse(expr, f"the attribute {ast.unparse(node)!r}")


def _check_call(node: ast.Call, expr: str) -> None:
    func = node.func
    if isinstance(func, ast.Name) and func.id in TRANSFORMS:
        return
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id in ("np", "numpy") and func.attr in NUMPY_FUNCTIONS:
            return
        if func.value.id == "contr" and func.attr in CONTRASTS:
            return
    raise _refuse(expr, f"a call of {ast.unparse(func)!r}")


def check_factor(factor) -> None:
    """Check one formulaic ``Factor`` (terms evaluated as Python only; names and literals are data)."""
    method = getattr(getattr(factor, "eval_method", None), "value", None)
    if method == "python":
        check_expression(factor.expr)
    elif method not in ("lookup", "literal"):
        raise FormulaError(f"formula term {getattr(factor, 'expr', factor)!r} has an unknown evaluation method")


#: A standalone ``.`` ("every other column", as in R): not a decimal point, not inside a name such as ``cad.dur``
DOT = re.compile(r"(?<![\w.`])\.(?![\w.`])")


def check_formula_part(part: str) -> None:
    """Check the terms of a formulaic formula (the fixed part, or one bar's left-hand side).

    A ``.`` stands for column names (plain lookups, expanded against the data by
    :func:`bayesvm.formula.bars.expand_dot`), so it is checked as a constant term."""
    try:
        formula = formulaic.Formula(DOT.sub("1", part))
    except FormulaicError as exc:
        raise FormulaError(f"cannot parse formula part {part!r}: {str(exc).splitlines()[0]}") from None
    for factor in _factors(formula):
        check_factor(factor)


def _factors(formula) -> list:
    """Every factor of a formulaic formula, whatever its structure (simple, multi-part or two-sided)."""
    if isinstance(formula, formulaic.formula.SimpleFormula):
        return [factor for term in formula for factor in term.factors]
    parts = formula._flatten() if hasattr(formula, "_flatten") else list(formula)
    return [factor for part in parts for factor in _factors(part)]
