"""Log densities of the joint pseudo-posterior, shared by the sampling and mode-finding engines.

``log p(y, theta, components) = -2 sum_i (1 - y_i f_i)_+ + log p(theta | components) + log p(components)``
(the augmentation variables integrated out; Polson & Scott 2011, eq. 3).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..model.problems import VarianceComponent, VBProblem
from . import variance_prior
from .components import LOG_2PI, component_values


def log_pseudo_likelihood(y: np.ndarray, f: np.ndarray, weights: np.ndarray | None = None) -> float:
    """``-2 sum_i omega_i max(0, 1 - y_i f_i)`` (``omega_i`` the rows' class weights, 1 where ``weights`` is None)."""
    hinge = np.maximum(0.0, 1.0 - y * f)
    return -2.0 * float(np.sum(hinge if weights is None else weights * hinge))


def log_prior(problem: VBProblem, theta_d: np.ndarray, theta_b: np.ndarray, covs: list[np.ndarray]) -> float:
    """``log p(theta, components)`` with all constants."""
    lam = problem.fixed_precision
    fixed = lam > 0
    total = float(np.sum(0.5 * np.log(lam[fixed]) - 0.5 * LOG_2PI - 0.5 * lam[fixed] * theta_d[fixed] ** 2))
    return total + log_component_prior(problem.components, theta_d, theta_b, covs)


class LogPrior:
    """:func:`log_prior` of one problem with its constants computed once: the samplers evaluate it for every kept
    draw (about a tenth of a small random-intercept model's iteration through :func:`log_prior`).  Equal to
    :func:`log_prior` to rounding (tested)."""

    def __init__(self, problem: VBProblem):
        lam = np.asarray(problem.fixed_precision, dtype=float)
        self.fixed = np.flatnonzero(lam > 0)
        self.lam = lam[self.fixed]
        self.constant = float(np.sum(0.5 * np.log(self.lam) - 0.5 * LOG_2PI))
        self.components = problem.components
        self.densities = [None if c.is_wishart else variance_prior.scalar_log_density(c) for c in problem.components]

    def __call__(self, theta_d: np.ndarray, theta_b: np.ndarray, covs: list[np.ndarray]) -> float:
        x = theta_d[self.fixed]
        total = self.constant - 0.5 * float(x @ (self.lam * x))
        for comp, cov, density in zip(self.components, covs, self.densities):
            if density is None:
                total += log_component_prior([comp], theta_d, theta_b, [cov])
                continue
            u = component_values(comp, theta_d, theta_b).ravel()
            s2 = float(cov[0, 0])
            total += -0.5 * u.size * (LOG_2PI + math.log(s2)) - 0.5 * float(u @ u) / s2 + density(s2)
        return total

    def of_draws(self, theta_d: np.ndarray, theta_b: np.ndarray, covs: list[np.ndarray]) -> np.ndarray:
        """``(S,)``: the log prior of each of ``S`` draws (``theta_d (S, q)``, ``theta_b (S, J, K)``, each component's
        ``(S, k, k)``), vectorised over the draws (the samplers compute it once for the kept draws, not in every
        iteration); equal to :meth:`__call__` of each draw to rounding (tested)."""
        x = theta_d[:, self.fixed]
        total = self.constant - 0.5 * np.einsum("sj,j,sj->s", x, self.lam, x)
        for comp, cov, density in zip(self.components, covs, self.densities):
            if density is None:
                u = theta_b[:, :, comp.index[0]] if comp.blocked else theta_d[:, comp.index]  # (S, J, k)
                total += wishart_log_prior_of_draws(comp, u, cov)
                continue
            u = theta_b[:, :, comp.index[0, 0]] if comp.blocked else theta_d[:, comp.index[:, 0]]
            s2 = cov[:, 0, 0]
            total += (
                -0.5 * u.shape[1] * (LOG_2PI + np.log(s2)) - 0.5 * np.einsum("sj,sj->s", u, u) / s2
                + variance_prior.log_density(comp, s2)
            )  # fmt: skip
        return total


def wishart_log_prior_of_draws(comp: VarianceComponent, u: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``sum_j log N(u_j | 0, Sigma_s) + log IW(Sigma_s; nu, Psi)`` for each draw ``s`` (``u (S, J, k)``,
    ``cov (S, k, k)``), batched over the draws through one Cholesky factor each:
    ``log IW = (nu / 2) log|Psi| - (nu k / 2) log 2 - log Gamma_k(nu / 2) - ((nu + k + 1) / 2) log|Sigma|
    - tr(Psi Sigma^{-1}) / 2``."""
    from scipy.special import multigammaln

    S, J, k = u.shape
    chol = np.linalg.cholesky(cov)  # (S, k, k)
    half_logdet = np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)), axis=1)  # log |Sigma|^(1/2)
    z = np.linalg.solve(chol[:, None], u[..., None])[..., 0] if J else u  # L^{-1} u_j, (S, J, k)
    normal = -0.5 * np.sum(z**2, axis=(1, 2)) - J * (half_logdet + 0.5 * k * LOG_2PI)
    nu, psi = comp.prior_df, comp.prior_scale
    inverse_factor = np.linalg.solve(chol, np.broadcast_to(np.eye(k), chol.shape))  # L^{-1}
    trace = np.einsum("ski,ij,skj->s", inverse_factor, psi, inverse_factor)  # tr(Psi Sigma^{-1})
    constant = 0.5 * nu * np.linalg.slogdet(psi)[1] - 0.5 * nu * k * math.log(2.0) - multigammaln(0.5 * nu, k)
    return normal + constant - (nu + k + 1) * half_logdet - 0.5 * trace


def log_component_prior(components, theta_d: np.ndarray, theta_b: np.ndarray, covs: list[np.ndarray]) -> float:
    """``sum_c [log N(u_c | 0, Sigma_c) + log p(Sigma_c)]`` over the variance components, with all constants."""
    total = 0.0
    for comp, cov in zip(components, covs):
        u = component_values(comp, theta_d, theta_b)  # (J, k)
        if comp.is_wishart:
            from scipy import stats

            total += float(np.sum(stats.multivariate_normal(np.zeros(comp.k), cov).logpdf(u)))
            total += float(stats.invwishart(df=comp.prior_df, scale=comp.prior_scale).logpdf(cov))
        else:
            s2 = cov[0, 0]
            total += -0.5 * u.size * (LOG_2PI + np.log(s2)) - 0.5 * float(np.sum(u**2)) / s2
            total += float(variance_prior.log_density(comp, s2))
    return total


def predictor_draws(theta_d: np.ndarray, theta_b: np.ndarray, D, codes, values) -> np.ndarray:
    """Linear predictor for every draw: ``(draws, n)`` from ``theta_d (draws, q)``, ``theta_b (draws, J, K)``;
    rows of an unseen level (code -1) get no blocked random effect."""
    f = (D @ theta_d.T).T if sp.issparse(D) else theta_d @ D.T
    if codes is not None and theta_b.size:
        seen = codes >= 0
        z = np.where(seen[:, None], values, 0.0)
        idx = np.where(seen, codes, 0)
        f = f + np.einsum("nk,snk->sn", z, theta_b[:, idx, :])
    return f
