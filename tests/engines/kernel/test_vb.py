"""Kernel engines (Wenzel et al. 2017, sections 4.1-4.4): bound, equivalences and gradients."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import linalg, stats

from bayesvm.engines.kernel.vb import (
    KernelProblem,
    Whitened,
    _batch_collapsed,
    fit_batch,
    fit_inducing,
    hyper_objective,
    natural_target,
    projection,
)
from bayesvm.kernels import RBF, Constant, Matern52

RNG = np.random.default_rng(11)
N = 50
X = RNG.normal(size=(N, 2))
Y = np.where(X[:, 0] ** 2 + X[:, 1] - 0.7 + 0.6 * RNG.normal(size=N) > 0, 1.0, -1.0)


def _fd(f, x, h=1e-6):
    return np.array([(f(x + e) - f(x - e)) / (2 * h) for e in np.eye(x.size) * h])


def _log_data(y, f, a):
    return np.sum(-0.5 * np.log(2 * np.pi * a) - (1 + a - y * f) ** 2 / (2 * a), axis=-1)


def _gig(chi):
    root = np.sqrt(chi)
    return stats.geninvgauss(p=0.5, b=root, scale=root)


def mc_bound_batch(problem, result, draws=4000, seed=0):
    """E_q[log p(y, a, f) - log q(f) - log q(a)] by simple Monte Carlo (independent of the engine's algebra)."""
    rng = np.random.default_rng(seed)
    K = result.kernel.matrix(problem.X) + result.jitter * np.eye(problem.n)
    L = linalg.cholesky(K, lower=True)
    mean, cov = L @ result.mean, L @ result.cov @ L.T
    cov = 0.5 * (cov + cov.T)
    f = rng.multivariate_normal(mean, cov, size=draws, method="eigh")
    a = _gig(result.chi).rvs(size=(draws, problem.n), random_state=rng)
    values = (
        _log_data(problem.y, f, a)
        + stats.multivariate_normal(np.zeros(problem.n), K, allow_singular=True).logpdf(f)
        - stats.multivariate_normal(mean, cov, allow_singular=True).logpdf(f)
        - _gig(result.chi).logpdf(a).sum(axis=1)
    )
    return values.mean(), values.std(ddof=1) / np.sqrt(draws)


def mc_bound_inducing(problem, result, draws=4000, seed=0):
    """Titsias's bound as an expectation: v ~ q(v), f_i | v ~ p(f_i | v), a_i ~ q(a_i)."""
    rng = np.random.default_rng(seed)
    k, Z = result.kernel, result.locations
    Lm, A = projection(k, Z, problem.X, result.jitter)
    cond_var = k.diag(problem.X) - np.sum(A * A, axis=0)
    v = rng.multivariate_normal(result.mean, result.cov, size=draws)
    f = v @ A + np.sqrt(np.maximum(cond_var, 0)) * rng.normal(size=(draws, problem.n))
    a = _gig(result.chi).rvs(size=(draws, problem.n), random_state=rng)
    values = (
        _log_data(problem.y, f, a)
        + stats.multivariate_normal(np.zeros(len(Z)), np.eye(len(Z))).logpdf(v)
        - stats.multivariate_normal(result.mean, result.cov).logpdf(v)
        - _gig(result.chi).logpdf(a).sum(axis=1)
    )
    return values.mean(), values.std(ddof=1) / np.sqrt(draws)


@pytest.fixture(scope="module")
def fixed_problem():
    return KernelProblem(X, Y, RBF(lengthscale=0.9, variance=2.0, learn=False))


def test_inducing_points_at_the_data_equal_batch_vb(fixed_problem):
    batch = fit_batch(fixed_problem, tol=1e-13, max_iter=3000, jitter=1e-9)
    inducing = fit_inducing(fixed_problem, X, tol=1e-13, max_iter=3000, jitter=1e-9)
    new = RNG.normal(size=(30, 2))
    for rows in (X, new):
        mb, vb = batch.predictor(rows)
        mi, vi = inducing.predictor(rows)
        np.testing.assert_allclose(mi, mb, atol=1e-6)
        np.testing.assert_allclose(vi, vb, atol=1e-6)
    assert abs(batch.lower_bound[-1] - inducing.lower_bound[-1]) < 1e-5


@pytest.mark.parametrize("engine", ["batch", "inducing"])
def test_lower_bound_is_monotone_and_matches_monte_carlo(fixed_problem, engine):
    if engine == "batch":
        result = fit_batch(fixed_problem, tol=1e-10)
        estimate, se = mc_bound_batch(fixed_problem, result)
    else:
        result = fit_inducing(fixed_problem, X[::3] + 0.05, tol=1e-10)
        estimate, se = mc_bound_inducing(fixed_problem, result)
    bounds = result.lower_bound
    assert bounds.size > 3 and result.converged
    assert np.all(np.diff(bounds) >= -1e-8 * np.abs(bounds[1:]))
    assert abs(estimate - bounds[-1]) < 3 * se, (estimate, se, bounds[-1])
    # the check can fail: a bound off by half a nat is rejected
    assert abs(estimate - (bounds[-1] + 0.5)) > 3 * se


def test_monte_carlo_check_rejects_a_wrong_chi():
    """With chi away from its optimum the closed form (at the engine's chi) no longer equals the MC value."""
    problem = KernelProblem(X, Y, RBF(lengthscale=0.9, variance=2.0, learn=False))
    result = fit_inducing(problem, X[::3], tol=1e-10)
    result.chi = result.chi * 3.0
    estimate, se = mc_bound_inducing(problem, result)
    assert abs(estimate - result.lower_bound[-1]) > 3 * se


@pytest.mark.parametrize(
    "kernel", [RBF(lengthscale=np.array([0.7, 1.4]), variance=1.5), Matern52(1.1) + Constant(0.3)], ids=["ard", "sum"]
)
def test_inducing_gradient_matches_finite_differences(kernel):
    Z = X[::4] + 0.1
    _, A = projection(kernel, Z, X, 1e-6)
    chi = np.exp(RNG.normal(size=N))
    q = Whitened(*natural_target(Y, A, np.ones(N)))
    x0 = np.concatenate([kernel.log_params(), Z.ravel()])
    size = kernel.log_params().size

    def value(x, q):
        return hyper_objective(kernel.with_log_params(x[:size]), x[size:].reshape(Z.shape), X, Y, 1e-6, q, chi,
                               locations=True)  # fmt: skip

    for fixed in (q, None):  # q held fixed, and the bound collapsed over q
        _, grad = value(x0, fixed)
        fd = _fd(lambda x, fixed=fixed: value(x, fixed)[0], x0)
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_gradient_with_q_u_fixed_matches_finite_differences():
    """Wenzel's A.3 form: q(u) = N(L_m m, L_m S L_m') held fixed while the hyperparameters move."""
    kernel = RBF(lengthscale=np.array([0.7, 1.4]), variance=1.5) + Constant(0.3)
    Z = X[::4] + 0.1
    Lm, A = projection(kernel, Z, X, 1e-6)
    q = Whitened(*natural_target(Y, A, np.exp(RNG.normal(size=N))))
    chi = np.exp(RNG.normal(size=N))
    mean_u, cov_u = Lm @ q.mean, Lm @ q.cov @ Lm.T

    def value(x):
        k = kernel.with_log_params(x)
        L2, _ = projection(k, Z, X, 1e-6)
        m = linalg.solve_triangular(L2, mean_u, lower=True)
        half = linalg.solve_triangular(L2, cov_u, lower=True)
        S = linalg.solve_triangular(L2, half.T, lower=True)
        S = 0.5 * (S + S.T)
        return hyper_objective(k, Z, X, Y, 1e-6, Whitened(np.linalg.inv(S), np.linalg.solve(S, m)), chi, scale=3.0)[0]

    x0 = kernel.log_params()
    grad = hyper_objective(kernel, Z, X, Y, 1e-6, q, chi, scale=3.0, fixed="u")[1]
    np.testing.assert_allclose(grad, _fd(value, x0), rtol=1e-5, atol=1e-6)


def test_batch_collapsed_gradient_matches_finite_differences():
    kernel = RBF(lengthscale=np.array([0.8, 1.2]), variance=1.3)
    chi = np.exp(RNG.normal(size=N))
    x0 = kernel.log_params()
    _, grad = _batch_collapsed(kernel, X, Y, 1e-4, chi)
    fd = _fd(lambda x: _batch_collapsed(kernel.with_log_params(x), X, Y, 1e-4, chi)[0], x0)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_learning_raises_the_bound_and_is_consistent_between_engines():
    start = KernelProblem(X, Y, RBF(lengthscale=3.0, variance=0.5))
    fixed = fit_inducing(KernelProblem(X, Y, RBF(lengthscale=3.0, variance=0.5, learn=False)), X)
    learned = fit_inducing(start, X)
    batch = fit_batch(start)
    assert learned.lower_bound[-1] > fixed.lower_bound[-1] + 1.0
    assert np.all(np.diff(learned.hyper_bounds) >= -1e-6 * np.abs(learned.hyper_bounds[1:]))
    np.testing.assert_allclose(batch.kernel.log_params(), learned.kernel.log_params(), atol=0.05)


def test_learned_inducing_locations_raise_the_bound():
    problem = KernelProblem(X, Y, RBF(lengthscale=0.9, variance=2.0, learn=False))
    Z = X[:5]
    still = fit_inducing(problem, Z)
    moved = fit_inducing(problem, Z, learn_locations=True)
    assert moved.lower_bound[-1] > still.lower_bound[-1]
    assert not np.allclose(moved.locations, Z)


def test_weighted_gradients_match_finite_differences():
    """Class weights multiply each row's terms of the bound, so of every gradient too (module docstring)."""
    weights = np.exp(RNG.normal(size=N))
    kernel = RBF(lengthscale=np.array([0.7, 1.4]), variance=1.5) + Constant(0.3)
    Z = X[::4] + 0.1
    _, A = projection(kernel, Z, X, 1e-6)
    chi = np.exp(RNG.normal(size=N))
    q = Whitened(*natural_target(Y, A, np.ones(N), weights=weights))
    x0 = np.concatenate([kernel.log_params(), Z.ravel()])
    size = kernel.log_params().size

    def value(x, q):
        return hyper_objective(kernel.with_log_params(x[:size]), x[size:].reshape(Z.shape), X, Y, 1e-6, q, chi,
                               locations=True, weights=weights)  # fmt: skip

    for fixed in (q, None):
        _, grad = value(x0, fixed)
        np.testing.assert_allclose(grad, _fd(lambda x, fixed=fixed: value(x, fixed)[0], x0), rtol=1e-5, atol=1e-6)
    batch = RBF(lengthscale=np.array([0.8, 1.2]), variance=1.3)
    _, grad = _batch_collapsed(batch, X, Y, 1e-4, chi, weights)
    fd = _fd(lambda x: _batch_collapsed(batch.with_log_params(x), X, Y, 1e-4, chi, weights)[0], batch.log_params())
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_integer_class_weights_equal_repeated_rows():
    """At a fixed kernel and fixed inducing locations, weight 2 on a row is the row twice: the same q(v)."""
    kernel = RBF(lengthscale=0.9, variance=2.0, learn=False)
    weights = np.where(Y > 0, 2.0, 1.0)
    weighted = fit_inducing(KernelProblem(X, Y, kernel, weights=weights), X[::3], tol=1e-12)
    twice = np.r_[np.arange(N), np.flatnonzero(Y > 0)]
    repeated = fit_inducing(KernelProblem(X[twice], Y[twice], kernel), X[::3], tol=1e-12)
    np.testing.assert_allclose(weighted.mean, repeated.mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(weighted.cov, repeated.cov, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(weighted.lower_bound[-1], repeated.lower_bound[-1], rtol=1e-9)
