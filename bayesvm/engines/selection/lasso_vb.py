"""Lasso VB: the double-exponential prior of Polson & Scott (2011, ``alpha = 1``) with the hinge augmentation,
fitted by mean-field variational Bayes.

Model, with ``X = [X_F, X_S]`` the engine's design: ``theta_F`` (intercept and ``unpenalized=`` columns with
``N(0, 1/lambda_j)``, random-effect columns with ``N(0, Sigma)`` per level) and the penalised slopes
``p(beta_k) = exp(-kappa |beta_k| / s_k) kappa / (2 s_k)`` (``kappa = 1 / nu``), written as the normal scale
mixture of Park & Casella (2008): ``beta_k | tau_k ~ N(0, tau_k)``, ``tau_k ~ Exponential(rate kappa^2 / (2 s_k^2))``;
``kappa`` is fixed (``Lasso(nu=...)``) or learned under ``kappa ~ Gamma(a, b)`` (shape, rate).

Factorisation ``q(theta) prod_k q(tau_k) q(kappa) prod_i q(a_i) prod_c q(Sigma_c)``.  The coordinate updates
(derived here; a sweep runs them in this order):

* ``q(kappa) ∝ kappa^(c - 1) exp(-b kappa - T kappa^2 / 2)``, ``c = a + 2m``, ``T = sum_k E[tau_k] / s_k^2``: not a
  named family; its normaliser and moments are computed by quadrature in ``log kappa`` (:func:`scale_moments`);
* ``q(tau_k) = GIG(1/2, E[kappa^2] / s_k^2, E[beta_k^2])`` (density ``∝ x^(p-1) exp(-(a x + b / x) / 2)``), so
  ``E[1/tau_k] = sqrt(a_k / b_k)`` and ``E[tau_k] = sqrt(b_k / a_k) (1 + 1 / sqrt(a_k b_k))``;
* ``q(theta) = N(mu, P^-1)``, ``P = X' W X + diag(lambda, E[1/tau]) + blockdiag(E[Sigma_c^{-1}])``,
  ``mu = P^-1 X' Y (1 + w)`` (Alg. 1 step 3 with the slopes' prior precisions ``E[1/tau_k]``);
* ``q(Sigma_c)``: Alg. 2 step 4; ``q(a_i) = GIG(1/2, 1, chi_i)``, ``chi_i = E (1 - y_i f_i)^2``.

Lower bound, every term kept: the data term (:func:`bayesvm.engines.augmentation.data_lower_bound`), the fixed
normal priors, the entropy of ``q(theta)``, each random-effect term's bound, and per slope (``E[log tau]`` cancels
between ``log p(beta | tau)`` and ``log q(tau)``)

    -log(2 pi) / 2 - E[beta^2] E[1/tau] / 2 + log Z_k + (a_k E[tau] + b_k E[1/tau]) / 2
    + 2 E[log kappa] - log(2 s_k^2) - E[kappa^2] E[tau] / (2 s_k^2),

``log Z_k = log 2 + log(pi / 2) / 2 - sqrt(a_k b_k) - log(a_k) / 2`` (the GIG(1/2) normaliser), and for a learned
scale ``a log b - log Gamma(a) + log Z_kappa - 2m E[log kappa] + T E[kappa^2] / 2`` (``E log p(kappa) -
E log q(kappa)`` with ``q(kappa)`` formed at ``T``).  It never decreases and equals a Monte Carlo estimate
written with scipy's densities (``tests/engines/selection/test_lasso_vb.py``).

The lasso has no mass at zero: the fit reports no inclusion probabilities, only ``P(slope > 0)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.special import gammaln, logsumexp

from ...linalg.dense import blas_threads
from ...model.problems import SelectionProblem
from ...priors import Lasso
from ..augmentation import CHI_FLOOR
from ..components import component_bound, decode_components, encode_components, initial_component, update_component
from .message import MessageSweep
from .vb import LOG_2PI, SelectionVBResult, component_second, fit_by_ascent

#: Points of the quadrature in ``log kappa`` for ``q(kappa)``, and its half-width in units of the curvature's SD
KAPPA_GRID = 4001
KAPPA_WIDTH = 25.0


@dataclass(frozen=True)
class ScaleMoments:
    """Moments of ``q(kappa) ∝ kappa^(c-1) exp(-b kappa - T kappa^2 / 2)`` and ``log`` of its normaliser (a fixed
    ``kappa`` has ``T = 0`` and no grid)."""

    mean: float
    second: float
    mean_log: float
    log_normaliser: float
    mean_inverse: float  # E[1 / kappa] = E[nu]
    c: float = 0.0
    b: float = 0.0
    T: float = 0.0

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draws of ``kappa``: the inverse of the quadrature's CDF at uniform draws (linear in ``log kappa``)."""
        if self.T == 0.0:
            return np.full(size, self.mean)
        u, log_w = _grid(self.c, self.b, self.T)
        log_w[[0, -1]] += np.log(2.0)  # the integrand at the nodes (the end weights undone)
        f = np.exp(log_w - log_w.max())
        cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f[:-1] + f[1:]))])  # the trapezoid rule up to each node
        return np.exp(np.interp(rng.random(size), cdf / cdf[-1], u))


