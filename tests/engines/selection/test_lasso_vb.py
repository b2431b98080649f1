"""Lasso VB (``bayesvm.engines.selection.lasso_vb``).

* ``q(kappa)``'s normaliser and moments equal scipy's adaptive quadrature; its draws follow its CDF.
* The lower bound never decreases and equals a Monte Carlo estimate of ``E_q[log p - log q]`` written here with
  scipy's densities (``q(tau)`` a GIG, ``q(kappa)`` drawn from its grid with the normaliser from
  ``scipy.integrate.quad``), with a fixed and a learned scale and with a random intercept; the check rejects a
  bound without the ``2 E[log kappa]`` term of ``p(tau | kappa)``.
* Its means agree with the lasso Gibbs sampler's within 0.5 Gibbs SD, and ``E[nu]`` with Gibbs's.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.engines.selection.lasso_vb import LassoAscent, fit_lasso_vb, scale_moments
from bayesvm.priors import Lasso

from .test_selection import _problem, random_intercept_terms
from .test_selection_random import _grouped

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _log_density(c, b, T):
    return lambda k: (c - 1) * np.log(k) - b * k - 0.5 * T * k * k


def _quad(g, c, b, T, upper=np.inf) -> tuple[float, float]:
    """``(log integral of the density up to upper, integral of g x density / integral of the density)`` by scipy's
    adaptive quadrature, split at the peak and scaled by the density there."""
    log_f = _log_density(c, b, T)
    peak = (-b + np.sqrt(b * b + 4 * T * c)) / (2 * T)
    h = lambda k: np.exp(log_f(k) - log_f(peak))  # noqa: E731
    pieces = [(0, min(peak, upper))] + ([(peak, upper)] if upper > peak else [])
    z = sum(integrate.quad(h, lo, hi, limit=400)[0] for lo, hi in pieces)
    gz = sum(integrate.quad(lambda k: g(k) * h(k), lo, hi, limit=400)[0] for lo, hi in pieces)
    return float(np.log(z) + log_f(peak)), gz / z


@pytest.mark.parametrize("c,b,T", [(5.0, 1.0, 3.0), (3.0, 1.0, 0.01), (41.0, 2.0, 250.0), (201.0, 0.5, 4.0)])
def test_scale_moments_equal_adaptive_quadrature(c, b, T):
    """``c = a + 2m >= 3`` in a fit (``E[1/kappa]`` is finite for ``c > 1``)."""
    m = scale_moments(c, b, T)
    log_z, _ = _quad(lambda k: 1.0, c, b, T)
    assert m.log_normaliser == pytest.approx(log_z, abs=1e-8)
    for g, value in ((lambda k: k, m.mean), (lambda k: k * k, m.second), (lambda k: 1 / k, m.mean_inverse)):
        assert value == pytest.approx(_quad(g, c, b, T)[1], rel=1e-7)
    assert m.mean_log == pytest.approx(_quad(np.log, c, b, T)[1], abs=1e-7)
    draws = m.sample(np.random.default_rng(0), 200_000)
    for level in (0.05, 0.25, 0.5, 0.75, 0.95):  # the draws' quantiles have the density's CDF
        x = np.quantile(draws, level)
        exact = np.exp(_quad(lambda k: 1.0, c, b, T, upper=x)[0] - log_z)
        assert exact == pytest.approx(level, abs=0.005)


def _mc_bound(problem, res, draws=20000, seed=1) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    y, X, sel = problem.y, problem.X, problem.selected
    prior = problem.prior
    theta = rng.multivariate_normal(res.mean, res.cov, size=draws)
    log_q = stats.multivariate_normal(res.mean, res.cov).logpdf(theta)
    f = theta @ X.T
    chi = 1 - 2 * y * (X @ res.mean) + np.einsum("ij,ij->i", X @ (res.cov + np.outer(res.mean, res.mean)), X)
    root = np.sqrt(chi)
    a = stats.geninvgauss(p=0.5, b=root, scale=root).rvs(size=(draws, y.size), random_state=rng)
    log_q += stats.geninvgauss(p=0.5, b=root, scale=root).logpdf(a).sum(axis=1)
    log_p = np.sum(-0.5 * np.log(2 * np.pi * a) - (1 + a - y * f) ** 2 / (2 * a), axis=1)
    fixed = problem.unselected
    log_p += stats.norm(0, 1 / np.sqrt(problem.fixed_precision[fixed])).logpdf(theta[:, fixed]).sum(axis=1)
    s2 = problem.prior_scale**2
    if prior.nu is None:
        law = res.scale_law
        kappa = law.sample(rng, draws)
        log_z, _ = _quad(lambda k: 1.0, law.c, law.b, law.T)
        log_q += (law.c - 1) * np.log(kappa) - law.b * kappa - 0.5 * law.T * kappa**2 - log_z
        log_p += stats.gamma(a=prior.a, scale=1 / prior.b).logpdf(kappa)
        e_kappa2 = law.second
    else:
        kappa = np.full(draws, 1 / prior.nu)
        e_kappa2 = prior.nu**-2
    # q(tau_k) = GIG(1/2, a_k, b_k) with a_k = E[kappa^2] / s_k^2 and b_k = 1 / (a_k E[1/tau_k]^-2)
    a_k = e_kappa2 / s2
    b_k = a_k / res.expected_b**2
    q_tau = stats.geninvgauss(p=0.5, b=np.sqrt(a_k * b_k), scale=np.sqrt(b_k / a_k))
    tau = q_tau.rvs(size=(draws, sel.size), random_state=rng)
    log_q += q_tau.logpdf(tau).sum(axis=1)
    log_p += stats.expon(scale=2 * s2[None, :] / kappa[:, None] ** 2).logpdf(tau).sum(axis=1)
    log_p += stats.norm(0, np.sqrt(tau)).logpdf(theta[:, sel]).sum(axis=1)
    terms_p, terms_q = random_intercept_terms(problem, res, theta, rng)
    log_p, log_q = log_p + terms_p, log_q + terms_q
    diff = log_p - log_q
    return float(diff.mean()), float(diff.std() / np.sqrt(draws))


def _check_bound(problem, res) -> None:
    bound = res.lower_bound
    assert res.converged and not res.decreases
    assert np.diff(bound).min() >= -1e-8 * abs(bound[-1])
    estimate, se = _mc_bound(problem, res)
    assert abs(bound[-1] - estimate) < 3 * se, (bound[-1], estimate, se)
    kappa = res.scale_law.mean_log if res.scale_law is not None else -np.log(problem.prior.nu)
    assert abs(bound[-1] - 2 * problem.m * kappa - estimate) > 3 * se


@pytest.mark.parametrize("prior", [Lasso(nu=0.7), Lasso(a=2.0, b=1.0)], ids=["fixed", "learned"])
def test_lasso_vb_bound_monotone_and_equal_to_monte_carlo(prior):
    problem = _problem(n=120, p=8, k=2, seed=0, prior=prior)
    _check_bound(problem, fit_lasso_vb(problem, max_iter=1000))


def test_lasso_vb_with_random_intercept_bound_monotone_and_equal_to_monte_carlo():
    problem, _ = _grouped(Lasso(), p=4, n_levels=12, intercept=True)
    res = fit_lasso_vb(problem, max_iter=1000)
    assert len(res.components) == 1
    _check_bound(problem, res)


def test_plain_and_accelerated_ascent_reach_the_same_optimum():
    problem = _problem(n=150, p=10, k=3, seed=4, prior=Lasso())
    plain = fit_lasso_vb(problem, max_iter=5000, accelerate=False, tol=1e-13)
    fast = fit_lasso_vb(problem, max_iter=5000, tol=1e-13)
    np.testing.assert_allclose(fast.mean, plain.mean, atol=1e-5)
    assert fast.lower_bound[-1] == pytest.approx(plain.lower_bound[-1], abs=1e-6)
    assert fast.scale_law.mean_inverse == pytest.approx(plain.scale_law.mean_inverse, rel=1e-5)


def test_each_sweep_is_a_fixed_point_at_the_optimum():
    problem = _problem(n=150, p=6, k=2, seed=7, prior=Lasso())
    ascent = LassoAscent(problem)
    state = ascent.initial_state()
    bounds = []
    for _ in range(600):
        out = ascent.sweep(*state)
        state = out.state
        bounds.append(out.bound)
    assert np.diff(bounds).min() >= -1e-9 * abs(bounds[-1])
    again = ascent.sweep(*state)
    np.testing.assert_allclose(again.mean, out.mean, atol=1e-8)


def test_lasso_vb_agrees_with_gibbs():
    problem = _problem(n=200, p=10, k=3, seed=1, prior=Lasso())
    res = fit_lasso_vb(problem)
    gibbs = sample_selection(problem, draws=2000, tune=500, chains=2, seed=3, progress=False)
    mean, sd = gibbs.theta_d.mean(axis=(0, 1)), gibbs.theta_d.std(axis=(0, 1))
    assert np.all(np.abs(res.mean - mean) < 0.5 * sd), (res.mean - mean) / sd
    assert res.scale_law.mean_inverse == pytest.approx(np.mean(gibbs.scale), rel=0.15)
