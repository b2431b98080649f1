"""Draws from the inverse Gaussian distribution ``IG(mean, shape)``, stable for any mean, an infinite one included.

The Laplace and Laplace-zero slopes of the selection samplers are scale mixtures whose mixing variables have
inverse Gaussian full conditionals (Park & Casella 2008; Luts & Ormerod 2014, Appendix B) with mean
``sigma / |v|``.  Under separation a learned scale wanders far into its heavy upper tail and a slope near 0 makes
that mean huge: numpy's ``Generator.wald`` returns 0 for means above about 1e15 (cancellation in
``mu + mu^2 y / (2 lambda) - ...``) and NaN for an infinite one, and a NaN precision then stopped the chain with
a raw ``ValueError`` (a separable two-class problem with six noise columns, ``LaplaceZero(0.05)``).

Michael, Schucany & Haas (1976): with ``y = Z^2`` and ``a = mean y / (2 shape)`` the smaller root of the quadratic
is ``x = mean (1 + a - sqrt(a^2 + 2 a))``, written here as ``mean / (1 + a + sqrt(a) sqrt(a + 2))`` (the same
number, without the cancellation or an overflow of ``a^2``); it is kept with probability ``mean / (mean + x)``,
else ``mean^2 / x`` is returned.  As ``mean -> inf``, ``x -> shape / y`` is kept with probability 1: the Levy
distribution, the limit of ``IG(mean, shape)``.
"""

from __future__ import annotations

import numpy as np

#: Means up to this go to numpy's ``Generator.wald`` (its relative error there is about ``mean * 1e-16``), so fits
#: whose means stay below it draw exactly what they drew before; larger ones, and infinite ones, to
#: :func:`stable_inverse_gaussian`.
WALD_MAX_MEAN = 1e8


def draw_inverse_gaussian(mean, shape, rng: np.random.Generator) -> np.ndarray:
    """One draw per element of ``IG(mean, shape)`` (``mean`` in ``(0, inf]``, ``shape > 0``, broadcast together)."""
    mean, shape = np.broadcast_arrays(np.asarray(mean, dtype=float), np.asarray(shape, dtype=float))
    big = ~(mean <= WALD_MAX_MEAN)
    out = np.asarray(rng.wald(np.where(big, 1.0, mean), shape), dtype=float)
    if big.any():
        out[big] = stable_inverse_gaussian(mean[big], shape[big], rng)
    return out


def stable_inverse_gaussian(mean, shape, rng: np.random.Generator) -> np.ndarray:
    """``IG(mean, shape)`` by Michael, Schucany & Haas without cancellation (module docstring)."""
    mean, shape = np.broadcast_arrays(np.asarray(mean, dtype=float), np.asarray(shape, dtype=float))
    y = rng.standard_normal(mean.shape) ** 2
    u = rng.random(mean.shape)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a = mean * y / (2.0 * shape)
        root = np.where(np.isfinite(a), mean / (1.0 + a + np.sqrt(a) * np.sqrt(a + 2.0)), shape / y)
        keep = np.where(np.isfinite(mean), u * (mean + root) <= mean, True)
        return np.where(keep, root, mean * (mean / root))