def _grid(c: float, b: float, T: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``u = log kappa`` and log trapezoid weights times the integrand (see :func:`scale_moments`)."""
    peak = (-b + np.sqrt(b * b + 4.0 * T * c)) / (2.0 * T)
    sd = 1.0 / np.sqrt(b * peak + 2.0 * T * peak**2)
    centre = np.log(peak)
    u = np.linspace(centre - max(KAPPA_WIDTH * sd, 60.0 / c), centre + KAPPA_WIDTH * sd, KAPPA_GRID)
    log_w = c * u - b * np.exp(u) - 0.5 * T * np.exp(2.0 * u) + np.log(u[1] - u[0])
    log_w[[0, -1]] -= np.log(2.0)
    return u, log_w


def scale_moments(c: float, b: float, T: float) -> ScaleMoments:
    """``q(kappa)``'s moments by the trapezoid rule in ``u = log kappa`` (the integrand is log-concave in ``u``, with
    its peak at ``kappa* = (-b + sqrt(b^2 + 4 T c)) / (2 T)``); the grid spans ``KAPPA_WIDTH`` curvature SDs on each
    side and at least ``60 / c`` to the left, where the integrand decays like ``kappa^c``."""
    u, log_w = _grid(c, b, T)
    kappa = np.exp(u)
    log_z = float(logsumexp(log_w))
    p = np.exp(log_w - log_z)
    return ScaleMoments(float(p @ kappa), float(p @ kappa**2), float(p @ u), log_z, float(p @ (1.0 / kappa)), c, b, T)


def fit_lasso_vb(
    problem: SelectionProblem, tol: float = 1e-8, max_iter: int = 1000, accelerate: bool = True
) -> SelectionVBResult:
    """Lasso VB (module docstring); ``accelerate=False`` is the plain coordinate ascent.

    Returns
    -------
    SelectionVBResult
        ``q(theta) = N(mean, cov)`` over every column; ``include`` is 1 everywhere (the lasso has no spike: the fit's
        ``inclusion`` reports NaN); ``expected_b`` holds ``E[1/tau_k]``; ``scale_law`` the final ``q(kappa)``
        (``None`` when ``nu`` is fixed).
    """
    if not isinstance(problem.prior, Lasso):
        raise TypeError("fit_lasso_vb needs a Lasso prior")
    with blas_threads(problem.q):
        return fit_by_ascent(LassoAscent(problem), problem, tol, max_iter, accelerate)


@dataclass
class _Sweep:
    """The factors one sweep (or one SVI step) produced; ``state`` and ``bound`` are set by
    :class:`~bayesvm.engines.selection.message.MessageSweep` after ``q(a)``."""

    rest: tuple  # (E[beta_S^2], T, components)
    mean: np.ndarray
    cov: np.ndarray
    inv_tau: np.ndarray
    kappa: ScaleMoments
    prior_bound: float
    second: np.ndarray  # E[theta theta']
    state: tuple = ()  # (chi, E[beta_S^2], T, components)
    bound: float = float("nan")

    @property
    def include(self) -> np.ndarray:
        return np.ones(self.mean.size)


class LassoAscent(MessageSweep):
    def __init__(self, problem: SelectionProblem):
        self.p = problem
        prior = problem.prior
        self.learn = prior.nu is None
        self.s2 = problem.prior_scale**2
        self.shape = prior.a + 2.0 * problem.m

    def kappa(self, T: float) -> ScaleMoments:
        if not self.learn:
            k = 1.0 / self.p.prior.nu
            return ScaleMoments(k, k * k, float(np.log(k)), 0.0, 1.0 / k)
        return scale_moments(self.shape, self.p.prior.b, T)

    def initial_state(self) -> tuple:
        """``E[1/a] = 1``, ``E[beta_k^2] = s_k^2``, ``T = m`` (``E[kappa] ~ 1``), ``E[Sigma^{-1}] = I``."""
        components = [initial_component(c) for c in self.p.components]
        return np.ones(self.p.y.size), self.s2.copy(), float(self.p.m), components

    def update(self, gram: np.ndarray, r: np.ndarray, second_beta: np.ndarray, T: float, components: list) -> _Sweep:
        """``q(kappa)``, ``q(tau)``, ``q(theta)`` and ``q(Sigma_c)`` in turn, given the rows' message ``(G, r)``."""
        p, sel = self.p, self.p.selected
        q = p.q
        kappa = self.kappa(T)
        # q(tau_k) = GIG(1/2, a_k, b_k)
        a_k, b_k = kappa.second / self.s2, np.maximum(second_beta, 1e-300)
        inv_tau = np.sqrt(a_k / b_k)
        root = np.sqrt(a_k * b_k)
        e_tau = np.sqrt(b_k / a_k) * (1.0 + 1.0 / root)
        # q(theta)
        precision = gram.copy()
        prior = p.fixed_precision.copy()
        prior[p.component_columns] = 0.0
        prior[sel] = inv_tau
        precision[np.diag_indices(q)] += prior
        p.add_component_precisions(precision, [c.expected_precision() for c in components])
        chol = sla.cho_factor(precision, lower=True)
        cov = sla.cho_solve(chol, np.eye(q))
        mean = sla.cho_solve(chol, r)
        second = cov + np.outer(mean, mean)
        seconds = [component_second(c, second) for c in p.components]
        components = [update_component(c, m, post) for c, m, post in zip(p.components, seconds, components)]
        new_second_beta = np.diag(second)[sel].copy()
        # the bound at (q(kappa), q(tau), q(theta), q(Sigma)) just formed, without the data term
        fixed = p.unselected
        lam = p.fixed_precision[fixed]
        total = 0.5 * float(np.sum(np.log(lam) - LOG_2PI - lam * np.diag(second)[fixed]))
        total += 0.5 * q * (1.0 + LOG_2PI) - float(np.sum(np.log(np.diag(chol[0]))))
        log_z = np.log(2.0) + 0.5 * np.log(np.pi / 2.0) - root - 0.5 * np.log(a_k)
        total += float(
            np.sum(
                -0.5 * LOG_2PI
                - 0.5 * new_second_beta * inv_tau
                + log_z
                + 0.5 * (a_k * e_tau + b_k * inv_tau)
                + 2.0 * kappa.mean_log
                - np.log(2.0 * self.s2)
                - kappa.second * e_tau / (2.0 * self.s2)
            )
        )
        if self.learn:
            a0, b0 = p.prior.a, p.prior.b
            total += a0 * np.log(b0) - gammaln(a0) + kappa.log_normaliser
            total += -2.0 * p.m * kappa.mean_log + 0.5 * T * kappa.second
        total += sum(component_bound(c, post, m) for c, post, m in zip(p.components, components, seconds))
        new_T = float(np.sum(e_tau / self.s2))
        return _Sweep((new_second_beta, new_T, components), mean, cov, inv_tau, kappa, float(total), second)

    def row_moments(self, factors: _Sweep, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``E f = X m`` and ``E (1 - y f)^2 = 1 - 2 y E f + x' E[theta theta'] x``."""
        mean_f = X @ factors.mean
        return mean_f, 1.0 - 2.0 * y * mean_f + np.einsum("ij,ij->i", X @ factors.second, X)

    def fields(self, factors: _Sweep) -> dict:
        """The result's prior-specific fields from the last factors."""
        return dict(include=np.ones(self.p.q), expected_b=factors.inv_tau, sigma2_shape=None, sigma2_scale=None,
                    components=factors.rest[2], scale_law=factors.kappa if self.learn else None)  # fmt: skip

    def encode(self, chi, second_beta, T, components) -> np.ndarray:
        return np.concatenate([np.log(chi), np.log(second_beta), [np.log(T)], encode_components(components)])

    def decode(self, x: np.ndarray, like: tuple) -> tuple:
        n, m = self.p.y.size, self.p.m
        components = decode_components(x[n + m + 1 :], like[3])
        return np.maximum(np.exp(x[:n]), CHI_FLOOR), np.exp(x[n : n + m]), float(np.exp(x[n + m])), components
