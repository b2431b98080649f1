"""The prior of one variance ``sigma^2``: the paper's ``IG(A, B)`` or a half-t on ``sigma`` (Huang & Wand 2013).

Every engine asks this module, and only this module, about a single-column variance component's prior.

**Inverse gamma** (Luts & Ormerod 2014, section 3.1): ``sigma^2 ~ IG(A, B)``; the paper's ``IG(0.01, 0.01)``
behaves badly when the data barely identify the variance (Gelman 2006): nearly improper, its posterior
can run off to ``10^9`` when each level has one row.

**Half-t** ``sigma ~ t_nu^+(0, s)``, written with an auxiliary variable ``a`` (Huang & Wand 2013, Result 5)::

    sigma^2 | a ~ IG(nu / 2, nu / a),    a ~ IG(1 / 2, 1 / s^2),

so every conditional stays inverse gamma and each engine keeps its conjugate update:

- mean-field VB (:func:`update`, one coordinate step each)::

      q(sigma^2) = IG(nu/2 + J/2,  nu E[1/a] + S/2),      S = sum_j E[u_j^2]
      q(a)       = IG((nu + 1)/2,  nu E[1/sigma^2] + 1/s^2);

- Gibbs (:func:`draw`): the same two conditionals with draws in place of expectations;
- ECME (:func:`mode`): the conditional mode of the marginal ``p(sigma^2 | u)``, the positive root of
  ``(J + nu + 2) v^2 - (S - (J + 1) nu s^2) v - S nu s^2 = 0`` (``S = sum u_j^2``);
- EP's lattice over ``log sigma^2`` (:func:`log_density`): the marginal density
  ``p(sigma^2) = 2 Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) s) (1 + sigma^2/(nu s^2))^(-(nu+1)/2) / (2 sigma)``.

A component uses the half-t when ``comp.prior_nu > 0`` (scale ``comp.prior_t_scale``), the inverse gamma
``IG(comp.prior_a, comp.prior_b)`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import digamma, gammaln

from .overrelax import relaxed_inverse_gamma

LOG_PI = float(np.log(np.pi))
TINY = float(np.finfo(float).tiny)


def is_half_t(comp) -> bool:
    return comp.prior_nu > 0


def initial(comp, posterior_type):
    """``q`` with ``E[1/sigma^2] = 1`` (and, for the half-t, ``q(a)`` given it)."""
    if not is_half_t(comp):
        return posterior_type(shape=comp.prior_a, scale=np.eye(1) * comp.prior_a)
    half = comp.prior_nu / 2.0
    return posterior_type(shape=half, scale=np.eye(1) * half, aux_rate=comp.prior_nu + comp.prior_t_scale**-2)


def update(comp, second: float, previous, posterior_type):
    """Mean-field VB: ``q(sigma^2)`` given ``E[1/a]`` of ``previous``, then ``q(a)`` given the new ``q(sigma^2)``
    (Luts & Ormerod Alg. 2 step 4 for the inverse gamma; module docstring for the half-t)."""
    J = comp.n_levels
    if not is_half_t(comp):
        return posterior_type(shape=comp.prior_a + J / 2.0, scale=np.array([[comp.prior_b + 0.5 * second]]))
    nu, s = comp.prior_nu, comp.prior_t_scale
    aux_rate = previous.aux_rate if previous is not None and previous.aux_rate is not None else nu + s**-2
    e_inv_a = 0.5 * (nu + 1.0) / max(aux_rate, TINY)  # (an extrapolated state may underflow)
    shape, rate = 0.5 * (nu + J), max(nu * e_inv_a + 0.5 * second, TINY)
    return posterior_type(shape=shape, scale=np.array([[rate]]), aux_rate=nu * shape / rate + s**-2)


def bound(comp, post) -> float:
    """``E[log p(sigma^2)] - E[log q(sigma^2)]`` (and, for the half-t, ``+ E[log p(a)] - E[log q(a)]``, with
    ``E[log p(sigma^2 | a)]`` in place of ``E[log p(sigma^2)]``), all constants included."""
    shape, rate = post.shape, float(post.scale[0, 0])
    e_log, e_inv = np.log(rate) - digamma(shape), shape / rate  # E[log sigma^2], E[1/sigma^2] under q
    entropy = -(shape * np.log(rate) - gammaln(shape) - (shape + 1.0) * e_log - rate * e_inv)
    if not is_half_t(comp):
        a, b = comp.prior_a, comp.prior_b
        return float(a * np.log(b) - gammaln(a) - (a + 1.0) * e_log - b * e_inv + entropy)
    nu, s = comp.prior_nu, comp.prior_t_scale
    a_shape, a_rate = 0.5 * (nu + 1.0), post.aux_rate
    e_log_a, e_inv_a = np.log(a_rate) - digamma(a_shape), a_shape / a_rate
    # E[log IG(sigma^2; nu/2, nu/a)]
    given_a = 0.5 * nu * (np.log(nu) - e_log_a) - gammaln(0.5 * nu) - (0.5 * nu + 1.0) * e_log - nu * e_inv_a * e_inv
    # E[log IG(a; 1/2, 1/s^2)]
    prior_a = -np.log(s) - gammaln(0.5) - 1.5 * e_log_a - e_inv_a / s**2
    entropy_a = -(a_shape * np.log(a_rate) - gammaln(a_shape) - (a_shape + 1.0) * e_log_a - a_rate * e_inv_a)
    return float(given_a + prior_a + entropy + entropy_a)


def conditional_inverse_gamma(comp, aux: float | None) -> tuple[float, float]:
    """``(shape, rate)`` of the prior of ``sigma^2`` as an inverse gamma: ``IG(A, B)``, or the half-t's
    ``IG(nu / 2, nu / a)`` given its auxiliary variable ``a`` (``s^2`` before the first draw)."""
    if not is_half_t(comp):
        return comp.prior_a, comp.prior_b
    a = comp.prior_t_scale**2 if aux is None else aux
    return 0.5 * comp.prior_nu, comp.prior_nu / a


def draw_auxiliary(comp, variance: float, rng: np.random.Generator) -> float | None:
    """Gibbs: the half-t's ``a | sigma^2 ~ IG((nu + 1) / 2, nu / sigma^2 + 1 / s^2)`` (None for the inverse gamma)."""
    if not is_half_t(comp):
        return None
    return (comp.prior_nu / variance + comp.prior_t_scale**-2) / rng.gamma(0.5 * (comp.prior_nu + 1.0))


