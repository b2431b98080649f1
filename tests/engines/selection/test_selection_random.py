"""Selection priors with random effects (issue 23): the random-effect block inside the selection engines.

* Laplace-zero VB with a random intercept: the lower bound never decreases and equals a Monte Carlo
  estimate written independently with scipy's densities (random effects and their variance included).
* Spike-and-slab Gibbs with a random intercept: posterior model probabilities and the variance's mean equal
  exact enumeration, each model's evidence by quadrature over the included slopes and ``log sigma^2``
  with the random intercepts integrated in closed form (:func:`bayesvm.results.marginal_check.group_log_integrals`).
* The blocked Gram matrix equals the dense product.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.engines.selection.vb import fit_laplace_zero_vb
from bayesvm.linalg.dense import weighted_gram
from bayesvm.model.problems import SelectionProblem, VarianceComponent
from bayesvm.priors import InverseGamma, LaplaceZero, SpikeSlab
from bayesvm.results.marginal_check import group_log_integrals

from ..model_enumeration import grid, sampled_model_probabilities
from .test_selection import _mc_bound

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _grouped(prior, p=2, n_levels=8, per_level=5, seed=2, intercept=False, variance=(2.0, 1.0)):
    """``y ~ x_1 + ... + x_p + (1 | g)`` with slopes ``(1.2, 0, ...)`` and group SD 1."""
    rng = np.random.default_rng(seed)
    n = n_levels * per_level
    codes = np.repeat(np.arange(n_levels), per_level)
    X = rng.standard_normal((n, p))
    u = rng.standard_normal(n_levels)
    eta = 1.2 * X[:, 0] + u[codes]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), 1.0, -1.0)
    fixed = [np.ones((n, 1))] if intercept else []
    Z = np.zeros((n, n_levels))
    Z[np.arange(n), codes] = 1.0
    D = np.hstack(fixed + [X, Z])
    start = D.shape[1] - n_levels
    component = VarianceComponent(
        "(1 | g)", (start + np.arange(n_levels))[:, None], False, n_levels, prior_a=variance[0], prior_b=variance[1]
    )
    precision = np.zeros(D.shape[1])
    precision[: start - p] = 1.0 / 25.0
    problem = SelectionProblem(
        y=y,
        X=D,
        selected=np.arange(start - p, start),
        fixed_precision=precision,
        prior=prior,
        prior_scale=np.ones(p),
        components=(component,),
    )
    return problem, codes


def test_blocked_gram_equals_dense_product():
    problem, _ = _grouped(SpikeSlab(), p=3, intercept=True)
    w = np.random.default_rng(0).random(problem.y.size)
    np.testing.assert_allclose(problem.weighted_gram(w), weighted_gram(problem.X, w), rtol=1e-12, atol=1e-12)


def test_laplace_zero_vb_with_random_intercept_bound_monotone_and_equal_to_monte_carlo():
    problem, _ = _grouped(LaplaceZero(0.3, InverseGamma(0.5, 0.5)), p=4, n_levels=12, intercept=True)
    res = fit_laplace_zero_vb(problem, max_iter=400)
    assert res.converged and len(res.components) == 1
    bound = res.lower_bound
    assert np.diff(bound).min() >= -1e-8 * abs(bound[-1])
    estimate, se = _mc_bound(problem, res)
    assert abs(bound[-1] - estimate) < 3 * se, (bound[-1], estimate, se)
    # the same check catches a bound without the random-effect terms' contribution
    without = res.lower_bound[-1] - 0.5 * 12 * np.log(2 * np.pi)
    assert abs(without - estimate) > 3 * se


def test_spike_slab_gibbs_with_random_intercept_matches_enumeration():
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem, codes = _grouped(prior)
    comp = problem.components[0]
    X = problem.X[:, problem.selected]
    log_s2 = np.linspace(-6.0, 4.0, 41)
    s2 = np.exp(log_s2)
    log_w = stats.invgamma(a=comp.prior_a, scale=comp.prior_b).logpdf(s2) + log_s2 + np.log(log_s2[1] - log_s2[0])
    ones = np.ones(problem.y.size)
    logs, s2_means = [], []
    for model in range(4):
        on = [k for k in range(2) if model >> k & 1]
        base = len(on) * np.log(prior.pi) + (2 - len(on)) * np.log1p(-prior.pi)
        if on:
            points, cell = grid(len(on), half_width=4.0, points=61)
            log_slab = stats.norm(0, prior.nu).logpdf(points).sum(axis=1) + np.log(cell)
            eta = points @ X[:, on].T
        else:
            log_slab, eta = np.zeros(1), np.zeros((1, problem.y.size))
        # (slopes x variances) grid, random intercepts integrated per group in closed form
        S, T = eta.shape[0], s2.size
        flat = group_log_integrals(
            problem.y, np.repeat(eta, T, axis=0), ones, codes, np.tile(s2, S), comp.n_levels
        ).reshape(S, T)
        joint = flat + log_slab[:, None] + log_w[None, :]
        logs.append(base + float(logsumexp(joint)))
        by_variance = logsumexp(joint, axis=0)
        s2_means.append(float(np.sum(np.exp(by_variance - logsumexp(by_variance)) * s2)))
    logs = np.array(logs)
    exact = np.exp(logs - logsumexp(logs))
    exact_s2 = float(exact @ np.array(s2_means))
    result = sample_selection(problem, draws=3000, tune=500, chains=2, seed=7, progress=False)
    sampled = sampled_model_probabilities(result, 2)
    se = np.sqrt(exact * (1 - exact) / 1500)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))
    draws_s2 = result.components[0][..., 0, 0].ravel()
    assert abs(draws_s2.mean() - exact_s2) < 0.1 * exact_s2, (draws_s2.mean(), exact_s2)
