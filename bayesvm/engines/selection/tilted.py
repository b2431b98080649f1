"""The tilted distribution of one slope's EP site under its cavity, for each slope prior (derived here; the accurate
selection fit of :mod:`bayesvm.engines.selection.ep` matches its moments, and draws from it by its quantile).

A slope's site ``s(beta)`` under the cavity ``N(beta; m, v)``:

* a Gaussian slab ``N(0, S)`` gives ``N(beta; m S / (v + S), v S / (v + S))`` with normaliser ``N(m; 0, v + S)``;
* a Laplace site ``exp(-|beta| / b) / (2 b)`` splits at 0: ``N(beta; m, v) e^{-beta / b} = e^{-m/b + v/(2 b^2)}
  N(beta; m - v/b, v)`` on ``beta > 0`` and ``e^{m/b + v/(2 b^2)} N(beta; m + v/b, v)`` on ``beta < 0``, so its
  normaliser is ``[e^{-m/b + v/(2b^2)} Phi((m - v/b)/sqrt v) + e^{m/b + v/(2b^2)} Phi(-(m + v/b)/sqrt v)] / (2 b)``
  and its moments are those of the two truncated normals;
* a point mass at 0 with weight ``1 - p`` beside either adds the weight ``(1 - p) N(m; 0, v)`` (spike-and-slab,
  Polson & Scott 2011, eq. 16; Laplace-zero, Luts & Ormerod 2014, section 3.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass
class SlopeTilted:
    """Moments of each slope's tilted distribution ``N(beta; m, v) s(beta) / Z``."""

    log_z: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    p_include: np.ndarray  # the slab's weight (1 without a point mass)
    p_positive: np.ndarray  # P(beta > 0)
    mean_if_included: np.ndarray  # the mean of the slab part
    cavity_mean: np.ndarray = None
    cavity_var: np.ndarray = None
    width: np.ndarray = None