def draw(
    comp,
    sum_squares: float,
    rng: np.random.Generator,
    aux: float | None,
    current: float | None = None,
    relaxation: float = 0.0,
) -> tuple[float, float | None]:
    """Gibbs: ``sigma^2 | u (, a)`` and, for the half-t, then ``a | sigma^2``; returns ``(sigma^2, a)``.  With
    ``relaxation > 0`` and the ``current`` variance, the over-relaxed step of the same inverse gamma
    (:func:`bayesvm.engines.overrelax.relaxed_inverse_gamma`)."""
    shape, rate = conditional_inverse_gamma(comp, aux)
    shape, scale = shape + 0.5 * comp.n_levels, rate + 0.5 * sum_squares
    if relaxation > 0.0 and current is not None:
        variance = relaxed_inverse_gamma(shape, scale, current, rng, relaxation)
    else:
        variance = scale / rng.gamma(shape)
    return variance, draw_auxiliary(comp, variance, rng)


def mode(comp, sum_squares: float) -> float:
    """ECME: the conditional mode of ``sigma^2`` given the coefficients (``sum_squares = sum_j u_j^2``)."""
    J = comp.n_levels
    if not is_half_t(comp):
        return (comp.prior_b + 0.5 * sum_squares) / (comp.prior_a + 0.5 * J + 1.0)
    nu, s2, S = comp.prior_nu, comp.prior_t_scale**2, sum_squares
    lead, mid = J + nu + 2.0, S - (J + 1.0) * nu * s2
    return (mid + np.sqrt(mid**2 + 4.0 * lead * S * nu * s2)) / (2.0 * lead)


def log_density(comp, variance: float | np.ndarray) -> float | np.ndarray:
    """``log p(sigma^2)`` with every constant (the half-t's marginal, ``a`` integrated out)."""
    v = np.asarray(variance, dtype=float)
    if not is_half_t(comp):
        a, b = comp.prior_a, comp.prior_b
        return a * np.log(b) - gammaln(a) - (a + 1.0) * np.log(v) - b / v
    nu, s = comp.prior_nu, comp.prior_t_scale
    log_sd_density = (
        np.log(2.0) + gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * (np.log(nu) + LOG_PI) - np.log(s)
        - 0.5 * (nu + 1.0) * np.log1p(v / (nu * s**2))
    )  # fmt: skip
    return log_sd_density - np.log(2.0) - 0.5 * np.log(v)


def scalar_log_density(comp) -> Callable[[float], float]:
    """:func:`log_density` at one variance as a scalar function with its constants computed once (every constant
    kept), for the samplers' log posterior of each kept draw."""
    if not is_half_t(comp):
        a, b = float(comp.prior_a), float(comp.prior_b)
        constant = a * math.log(b) - math.lgamma(a)
        return lambda v: constant - (a + 1.0) * math.log(v) - b / v
    nu, s = float(comp.prior_nu), float(comp.prior_t_scale)
    constant = (
        math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * (math.log(nu) + LOG_PI) - math.log(s)
    )  # (the log 2 of the half-t's density cancels the log 2 of the change to the variance)
    scale = nu * s * s
    return lambda v: constant - 0.5 * (nu + 1.0) * math.log1p(v / scale) - 0.5 * math.log(v)


def log_density_of_log_variance(comp) -> Callable[[float], float]:
    """``t -> log p(t)`` for ``t = log sigma^2`` (:func:`log_density` with its Jacobian ``+ t``; the half-t's marginal,
    ``a`` integrated out), up to a constant, as a scalar function for samplers that call it many times."""
    if not is_half_t(comp):
        a, b = float(comp.prior_a), float(comp.prior_b)
        return lambda t: -a * t - b * math.exp(-t)
    nu, scale2 = float(comp.prior_nu), float(comp.prior_t_scale) ** 2
    return lambda t: 0.5 * t - 0.5 * (nu + 1.0) * math.log1p(math.exp(t) / (nu * scale2))


def describe(comp) -> str:
    """The prior in words, for ``summary()``."""
    if not is_half_t(comp):
        return f"sigma^2 ~ IG({comp.prior_a:g}, {comp.prior_b:g})"
    return f"sigma ~ half-t({comp.prior_nu:g}, {comp.prior_t_scale:.3g})"
