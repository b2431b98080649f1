"""Model matrices: the fixed-effect design X (formulaic) and the random-effect design Z.

The random-effect structure is a plain record in the spirit of lme4's ``mkReTrms``: one
:class:`ReTerm` per bar (after ``||`` and ``/`` expansion) holding the bar's own formulaic
``ModelSpec``, the sorted group levels, each row's level code and its ``k`` term values.
``Z`` for a term is the sparse ``n x (J k)`` matrix with row ``i`` equal to
``e_{level(i)} (x) z_i`` (columns level-major: all terms of level 1, then level 2, ...).
Nothing here knows about engines or results (DESIGN section 2).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace

import formulaic
import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..checks.rank import Aliased, aliased_columns
from ..errors import DataError, DesignError, FormulaError
from .bars import Bar, ParsedFormula, expand_dot, parse_formula, refuse_response_on_the_right, removed_names
from .frames import (
    MAX_FIXED_COLUMNS,
    as_frame,
    check_column_kinds,
    check_factor_sizes,
    check_text_numbers,
    coerce_like_training,
    plain_columns,
)
from .gp_terms import GpTerm, build_gp_term
from .groups import group_labels, group_levels, level_codes
from .imputation import ImputationLayout, check_imputable, imputation_layout, placeholder_values
from .materializer import materialize
from .response import ResponseCoding, code_response
from .restricted import formula_variables

MISSING_CHOICES = ("error", "drop", "impute")


@dataclass(frozen=True, eq=False)
class ReTerm:
    """One random-effect term after expansion (a record, no maths).

    Attributes
    ----------
    bar
        The bar it came from.
    spec
        formulaic ``ModelSpec`` of the bar's left-hand side.
    columns
        Which columns of that model matrix this term uses (all for ``|``, one for ``||``).
    term_names
        Names of those columns, ``"(Intercept)"`` for the intercept.
    levels
        Sorted group levels seen in the training data (strings).
    codes
        Level index of every training row, shape ``(n,)``.
    values
        Term values of every training row, shape ``(n, k)``.
    """

    bar: Bar
    spec: formulaic.model_spec.ModelSpec
    columns: tuple[int, ...]
    term_names: tuple[str, ...]
    levels: pd.Index
    codes: np.ndarray
    values: np.ndarray

    @property
    def group(self) -> str:
        return self.bar.group_name

    @property
    def k(self) -> int:
        return len(self.term_names)

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    @property
    def correlated(self) -> bool:
        return self.k > 1

    @property
    def label(self) -> str:
        """Human-readable name, e.g. ``"(1 + x | g)"`` or ``"x || g"``."""
        if self.bar.correlated:
            return str(self.bar)
        return f"({self.term_names[0]} || {self.group})"

    @property
    def column_names(self) -> list[str]:
        group = self.group
        return [f"{name}|{group}[{level}]" for level in pd.Index(self.levels).tolist() for name in self.term_names]

    def check_shapes(self) -> None:
        """Raise ``ValueError`` unless the term's names, columns, codes and values fit together (a restored file)."""
        values, codes = self.values, self.codes
        if not (isinstance(values, np.ndarray) and values.ndim == 2 and isinstance(codes, np.ndarray)):
            raise ValueError(f"random-effect term {self.bar}: its values or codes are not arrays")
        if codes.shape != (values.shape[0],) or not values.shape[1] == len(self.term_names) == len(self.columns):
            raise ValueError(f"random-effect term {self.bar}: its codes, values and names do not match")
        if codes.size and int(codes.max()) >= len(self.levels):
            raise ValueError(f"random-effect term {self.bar}: its columns or level codes do not match its levels")

    def z_matrix(self, codes: np.ndarray | None = None, values: np.ndarray | None = None) -> sp.csr_matrix:
        """Sparse ``n x (J k)`` design; rows with code -1 (unseen level) are all zero."""
        codes = self.codes if codes is None else codes
        values = self.values if values is None else values
        n, k = values.shape
        seen = codes >= 0
        rows = np.repeat(np.arange(n)[seen], k)
        cols = (codes[seen, None] * k + np.arange(k)[None, :]).ravel()
        return sp.csr_matrix((values[seen].ravel(), (rows, cols)), shape=(n, self.n_levels * k))


