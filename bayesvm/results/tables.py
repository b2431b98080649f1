"""One tidy table of a fit's estimates (broom.mixed's ``tidy()`` layout), for CSV and JSON output."""

from __future__ import annotations

import numpy as np
import pandas as pd

TIDY_COLUMNS = ["effect", "group", "term", "estimate", "std_error", "conf_low", "conf_high"]


def tidy(summary) -> pd.DataFrame:
    """Fixed effects (``effect="fixed"``), random-effect standard deviations (``effect="ran_pars"``) and a kernel's
    learned hyperparameters (``effect="hyperparameter"``, point estimates).

    Parameters
    ----------
    summary
        A :class:`~bayesvm.results.summary.Summary` (``fit.summary(level)``).

    Returns
    -------
    DataFrame
        Columns ``effect, group, term, estimate, std_error, conf_low, conf_high`` and, where the fit has
        them, ``p_include``, ``ess_bulk``, ``ess_tail`` and ``r_hat``; ``std_error`` is the posterior SD
        (empty for a posterior mode), ``conf_*`` the central credible interval.  Random-effect rows give
        ``sqrt(E[sigma^2])`` (as ``summary()`` does) with no interval.
    """
    fixed = summary.fixed
    columns = list(fixed.columns)
    out = pd.DataFrame(
        {
            "effect": "fixed",
            "group": "",
            "term": fixed.index.astype(str),
            "estimate": fixed["mean"].to_numpy(),
            "std_error": fixed["sd"].to_numpy() if "sd" in fixed else np.nan,
            "conf_low": fixed[columns[2]].to_numpy() if len(columns) >= 4 else np.nan,
            "conf_high": fixed[columns[3]].to_numpy() if len(columns) >= 4 else np.nan,
        }
    )
    for extra in ("p_include", "ess_bulk", "ess_tail", "r_hat"):
        if extra in fixed:
            out[extra] = fixed[extra].to_numpy()
    random = summary.random
    if not random.empty:
        ran = pd.DataFrame(
            {
                "effect": "ran_pars",
                "group": random["group"].astype(str).to_numpy(),
                "term": [f"sd__{term}" for term in random["term"]],
                "estimate": random["sd"].to_numpy(),
                "std_error": np.nan,
                "conf_low": np.nan,
                "conf_high": np.nan,
            }
        )
        out = pd.concat([out, ran], ignore_index=True)
    hyperparameters = summary.info.get("hyperparameters")
    if hyperparameters is not None and len(hyperparameters):
        out = (
            hyperparameter_table(hyperparameters)
            if out.empty
            else pd.concat([out, hyperparameter_table(hyperparameters)], ignore_index=True)
        )
    return out


def hyperparameter_table(values: pd.Series) -> pd.DataFrame:
    """One row per kernel hyperparameter (``effect="hyperparameter"``; point estimates, ML-II, so no interval)."""
    return pd.DataFrame(
        {
            "effect": "hyperparameter",
            "group": "",
            "term": values.index.astype(str),
            "estimate": values.to_numpy(float),
            "std_error": np.nan,
            "conf_low": np.nan,
            "conf_high": np.nan,
        },
        columns=TIDY_COLUMNS,
    )
