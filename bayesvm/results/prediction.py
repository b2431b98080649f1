"""Predictive class probabilities from the Bayesian SVM's pseudo-likelihood.

The pseudo-likelihood ``exp(-2 (1 - y f)_+)`` normalised over ``y in {-1, +1}`` gives

    p(y = +1 | f) = e^{-2(1-f)_+} / (e^{-2(1-f)_+} + e^{-2(1+f)_+}) = expit(2 (1+f)_+ - 2 (1-f)_+),

i.e. ``expit(4 f)`` on ``|f| <= 1``, ``expit(2 + 2 f)`` above and ``expit(2 f - 2)`` below.
``kind="prob"`` averages it over the posterior of ``f`` (``N(mean, var)`` under VB) by
Gauss-Hermite quadrature.  Because ``p(+1 | f) - 1/2`` is odd and increasing in ``f`` and the
nodes are symmetric, the average exceeds 1/2 exactly when the posterior mean of ``f`` is
positive; classes are defined as ``prob > 0.5`` so the two always agree.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

_NODES, _WEIGHTS = np.polynomial.hermite.hermgauss(40)


def pseudo_probability(f: np.ndarray) -> np.ndarray:
    """``p(y = +1 | f)`` of the normalised hinge pseudo-likelihood."""
    f = np.asarray(f, dtype=float)
    return expit(2.0 * np.maximum(1.0 + f, 0.0) - 2.0 * np.maximum(1.0 - f, 0.0))


def gaussian_average_probability(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``E[p(y = +1 | f)]`` for ``f ~ N(mean, var)`` (40-point Gauss-Hermite)."""
    sd = np.sqrt(np.maximum(var, 0.0))
    points = mean[:, None] + np.sqrt(2.0) * sd[:, None] * _NODES[None, :]
    return pseudo_probability(points) @ _WEIGHTS / np.sqrt(np.pi)
