"""Split lme4-style random-effect bars (and ``gp()`` terms, :mod:`.gp_terms`) off a model formula.

formulaic reads ``|`` as a multipart-formula separator, so the random-effect terms
``(expr | group)`` and ``(expr || group)`` are removed here, at parenthesis depth one,
before the fixed part is handed to formulaic unchanged.

Supported, following lme4 / reformulas:

* ``(1 | g)`` random intercept; ``(x | g)`` means ``(1 + x | g)``;
* ``(1 + x | g)`` correlated intercept and slope; ``(0 + x | g)`` slope only;
* ``(1 + x || g)`` independent terms, expanded later into one bar per column;
* ``(1 | a/b)`` nested, expanded to ``(1 | a) + (1 | a:b)``;
* ``(1 | a:b)`` interaction of factors as the grouping factor; crossed ``(1|a) + (1|b)``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from ..errors import FormulaError
from .gp_terms import GpSpec, extract_gp_terms
from .restricted import DOT, check_formula_part

_NAME = r"(?:[A-Za-z_.][A-Za-z0-9_.]*|`[^`]+`)"
_GROUP_RE = re.compile(rf"^{_NAME}(?:\s*[:/]\s*{_NAME})*$")


@dataclass(frozen=True)
class Bar:
    """One random-effect term ``(expr | group)``.

    Attributes
    ----------
    expr
        The left-hand side as written (a formulaic formula, e.g. ``"1 + x"``).
    group
        The grouping factors, e.g. ``("a", "b")`` for ``a:b``.
    correlated
        False for ``||`` (independent columns).
    """

    expr: str
    group: tuple[str, ...]
    correlated: bool = True

    @property
    def group_name(self) -> str:
        return ":".join(self.group)

    def __str__(self) -> str:
        bar = "|" if self.correlated else "||"
        return f"({self.expr} {bar} {self.group_name})"


@dataclass(frozen=True)
class ParsedFormula:
    """A formula split into response, fixed part, random-effect bars and Gaussian-process terms."""

    formula: str
    response: str
    fixed: str
    bars: tuple[Bar, ...]
    gp_terms: tuple[GpSpec, ...] = ()


def _strip_backticks(name: str) -> str:
    name = name.strip()
    return name[1:-1] if name.startswith("`") and name.endswith("`") else name


def _outside_backticks(text: str):
    """``(position, character)`` of ``text`` outside back-quoted names (a column named ``weight (kg`` is a name, not
    an open parenthesis)."""
    quoted = False
    for pos, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif not quoted:
            yield pos, char


def _check_parentheses(text: str, formula: str) -> None:
    depth = 0
    for pos, char in _outside_backticks(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise FormulaError(f"unbalanced parentheses in formula {formula!r}: unexpected ')' at position {pos}")
    if depth != 0:
        raise FormulaError(f"unbalanced parentheses in formula {formula!r}: {depth} '(' not closed")


def _top_level_groups(rhs: str) -> list[tuple[int, int]]:
    """Spans ``(start, end)`` of every top-level parenthesised group in ``rhs``."""
    spans, depth, start = [], 0, 0
    for pos, char in _outside_backticks(rhs):
        if char == "(":
            if depth == 0:
                start = pos
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                spans.append((start, pos + 1))
    return spans


def _parse_bar(inner: str, formula: str) -> list[Bar]:
    """Parse the text inside one ``( ... | ... )`` group."""
    correlated = "||" not in inner
    lhs, _, group = inner.partition("||" if not correlated else "|")
    lhs, group = lhs.strip(), group.strip()
    if "|" in group:
        raise FormulaError(f"random-effect term ({inner}) in {formula!r} has more than one bar")
    if not lhs:
        raise FormulaError(
            f"random-effect term ({inner}) in {formula!r} has no terms before the bar; write (1 | {group or 'g'})"
        )
    if not group:
        raise FormulaError(f"random-effect term ({inner}) in {formula!r} has no grouping factor after the bar")
    if not _GROUP_RE.match(group):
        raise FormulaError(
            f"grouping factor {group!r} in {formula!r} must be column names joined by ':' (interaction) or '/' (nesting)"
        )
    if "/" in group and ":" in group:
        raise FormulaError(f"grouping factor {group!r} in {formula!r} mixes '/' and ':'; write nested terms explicitly")
    if "/" in group:
        parts = [_strip_backticks(p) for p in group.split("/")]
        return [Bar(lhs, tuple(parts[: i + 1]), correlated) for i in range(len(parts))]
    return [Bar(lhs, tuple(_strip_backticks(p) for p in group.split(":")), correlated)]


#: An unquoted name with a dot in it, not part of a longer name, a quoted name or a call (``np.log(``).
_DOTTED = re.compile(r"(?<![`\w.])([A-Za-z_.][A-Za-z0-9_.]*\.[A-Za-z0-9_.]*)(?![\w.(`])")


def formula_name(name) -> str:
    """A column's name as a formula writes it: bare where it is a plain name, else in backticks."""
    name = str(name)
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def quote_dotted_columns(text: str, columns) -> str:
    """R-style names with dots (``Cl.thickness``, ``Bare.nuclei``, as R's ``write.csv`` exports them) used as
    written: an unquoted dotted name that is exactly one of ``columns`` is put in backticks, which formulaic would
    otherwise read as the attribute ``thickness`` of a column ``Cl`` (and the restricted grammar refuse).  Names that
    are not columns (``np.log``) are left as they are."""
    names = {str(c) for c in columns if "." in str(c)}
    if not names:
        return text
    return _DOTTED.sub(lambda m: f"`{m.group(1)}`" if m.group(1) in names else m.group(1), text)


def parse_formula(formula: str, columns=None) -> ParsedFormula:
    """Split ``"y ~ fixed + (expr | g)"`` into response, fixed part and bars; with the data's ``columns``, a dotted
    column name written without backticks is read as that column (:func:`quote_dotted_columns`).  The result is
    immutable and kept for the last :data:`PARSED_KEPT` formulas and column sets (a fit parses its formula more than
    once).

    Raises
    ------
    FormulaError
        For a missing ``~``, a missing response, unbalanced parentheses, an empty side of a bar,
        or a bar that is not a top-level ``+`` term.
    """
    if not isinstance(formula, str):
        raise FormulaError(f"formula must be a string such as 'y ~ x + (1 | g)', got {type(formula).__name__}")
    return _parsed(formula, None if columns is None else tuple(str(c) for c in columns))


#: How many parsed formulas :func:`parse_formula` keeps.
PARSED_KEPT = 32


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parsed(formula: str, columns: tuple[str, ...] | None) -> ParsedFormula:
    """:func:`parse_formula` of a string formula and the data's column names."""
    _check_parentheses(formula, formula)
    tildes = [pos for pos, char in _outside_backticks(formula) if char == "~"]  # (a quoted name may hold one)
    if len(tildes) != 1:
        raise FormulaError(f"formula {formula!r} must contain exactly one '~' separating response and predictors")
    lhs, rhs = formula[: tildes[0]].strip(), formula[tildes[0] + 1 :].strip()
    if not lhs:
        raise FormulaError(f"formula {formula!r} has no response on the left of '~'")
    if not re.fullmatch(_NAME, lhs):
        aggregated = (
            " (one binary outcome per row: for counts of successes and failures, as glm's cbind(s, f) or a "
            "proportion with weights, expand each row into one row per trial, e.g. with np.repeat)"
            if re.match(r"\s*cbind\s*\(", lhs) or "/" in lhs
            else " (its classes are read from the column as it is: text, categories, booleans or two numbers)"
            if re.match(r"\s*(as\.)?factor\s*\(|\s*C\s*\(", lhs)
            else ""
        )
        raise FormulaError(f"response {lhs!r} in {formula!r} must be a single column name{aggregated}")
    if not rhs:
        raise FormulaError(
            f"formula {formula!r} has nothing on the right of '~'; use '~ 1' for an intercept-only model"
        )
    if rhs[-1] in "+-*/:^" or rhs.startswith(("*", "/", ":", "^")):
        at = "ends" if rhs[-1] in "+-*/:^" else "starts"
        raise FormulaError(
            f"formula {formula!r} {at} with the operator {rhs[-1] if at == 'ends' else rhs[0]!r}, "
            "which needs a term on each side"
        )

    if columns is not None:
        _check_numbers_that_name_columns(rhs, formula, columns)
        rhs = quote_dotted_columns(rhs, columns)
    rhs, gp_terms = extract_gp_terms(rhs, formula)
    bars: list[Bar] = []
    pieces, last = [], 0
    for start, end in _top_level_groups(rhs):
        inner = rhs[start + 1 : end - 1]
        if "|" not in _depth_zero_text(inner):
            continue
        before = rhs[last:start].rstrip()
        if before and not before.endswith("+"):
            raise FormulaError(f"random-effect term {rhs[start:end]!r} in {formula!r} must be added with '+'")
        after = rhs[end:].lstrip()
        if after and not after.startswith(("+", "-")):
            raise FormulaError(
                f"random-effect term {rhs[start:end]!r} in {formula!r} must be followed by '+' or end the formula"
            )
        bars.extend(_parse_bar(inner, formula))
        pieces.append(rhs[last:start])
        last = end
    pieces.append(rhs[last:])
    fixed = "".join(pieces)
    fixed = re.sub(r"\+\s*(\+\s*)+", "+ ", fixed)
    fixed = re.sub(r"^\s*\+\s*|\s*\+\s*$", "", fixed).strip()
    if any(char == "|" for _, char in _outside_backticks(fixed)):
        raise FormulaError(
            f"'|' in {formula!r} is only allowed inside a parenthesised random-effect term such as (1 | g)"
        )
    if not fixed:
        fixed = "1"
    for part in (fixed, *(bar.expr for bar in bars)):
        try:
            check_formula_part(part)
        except FormulaError as exc:
            hint = _unquoted_names_hint(formula, columns)
            raise FormulaError(f"{str(exc).rstrip('.')}{hint}" if hint else str(exc)) from None
    return ParsedFormula(
        formula=formula, response=_strip_backticks(lhs), fixed=fixed, bars=tuple(bars), gp_terms=gp_terms
    )


def refuse_response_on_the_right(parsed: ParsedFormula, fixed, bars, groups, gp) -> None:
    """The response read again on the right of ``~`` (as a predictor, in a random-effect term, as a grouping factor or
    in a ``gp()`` term) would predict itself: refused naming where (R's model.matrix drops it with a warning)."""
    where = [
        label
        for label, names in (
            ("the fixed effects", fixed), ("a random-effect term", bars), ("a grouping factor", groups),
            ("a gp() term", gp),
        )
        if parsed.response in names
    ]  # fmt: skip
    if where:
        raise FormulaError(
            f"the response {parsed.response!r} also appears on the right of '~' in {parsed.formula!r} (in "
            f"{' and '.join(where)}): it would predict itself; remove it from the right-hand side"
        )


#: A number written in a formula (``0``, ``1``, ``2.5``), outside names and backticks.
_NUMBER = re.compile(r"(?<![\w.`])(\d+(?:\.\d*)?)(?![\w.`])")


def _check_numbers_that_name_columns(rhs: str, formula: str, columns) -> None:
    """A formula reads ``0``, ``1`` as the intercept and other numbers as constants: where the data name a column
    so (pandas' default names), the unquoted number is ambiguous, so it is refused with the backticked spelling."""
    names = {str(c) for c in columns}
    unquoted = re.sub(r"`[^`]*`|'[^']*'|\"[^\"]*\"", " ", rhs)
    for token in _NUMBER.findall(unquoted):
        if token in names:
            raise FormulaError(
                f"{token} in {formula!r} is read as a number (1 and 0 add or remove the intercept), and the data have "
                f"a column named {token}: write the column in backticks, `{token}`"
            )


def _unquoted_names_hint(formula: str, columns) -> str:
    """A hint for columns whose names hold characters a formula reads as operators or separators (a space, ``-``,
    ``/``) and that the formula writes without backticks; empty when there are none (or no columns)."""
    if columns is None:
        return ""
    names = [str(c) for c in columns if re.search(r"[^\w.]", str(c)) and str(c) in formula and f"`{c}`" not in formula]
    if not names:
        return ""
    quoted = ", ".join(f"`{name}`" for name in names[:3])
    return f"; column name(s) {names[:3]} must be written in backticks in a formula: {quoted}"


def _depth_zero_text(inner: str) -> str:
    """Characters of ``inner`` outside any nested parentheses and back-quoted names."""
    out, depth = [], 0
    for _, char in _outside_backticks(inner):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)


