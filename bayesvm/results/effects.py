"""Effects on the probability scale: average predictive comparisons (Gelman & Pardoe 2007).

A Bayesian SVM's coefficients move the decision value ``f``, not the log-odds, so they have no odds-ratio
reading.  What a clinical reader can report instead is how much the calibrated probability
``P(y = positive)`` changes when one predictor changes and everything else about each row stays as it is:

    change = mean_i [ P(y_i = + | x_i with column = b) - P(y_i = + | x_i with column = a) ],

averaged over the rows of the data (the training rows by default).  Every other term that uses the column
(interactions, transformations) follows it, because the rows are predicted again from the raw data.
The probabilities are :meth:`~bayesvm.results.fit.BSVMFit.predict` ``kind="prob"``: posterior predictive and
calibrated, with random effects at each row's own level.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DataError


def probability_change(
    fit, column: str, values: tuple | None = None, newdata: pd.DataFrame | None = None, by: float = 1.0
) -> pd.DataFrame:
    """Average change of ``P(y = positive)`` when ``column`` changes (see the module docstring).

    Parameters
    ----------
    fit
        A fitted model with a recorded call (``bsvm()``).
    column
        A column of the data that the formula uses.
    values
        ``(a, b)``: every row set to ``a``, then to ``b``.  Default: for a numeric column each row's own
        value against that value plus ``by``; for a categorical column every level against the first
        (reference) level.
    newdata
        Rows to average over; default the training rows.
    by
        The step of a numeric column (in its own units) when ``values`` is not given.

    Returns
    -------
    DataFrame
        One row per comparison: ``from``, ``to``, the mean probabilities ``p_from`` and ``p_to`` and their
        difference ``change``.
    """
    data = _rows(fit, newdata)
    if column not in data.columns:
        raise DataError(f"column {column!r} is not used by the formula {fit.formula!r}; columns: {list(data.columns)}")
    series = data[column]
    numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
    if values is not None:
        if len(values) != 2:
            raise DataError(f"values must be a pair (a, b), got {values!r}")
        pairs = [(values[0], values[1])]
    elif numeric:
        pairs = [("x", f"x + {by:g}")]
    else:
        levels = _levels(series)
        if len(levels) < 2:
            raise DataError(f"column {column!r} has a single level {levels}: nothing to compare")
        pairs = [(levels[0], level) for level in levels[1:]]
    rows = []
    for a, b in pairs:
        if values is None and numeric:
            p_from = fit.predict(data, kind="prob").to_numpy()
            shifted = data.copy()
            shifted[column] = series + by
            p_to = fit.predict(shifted, kind="prob").to_numpy()
        else:
            p_from = fit.predict(_set(data, column, a), kind="prob").to_numpy()
            p_to = fit.predict(_set(data, column, b), kind="prob").to_numpy()
        rows.append(
            {
                "from": a,
                "to": b,
                "p_from": float(np.mean(p_from)),
                "p_to": float(np.mean(p_to)),
                "change": float(np.mean(p_to - p_from)),
            }
        )
    table = pd.DataFrame(rows)
    table.index = [f"{column}: {r['from']} -> {r['to']}" for r in rows]
    return table


def _rows(fit, newdata: pd.DataFrame | None) -> pd.DataFrame:
    if newdata is not None:
        from ..formula.frames import as_frame

        return as_frame(newdata, "newdata")
    call = fit.call
    if call is None or call.data is None or not isinstance(call.data, pd.DataFrame):
        raise DataError("this fit keeps no training rows (loaded without them, or out-of-core): pass newdata=")
    return call.data


def _levels(series: pd.Series) -> list:
    if isinstance(series.dtype, pd.CategoricalDtype):
        return [level for level in series.cat.categories if (series == level).any()]
    return sorted(series.dropna().unique().tolist(), key=str)


def _set(data: pd.DataFrame, column: str, value) -> pd.DataFrame:
    out = data.copy()
    if isinstance(out[column].dtype, pd.CategoricalDtype):
        out[column] = pd.Categorical([value] * len(out), categories=out[column].cat.categories)
    else:
        out[column] = value
    return out
