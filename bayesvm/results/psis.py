"""Pareto-smoothed importance sampling (PSIS; Vehtari, Simpson, Gelman, Yao & Gabry 2024, JMLR 25(72)).

The ``M = ceil(min(S / 5, 3 sqrt(S / r_eff)))`` largest of ``S`` importance ratios are replaced by the expected order
statistics of a generalised Pareto distribution fitted to them (the empirical-Bayes estimate of Zhang & Stephens
2009, with the weakly informative prior on the shape of Vehtari et al., their appendix), the result truncated at the
largest raw ratio; the fitted shape ``k`` is the diagnostic (``k <= 0.7``: the weighted estimates are reliable).

This is the algorithm of ArviZ's ``psislw``, ported to plain numpy so that the checks that run at the end of every fit
(:mod:`bayesvm.results.vb_check`, :mod:`bayesvm.results.loo`) do not import ArviZ (over a second in a new process);
``tests/results/test_psis.py`` checks it against ArviZ's to rounding.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

#: Log of the smallest positive double: the body/tail cut never falls below it.
_CUTOFF_MIN = float(np.log(np.finfo(float).tiny))
_EPS = float(np.finfo(float).eps)


def psis(log_ratios: np.ndarray, reff: float = 1.0) -> tuple[np.ndarray, np.ndarray | float]:
    """Normalised Pareto-smoothed log weights and the shape estimate ``k`` of ``log_ratios`` (the last axis holds
    the draws; a vector gives a float ``k``, a ``rows x draws`` array one ``k`` per row).  ``k`` is ``inf`` where the
    tail has at most four draws (too few to fit)."""
    ratios = np.asarray(log_ratios, dtype=float)
    if ratios.ndim == 1:
        weights, k = _smoothed(ratios.copy(), _cutoff_index(ratios.size, reff))
        return weights, k
    out, shapes = np.empty_like(ratios), np.empty(ratios.shape[0])
    cut = _cutoff_index(ratios.shape[-1], reff)
    for i, row in enumerate(ratios):
        out[i], shapes[i] = _smoothed(row.copy(), cut)
    return out, shapes


def _cutoff_index(draws: int, reff: float) -> int:
    return -int(np.ceil(min(draws / 5.0, 3 * (draws / reff) ** 0.5))) - 1


def _smoothed(x: np.ndarray, cutoff_index: int) -> tuple[np.ndarray, float]:
    """One vector of log ratios (changed in place): its smoothed, normalised log weights and ``k``."""
    x -= np.max(x)
    order = np.argsort(x)
    cutoff = max(x[order[cutoff_index]], _CUTOFF_MIN)
    exp_cutoff = np.exp(cutoff)
    (tail,) = np.where(x > cutoff)
    k = np.inf
    if tail.size > 4:
        tail_order = np.argsort(x[tail])
        values = np.exp(x[tail]) - exp_cutoff
        k, sigma = _gpd_fit(values[tail_order])
        if np.isfinite(k):
            quantiles = np.arange(0.5, tail.size) / tail.size
            x[tail[tail_order]] = np.log(_gpd_quantiles(quantiles, k, sigma) + exp_cutoff)
            x[x > 0] = 0.0
    x -= logsumexp(x)
    return x, float(k)


def _gpd_fit(values: np.ndarray) -> tuple[float, float]:
    """Shape and scale of a generalised Pareto distribution fitted to sorted positive ``values`` (Zhang & Stephens
    2009, with the prior on ``k`` of Vehtari et al. 2024)."""
    prior_bs, prior_k = 3.0, 10.0
    n = values.size
    m = 30 + int(n**0.5)
    b = 1.0 - np.sqrt(m / (np.arange(1, m + 1, dtype=float) - 0.5))
    b /= prior_bs * values[int(n / 4 + 0.5) - 1]
    b += 1.0 / values[-1]
    k = np.log1p(-b[:, None] * values).mean(axis=1)
    length = n * (np.log(-(b / k)) - k - 1.0)
    weights = 1.0 / np.exp(length - length[:, None]).sum(axis=1)
    keep = weights >= 10 * _EPS
    weights, b = weights[keep], b[keep]
    weights /= weights.sum()
    b_post = float(np.sum(b * weights))
    k_post = float(np.log1p(-b_post * values).mean())
    sigma = -k_post / b_post
    return (n * k_post + prior_k * 0.5) / (n + prior_k), sigma


def _gpd_quantiles(probabilities: np.ndarray, k: float, sigma: float) -> np.ndarray:
    """Inverse distribution function of the generalised Pareto distribution at ``0 < p < 1``."""
    if sigma <= 0:
        return np.full_like(probabilities, np.nan)
    if abs(k) < _EPS:
        return -np.log1p(-probabilities) * sigma
    return np.expm1(-k * np.log1p(-probabilities)) / k * sigma


def normalised_weights(log_weights: np.ndarray) -> np.ndarray:
    """Importance weights summing to 1 from (unnormalised) log weights, computed without overflow."""
    weights = np.exp(log_weights - np.max(log_weights))
    return weights / weights.sum()
