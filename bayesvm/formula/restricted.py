"""The terms of a formula part, checked before anything evaluates them, and the columns they use.

formulaic parses a formula part (the fixed part, or one bar's left-hand side) into factors: plain names, literals
and Python expressions.  Every Python expression is checked here by the same interpreter that later evaluates it
(:mod:`bayesvm.formula.interpreter`), so a formula, or a term restored from a saved fit, that uses anything outside
the grammar is refused before data are touched.  The columns a part uses come from the same parse, never from
formulaic's ``required_variables`` (which evaluates parts of the text with Python's ``eval``).
"""

from __future__ import annotations

import ast
import math
import re

import formulaic
from formulaic.errors import FormulaicError

from ..errors import FormulaError
from .interpreter import R_CALLS, check_term, term_variables

#: Longest formula part formulaic is given to parse (``y ~ .`` on a wide frame writes every column).
MAX_FORMULA_LENGTH = 2_000_000
#: Most terms the interactions of a formula part may add to the terms written in it (``(a + b + ...)^k`` and
#: ``a * b * ...`` grow combinatorially, and formulaic's expansion of them, before anything is checked, faster still).
MAX_TERMS = 1000
#: Largest exponent of a power of terms (an exponent above the number of terms adds nothing).
MAX_POWER = 20


def check_factor(factor) -> None:
    """Check one formulaic ``Factor``: a Python expression must pass the interpreter's grammar; names and literals
    are data."""
    method = getattr(getattr(factor, "eval_method", None), "value", None)
    expr = getattr(factor, "expr", None)
    if not isinstance(expr, str):
        raise FormulaError(f"a formula factor must be text, got {type(expr).__name__}")
    if method == "python":
        check_term(expr)
    elif method == "literal":
        _check_literal(expr)
    elif method != "lookup":
        raise FormulaError(f"formula term {expr!r} has an unknown evaluation method")


def _check_literal(expr: str) -> None:
    """A literal factor is a number or a short string (formulaic reads it with ``ast.literal_eval``)."""
    if len(expr) > 1_000 or not re.fullmatch(r"\s*(?:[-+]?[0-9.eE+-]+|'[^'\\]*'|\"[^\"\\]*\")\s*", expr):
        raise FormulaError(f"formula literal {expr[:60]!r} is not a number or a short text")


#: A standalone ``.`` ("every other column", as in R): not a decimal point, not inside a name such as ``cad.dur``
DOT = re.compile(r"(?<![\w.`])\.(?![\w.`])")


#: R's ``as.factor(`` and ``as.numeric(``, which no Python parser reads (``as`` is a keyword)
R_DOTTED_CALL = re.compile(r"\b(as\.(?:factor|numeric|integer))\s*\(")


