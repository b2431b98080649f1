"""Convergence diagnostics of a sampler's draws, for the engines that decide or report on them: rank-normalised
R-hat and bulk / tail effective sample sizes (Vehtari et al. 2021, as ArviZ computes them)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd


def _arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (ArviZ's import-time notices about its own future)
        import arviz

    return arviz


def rhat_and_ess(values: np.ndarray) -> tuple[float, float]:
    """Largest R-hat and smallest bulk ESS over ``values (chains, draws, m)``; a quantity that never moves (NaN) counts
    as converged."""
    az = _arviz()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = az.convert_to_dataset({"q": values})
        rhat = np.asarray(az.rhat(dataset)["q"].values, dtype=float)
        ess = np.asarray(az.ess(dataset, method="bulk")["q"].values, dtype=float)
    rhat, ess = rhat[np.isfinite(rhat)], ess[np.isfinite(ess)]
    return (float(rhat.max()) if rhat.size else 1.0), (float(ess.min()) if ess.size else float("inf"))


def draw_diagnostics(draws: np.ndarray, names: list[str]) -> pd.DataFrame:
    """``r_hat``, ``ess_bulk`` and ``ess_tail`` of each column of ``draws`` (``(chains, draws, k)``), one row per
    name."""
    az = _arviz()
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        dataset = az.convert_to_dataset({"q": np.asarray(draws, dtype=float)})
        columns = {
            "r_hat": az.rhat(dataset)["q"].values,
            "ess_bulk": az.ess(dataset, method="bulk")["q"].values,
            "ess_tail": az.ess(dataset, method="tail")["q"].values,
        }
    return pd.DataFrame({stat: np.asarray(values, dtype=float) for stat, values in columns.items()}, index=list(names))