@dataclass(frozen=True, eq=False)
class Design:
    """Everything an engine needs, plus what ``predict`` needs to rebuild it.

    Attributes
    ----------
    parsed
        The split formula.
    response
        Coding of the response classes.
    y
        Response as -1.0 / +1.0, shape ``(n,)``.
    X
        Fixed-effect design, shape ``(n, p)``.
    x_names
        Column names of X (``"(Intercept)"`` for the intercept).
    spec
        formulaic ``ModelSpec`` of the fixed part (reused at predict time).
    re_terms
        Random-effect terms.
    row_index
        Index labels of the rows used (after ``missing="drop"``).
    n_dropped
        Rows dropped for missing values, by column.
    imputation
        Layout of the imputed predictors (``missing="impute"``).
    numeric_variables
        Predictors that were numeric in training (new data holding them as text are converted or refused).
    aliased
        Columns of the formula's model matrix dropped as aliased (rank deficiency), each with its reason.
    x_keep
        Positions, in formulaic's model matrix, of the columns of X (``None``: all of them).
    gp_terms
        The formula's ``gp()`` terms (:mod:`bayesvm.formula.gp_terms`).
    gp_bases
        Their bases on the training rows, ``(n, m_t)`` each.
    wide_kept
        Columns of a design with more columns than rows that are combinations of earlier columns on these rows, kept
        (``build_design(keep_wide=...)`` not None): the prior on the slopes identifies their coefficients.
    """

    parsed: ParsedFormula
    response: ResponseCoding
    y: np.ndarray
    X: np.ndarray
    x_names: tuple[str, ...]
    spec: formulaic.model_spec.ModelSpec
    re_terms: tuple[ReTerm, ...]
    row_index: pd.Index
    n_dropped: dict[str, int]
    imputation: ImputationLayout | None = None
    numeric_variables: frozenset[str] = frozenset()
    aliased: tuple[Aliased, ...] = ()
    x_keep: tuple[int, ...] | None = None
    gp_terms: tuple[GpTerm, ...] = ()
    gp_bases: tuple[np.ndarray, ...] = ()
    wide_kept: tuple[str, ...] = ()

    def check_shapes(self) -> None:
        """Raise ``ValueError`` unless the design's names, rows and columns fit together (a restored file whose
        ``x_names`` or rows were changed is refused when it loads, not when it predicts)."""
        X = self.X
        if not (isinstance(X, np.ndarray) and X.ndim == 2 and isinstance(self.y, np.ndarray) and self.y.ndim == 1):
            raise ValueError("the design's X or y is not an array of the right shape")
        if len(self.x_names) != X.shape[1]:
            raise ValueError(f"the design names {len(self.x_names)} columns but X has {X.shape[1]}")
        if self.y.shape[0] != len(self.row_index) or X.shape[0] > self.y.shape[0]:  # streamed: X holds a prototype
            raise ValueError("the design's response, rows and X do not have the same rows")
        if self.x_keep is not None and len(self.x_keep) != X.shape[1]:
            raise ValueError("the design's kept columns do not match X")
        for term in self.re_terms:
            if term.codes.shape[0] != X.shape[0]:
                raise ValueError(f"random-effect term {term.bar} does not have the design's rows")
        if len(self.gp_bases) != len(self.gp_terms):
            raise ValueError("the design's gp() terms and their bases do not match")

    def response_of(self, newdata: pd.DataFrame) -> np.ndarray:
        """The response of new rows coded -1 / +1 (:meth:`ResponseCoding.encode_new`)."""
        return self.response.encode_new(as_frame(newdata, "newdata"))

    def term_columns(self) -> dict[str, np.ndarray]:
        """Positions in X of each fixed-effect term's columns (aliased columns left out)."""
        width = max((sl.stop for sl in self.spec.term_slices.values()), default=0)
        position = np.full(width, -1)
        kept = np.arange(width) if self.x_keep is None else np.asarray(self.x_keep)
        position[kept] = np.arange(kept.size)
        out = {}
        for term, sl in self.spec.term_slices.items():
            where = position[sl]
            out[str(term)] = where[where >= 0]
        return out

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def column_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Means and SDs (``ddof=1``) of the columns of X (used by the internal standardisation)."""
        return self.X.mean(axis=0), self.X.std(axis=0, ddof=1)

    def level_counts(self, term: ReTerm) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, rows of the positive class)`` of each level of ``term``'s grouping factor."""
        seen = term.codes >= 0
        rows = np.bincount(term.codes[seen], minlength=term.n_levels)
        positive = np.bincount(term.codes[seen], weights=(self.y[seen] > 0).astype(float), minlength=term.n_levels)
        return rows, positive.astype(np.int64)

    @property
    def p(self) -> int:
        return self.X.shape[1]

    @property
    def has_intercept(self) -> bool:
        return "(Intercept)" in self.x_names

    @property
    def groups(self) -> dict[str, int]:
        """Number of levels of each grouping factor."""
        return {term.group: term.n_levels for term in self.re_terms}

    def Z(self) -> sp.csr_matrix:
        """Random-effect design of all terms side by side (empty if none)."""
        if not self.re_terms:
            return sp.csr_matrix((self.n, 0))
        return sp.hstack([term.z_matrix() for term in self.re_terms], format="csr")

    @property
    def z_names(self) -> list[str]:
        return [name for term in self.re_terms for name in term.column_names]

    def rematerialize(self, newdata: pd.DataFrame, include_random: bool = True) -> NewDesign:
        """Rebuild X and the random-effect codes and values for new rows.

        Raises
        ------
        DesignError
            If a column is missing or a fixed-effect factor has a level not seen in training.
        DataError
            If a needed value is missing.
        """
        newdata = as_frame(newdata, "newdata")
        needed = set(required_variables(self.parsed.fixed, newdata, "newdata"))
        needed |= {v for term in self.gp_terms for v in term.spec.variables}
        if include_random:
            for term in self.re_terms:
                needed |= set(required_variables(term.bar.expr, newdata, "newdata")) | set(term.bar.group)
        _check_columns(newdata, needed, "newdata")
        newdata = coerce_like_training(plain_columns(newdata, sorted(needed)), self.numeric_variables, "newdata")
        check_column_kinds(newdata, sorted(needed))
        layout = self.imputation
        imputable = set(layout.source_columns) if layout is not None else set()
        remedy = (
            "" if imputable else ", or fit with missing='impute', whose predictions integrate missing predictors out"
        )
        _check_missing(newdata, sorted(needed - imputable), missing="error", what="newdata", remedy=remedy)
        raw_values = None
        if imputable:  # missing values of imputation variables are integrated out by the fit
            with_missing = newdata[sorted(imputable)].copy()
            numeric = [(j, name) for j, name in enumerate(layout.variables) if not layout.categorical[j]]
            for j, name in numeric:
                values = newdata[name].to_numpy(dtype=float, na_value=np.nan)
                if np.isinf(values).any():
                    raise DataError(f"newdata has infinite values in {name!r}")
                newdata[name] = np.where(np.isnan(values), layout.observed_mean[j], values)
            for name, level in layout.placeholders:
                column = newdata[name]
                if isinstance(column.dtype, pd.CategoricalDtype) and level not in column.cat.categories:
                    column = column.cat.add_categories([level])
                newdata[name] = column.where(~with_missing[name].isna(), level)
        _check_unseen_levels(self.spec, newdata)  # (after the placeholders: a missing level is imputed, not unseen)
        X = materialize(self.spec, newdata, "fixed effects")
        if self.x_keep is not None:
            X = X[:, list(self.x_keep)]
        _check_finite(X, self.x_names, "newdata")
        if imputable:
            raw_values = layout.raw_values(with_missing, X)
        codes, values = [], []
        for term in self.re_terms:
            if not include_random:
                codes.append(np.full(len(newdata), -1))
                values.append(np.zeros((len(newdata), term.k)))
                continue
            labels = group_labels(newdata, term.bar.group)
            codes.append(level_codes(term.levels, labels))
            values.append(materialize(term.spec, newdata, str(term.bar))[:, list(term.columns)])
            _check_finite(values[-1], term.term_names, "newdata")
        bases = tuple(term.basis(_gp_inputs(newdata, term.spec, "newdata")) for term in self.gp_terms)
        return NewDesign(X=X, codes=tuple(codes), values=tuple(values), imputation_values=raw_values, gp_bases=bases)