def log_normal(x: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``log N(x; 0, var)``."""
    return -0.5 * (LOG_2PI + np.log(var) + x**2 / var)


def laplace_tilted(m: np.ndarray, v: np.ndarray, b: np.ndarray):
    """``log Z``, mean, variance and ``P(beta > 0)`` of ``N(beta; m, v) exp(-|beta| / b) / (2 b)`` (module
    docstring: two truncated normals)."""
    s = np.sqrt(v)
    mu_p, mu_n = m - v / b, m + v / b  # the pieces' means on beta > 0 and beta < 0
    a_p, a_n = mu_p / s, -mu_n / s  # standardised distances inside each piece
    log_wp = -m / b + v / (2.0 * b**2) + log_ndtr(a_p)
    log_wn = m / b + v / (2.0 * b**2) + log_ndtr(a_n)
    log_sum = np.logaddexp(log_wp, log_wn)
    p_pos = np.exp(log_wp - log_sum)
    lam_p = np.exp(-0.5 * a_p**2 - 0.5 * LOG_2PI - log_ndtr(a_p))  # phi / Phi (inverse Mills ratio)
    lam_n = np.exp(-0.5 * a_n**2 - 0.5 * LOG_2PI - log_ndtr(a_n))
    mean_p = mu_p + s * lam_p  # N(mu_p, v) truncated to beta > 0
    var_p = v * np.clip(1.0 - a_p * lam_p - lam_p**2, 0.0, 1.0)
    mean_n = mu_n - s * lam_n  # N(mu_n, v) truncated to beta < 0
    var_n = v * np.clip(1.0 - a_n * lam_n - lam_n**2, 0.0, 1.0)
    mean = p_pos * mean_p + (1.0 - p_pos) * mean_n
    second = p_pos * (var_p + mean_p**2) + (1.0 - p_pos) * (var_n + mean_n**2)
    return log_sum - np.log(2.0 * b), mean, np.maximum(second - mean**2, 0.0), p_pos


def laplace_quantile(u: np.ndarray, m: np.ndarray, v: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The inverse CDF of the Laplace site's tilted distribution (two truncated normals, module docstring)."""
    s = np.sqrt(v)
    mu_p, mu_n = m - v / b, m + v / b
    _, _, _, p_pos = laplace_tilted(m, v, b)
    w_neg = 1.0 - p_pos
    with np.errstate(divide="ignore", invalid="ignore"):
        q_neg = np.clip(u / w_neg, 0.0, 1.0)  # N(mu_n, v) below 0: P(X < x | X < 0) = q
        x_neg = mu_n + s * ndtri(q_neg * ndtr(-mu_n / s))
        q_pos = np.clip((u - w_neg) / p_pos, 0.0, 1.0)  # N(mu_p, v) above 0: P(X > x | X > 0) = 1 - q
        x_pos = mu_p - s * ndtri((1.0 - q_pos) * ndtr(mu_p / s))
    return np.where(u < w_neg, np.minimum(x_neg, 0.0), np.maximum(x_pos, 0.0))


def spike_slab_tilted(pi: float, m: np.ndarray, v: np.ndarray, S: np.ndarray) -> SlopeTilted:
    """``(1 - pi) delta_0 + pi N(0, S)``: the point mass (weight ``(1 - pi) N(m; 0, v)``) and the Gaussian
    ``N(m S / (v + S), v S / (v + S))`` (weight ``pi N(m; 0, v + S)``)."""
    log_w0 = np.log1p(-pi) + log_normal(m, v)
    log_w1 = np.log(pi) + log_normal(m, v + S)
    log_z = np.logaddexp(log_w0, log_w1)
    p = np.exp(log_w1 - log_z)
    slab_mean, slab_var = m * S / (v + S), v * S / (v + S)
    mean = p * slab_mean
    var = np.maximum(p * (slab_var + slab_mean**2) - mean**2, 0.0)
    p_pos = p * np.exp(log_ndtr(slab_mean / np.sqrt(slab_var)))
    return SlopeTilted(log_z, mean, var, p, p_pos, slab_mean)


def spike_slab_quantile(tilted: SlopeTilted, u: np.ndarray) -> np.ndarray:
    """``F^-1(u)`` of ``(1 - p) delta_0 + p N(a, c)``, exactly 0 on the point mass."""
    m, v, width, p = tilted.cavity_mean, tilted.cavity_var, tilted.width, tilted.p_include
    spike = 1.0 - p
    a, c = m * width / (v + width), v * width / (v + width)
    below = p * ndtr(-a / np.sqrt(c))  # the slab's mass below 0
    with np.errstate(divide="ignore", invalid="ignore"):
        low = a + np.sqrt(c) * ndtri(np.clip(u / p, 0.0, 1.0))
        high = a + np.sqrt(c) * ndtri(np.clip((u - spike) / p, 0.0, 1.0))
    return np.where(u < below, np.minimum(low, 0.0), np.where(u < below + spike, 0.0, np.maximum(high, 0.0)))


def laplace_zero_tilted(rho: float, m: np.ndarray, v: np.ndarray, b: np.ndarray) -> SlopeTilted:
    """``(1 - rho) delta_0 + rho Laplace(0, b)``: the point mass (weight ``(1 - rho) N(m; 0, v)``) and the Laplace
    piece (weight ``rho`` times its normaliser); ``rho = 1`` is the Laplace site alone, every slope included."""
    log_l, mean_l, var_l, pos_l = laplace_tilted(m, v, b)
    log_w0 = np.log1p(-rho) + log_normal(m, v) if rho < 1 else np.full_like(m, -np.inf)
    log_w1 = np.log(rho) + log_l
    log_z = np.logaddexp(log_w0, log_w1)
    p = np.exp(log_w1 - log_z)
    mean = p * mean_l
    var = np.maximum(p * (var_l + mean_l**2) - mean**2, 0.0)
    return SlopeTilted(log_z, mean, var, p, p * pos_l, mean_l)


def laplace_zero_quantile(tilted: SlopeTilted, u: np.ndarray) -> np.ndarray:
    """``F^-1(u)`` of ``(1 - p) delta_0 + p`` (the Laplace site's tilted), exactly 0 on the point mass."""
    m, v, width, p = tilted.cavity_mean, tilted.cavity_var, tilted.width, tilted.p_include
    spike = 1.0 - p
    below = p * (1.0 - laplace_tilted(m, v, width)[3])
    with np.errstate(divide="ignore", invalid="ignore"):
        low = laplace_quantile(np.clip(u / p, 0.0, 1.0), m, v, width)
        high = laplace_quantile(np.clip((u - spike) / p, 0.0, 1.0), m, v, width)
    return np.where(u < below, low, np.where(u < below + spike, 0.0, high))


def lasso_tilted(m: np.ndarray, v: np.ndarray, b: np.ndarray) -> SlopeTilted:
    """The Laplace site alone (no point mass: every slope included)."""
    log_l, mean_l, var_l, pos_l = laplace_tilted(m, v, b)
    return SlopeTilted(log_l, mean_l, var_l, np.ones_like(m), pos_l, mean_l)
