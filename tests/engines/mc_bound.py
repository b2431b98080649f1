"""Monte Carlo estimate of E_q[log p(y, a, theta, components) - log q] for the VB engine.

Written independently of the engine's closed form: every density is scipy's.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from bayesvm.engines.linear.vb import VBResult
from bayesvm.model.problems import VBProblem
from bayesvm.priors import HalfT


def dense_covariance(theta) -> tuple[np.ndarray, np.ndarray]:
    """Full mean and covariance of (theta_d, vec theta_b) from the structured posterior."""
    q = theta.mean_d.size
    if hasattr(theta, "solve"):  # sparse path: invert by solves
        return theta.mean_d, theta.solve(np.eye(q))
    if theta.mean_b.size == 0:
        return theta.mean_d, theta.cov_d
    J, K = theta.mean_b.shape
    G = theta.gains.dense().reshape(J * K, q)
    cross = -theta.cov_d @ G.T
    block = np.zeros((J * K, J * K))
    for j in range(J):
        block[j * K : (j + 1) * K, j * K : (j + 1) * K] = theta.block_inv[j]
    bb = block + G @ theta.cov_d @ G.T
    cov = np.block([[theta.cov_d, cross], [cross.T, bb]])
    return np.concatenate([theta.mean_d, theta.mean_b.ravel()]), cov


def mc_lower_bound(problem: VBProblem, result: VBResult, draws: int, seed: int = 1) -> tuple[float, float]:
    """Return (estimate, standard error)."""
    rng = np.random.default_rng(seed)
    theta = result.theta
    mean, cov = dense_covariance(theta)
    q = theta.mean_d.size
    draws_theta = rng.multivariate_normal(mean, cov, size=draws, method="cholesky")
    log_q = stats.multivariate_normal(mean, cov).logpdf(draws_theta)
    td = draws_theta[:, :q]
    tb = draws_theta[:, q:].reshape((draws,) + theta.mean_b.shape)
    # linear predictor
    f = (problem.D @ td.T).T
    if problem.blocked is not None:
        codes, z = problem.blocked.codes, problem.blocked.values
        f = f + np.einsum("nk,snk->sn", z, tb[:, codes, :])
    # a_i ~ GIG(1/2, 1, chi_i); a class-weighted row is the augmented row of margin omega_i and design row
    # omega_i c_i, whose optimal q(a_i) is GIG(1/2, 1, omega_i^2 chi_i)
    omega = np.ones(problem.n) if problem.weights is None else problem.weights
    root = omega * np.sqrt(result.chi)
    a = stats.geninvgauss(p=0.5, b=root, scale=root).rvs(size=(draws, problem.n), random_state=rng)
    log_q = log_q + stats.geninvgauss(p=0.5, b=root, scale=root).logpdf(a).sum(axis=1)
    y = problem.y
    log_p = np.sum(-0.5 * np.log(2 * np.pi * a) - (omega + a - y * omega * f) ** 2 / (2 * a), axis=1)
    lam = problem.fixed_precision
    fixed = lam > 0
    log_p += stats.norm(0, 1 / np.sqrt(lam[fixed])).logpdf(td[:, fixed]).sum(axis=1)
    for comp, post in zip(problem.components, result.components):
        coefs = tb[:, :, comp.index[0]] if comp.blocked else td[:, comp.index]  # (draws, J, k)
        if comp.is_wishart:
            sig = stats.invwishart(df=post.shape, scale=post.scale).rvs(size=draws, random_state=rng)
            log_q += stats.invwishart(df=post.shape, scale=post.scale).logpdf(np.moveaxis(sig, 0, -1))
            log_p += stats.invwishart(df=comp.prior_df, scale=comp.prior_scale).logpdf(np.moveaxis(sig, 0, -1))
            for s in range(draws):
                log_p[s] += stats.multivariate_normal(np.zeros(comp.k), sig[s]).logpdf(coefs[s]).sum()
        else:
            s2, terms = scalar_component_terms(comp, post, draws, rng)
            log_p += terms
            log_p += stats.norm(0, np.sqrt(s2)[:, None, None]).logpdf(coefs).sum(axis=(1, 2))
    values = log_p - log_q
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(draws))


def scalar_component_terms(comp, post, draws: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Draws of ``sigma^2`` from ``q`` and ``log p(sigma^2 (, a)) - log q(sigma^2 (, a))`` per draw: the inverse
    gamma prior, or the half-t through its auxiliary variable (``sigma^2 | a ~ IG(nu/2, nu/a)``,
    ``a ~ IG(1/2, 1/s^2)``, ``q(a) = IG((nu+1)/2, aux_rate)``)."""
    q_s2 = stats.invgamma(a=post.shape, scale=post.scale[0, 0])
    s2 = q_s2.rvs(size=draws, random_state=rng)
    terms = -q_s2.logpdf(s2)
    if isinstance(comp.prior, HalfT):
        nu, scale = comp.prior.nu, comp.prior.scale
        q_a = stats.invgamma(a=(nu + 1) / 2, scale=post.aux_rate)
        aux = q_a.rvs(size=draws, random_state=rng)
        terms += stats.invgamma(a=0.5, scale=1 / scale**2).logpdf(aux) - q_a.logpdf(aux)
        terms += stats.invgamma(a=nu / 2, scale=nu / aux).logpdf(s2)
    else:
        terms += stats.invgamma(a=comp.prior.a, scale=comp.prior.b).logpdf(s2)
    return s2, terms