@dataclass(frozen=True)
class NewDesign:
    """Design for new rows: X plus, per random-effect term, level codes (-1 = unseen) and values."""

    X: np.ndarray
    codes: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]
    imputation_values: np.ndarray | None = None  # raw values of the imputation variables, NaN where missing
    gp_bases: tuple[np.ndarray, ...] = ()  # the gp() terms' bases of the new rows
    labels: pd.Index | None = None  # the rows' labels in their frame, where a streamed fit needs them


def required_variables(formula: str, data: pd.DataFrame, what: str) -> list[str]:
    """Data columns a formula part uses (:func:`bayesvm.formula.restricted.formula_variables`), sorted."""
    return formula_variables(formula)


def _check_columns(data: pd.DataFrame, needed: set[str], what: str) -> None:
    for name in sorted(needed):
        if name not in data.columns:
            dotted = [str(c) for c in data.columns if str(c).startswith(name + ".")]
            same_letters = [str(c) for c in data.columns if str(c).casefold() == name.casefold()]
            close = dotted[:3] or same_letters or difflib.get_close_matches(name, [str(c) for c in data.columns], n=3)
            hint = f"; did you mean {close}?" if close else ""
            if dotted:
                hint += " (names containing '.' must be quoted in backticks, e.g. `cad.dur`)"
            elif any(re.search(r"[^\w.]", name) for name in close):  # "dose-mg" read as dose - mg
                hint += f" (a name holding a space or an operator must be quoted in backticks, e.g. `{close[0]}`)"
            raise FormulaError(f"column {name!r} used in the formula is not in {what}{hint}")