#: A term removed with ``-``: a name or a backtick-quoted name (not ``- 1``, not ``-(...)``).
_REMOVED = re.compile(r"(?:^|(?<=[\s(+]))-\s*(`[^`]+`|[A-Za-z_.][A-Za-z0-9_.]*)")


def removed_names(fixed: str) -> list[str]:
    """The column names a fixed part removes with ``-`` (``y ~ . - id``), without backticks."""
    return [_strip_backticks(name) for name in _REMOVED.findall(fixed)]


def expand_dot(parsed: ParsedFormula, columns, grouping_factors) -> ParsedFormula:
    """``y ~ .`` as in R: ``.`` in the fixed part stands for every column except the response and the
    grouping factors of the random-effect terms (in R's ``glmer`` they would also enter as fixed factors,
    aliased with the random intercepts); ``- term`` then removes terms as usual.  A random slope's variable
    stays in (the fixed slope is the mean of the random ones).

    Raises
    ------
    FormulaError
        When ``.`` leaves no column.
    """
    if not DOT.search(parsed.fixed):
        return parsed
    skip = {parsed.response, *grouping_factors}
    names = [str(c) for c in columns if str(c) not in skip]
    quoted = [name for name in names if "`" in name]
    if quoted:
        raise FormulaError(f"'.' cannot stand for column(s) {quoted[:3]}: their names hold a backtick; rename them")
    if not names:
        raise FormulaError(
            f"'.' in {parsed.formula!r} stands for every column except the response and the grouping factors, "
            "and the data have no other column"
        )
    quoted = " + ".join(formula_name(n) for n in names)
    return replace(parsed, fixed=DOT.sub(lambda _: f"({quoted})", parsed.fixed))


def check_formula_text(formula: str) -> None:
    """Check every term of a whole formula (fixed part and random-effect bars) before anything evaluates it."""
    parse_formula(formula)  # checks each part with check_formula_part


def check_parsed_formula(parsed: ParsedFormula) -> None:
    """Check a restored split formula: the formula as written, its fixed part (after ``.`` expansion) and each bar's
    left-hand side and grouping factors, each on its own, since a file could change one without the others."""
    for text in (parsed.formula, parsed.fixed, parsed.response):
        if not isinstance(text, str):
            raise FormulaError(f"a stored formula part must be text, got {type(text).__name__}")
    check_formula_text(parsed.formula)
    check_formula_part(parsed.fixed)
    if not isinstance(parsed.bars, tuple) or not all(isinstance(bar, Bar) for bar in parsed.bars):
        raise FormulaError("a stored formula's random-effect terms are not bars")
    for bar in parsed.bars:
        check_formula_part(bar.expr)
        if not all(isinstance(name, str) for name in bar.group):
            raise FormulaError(f"a stored bar's grouping factors {bar.group!r} are not column names")
