"""Leave-one-out predictions of ``f`` from a fit's own draws, by Pareto-smoothed importance sampling (PSIS-LOO).

The probability map (:mod:`bayesvm.results.calibration`) is learned from out-of-sample predictions.  For a fit
without random effects they come from the fit itself: the posterior with row ``i`` left out is the fit's posterior
reweighted by ``1 / exp(-2 max(0, 1 - y_i f_i))``, the row's factor of the hinge pseudo-likelihood (Polson & Scott
2011, eq. 1), so with draws ``f^(s)`` of the decision values at the training rows

    E[f_i | y_-i] ~ sum_s w_is f_i^(s),   w_is ∝ exp(2 max(0, 1 - y_i f_i^(s))),

and the second moment alike, the weights Pareto-smoothed per row (Vehtari, Gelman & Gabry 2017).  This costs one
pass of the draws over the rows instead of five refits (:mod:`bayesvm.results.crossfit`).  Where a row carries its
own random effect the reweighting has to move that effect far (the row is much of its level's data), the weights
degenerate, and the leave-one-out moments stay near the fit's own: mixed models, and every other model whose rows
are not exchangeable given the coefficients, keep the refits.  So does a fit where too many rows' weights fall on a
few draws (:func:`thin_share`): classes the slopes separate, where the draws that misclassify a row carry it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..model.problems import PENALTY_SOURCE, VBProblem
from .crossfit import stratified_folds
from .psis import psis

#: Draws of the coefficients the leave-one-out moments are averaged over.
LOO_DRAWS = 1000
#: Rows whose decision values are computed at once (``draws x rows`` doubles in memory).
ROWS_PER_CHUNK = 20_000
#: A row's leave-one-out moments rest on too few draws where the effective sample size of its smoothed weights is
#: below this fraction of the draws: a few draws that misclassify it then carry it (weights ``exp(2 (1 - y f))``),
#: its mean lands on the wrong side with a tiny variance, and no smoothing repairs that.
MIN_ESS_FRACTION = 0.1
#: PSIS-LOO serves a probability map while at most this share of the rows rest on too few draws; beyond it the map is
#: learned from cross-fitted refits.  Classes that the slopes separate leave a third of the rows so (scikit-learn's
#: wine: 29-38%, every other one wrong-sided), overlapping ones a few (breast cancer 0-2%, spam 0.4%).
MAX_THIN_SHARE = 0.05


def applies(fit) -> str | None:
    """Why PSIS-LOO does not serve ``fit``'s probability map, or ``None`` when it does."""
    problem, model = getattr(fit, "problem", None), getattr(fit, "model", None)
    design = getattr(model, "design", None)
    if not isinstance(problem, VBProblem) or design is None or getattr(model, "prior", None) is not None:
        return "not a linear fit with a normal prior"  # (a selection fit's draws ignore the slopes' dependence on q)
    if fit.posterior.point:
        return f"its posterior ({fit.posterior.kind}) is one point, with no draws that stand for it"
    if any(component.source != PENALTY_SOURCE for component in problem.components):
        return "random-effect or gp() terms: each row is much of its own level's data"
    if design.imputation is not None or sp.issparse(problem.D) or problem.D.shape[0] != problem.y.size:
        return "imputed, sparse or streamed rows"
    if min(int(np.sum(problem.y > 0)), int(np.sum(problem.y < 0))) < 2:
        return "fewer than 2 rows of a class"
    return None


def loo_predictions(fit, draws: int = LOO_DRAWS, seed: int = 0, folds: int = 5) -> pd.DataFrame:
    """``mean, var, new_var, y, fold`` of every training row's leave-one-out predictive ``f`` (module docstring), the
    frame :func:`bayesvm.results.calibration.fit_calibration_map` learns from; ``attrs["khat"]`` holds each row's
    Pareto k-hat and ``attrs["ess"]`` the effective sample size of its smoothed weights (a fraction of the draws).
    ``fold``: a stratified assignment of the rows to ``folds`` parts, by which the calibration report scores each part
    with a map learned from the others (as it does cross-fitted predictions)."""
    rng = np.random.default_rng(seed)
    theta_d, _, _ = fit.posterior.draws(rng, draws)
    theta = theta_d.reshape(-1, theta_d.shape[-1])
    problem = fit.problem
    y = problem.y
    mean, second, khat, ess = np.empty(y.size), np.empty(y.size), np.empty(y.size), np.empty(y.size)
    for start in range(0, y.size, ROWS_PER_CHUNK):
        rows = slice(start, min(start + ROWS_PER_CHUNK, y.size))
        f = np.asarray(problem.D[rows]) @ theta.T  # (rows, draws)
        log_ratio = 2.0 * np.maximum(1.0 - y[rows, None] * f, 0.0)  # minus the row's log pseudo-likelihood
        if problem.weights is not None:  # a class-weighted row: omega_i times its hinge
            log_ratio = problem.weights[rows, None] * log_ratio
        log_weights, chunk_khat = psis(log_ratio)
        weights = np.exp(log_weights)
        mean[rows] = np.sum(weights * f, axis=1)
        second[rows] = np.sum(weights * f * f, axis=1)
        khat[rows] = chunk_khat
        ess[rows] = 1.0 / np.sum(weights * weights, axis=1) / weights.shape[1]
    fold = stratified_folds(y, folds, seed)
    frame = pd.DataFrame({"mean": mean, "var": np.maximum(second - mean**2, 0.0), "new_var": 0.0, "y": y, "fold": fold})
    frame.attrs["khat"] = khat
    frame.attrs["ess"] = ess
    return frame


def thin_share(predictions: pd.DataFrame) -> float:
    """The share of rows whose leave-one-out moments rest on too few draws (:data:`MIN_ESS_FRACTION`)."""
    return float(np.mean(predictions.attrs["ess"] < MIN_ESS_FRACTION))