def bad_mask(column: pd.Series) -> np.ndarray:
    """Missing values, and infinities in numeric columns."""
    mask = column.isna().to_numpy().copy()
    if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
        values = column.to_numpy(dtype=float, na_value=np.nan)
        mask |= ~np.isfinite(values)
    return mask


def _infinities(data: pd.DataFrame, columns) -> str:
    """A sentence naming the columns whose bad values include infinities (which pandas' ``dropna`` keeps and
    ``missing="impute"`` refuses), or ""."""
    infinite = {}
    for name in columns:
        column = data[name]
        if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
            count = int(np.isinf(column.to_numpy(dtype=float, na_value=np.nan)).sum())
            if count:
                infinite[name] = count
    if not infinite:
        return ""
    detail = ", ".join(f"{name!r}: {count}" for name, count in infinite.items())
    first = next(iter(infinite))
    return (
        f". Of these, {detail} are infinite (often a log of zero or a division by zero upstream): pandas' dropna() "
        f"keeps them and missing='impute' refuses them; replace them first, e.g. data[{first!r}].replace([np.inf, "
        "-np.inf], np.nan), or fix the transformation"
    )


def _check_missing(data: pd.DataFrame, columns: list[str], missing: str, what: str, remedy: str = "") -> np.ndarray:
    """Rows to keep; raise for missing / non-finite values unless ``missing="drop"`` (``remedy``: what else new rows
    can do, after dropping the incomplete ones)."""
    bad = {name: bad_mask(data[name]) for name in columns}
    counts = {name: int(mask.sum()) for name, mask in bad.items() if mask.any()}
    keep = np.ones(len(data), dtype=bool)
    if not counts:
        return keep
    if missing == "error":
        detail = ", ".join(f"{name!r}: {count}" for name, count in counts.items())
        first = {name: data.index[bad[name]][:3].tolist() for name in counts}
        rows = "; ".join(f"{name!r} rows {idx}" for name, idx in first.items())
        columns = ", ".join(repr(name) for name in counts)
        hint = (
            " (use missing='drop' to fit on complete cases, or missing='impute' to impute missing predictors)"
            if what == "data"
            else f"; predict the complete rows (newdata.dropna(subset=[{columns}])){remedy}"
        )
        raise DataError(
            f"{what} has missing or non-finite values in {detail} (first {rows}){hint}{_infinities(data, counts)}"
        )
    for mask in bad.values():
        keep &= ~mask
    if not keep.any():
        raise DataError(f"no complete rows are left in {what} after dropping missing values in {sorted(counts)}")
    return keep


def _clean_name(name: str) -> str:
    return "(Intercept)" if name == "Intercept" else name


_C_CALL = re.compile(r"^C\(\s*([A-Za-z_.][A-Za-z0-9_.]*)")


