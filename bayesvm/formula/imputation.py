"""Which predictors ``missing="impute"`` imputes, and where they sit in the design.

A predictor with missing values must enter the fixed part as a main effect (its own column of X,
equal to the variable): then the design row is affine in the missing values and the imputation
model (Luts & Ormerod 2014, section 3.3) applies exactly.  Inside an interaction or a transformation
(``x:z``, ``np.log(x)``) the row is no longer affine in ``x``; that extension is not derived here,
so such formulas are refused with a message saying how to rewrite them (create the transformed
column in the data first).  Grouping factors and random-effect variables are refused likewise.

A categorical main effect with missing values enters through its indicator columns (one per level but the
reference): each indicator is an imputation variable of the joint normal model, missing together on the rows where
the factor is, so the design row stays affine in them and the SVM's updates stay conditionally conjugate.  This is
the linear-Gaussian (latent-normal) approximation to the factor's distribution: an imputed row carries expected
indicators, the probabilities of its levels under the normal model (not constrained to one level), which is what the
linear predictor needs in expectation; a discrete (multinomial) imputation model is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..errors import DataError, DesignError


@dataclass(frozen=True, eq=False)
class ImputationLayout:
    """The imputation model's variables.

    Attributes
    ----------
    variables
        Numeric main-effect predictors modelled jointly ``N(mu, Sigma)``: those with missing values
        and the fully observed ones; and the indicator columns of categorical main effects with missing values,
        named as their columns of X (``"smoker[T.yes]"``).
    x_columns
        Column of X holding each variable.
    values
        ``(n, V)`` raw values (0/1 for an indicator), NaN where missing.
    sources
        The data column of each variable (the factor's for an indicator); empty: each variable is its own column.
    placeholders
        ``(column, value)``: what a missing value of a categorical source is replaced by while the design is built (its
        most frequent level; the indicators it gives are then replaced by the imputation).
    """

    variables: tuple[str, ...]
    x_columns: tuple[int, ...]
    values: np.ndarray
    sources: tuple[str, ...] = ()
    placeholders: tuple[tuple[str, object], ...] = ()

    @property
    def source_columns(self) -> tuple[str, ...]:
        """The data column of each variable."""
        return self.sources or self.variables

    @property
    def categorical(self) -> np.ndarray:
        """Whether each variable is the indicator of a categorical source (its values come from X, not the data)."""
        return np.array([v != c for v, c in zip(self.variables, self.source_columns)], dtype=bool)

    def raw_values(self, frame: pd.DataFrame, X: np.ndarray) -> np.ndarray:
        """``(rows, V)`` values of the variables for ``frame`` whose design is ``X`` (built with the placeholders):
        a numeric variable's column of ``frame``, an indicator's column of ``X``; NaN where the source is missing."""
        out = np.empty((len(frame), len(self.variables)))
        for j, (name, source) in enumerate(zip(self.variables, self.source_columns)):
            missing = frame[source].isna().to_numpy()
            if name == source:
                out[:, j] = frame[source].to_numpy(dtype=float, na_value=np.nan)
            else:
                out[:, j] = np.where(missing, np.nan, X[:, self.x_columns[j]])
        return out

    @property
    def missing(self) -> np.ndarray:
        return np.isnan(self.values)

    @property
    def n_missing(self) -> dict[str, int]:
        counts = self.missing.sum(axis=0)
        return {name: int(c) for name, c in zip(self.variables, counts) if c}

    @property
    def incomplete_rows(self) -> int:
        """Rows with at least one missing value."""
        return int(self.missing.any(axis=1).sum())

    @property
    def observed_mean(self) -> np.ndarray:
        return np.nanmean(self.values, axis=0)

    @property
    def observed_sd(self) -> np.ndarray:
        sd = np.nanstd(self.values, axis=0, ddof=1)
        return np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)


@dataclass(frozen=True)
class ColumnGaps:
    """What the imputation check needs to know of one column with missing values (in memory from the frame, out of
    core reduced over the partitions): the first row labels of its missing and infinite values and, for a
    categorical column, how many levels are observed."""

    name: str
    n_missing: int
    rows: list
    categorical: bool
    observed_levels: int = 0
    infinite_rows: tuple = ()
    n_observed: int = 0

    @classmethod
    def of(cls, data: pd.DataFrame, name: str, bad: np.ndarray) -> ColumnGaps:
        """The gaps of column ``name`` of ``data`` (``bad``: its missing or non-finite rows)."""
        column = data[name]
        if is_categorical(column):
            return cls(name, int(bad.sum()), data.index[bad][:5].tolist(), True, int(column.dropna().nunique()))
        values = column.to_numpy(dtype=float, na_value=np.nan)
        infinite = data.index[np.isinf(values)][:5].tolist()
        return cls(name, int(bad.sum()), data.index[bad][:5].tolist(), False, 0, tuple(infinite),
                   int(np.isfinite(values).sum()))  # fmt: skip


def check_imputable(
    data: pd.DataFrame,
    bad: dict[str, np.ndarray],
    response: str,
    group_vars: list[str],
    bar_vars: list[str],
    gp_vars: list[str] = (),
) -> list[str]:
    """Variables with missing values that may be imputed; raise naming rows for the rest."""
    gaps = [ColumnGaps.of(data, name, mask) for name, mask in bad.items() if mask.any()]
    return check_gaps(gaps, group_vars, bar_vars, gp_vars)


def check_gaps(gaps: list[ColumnGaps], group_vars, bar_vars, gp_vars=()) -> list[str]:
    """The names of the columns with ``gaps`` when each may be imputed; a :class:`DataError` naming the column and
    its first rows for the first that may not."""
    for gap in gaps:
        name, rows = gap.name, gap.rows
        if name in group_vars:
            raise DataError(
                f"grouping variable {name!r} has {gap.n_missing} missing value(s) (rows {rows}): "
                "imputation needs every group observed; drop those rows or use missing='drop'"
            )
        if name in bar_vars:
            raise DataError(
                f"{name!r} has missing values (rows {rows}) and is used in a random-effect term: "
                "only fixed-effect main effects can be imputed"
            )
        if name in gp_vars:
            raise DataError(
                f"{name!r} has missing values (rows {rows}) and is an input of a gp() term: the term's basis is "
                "nonlinear in it, so its conditional given the rest is not Gaussian and the imputation model does "
                "not apply; use missing='drop' for those rows or impute it before fitting"
            )
        if gap.categorical:
            if gap.observed_levels < 2:
                raise DataError(
                    f"categorical predictor {name!r} has missing values (rows {rows}) and fewer than 2 observed "
                    "levels to impute from"
                )
            continue
        if gap.infinite_rows:
            raise DataError(f"{name!r} has infinite values (rows {list(gap.infinite_rows)})")
        if gap.n_observed == 0:
            raise DataError(f"{name!r} has no observed value to impute from")
    return [gap.name for gap in gaps]


def is_categorical(column: pd.Series) -> bool:
    """A predictor that formulaic codes by levels (text, categorical, boolean), not as a number."""
    return not pd.api.types.is_numeric_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype)


def placeholder_values(data: pd.DataFrame, names: list[str]) -> tuple[tuple[str, object], ...]:
    """``(column, most frequent level)`` of each categorical column among ``names``."""
    return tuple((name, data[name].mode(dropna=True).iloc[0]) for name in names if is_categorical(data[name]))


def imputation_layout(
    spec, data: pd.DataFrame, missing_vars: list[str], required, X: np.ndarray, x_names: tuple[str, ...]
) -> ImputationLayout:
    """Check that each missing variable is a main effect only, and collect the imputation variables.

    ``required(expr)`` returns the data columns a factor expression uses; ``X`` (with ``x_names``) is the design
    built with the placeholders, from which a categorical variable's indicators are read.
    """
    main_effects: dict[str, int] = {}
    indicators: list[tuple[str, str, int]] = []  # (indicator, factor, column of X)
    for term, columns in spec.term_slices.items():
        factors = list(term.factors)
        for factor in factors:
            expr = str(factor.expr)
            uses = ({expr} if expr in data.columns else set(required(expr))) & set(missing_vars)  # (a back-quoted name)
            if not uses:
                continue
            if len(factors) > 1 or expr not in missing_vars:
                name = sorted(uses)[0]
                raise DesignError(
                    f"{name!r} has missing values and appears in the term {str(term)!r}: imputation needs "
                    "predictors with missing values as main effects only (their design row must be linear in "
                    f"them); create the transformed or interacted column in the data before fitting, e.g. "
                    f"data['log_{name}'] = np.log(data['{name}'])"
                )
        if len(factors) == 1 and str(factors[0].expr) in data.columns:
            expr = str(factors[0].expr)
            if not is_categorical(data[expr]) and columns.stop - columns.start == 1:
                main_effects[expr] = columns.start
            elif is_categorical(data[expr]) and expr in missing_vars:
                indicators += [(x_names[col], expr, col) for col in range(columns.start, columns.stop)]
    variables = [v for v in main_effects if v in missing_vars] + [v for v in main_effects if v not in missing_vars]
    names = variables + [name for name, _, _ in indicators]
    sources = variables + [factor for _, factor, _ in indicators]
    x_columns = [main_effects[v] for v in variables] + [col for _, _, col in indicators]
    layout = ImputationLayout(
        variables=tuple(names),
        x_columns=tuple(x_columns),
        values=np.zeros((len(data), 0)),
        sources=tuple(sources) if indicators else (),
        placeholders=placeholder_values(data, [factor for factor in dict.fromkeys(f for _, f, _ in indicators)]),
    )
    return replace(layout, values=layout.raw_values(data, X))