def formula_factors(part: str) -> list:
    """Every factor of a formula part, parsed by formulaic (parsing runs no code) and checked (:func:`check_factor`).

    A ``.`` stands for column names (plain lookups, expanded against the data by
    :func:`bayesvm.formula.bars.expand_dot`), so it is read as a constant term here."""
    if not isinstance(part, str):
        raise FormulaError(f"a formula must be text, got {type(part).__name__}")
    if len(part) > MAX_FORMULA_LENGTH:
        raise FormulaError(f"formula of {len(part):,} characters; at most {MAX_FORMULA_LENGTH:,}")
    terms = expanded_terms(part)
    if terms > MAX_TERMS + part.count("+") + 1:
        raise FormulaError(
            f"formula part {part[:80]!r} expands to about {terms:,} terms (powers and products of sums); at most "
            f"{MAX_TERMS:,} more than it writes: write the interactions you need, e.g. (a + b + c)^2 rather than a "
            "higher power"
        )
    try:
        formula = formulaic.Formula(DOT.sub("1", part))
    except FormulaicError as exc:
        raise FormulaError(f"cannot parse formula part {part!r}: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise FormulaError(f"formula part {part[:60]!r}... is nested too deeply to parse") from None
    except (MemoryError, ValueError, TypeError, SyntaxError) as exc:
        dotted = R_DOTTED_CALL.search(part)  # (R's as.factor(x): `as` is a Python keyword)
        hint = f" ({R_CALLS[dotted.group(1)]})" if dotted else ""
        raise FormulaError(f"cannot parse formula part {part[:200]!r}: {type(exc).__name__}{hint}") from None
    factors = _factors(formula)
    for factor in factors:
        check_factor(factor)
    return factors


def expanded_terms(part: str) -> int:
    """An upper bound on the terms a formula part expands to, from its syntax alone (no formulaic parse): a sum adds
    its sides, ``a * b`` gives ``a + b + a:b``, ``a:b`` multiplies, ``a / b`` gives ``a + a:b``, and ``(...)^k`` (or
    ``**k``) every interaction of up to ``k`` of its terms.  A part this reading cannot parse counts as one term per
    ``+`` unless it has a power, whose exponent is then read alone."""
    code = re.sub(r"`[^`]*`", "_q", part)
    code = re.sub(r"(?<![:<>=!]):(?![:=])", "@", code).replace("^", "**")
    try:
        tree = ast.parse(code, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        powers = [int(k) for k in re.findall(r"(?:\*\*|\^)\s*\(?\s*(\d{1,12})", part)]
        return (MAX_TERMS + part.count("+") + 2) if any(k > 8 for k in powers) else part.count("+") + 1
    try:
        return _count_terms(tree.body)
    except RecursionError:
        return 2**64


def _count_terms(node: ast.AST) -> int:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        total = 0  # a sum of many terms (a wide formula, ``y ~ .``) is a deep left chain: walked, not recursed into
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            total += _count_terms(node.right)
            node = node.left
        return total + _count_terms(node)
    if isinstance(node, ast.BinOp):
        op = type(node.op)
        if op is ast.Pow:
            base = _count_terms(node.left)
            power = node.right.value if isinstance(node.right, ast.Constant) else None
            if not isinstance(power, int) or isinstance(power, bool) or power < 1:
                return base
            if power > MAX_POWER:  # formulaic multiplies the base out once per unit of the exponent
                raise FormulaError(
                    f"the power {ast.unparse(node)[:60]} has the exponent {power:,}; at most {MAX_POWER} (an exponent "
                    "above the number of terms adds no interaction)"
                )
            if base >= 64:  # past any bound below, without computing it
                return 2**64
            return sum(math.comb(base, i) for i in range(1, min(power, base) + 1))
        left, right = _count_terms(node.left), _count_terms(node.right)
        if op is ast.Mult:
            return left + right + left * right
        if op is ast.MatMult:
            return left * right
        if op is ast.Div:
            return left + left * right
        return left + right
    if isinstance(node, ast.UnaryOp):
        return _count_terms(node.operand)
    if isinstance(node, ast.Constant):
        return 0
    return 1  # a name, a call (one factor, whatever its arguments), braces


def check_formula_part(part: str) -> None:
    """Check the terms of a formula part (:func:`formula_factors`)."""
    formula_factors(part)


def formula_variables(part: str) -> list[str]:
    """The data columns a formula part uses, sorted: its plain names, and the columns its expressions read
    (:func:`bayesvm.formula.interpreter.term_variables`)."""
    variables: set[str] = set()
    for factor in formula_factors(part):
        method = factor.eval_method.value
        if method == "lookup":
            variables.add(str(factor.expr))
        elif method == "python":
            variables.update(term_variables(factor.expr))
    return sorted(variables)


def _factors(formula) -> list:
    """Every factor of a formulaic formula, whatever its structure (simple, multi-part or two-sided)."""
    if isinstance(formula, formulaic.formula.SimpleFormula):
        return [factor for term in formula for factor in term.factors]
    return [factor for part in formula for factor in _factors(part)]  # a structured formula iterates its parts