def _check_unseen_levels(spec, newdata: pd.DataFrame) -> None:
    """Error for a fixed-effect factor level that training never saw (formulaic only warns)."""
    for key, (_kind, state) in spec.encoder_state.items():
        categories = state.get("categories") if isinstance(state, dict) else None
        if categories is None:
            continue
        match = _C_CALL.match(key)
        column = key if key in newdata.columns else (match.group(1) if match else None)
        if column is None or column not in newdata.columns:
            continue
        values = newdata[column]
        known = set(categories) | {str(c) for c in categories}
        unseen = [v.item() if isinstance(v, np.generic) else v for v in pd.unique(values)]
        unseen = [v for v in unseen if v not in known and str(v) not in known]
        if unseen:
            count = int(values.isin(unseen).sum())
            raise DesignError(
                f"column {column!r} has level(s) {unseen[:5]} in {count} row(s) of newdata that the fit never saw; "
                f"known levels: {list(categories)}; map them to a known level or predict the other rows (R's "
                "predict() refuses new factor levels alike)"
            )


@dataclass(frozen=True, eq=False)
class FoldDesign:
    """What a cross-fitting fold fit (:mod:`bayesvm.results.crossfit`) takes from the full fit's design, so that it
    can predict its held-out rows whatever they hold.

    Attributes
    ----------
    fixed_spec
        The full fit's fixed-effect spec (a formulaic ``ModelSpec``, ``Design.spec``): the fold's columns are built
        with its transforms' states and factor levels instead of learning them from the fold's rows (a ``bs()``
        basis whose boundary knots are the full training range; a factor level only held-out rows have, which is
        then a zero column that the fold fit drops as aliased).
    impute_also
        With ``missing="impute"``: the full fit's imputation variables, put in the fold's imputation model even
        where its training rows miss none of their values (held-out rows may).
    """

    fixed_spec: object = None
    impute_also: tuple[str, ...] = ()


def build_design(
    parsed: ParsedFormula,
    data: pd.DataFrame,
    positive: object | None = None,
    missing: str = "error",
    rank: str = "warn",
    fold: FoldDesign | None = None,
    keep_wide: tuple[str, ...] | None = None,
) -> Design:
    """Build the design for a fit; never modifies ``data``.

    ``fold`` (:class:`FoldDesign`): what a cross-fitting fold fit takes from the full fit's design.

    ``keep_wide``: where the design has more columns than rows, columns aliased as combinations of several earlier
    ones (:attr:`bayesvm.checks.rank.Aliased.combination`) are kept, except those named in ``keep_wide`` (the
    caller's columns without a proper prior), and recorded in ``Design.wide_kept``.  Past the rank every column is
    such a combination on the training rows, whatever the population holds; dropping them by position threw away
    most of a wide design (kernlab's ``promotergene``, 106 rows and 172 columns: 66 dropped, cross-validated error
    13.2% against 9.4% with them kept; logistic regression 7.6%, a linear SVC 11.3%).  ``None`` (the default) drops
    them as any aliased column.

    Aliased fixed-effect columns (:mod:`bayesvm.checks.rank`) are dropped and recorded in
    ``Design.aliased`` (``rank="warn"`` or ``"ignore"``; the checks report them), refused when ``rank="stop"``,
    or kept when ``rank="keep"`` (kernel inputs, where a column has no coefficient of its own, and out-of-core
    prototypes, whose few rows could alias columns the full data separate).

    Raises
    ------
    FormulaError, DesignError, DataError
        With the column, term or rows at fault named.
    """
    data = as_frame(data, "data")
    if missing not in MISSING_CHOICES:
        raise DataError(f"missing must be one of {MISSING_CHOICES}, got {missing!r}")
    parsed, used = _used_variables(parsed, data)
    data = plain_columns(data, used.all, labels=(parsed.response,))
    check_column_kinds(data, used.all)
    check_text_numbers(data, [v for v in used.predictors if v != parsed.response], _factor_wrapped(parsed))
    coefficients = None if rank == "keep" else MAX_FIXED_COLUMNS  # kernel inputs have no coefficient per column
    check_factor_sizes(data, [v for v in used.fixed if v != parsed.response], len(data), coefficients)
    numeric = frozenset(
        v
        for v in used.predictors
        if pd.api.types.is_numeric_dtype(data[v].dtype) and not pd.api.types.is_bool_dtype(data[v].dtype)
    )
    rows = _kept_rows(parsed, data, used, missing, fold)
    frame = rows.frame
    response = code_response(frame[parsed.response], parsed.response, positive)
    fixed = _fixed_columns(parsed, frame, used, rows, rank, fold, keep_wide)
    gp_terms = tuple(build_gp_term(spec, _gp_inputs(frame, spec, "data")) for spec in parsed.gp_terms)
    return Design(
        parsed=parsed,
        response=response,
        y=response.encode(frame[parsed.response]),
        X=fixed.X,
        x_names=fixed.x_names,
        spec=fixed.spec,
        re_terms=_random_terms(parsed, frame),
        row_index=frame.index,
        n_dropped=rows.n_dropped,
        imputation=fixed.layout,
        numeric_variables=numeric,
        aliased=fixed.aliased,
        x_keep=fixed.keep,
        gp_terms=gp_terms,
        gp_bases=tuple(term.basis(_gp_inputs(frame, term.spec, "data")) for term in gp_terms),
        wide_kept=fixed.wide_kept,
    )


