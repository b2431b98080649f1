"""Expectation propagation's algebra for one hinge site ``t_i(f_i) = exp(-2 max(0, 1 - y_i f_i))``: its tilted
moments (closed form), the cavity of a marginal, the moment-matching (damped) site update and the site's terms of EP's
``log Z`` (Rasmussen & Williams 2006, eq. 3.65).  :mod:`bayesvm.engines.linear.ep` runs EP with them in memory and
:mod:`bayesvm.engines.linear.stream_ep` on out-of-core partitions; every function is elementwise over rows."""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr

from ..linalg import compiled
from ..linalg.row_threads import in_row_halves
from .hinge_levels import log_ndtr_compiled

LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


def tilted_moments(y: np.ndarray, m: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``log Z``, mean and variance of ``f`` under ``N(f; m, v) exp(-2 max(0, 1 - y f))``.

    With ``a = y m`` and ``s = sqrt(v)`` the tilted density is a mixture of two truncated normals: ``N(a + 2v, v)`` on
    ``y f < 1`` (weight ``exp(2a + 2v - 2) Phi(beta)``, ``beta = (1 - a - 2v) / s``) and ``N(a, v)`` on ``y f > 1``
    (weight ``Phi(-alpha)``, ``alpha = (1 - a) / s``); each piece's moments by its inverse Mills ratio.  Where numba
    is installed by a compiled loop over the rows (:func:`_tilted_rows`, the same operations), in two halves on the
    row threads on many rows (:func:`bayesvm.linalg.row_threads.in_row_halves`: a third of an EP sweep on 200,000 rows),
    else by numpy.
    """
    if compiled.available():
        y, m, v = (np.ascontiguousarray(x, dtype=float) for x in (y, m, v))
        log_z, mean, var = np.empty(m.size), np.empty(m.size), np.empty(m.size)
        in_row_halves(m.size, lambda rows: tilted_rows(y[rows], m[rows], v[rows], log_z[rows], mean[rows], var[rows]))
        return log_z, mean, var
    a, s = y * m, np.sqrt(v)
    beta = (1.0 - a - 2.0 * v) / s  # piece 1: N(a + 2v, v) on z < 1
    alpha = (1.0 - a) / s  # piece 2: N(a, v) on z > 1
    log_phi1, log_phi2 = log_ndtr(beta), log_ndtr(-alpha)  # each evaluated once (the costliest part of a sweep)
    log_w1 = 2.0 * a + 2.0 * v - 2.0 + log_phi1
    log_w2 = log_phi2
    log_z = np.logaddexp(log_w1, log_w2)
    p1 = np.exp(log_w1 - log_z)
    p2 = 1.0 - p1
    lam1 = np.exp(-0.5 * beta**2 - LOG_SQRT_2PI - log_phi1)
    lam2 = np.exp(-0.5 * alpha**2 - LOG_SQRT_2PI - log_phi2)
    mean1 = a + 2.0 * v - s * lam1
    var1 = v * np.clip(1.0 - beta * lam1 - lam1**2, 0.0, 1.0)
    mean2 = a + s * lam2
    var2 = v * np.clip(1.0 + alpha * lam2 - lam2**2, 0.0, 1.0)
    mean = p1 * mean1 + p2 * mean2
    var = p1 * (var1 + (mean1 - mean) ** 2) + p2 * (var2 + (mean2 - mean) ** 2)
    return log_z, y * mean, np.clip(var, 1e-12 * v, v)


def weighted_tilted_moments(
    y: np.ndarray, m: np.ndarray, v: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`tilted_moments` of ``N(f; m, v) exp(-2 omega max(0, 1 - y f))`` for rows with class weights ``omega``
    (None: every row 1).  In ``g = omega f + (1 - omega) y`` the tilted density is the unweighted one of the cavity
    ``N(omega m + (1 - omega) y, omega^2 v)`` (:mod:`bayesvm.model.class_weights`), with the same normaliser; its mean
    and variance map back by ``f = (g - (1 - omega) y) / omega``."""
    if weights is None:
        return tilted_moments(y, m, v)
    offset = (1.0 - weights) * y
    log_z, mean_g, var_g = tilted_moments(y, weights * m + offset, weights * weights * v)
    return log_z, (mean_g - offset) / weights, var_g / (weights * weights)


def _tilted_row(y, m, v):
    """:func:`tilted_moments` of one row, the numpy path's operations in its order: ``(log Z, mean, variance)``."""
    a, s = y * m, np.sqrt(v)
    beta = (1.0 - a - 2.0 * v) / s
    alpha = (1.0 - a) / s
    log_phi1, log_phi2 = log_ndtr_compiled(beta), log_ndtr_compiled(-alpha)
    log_w1 = 2.0 * a + 2.0 * v - 2.0 + log_phi1
    log_w2 = log_phi2
    high = max(log_w1, log_w2)
    log_z = high + np.log1p(np.exp(min(log_w1, log_w2) - high)) if high > -np.inf else high  # np.logaddexp
    p1 = np.exp(log_w1 - log_z)
    p2 = 1.0 - p1
    lam1 = np.exp(-0.5 * beta**2 - LOG_SQRT_2PI - log_phi1)
    lam2 = np.exp(-0.5 * alpha**2 - LOG_SQRT_2PI - log_phi2)
    mean1 = a + 2.0 * v - s * lam1
    var1 = v * min(max(1.0 - beta * lam1 - lam1**2, 0.0), 1.0)
    mean2 = a + s * lam2
    var2 = v * min(max(1.0 + alpha * lam2 - lam2**2, 0.0), 1.0)
    mean = p1 * mean1 + p2 * mean2
    var = p1 * (var1 + (mean1 - mean) ** 2) + p2 * (var2 + (mean2 - mean) ** 2)
    return log_z, y * mean, min(max(var, 1e-12 * v), v)


def _tilted_rows(y, m, v, log_z, mean, var):
    """:func:`_tilted_row` of every row, into ``log_z``, ``mean`` and ``var``."""
    for i in range(m.size):
        log_z[i], mean[i], var[i] = _tilted_row(y[i], m[i], v[i])


if compiled.numba is not None:
    _tilted_row = compiled.compile_nogil(_tilted_row, inline=True)
    tilted_rows = compiled.compile_nogil(_tilted_rows)
else:  # never called: tilted_moments checks compiled.available()
    tilted_rows = None


def cavities(mean_f: np.ndarray, var_f: np.ndarray, tau: np.ndarray, nu: np.ndarray):
    """``(ok, m, v)``: each site's cavity ``N(m, v)`` (the marginal of its projection with the site removed); ``ok``
    marks the sites whose cavity is proper (elsewhere the marginal stands in and the site is not updated)."""
    cav_prec = 1.0 / var_f - tau
    ok = cav_prec > 1e-10
    m = np.where(ok, (mean_f / var_f - nu) / np.where(ok, cav_prec, 1.0), mean_f)
    v = np.where(ok, 1.0 / np.where(ok, cav_prec, 1.0), var_f)
    return ok, m, v


def damped_sites(tau, nu, ok, m, v, t_mean, t_var, damping: float, floor: np.ndarray | float = 0.0):
    """The sites that match each tilted distribution's moments (``tau = 1/t_var - 1/v``, at least ``floor``;
    ``nu = t_mean/t_var - m/v``), a fraction ``damping`` of the way from the current ones."""
    new_tau = np.maximum(1.0 / t_var - 1.0 / v, floor)
    new_nu = t_mean / t_var - m / v
    tau = np.where(ok, (1 - damping) * tau + damping * new_tau, tau)
    nu = np.where(ok, (1 - damping) * nu + damping * new_nu, nu)
    return tau, nu


def updated_sites(y, mean_f, var_f, tau, nu, weights, damping: float) -> tuple[np.ndarray, np.ndarray]:
    """One parallel EP update of every site from the marginals ``N(mean_f, var_f)`` of ``f`` under ``q``:
    :func:`cavities`, :func:`weighted_tilted_moments` of each proper cavity and :func:`damped_sites` (no floor).
    Where numba is installed by one compiled pass over the rows (:func:`_site_rows`, the same operations row by
    row, without the dozen row-length temporaries of the three steps), in two halves on the row threads on many
    rows; else by the three numpy steps."""
    if not compiled.available():
        ok, m, v = cavities(mean_f, var_f, tau, nu)
        _, t_mean, t_var = weighted_tilted_moments(y, m, v, weights)
        return damped_sites(tau, nu, ok, m, v, t_mean, t_var, damping)
    y, mean_f, var_f, tau, nu = (np.ascontiguousarray(x, dtype=float) for x in (y, mean_f, var_f, tau, nu))
    weighted = weights is not None
    omega = np.ascontiguousarray(weights, dtype=float) if weighted else y  # (unread without weights)
    new_tau, new_nu = np.empty(tau.size), np.empty(nu.size)
    in_row_halves(tau.size, lambda rows: site_rows(
        y[rows], mean_f[rows], var_f[rows], tau[rows], nu[rows], omega[rows], weighted, damping,
        new_tau[rows], new_nu[rows],
    ))  # fmt: skip
    return new_tau, new_nu


def _site_rows(y, mean_f, var_f, tau, nu, omega, weighted, damping, new_tau, new_nu):
    """:func:`updated_sites` row by row, into ``new_tau`` and ``new_nu``: the numpy steps' operations in their order
    (a row whose cavity is improper keeps its site)."""
    for i in range(tau.size):
        cav_prec = 1.0 / var_f[i] - tau[i]
        if not cav_prec > 1e-10:
            new_tau[i], new_nu[i] = tau[i], nu[i]
            continue
        m = (mean_f[i] / var_f[i] - nu[i]) / cav_prec
        v = 1.0 / cav_prec
        if weighted:
            offset = (1.0 - omega[i]) * y[i]
            _, mean_g, var_g = _tilted_row(y[i], omega[i] * m + offset, omega[i] * omega[i] * v)
            t_mean, t_var = (mean_g - offset) / omega[i], var_g / (omega[i] * omega[i])
        else:
            _, t_mean, t_var = _tilted_row(y[i], m, v)
        matched_tau = 1.0 / t_var - 1.0 / v
        if matched_tau < 0.0:  # (np.maximum: a NaN stays NaN)
            matched_tau = 0.0
        matched_nu = t_mean / t_var - m / v
        new_tau[i] = (1 - damping) * tau[i] + damping * matched_tau
        new_nu[i] = (1 - damping) * nu[i] + damping * matched_nu


if compiled.numba is not None:
    site_rows = compiled.compile_nogil(_site_rows)
else:  # never called: updated_sites checks compiled.available()
    site_rows = None


def extrapolated_sites(sites: list, coefficients) -> tuple[np.ndarray, np.ndarray]:
    """``s_0 + sum_k c_k (s_k - s_0)`` of sites ``s_k = (tau_k, nu_k)``, the precisions at least 0: a start for EP at a
    new node from the sites of converged neighbours (:meth:`bayesvm.engines.linear.ep.NodeFits.extrapolation`);
    elementwise, so the partitions of out-of-core rows extrapolate theirs alike."""
    (tau0, nu0), rest = sites[0], sites[1:]
    tau = tau0 + sum(c * (tau_k - tau0) for c, (tau_k, _) in zip(coefficients, rest))
    nu = nu0 + sum(c * (nu_k - nu0) for c, (_, nu_k) in zip(coefficients, rest))
    return np.maximum(tau, 0.0), nu


def final_cavities(mean_f: np.ndarray, var_f: np.ndarray, tau: np.ndarray, nu: np.ndarray):
    """``(m, v)``: every site's cavity at convergence, for the evidence (a proper one everywhere)."""
    cav_prec = np.maximum(1.0 / var_f - tau, 1e-12)
    return (mean_f / var_f - nu) / cav_prec, 1.0 / cav_prec


def ep_log_evidence(logdet_prior: float, logdet_precision: float, tau, nu, mean_f, log_z, m, v) -> float:
    """EP's ``log Z`` (Rasmussen & Williams 2006, eq. 3.65, with a general prior precision ``Lambda`` and every site a
    projection ``f = C theta``): ``log|Lambda|/2 - log|P|/2 + nu' C mu / 2 + sum_i [log Z_i + log(1 + v_i tau_i)/2
    - (m_i/v_i + nu_i)^2 / (2 (1/v_i + tau_i)) + m_i^2 / (2 v_i)]``."""
    return 0.5 * logdet_prior - 0.5 * logdet_precision + site_log_evidence(tau, nu, mean_f, log_z, m, v)


def site_log_evidence(tau, nu, mean_f, log_z, m, v) -> float:
    """The rows' terms of :func:`ep_log_evidence`, ``nu' C mu / 2 + sum_i [...]``: a sum over rows, so the partitions
    of out-of-core data add theirs."""
    sites = log_z + 0.5 * np.log1p(v * tau) - 0.5 * (m / v + nu) ** 2 / (1.0 / v + tau) + 0.5 * m**2 / v
    return 0.5 * float(nu @ mean_f) + float(np.sum(sites))
