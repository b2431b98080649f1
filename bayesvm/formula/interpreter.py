"""Formula terms evaluated by the package's own interpreter over :mod:`ast`, never by Python's ``eval``.

A term that is not a plain column name (``log(x)``, ``C(g, contr.sum)``, ``I(x ** 2)``, ``poly(age, 2)``) is
parsed with :func:`ast.parse` and then walked node by node.  Only these nodes have a meaning:

- names: a data column (a backtick-quoted name is always a column), or a contrast coding (``Sum``);
- constants: numbers (at most :data:`MAX_INT_BITS` bits), text (at most ``MAX_TEXT`` characters), booleans, None;
  lists and tuples of them (at most ``MAX_LIST`` items);
- ``np.pi``, ``np.e``, ``np.inf``, ``np.nan`` and the contrast codings ``contr.<name>``;
- arithmetic ``+ - * / // % **`` on numbers and numeric columns only (never on text or lists), unary ``-``/``+``,
  comparisons, ``and``/``or``/``not``, and ``&``/``|``/``~`` on booleans;
- calls of the functions in :mod:`bayesvm.formula.transforms` (by name, ``np.<name>`` or ``contr.<name>``), with
  the keyword arguments each lists, arguments of the kinds it declares, checked against its bounds before it runs;
  and ``Q("name")``, the column of that name.

Everything else (attribute access on anything but ``np`` and ``contr``, subscripts, lambdas, comprehensions,
f-strings, ``**kwargs``, names with a leading double underscore, calls of any other function) is refused with a
:class:`~bayesvm.errors.FormulaError` that names the term and the construct.  Backticks quote a column name only
outside string literals, as formulaic reads them; unquoted names must be ASCII identifiers (Python folds look-alike
characters such as a full-width ``ｘ`` into ``x``, so other names are written in backticks).  The same walk checks a
term without data (:func:`check_term`, run on every formula and every term a saved fit restores) and evaluates it on
data (:func:`evaluate_term`), so the check and the evaluation cannot drift apart.

Stateful transforms (``center``, ``scale``, ``poly``, ``bs``, ...) get their state under the key formulaic gives
them (the call as :func:`ast.unparse` writes it, quoted names in their Python spelling), so a learned centre or
knot sequence is reused when new rows are predicted.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pandas as pd

from ..errors import FormulaError
from .transforms import (
    CONTR,
    CONTRAST_CODINGS,
    MAX_LIST,
    MAX_TEXT,
    NUMPY_CONSTANTS,
    NUMPY_FUNCTIONS,
    TRANSFORMS,
    Call,
    Refusal,
    Transform,
    is_data,
)

#: Largest magnitude of a whole number a term may compute with, in bits (``2**1024`` is past float64's range).
MAX_INT_BITS = 1024
#: Deepest nesting of a term's syntax tree.
MAX_DEPTH = 60
#: Longest formula term, in characters.
MAX_TERM_LENGTH = 20_000
NUMPY_NAMES = ("np", "numpy")
#: Names with a meaning of their own in a term: a quoted column of the same name gets another identifier.
_RESERVED = frozenset({*TRANSFORMS, *CONTRAST_CODINGS, *NUMPY_NAMES, "contr", "Q"})

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_LOGICAL = {ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b}
_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
_UNARY = {ast.USub: lambda a: -a, ast.UAdd: lambda a: +a}
_STRUCTURAL = (
    ast.Expression,
    ast.Load,
    ast.keyword,
    *_BINARY,
    *_LOGICAL,
    *_COMPARE,
    *_UNARY,
    ast.Not,
    ast.Invert,
    ast.And,
    ast.Or,
)


@dataclass(frozen=True)
class Term:
    """A parsed and checked formula term.

    Attributes
    ----------
    text
        The term as written.
    tree
        Its syntax tree, backtick-quoted names replaced by Python identifiers.
    quoted
        Those identifiers -> the column names they quote.
    """

    text: str
    tree: ast.Expression
    quoted: dict

    def refuse(self, what: str, r_spelling: str = "") -> FormulaError:
        return FormulaError(
            f"formula term {self.text!r} uses {what}, which bayesvm does not evaluate{r_spelling}: formula terms may "
            "use column names, constants, arithmetic, the formula transforms (C, I, center, scale, poly, bs, log, "
            "...) and element-wise numpy functions such as np.log or np.sqrt"
        )


#: R's formula functions and what says the same here, named where a formula uses one (an R user's first formula);
#: ``as.*`` never reach a call (``as`` is a Python keyword): :func:`bayesvm.formula.restricted.formula_factors` names
#: them where the formula fails to parse
R_CALLS = {
    "factor": "R's factor(x) is C(x) here",
    "as.factor": "R's as.factor(x) is C(x) here",
    "relevel": "R's relevel(x, 'b') is C(x, Treatment('b')) here",
    "as.numeric": "R's as.numeric(x): the column itself here",
    "as.integer": "R's as.integer(x): the column itself here",
    "offset": "an offset, a fixed part of the decision value, is not supported",
    "ns": "splines::ns(x, df) has no twin here: bs(x, df=...) or a gp(x) term",
    "s": "mgcv's s(x) is a gp(x) term here",
}


# ----- reading the text -------------------------------------------------------------------------------------------
def _quote_names(text: str) -> tuple[str, dict]:
    """``text`` with each backtick-quoted name outside string literals replaced by a Python identifier (its Python
    spelling where it has one, formulaic's ``my col`` -> ``my_col`` otherwise), and the map back."""
    taken = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    out, quoted, i = [], {}, 0
    while i < len(text):
        char = text[i]
        if char in "'\"":
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
            continue
        if char == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise FormulaError(f"formula term {text!r} has a backtick that is not closed")
            name = text[i + 1 : end]
            if not name:
                raise FormulaError(f"formula term {text!r} has an empty backtick-quoted name")
            identifier = _identifier_for(name, quoted, taken)
            quoted[identifier] = name
            out.append(f" {identifier} ")
            i = end + 1
            continue
        out.append(char)
        i += 1
    return "".join(out).strip(), quoted


def _string_end(text: str, start: int) -> int:
    """Position after the string literal starting at ``start`` (single or triple quotes; a backslash always takes
    the next character, as Python's tokenizer reads both plain and raw strings)."""
    quote = text[start] * 3 if text.startswith(text[start] * 3, start) else text[start]
    i = start + len(quote)
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        i += 1
    return len(text)  # unterminated: ast.parse refuses it


def _identifier_for(name: str, quoted: dict, taken: set) -> str:
    """The Python identifier standing for a quoted column name: the name itself where it is one (so that a stateful
    transform's key is formulaic's), else its letters, digits and underscores, made unique."""
    for identifier, other in quoted.items():
        if other == name:
            return identifier
    if (
        name.isidentifier()
        and name.isascii()
        and not keyword.iskeyword(name)
        and not name.startswith("__")
        and name not in _RESERVED
    ):
        return name
    base = re.sub(r"[^0-9A-Za-z_]", "_", name)
    base = f"_{base}" if base[0].isdigit() or base.startswith("__") else base
    identifier, count = base, 0
    while identifier in taken or identifier in _RESERVED or keyword.iskeyword(identifier) or identifier in quoted:
        count += 1
        identifier = f"{base}_{count}"
    taken.add(identifier)
    return identifier


def parse_term(text: str) -> Term:
    """Parse and check a term without data (:func:`check_term`); returns the checked :class:`Term`."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula term must be text, got {type(text).__name__}")
    if len(text) > MAX_TERM_LENGTH:
        raise FormulaError(f"formula term of {len(text):,} characters; at most {MAX_TERM_LENGTH:,}")
    if "\x00" in text:
        raise FormulaError("formula term holds a NUL character")
    code, quoted = _quote_names(text)
    try:
        tree = ast.parse(code, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise FormulaError(f"formula term {text!r} is not a valid expression") from None
    term = Term(text, tree, quoted)
    _check(term, tree, 0)
    return term


def check_term(text: str) -> None:
    """Refuse a term outside the grammar of the module docstring, naming the construct."""
    parse_term(text)


# ----- the static check -------------------------------------------------------------------------------------------
def _check(term: Term, node: ast.AST, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise term.refuse(f"an expression nested more than {MAX_DEPTH} levels deep")
    if isinstance(node, ast.Name):
        _check_name(term, node)
    elif isinstance(node, ast.Constant):
        _check_constant(term, node.value)
    elif isinstance(node, ast.Attribute):
        _attribute_value(term, node)
    elif isinstance(node, ast.Call):
        name, transform = _callee(term, node)
        for item in node.keywords:
            if item.arg is None:
                raise term.refuse("'**' keyword unpacking")
            if transform is None or item.arg not in transform.names:
                takes = list(transform.names) if transform is not None else ["the column name"]
                raise FormulaError(
                    f"formula term {term.text!r}: {name}() has no argument {item.arg!r} that a formula may set "
                    f"(it takes {takes})"
                )
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise term.refuse("'*' argument unpacking")
        for child in (*node.args, *(item.value for item in node.keywords)):
            _check(term, child, depth + 1)
        return
    elif isinstance(node, ast.List | ast.Tuple):
        if len(node.elts) > MAX_LIST:
            raise term.refuse(f"a list of {len(node.elts):,} items (at most {MAX_LIST:,})")
    elif not isinstance(node, _STRUCTURAL + (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare)):
        raise term.refuse(f"a {type(node).__name__} construct ({_source(node)!r})")
    for child in ast.iter_child_nodes(node):
        _check(term, child, depth + 1)


def _source(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:60]
    except Exception:  # an unparsable node is reported by its type alone
        return type(node).__name__


def _check_name(term: Term, node: ast.Name) -> None:
    if node.id in term.quoted:
        return
    if node.id.startswith("__"):
        raise term.refuse(f"the name {node.id!r}")
    if not node.id.isascii():
        raise FormulaError(
            f"formula term {term.text!r}: the name {node.id!r} is not plain ASCII; write column names with other "
            f"characters in backticks, e.g. `{node.id}`"
        )


def _check_constant(term: Term, value) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise term.refuse(f"a number of {value.bit_length():,} bits (at most {MAX_INT_BITS})")
        return
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise term.refuse(f"a text constant of {len(value):,} characters (at most {MAX_TEXT:,})")
        return
    raise term.refuse(f"a constant of type {type(value).__name__}")


def _attribute_value(term: Term, node: ast.Attribute):
    """The value ``np.pi`` or ``contr.sum`` names; anything else is refused."""
    owner = node.value.id if isinstance(node.value, ast.Name) and node.value.id not in term.quoted else None
    if owner in NUMPY_NAMES and node.attr in NUMPY_CONSTANTS:
        return NUMPY_CONSTANTS[node.attr]
    if owner == "contr" and node.attr in CONTR:
        return CONTR[node.attr][0]
    raise term.refuse(f"the attribute {_source(node)!r}")


def _callee(term: Term, node: ast.Call) -> tuple[str, Transform | None]:
    """The name and record of the function a call names (``None`` for ``Q``); anything else is refused."""
    func = node.func
    if isinstance(func, ast.Name) and func.id not in term.quoted:
        if func.id == "Q":
            return "Q", None
        if func.id in TRANSFORMS:
            return func.id, TRANSFORMS[func.id]
        if func.id in CONTRAST_CODINGS:
            return func.id, CONTRAST_CODINGS[func.id][1]
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id not in term.quoted:
        owner, name = func.value.id, func.attr
        if owner in NUMPY_NAMES and name in NUMPY_FUNCTIONS:
            return f"{owner}.{name}", NUMPY_FUNCTIONS[name]
        if owner == "contr" and name in CONTR:
            return f"contr.{name}", CONTR[name][1]
    name = _source(func)
    raise term.refuse(f"a call of {name!r}", f" ({R_CALLS[name]})" if name in R_CALLS else "")


# ----- which columns a term uses ----------------------------------------------------------------------------------
def term_variables(text: str) -> list[str]:
    """The data columns a term uses, in order of first use: its names that are not contrast codings, callees or
    ``np`` / ``contr`` owners, its backtick-quoted names and the arguments of ``Q("...")``."""
    term = parse_term(text)
    parents = {id(child): parent for parent in ast.walk(term.tree) for child in ast.iter_child_nodes(parent)}
    found: dict[str, None] = {}
    for node in ast.walk(term.tree):
        if isinstance(node, ast.Call):
            name, _ = _callee(term, node)
            if name == "Q" and node.args and isinstance(node.args[0], ast.Constant):
                found[str(node.args[0].value)] = None
        elif isinstance(node, ast.Name):
            parent = parents.get(id(node))
            if node.id in term.quoted:
                found[term.quoted[node.id]] = None
            elif not (
                isinstance(parent, ast.Attribute)
                or isinstance(parent, ast.Call)
                and parent.func is node
                or node.id in CONTRAST_CODINGS
            ):
                found[node.id] = None
    return list(found)


# ----- evaluation -------------------------------------------------------------------------------------------------
def evaluate_term(
    text: str, columns: Mapping, rows: int, state: dict, metadata: Mapping | None = None, spec=None
) -> tuple:
    """Evaluate a term on data.

    Parameters
    ----------
    text
        The term (a formulaic factor's expression).
    columns
        The data's columns by name (a mapping or a data frame); nothing else can be reached.
    rows
        The number of rows (the bounds of ``poly``, ``lag``, ``hashed`` read it).
    state
        The stateful transforms' state (formulaic's ``ModelSpec.transform_state``), updated in place where a
        transform learns it.
    metadata
        The factor's metadata by expression (passed to a stateful transform that is the whole term).
    spec
        The formulaic ``ModelSpec`` being built (stateful transforms read its output type).

    Returns
    -------
    (value, used)
        The term's value and the names of the columns it read.

    Raises
    ------
    FormulaError
        For a construct, argument or bound the grammar refuses, or a column the data do not have.
    """
    term = parse_term(text)
    run = _Evaluation(term, columns, rows, state, metadata or {}, spec)
    value = run.value(term.tree.body)
    if not is_data(value) and not isinstance(value, str):
        raise term.refuse(f"a value that is not data ({type(value).__name__})")
    return value, run.used


class _Evaluation:
    """One evaluation of a checked term; every node kind has one method, looked up by type."""

    def __init__(self, term: Term, columns: Mapping, rows: int, state: dict, metadata: Mapping, spec) -> None:
        self.term, self.columns, self.rows, self.state, self.metadata, self.spec = (
            term,
            columns,
            rows,
            state,
            metadata,
            spec,
        )
        self.used: list[str] = []

    def value(self, node: ast.AST):
        method = self._METHODS.get(type(node))
        if method is None:
            raise self.term.refuse(f"a {type(node).__name__} construct")
        return method(self, node)

    def _constant(self, node: ast.Constant):
        return node.value

    def _name(self, node: ast.Name):
        name = self.term.quoted.get(node.id, node.id)
        if name in self.columns:
            if name not in self.used:
                self.used.append(name)
            return self.columns[name]
        if node.id not in self.term.quoted and node.id in CONTRAST_CODINGS:
            return CONTRAST_CODINGS[node.id][0]
        raise FormulaError(f"formula term {self.term.text!r} uses {name!r}, which is not a column of the data")

    def _attribute(self, node: ast.Attribute):
        return _attribute_value(self.term, node)

    def _sequence(self, node: ast.List | ast.Tuple):
        items = [self.value(item) for item in node.elts]
        for item in items:
            if not isinstance(item, str | Real | bool | list | tuple) and item is not None:
                raise self.term.refuse("a list holding something other than constants")
        return items if isinstance(node, ast.List) else tuple(items)

    def _binary(self, node: ast.BinOp):
        left, right = self.value(node.left), self.value(node.right)
        operator = type(node.op)
        if operator in _LOGICAL:
            self._require(_is_boolean, left, right, "'&' and '|' on values that are not True/False")
            return self._compute(_LOGICAL[operator], left, right)
        if operator not in _BINARY:
            raise self.term.refuse(f"the operator {type(node.op).__name__}")
        self._require(_is_numeric, left, right, f"arithmetic on {_kind(left, right)}")
        if operator is ast.Pow:
            _check_power(self.term, left, right)
        return self._bounded(self._compute(_BINARY[operator], left, right))

    def _unary(self, node: ast.UnaryOp):
        operand = self.value(node.operand)
        if isinstance(node.op, ast.Not):
            return self._compute(lambda a: not a, operand)
        if isinstance(node.op, ast.Invert):
            self._require(_is_boolean, operand, operand, "'~' on values that are not True/False")
            return self._compute(lambda a: ~a, operand)
        self._require(_is_numeric, operand, operand, f"arithmetic on {_kind(operand, operand)}")
        return self._compute(_UNARY[type(node.op)], operand)

    def _boolean(self, node: ast.BoolOp):
        result = self.value(node.values[0])
        for item in node.values[1:]:
            truth = self._compute(bool, result)
            if truth == isinstance(node.op, ast.Or):
                return result
            result = self.value(item)
        return result

    def _compare(self, node: ast.Compare):
        left = self.value(node.left)
        result = True
        for op, item in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise self.term.refuse(f"the comparison {type(op).__name__}")
            right = self.value(item)
            outcome = self._compute(_COMPARE[type(op)], left, right)
            result = outcome if result is True else self._compute(lambda a, b: a & b, result, outcome)
            left = right
        return result

    def _call(self, node: ast.Call):
        name, transform = _callee(self.term, node)
        args = [self.value(arg) for arg in node.args]
        kwargs = {item.arg: self.value(item.value) for item in node.keywords}
        if transform is None:  # Q("column name")
            if len(args) != 1 or kwargs or not isinstance(args[0], str):
                raise self.term.refuse("Q() with anything but one column name")
            if args[0] not in self.columns:
                raise FormulaError(f"formula term {self.term.text!r}: Q({args[0]!r}) is not a column of the data")
            self.used.append(args[0])
            return self.columns[args[0]]
        try:
            arguments = transform.bind(name, args, kwargs)
            key = ast.unparse(node).replace("\n", " ")
            if transform.bound is not None:
                learning = not (transform.stateful and self.state.get(key))
                transform.bound(Call(name, arguments, self.rows, learning))
        except Refusal as exc:
            raise FormulaError(f"formula term {self.term.text!r}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise FormulaError(f"formula term {self.term.text!r} cannot be evaluated: {exc}") from None
        if not transform.stateful:
            return self._bounded(self._compute(lambda: transform.call(arguments)))
        state = self.state.setdefault(key, {})
        extra = {"_state": state, "_metadata": self.metadata.get(key), "_spec": self.spec}
        return self._compute(lambda: transform.call(arguments, **extra))

    def _require(self, test, left, right, what: str) -> None:
        if not (test(left) and test(right)):
            raise self.term.refuse(what)

    def _compute(self, function, *args):
        """Run one operation; a numerical failure (a log of text, an overflow) becomes a FormulaError."""
        try:
            with np.errstate(all="ignore"):
                return function(*args)
        except FormulaError:
            raise
        except (ArithmeticError, TypeError, ValueError, IndexError, KeyError, AttributeError, MemoryError) as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise FormulaError(f"formula term {self.term.text!r} cannot be evaluated: {message}") from None

    def _bounded(self, value):
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
            raise self.term.refuse(f"a number of {value.bit_length():,} bits (at most {MAX_INT_BITS})")
        return value

    _METHODS = {
        ast.Constant: _constant,
        ast.Name: _name,
        ast.Attribute: _attribute,
        ast.List: _sequence,
        ast.Tuple: _sequence,
        ast.BinOp: _binary,
        ast.UnaryOp: _unary,
        ast.BoolOp: _boolean,
        ast.Compare: _compare,
        ast.Call: _call,
    }


def _is_numeric(value) -> bool:
    if isinstance(value, bool | np.bool_ | Real | np.number):
        return True
    if isinstance(value, pd.Series | np.ndarray):
        dtype = value.dtype
        return pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)
    return False


def _is_boolean(value) -> bool:
    if isinstance(value, bool | np.bool_):
        return True
    return isinstance(value, pd.Series | np.ndarray) and pd.api.types.is_bool_dtype(value.dtype)


def _kind(*values) -> str:
    for value in values:
        if isinstance(value, str):
            return "text"
        if isinstance(value, list | tuple):
            return "a list"
        if isinstance(value, pd.Series | np.ndarray) and not _is_numeric(value):
            return "a column that is not numeric"
        if not _is_numeric(value):
            return f"a {type(value).__name__}"
    return "these values"


def _check_power(term: Term, base, exponent) -> None:
    """Refuse a power of plain numbers whose result has more than :data:`MAX_INT_BITS` bits or overflows a float."""
    if isinstance(base, pd.Series | np.ndarray) or isinstance(exponent, pd.Series | np.ndarray):
        return
    base, exponent = float(base) if not isinstance(base, Integral) else int(base), exponent
    if isinstance(exponent, Integral) and exponent > 0 and abs(base) > 1:
        bits = float(exponent) * math.log2(abs(base))
        if bits > MAX_INT_BITS:
            raise term.refuse(f"a power of about 2**{bits:,.0f} (at most 2**{MAX_INT_BITS})")