@dataclass(frozen=True)
class _Variables:
    """The data columns a formula reads: the fixed part's, the random-effect terms' (``bars``) and their grouping
    factors', the ``gp()`` terms'; ``all`` with the response, ``predictors`` without the grouping factors."""

    fixed: list[str]
    bars: list[str]
    groups: list[str]
    gp: list[str]
    all: list[str]
    predictors: list[str]


def _used_variables(parsed: ParsedFormula, data: pd.DataFrame) -> tuple[ParsedFormula, _Variables]:
    """``.`` expanded over the data's columns, and the columns the formula reads (each checked to be there)."""
    bar_vars = [v for bar in parsed.bars for v in required_variables(bar.expr, data, "data")]
    group_vars = [v for bar in parsed.bars for v in bar.group]
    gp_vars = [v for spec in parsed.gp_terms for v in spec.variables]
    for name in removed_names(parsed.fixed):  # R: object 'zz' not found; formulaic would drop the term silently
        if name not in data.columns:
            _check_columns(data, {name}, "data")
    parsed = expand_dot(parsed, data.columns, group_vars)
    fixed_vars = required_variables(parsed.fixed, data, "data")
    refuse_response_on_the_right(parsed, fixed_vars, bar_vars, group_vars, gp_vars)
    used = list(dict.fromkeys([parsed.response, *fixed_vars, *bar_vars, *group_vars, *gp_vars]))
    _check_columns(data, set(used), "data")
    predictors = list(dict.fromkeys([*fixed_vars, *bar_vars, *gp_vars]))
    return parsed, _Variables(fixed_vars, bar_vars, group_vars, gp_vars, used, predictors)


def kept_response(formula: str, data: pd.DataFrame, missing: str) -> pd.Series:
    """The response of the rows of ``data`` that a fit of ``formula`` keeps under ``missing`` (``"drop"``: complete
    rows; ``"impute"``: rows with a response): one fit per class takes its classes from these rows."""
    parsed, used = _used_variables(parse_formula(formula, data.columns), data)
    return _kept_rows(parsed, data, used, missing, None).frame[parsed.response]


@dataclass(frozen=True)
class _Rows:
    """The rows a fit keeps (``frame``, imputed columns filled with placeholders; ``raw`` before them), the columns to
    impute and the count of rows dropped per column."""

    frame: pd.DataFrame
    raw: pd.DataFrame
    impute: list[str]
    n_dropped: dict


def _kept_rows(parsed: ParsedFormula, data: pd.DataFrame, used: _Variables, missing: str, fold) -> _Rows:
    """The rows kept under ``missing`` (``"error"``: none may be missing; ``"drop"``; ``"impute"``: the predictors'
    missing values to impute, rows without a response dropped and reported)."""
    no_response = data[parsed.response].isna().to_numpy()
    if no_response.any() and missing == "error":
        rows = data.index[no_response][:5].tolist()
        raise DataError(
            f"response {parsed.response!r} has {int(no_response.sum())} missing value(s) (rows {rows}"
            f"{'...' if no_response.sum() > 5 else ''}); use missing='drop' to fit on the rows where it is observed"
        )
    impute: list[str] = []
    dropped_responses = {}
    if missing == "impute":
        if no_response.any():  # predictors are imputed, the response never is: those rows are dropped (and reported)
            dropped_responses = {parsed.response: int(no_response.sum())}
            data = data.loc[~no_response]
        bad = {name: bad_mask(data[name]) for name in used.all}
        impute = check_imputable(data, bad, parsed.response, used.groups, used.bars, used.gp)
        also = () if fold is None else fold.impute_also
        impute += [v for v in also if v in used.predictors and v != parsed.response and v not in impute]
        keep = np.ones(len(data), dtype=bool)
    else:
        keep = _check_missing(data, used.all, missing, "data")
    n_dropped = {name: int(bad_mask(data[name]).sum()) for name in used.all} if not keep.all() else {}
    n_dropped = {name: count for name, count in n_dropped.items() if count} or dropped_responses
    frame = data.loc[keep] if not keep.all() else data
    raw = frame
    if impute:  # placeholders (observed means, a factor's most frequent level) to build X; the engines replace them
        frame = frame.copy()
        levels = dict(placeholder_values(frame, impute))
        for name in impute:
            frame[name] = frame[name].fillna(levels[name] if name in levels else frame[name].mean())
    return _Rows(frame, raw, impute, n_dropped)


