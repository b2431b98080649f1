"""Which predictors ``missing="impute"`` imputes, and where they sit in the design.

A predictor with missing values must enter the fixed part as a main effect (its own column of X,
equal to the variable): then the design row is affine in the missing values and the imputation
model (Luts & Ormerod 2014, section 3.3) applies exactly.  Inside an interaction or a transformation
(``x:z``, ``np.log(x)``) the row is no longer affine in ``x``; that extension is not derived here,
so such formulas are refused with a message saying how to rewrite them (create the transformed
column in the data first).  Missing categorical predictors, grouping factors and random-effect
variables are refused likewise.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        and the fully observed ones.
    x_columns
        Column of X holding each variable.
    values
        ``(n, V)`` raw values, NaN where missing.
    """

    variables: tuple[str, ...]
    x_columns: tuple[int, ...]
    values: np.ndarray

    @property
    def missing(self) -> np.ndarray:
        return np.isnan(self.values)

    @property
    def n_missing(self) -> dict[str, int]:
        counts = self.missing.sum(axis=0)
        return {name: int(c) for name, c in zip(self.variables, counts) if c}

    @property
    def observed_mean(self) -> np.ndarray:
        return np.nanmean(self.values, axis=0)

    @property
    def observed_sd(self) -> np.ndarray:
        sd = np.nanstd(self.values, axis=0, ddof=1)
        return np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)


def check_imputable(
    data: pd.DataFrame,
    bad: dict[str, np.ndarray],
    response: str,
    group_vars: list[str],
    bar_vars: list[str],
    gp_vars: list[str] = (),
) -> list[str]:
    """Variables with missing values that may be imputed; raise naming rows for the rest."""
    names = [name for name, mask in bad.items() if mask.any()]
    for name in names:
        rows = data.index[bad[name]][:5].tolist()
        column = data[name]
        if name in group_vars:
            raise DataError(
                f"grouping variable {name!r} has {int(bad[name].sum())} missing value(s) (rows {rows}): "
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
        if not pd.api.types.is_numeric_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype):
            raise DataError(
                f"categorical predictor {name!r} has {int(bad[name].sum())} missing value(s) (rows {rows}): "
                "imputation of categorical predictors is not available; use missing='drop' or add a level"
            )
        values = column.to_numpy(dtype=float, na_value=np.nan)
        if np.isinf(values).any():
            raise DataError(f"{name!r} has infinite values (rows {data.index[np.isinf(values)][:5].tolist()})")
        if np.isnan(values).all():
            raise DataError(f"{name!r} has no observed value to impute from")
    return names


def imputation_layout(spec, data: pd.DataFrame, missing_vars: list[str], required) -> ImputationLayout:
    """Check that each missing variable is a main effect only, and collect the imputation variables.

    ``required(expr)`` returns the data columns a factor expression uses.
    """
    main_effects: dict[str, int] = {}
    for term, columns in spec.term_slices.items():
        factors = list(term.factors)
        for factor in factors:
            expr = str(factor.expr)
            uses = set(required(expr)) & set(missing_vars)
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
        if len(factors) == 1 and columns.stop - columns.start == 1:
            expr = str(factors[0].expr)
            if expr in data.columns:
                column = data[expr]
                if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
                    main_effects[expr] = columns.start
    variables = [v for v in main_effects if v in missing_vars] + [v for v in main_effects if v not in missing_vars]
    values = np.column_stack([data[v].to_numpy(dtype=float, na_value=np.nan) for v in variables])
    return ImputationLayout(
        variables=tuple(variables), x_columns=tuple(main_effects[v] for v in variables), values=values
    )