@dataclass(frozen=True)
class _FixedColumns:
    """The fixed-effect matrix after aliased columns are dropped (``keep``: the built columns kept, None: all), its
    model spec, the aliased and the wide-kept columns, and the imputation layout over the kept columns."""

    X: np.ndarray
    x_names: tuple[str, ...]
    spec: object
    aliased: tuple
    wide_kept: tuple[str, ...]
    keep: tuple[int, ...] | None
    layout: object


def _fixed_columns(parsed, frame, used: _Variables, rows: _Rows, rank: str, fold, keep_wide) -> _FixedColumns:
    """The fixed part's matrix (the full fit's columns for a fold fit), checked finite and for aliased columns
    (dropped, refused or kept by ``rank``; ``keep_wide``: see :func:`build_design`), and the imputation layout."""
    if fold is None or fold.fixed_spec is None:
        matrix = materialize(parsed.fixed, frame, "fixed effects")
    else:
        matrix = materialize(fold.fixed_spec, frame, "fixed effects", as_matrix=True)
    X = np.asarray(matrix, dtype=float)
    x_names = tuple(_clean_name(str(c)) for c in matrix.columns)
    built, built_names = X, x_names  # (before aliased columns are dropped: the imputation layout's columns)
    if not x_names:
        raise DesignError(
            f"the fixed part {parsed.fixed!r} of the formula has no columns; the model needs an intercept or a "
            f"predictor: write '{parsed.response} ~ 1' (plus any random-effect terms) for an intercept-only model"
        )
    _check_finite(X, x_names)
    aliased: tuple[Aliased, ...] = ()
    wide_kept: tuple[str, ...] = ()
    if rank != "keep":
        one_level = _one_level_factors(frame, used.fixed, x_names, parsed.response)
        found = aliased_columns(X, x_names)
        if keep_wide is not None and X.shape[1] > X.shape[0]:
            wide_kept = tuple(a.name for a in found if a.combination and a.name not in keep_wide)
            found = [a for a in found if a.name not in wide_kept]
        aliased = (*one_level, *found)
    keep = None
    if aliased:
        if rank == "stop":
            detail = "; ".join(f"{a.name!r}: {a.reason}" for a in aliased)
            raise DesignError(f"the fixed-effect model matrix is rank deficient: {detail}")
        gone = {a.name for a in aliased}
        keep = tuple(j for j, name in enumerate(x_names) if name not in gone)
        X, x_names = X[:, list(keep)], tuple(x_names[j] for j in keep)
    layout = None
    if rows.impute:
        raw = rows.raw
        layout = imputation_layout(
            matrix.model_spec, raw, rows.impute, lambda expr: required_variables(expr, raw, "data"), built, built_names
        )
        if keep is not None:
            position = {j: i for i, j in enumerate(keep)}
            lost = [v for v, col in zip(layout.variables, layout.x_columns) if col not in position]
            if lost:
                raise DesignError(
                    f"imputed predictor(s) {lost} are aliased with other columns; remove them or the others"
                )
            layout = replace(layout, x_columns=tuple(position[col] for col in layout.x_columns))
    return _FixedColumns(X, x_names, matrix.model_spec, aliased, wide_kept, keep, layout)


def _random_terms(parsed: ParsedFormula, frame: pd.DataFrame) -> tuple[ReTerm, ...]:
    """Each random-effect bar's columns and its grouping factor's levels (``(x || g)``: one term per column)."""
    re_terms: list[ReTerm] = []
    for bar in parsed.bars:
        lhs = materialize(bar.expr, frame, str(bar))
        values = np.asarray(lhs, dtype=float)
        names = [_clean_name(str(c)) for c in lhs.columns]
        if values.shape[1] == 0:
            raise FormulaError(f"random-effect term {bar} has no columns")
        _check_finite(values, names)
        levels, codes = group_levels(frame, bar.group)
        blocks = [tuple(range(values.shape[1]))] if bar.correlated else [(j,) for j in range(values.shape[1])]
        for cols in blocks:
            re_terms.append(
                ReTerm(
                    bar=bar,
                    spec=lhs.model_spec,
                    columns=cols,
                    term_names=tuple(names[j] for j in cols),
                    levels=levels,
                    codes=codes,
                    values=values[:, list(cols)],
                )
            )
    _check_repeated_columns(re_terms)
    return tuple(re_terms)


def _check_repeated_columns(re_terms: list[ReTerm]) -> None:
    """Refuse a column that two random-effect terms give the same grouping factor (``(1 | g) + (1 + x | g)``): each
    level's two coefficients enter the predictor only through their sum, so the data identify only the sum of the two
    variances, and each term's reported variance would be the prior's split of it."""
    seen: dict[tuple[tuple[str, ...], str], ReTerm] = {}
    for term in re_terms:
        for name in term.term_names:
            first = seen.setdefault((term.bar.group, name), term)
            if first is not term:
                raise FormulaError(
                    f"random-effect terms {first.bar} and {term.bar} both give grouping factor "
                    f"{term.bar.group_name!r} the column {name!r}: the data identify only the sum of the two "
                    f"variances; write each column once per grouping factor, e.g. (1 + x | {term.bar.group_name}), "
                    f"or (1 | {term.bar.group_name}) + (0 + x | {term.bar.group_name}) for uncorrelated ones"
                )


def _gp_inputs(frame: pd.DataFrame, spec, what: str) -> np.ndarray:
    """The raw inputs of a ``gp()`` term, ``(n, d)``; numeric columns only."""
    for name in spec.variables:
        column = frame[name]
        if not pd.api.types.is_numeric_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype):
            raise DesignError(
                f"{spec.label}: input {name!r} is {column.dtype}, not numeric; a Gaussian process needs distances "
                "between inputs (put a categorical variable in the linear part or a random-effect term)"
            )
    values = np.column_stack([frame[name].to_numpy(dtype=float, na_value=np.nan) for name in spec.variables])
    _check_finite(values, list(spec.variables), what)
    return values


def _one_level_factors(frame: pd.DataFrame, variables: list[str], x_names, response: str) -> list[Aliased]:
    """Categorical predictors with a single level: formulaic gives them no column (nothing to contrast)."""
    out = []
    for name in variables:
        column = frame[name]
        if name == response or (
            pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype)
        ):
            continue
        levels = pd.unique(column.dropna())
        if len(levels) == 1 and not any(name in x for x in x_names):
            out.append(Aliased(name, f"a factor with one level ({levels[0]!r}) in the data: nothing to contrast"))
    return out


_C_ARGUMENT = re.compile(r"\bC\(\s*(`[^`]+`|[A-Za-z_.][A-Za-z0-9_.]*)")


def _factor_wrapped(parsed: ParsedFormula) -> set[str]:
    """Columns the formula explicitly makes categorical with ``C(...)``."""
    texts = [parsed.fixed, *(bar.expr for bar in parsed.bars)]
    return {name.strip("`") for text in texts for name in _C_ARGUMENT.findall(text)}


#: Largest magnitude a design value may have: its square times the rows must not overflow float64 (1.8e308).
MAX_MAGNITUDE = 1e150


def _check_finite(matrix: np.ndarray, names: list[str] | tuple[str, ...], what: str = "data") -> None:
    """Refuse non-finite design values, and values so large that sums of squares or products overflow."""
    bad = ~np.isfinite(matrix)
    if bad.any():
        cols = np.flatnonzero(bad.any(axis=0))
        detail = ", ".join(f"{names[j]!r}: {int(bad[:, j].sum())}" for j in cols)
        raise DesignError(
            f"non-finite values in design column(s) {detail} (e.g. log of zero or a negative number, or a power or "
            "exponential past the largest float)"
        )
    if matrix.size:
        largest = np.abs(matrix).max(axis=0)
        limit = MAX_MAGNITUDE / np.sqrt(max(matrix.shape[0], 1))
        huge = np.flatnonzero(largest > limit)
        if huge.size:
            detail = ", ".join(f"{names[j]!r} (up to {largest[j]:.3g})" for j in huge)
            raise DesignError(
                f"{what} design column(s) {detail} hold values too large to compute with (their squares overflow); "
                "rescale them, e.g. divide by a power of ten or take logs"
            )
