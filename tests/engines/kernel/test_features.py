"""``kernel=`` fits by Gibbs, EM and accurate VB: the kernel model as a linear one on its whitened features
(``bayesvm.engines.kernel.features``), through ``bsvm()``.

* EM reaches the minimum of the L2-penalised hinge on the features (scikit-learn's LinearSVC without intercept,
  ``C = 2``), the kernel SVM at the given kernel.
* Gibbs matches the exact posterior of ``v`` by quadrature (two inducing locations: a 2-D grid), and its predictive
  SD at a new row is the DTC predictive's.
* Learned hyperparameters are taken from the VB fit (ML-II) and the summary says so; given ones are kept.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.svm import LinearSVC

import bayesvm
from bayesvm.engines.kernel.features import whitened_features
from bayesvm.kernels import RBF

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    eta = 2.0 * np.sin(1.5 * X[:, 0]) - X[:, 1] ** 2 + 1.0
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "a", "b")
    return pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1], "y": y})


def _features(fit) -> np.ndarray:
    r = fit.result
    return whitened_features(r.kernel, r.locations, fit.problem.X, r.jitter)


def test_em_is_the_kernel_svm_at_the_given_kernel():
    data = _frame(120)
    fit = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(lengthscale=0.8, variance=4.0, learn=False), inducing=20,
                       method="em", seed=1)  # fmt: skip
    assert fit.converged and fit.result.engine == "em" and fit.result.hyperparameters_from == ""
    A, y, v = _features(fit), fit.problem.y, fit.result.mean
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (liblinear stops short of tol=1e-12)
        svc = LinearSVC(C=2.0, loss="hinge", fit_intercept=False, tol=1e-12, max_iter=1_000_000, random_state=0)
        svc.fit(A, y)

    def objective(u):
        return 2.0 * np.maximum(0.0, 1.0 - y * (A @ u)).sum() + 0.5 * u @ u

    ours, theirs = objective(v), objective(svc.coef_.ravel())
    assert ours <= theirs * (1 + 1e-8), (ours, theirs)
    # the optimality certificate (KKT): v = 2 sum_i alpha_i y_i a_i with alpha_i = 1 inside the margin, 0 outside
    # and in [0, 1] on it
    margin = 1.0 - y * (A @ v)
    on = np.abs(margin) < 1e-6
    rest = v - 2.0 * A[margin > 1e-6].T @ y[margin > 1e-6]
    alpha, *_ = np.linalg.lstsq(2.0 * A[on].T * y[on], rest, rcond=None)
    assert np.linalg.norm(2.0 * A[on].T @ (alpha * y[on]) - rest) < 1e-5 * (1 + np.linalg.norm(v))
    assert on.sum() >= 3 and alpha.min() > -1e-4 and alpha.max() < 1 + 1e-4, alpha
    # a mode carries no spread of v: the predictive variance is the part the inducing points leave unexplained
    mean, var = fit.posterior.link(fit.problem.X)
    k = fit.result.kernel
    np.testing.assert_allclose(var, np.maximum(k.diag(fit.problem.X) - np.sum(A * A, axis=1), 0.0), atol=1e-10)


def test_weighted_em_is_the_weighted_kernel_svm():
    """With class weights EM minimises ``2 sum_i omega_i hinge_i + |v|^2 / 2``, LinearSVC's problem with
    ``class_weight`` on the same features."""
    data = _frame(120)
    class_weight = {"a": 3.0}
    fit = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(lengthscale=0.8, variance=4.0, learn=False), inducing=20,
                       method="em", seed=1, class_weight=class_weight)  # fmt: skip
    A, y, v = _features(fit), fit.problem.y, fit.result.mean
    weights = fit.problem.weights
    assert weights is not None and set(np.unique(weights)) == {1.0, 3.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svc = LinearSVC(C=2.0, loss="hinge", fit_intercept=False, tol=1e-12, max_iter=1_000_000, random_state=0,
                        class_weight={-1.0: 3.0, 1.0: 1.0})  # fmt: skip
        svc.fit(A, y)

    def objective(u):
        return 2.0 * (weights * np.maximum(0.0, 1.0 - y * (A @ u))).sum() + 0.5 * u @ u

    assert objective(v) <= objective(svc.coef_.ravel()) * (1 + 1e-8)
    plain = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(lengthscale=0.8, variance=4.0, learn=False), inducing=20,
                         method="em", seed=1)  # fmt: skip
    assert objective(v) < objective(plain.result.mean) - 1e-3  # (the weights change the optimum)


def test_gibbs_matches_quadrature_of_the_exact_posterior():
    data = _frame(40, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        fit = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(lengthscale=1.5, variance=3.0, learn=False), inducing=2,
                           method="gibbs", draws=6000, tune=500, chains=2, seed=5, progress=False)  # fmt: skip
    A, y = _features(fit), fit.problem.y
    grid = np.linspace(-8, 8, 801)
    v1, v2 = np.meshgrid(grid, grid, indexing="ij")
    V = np.stack([v1.ravel(), v2.ravel()], axis=1)
    log_p = -2.0 * np.maximum(0.0, 1.0 - y[None, :] * (V @ A.T)).sum(axis=1) - 0.5 * np.sum(V * V, axis=1)
    w = np.exp(log_p - log_p.max())
    w /= w.sum()
    assert w.reshape(v1.shape)[[0, -1], :].sum() + w.reshape(v1.shape)[:, [0, -1]].sum() < 1e-10  # the grid holds it
    exact_mean = w @ V
    exact_cov = (V - exact_mean).T @ ((V - exact_mean) * w[:, None])
    sd = np.sqrt(np.diag(exact_cov))
    assert np.all(np.abs(fit.result.mean - exact_mean) < 0.06 * sd), (fit.result.mean, exact_mean, sd)
    np.testing.assert_allclose(np.sqrt(np.diag(fit.result.cov)), sd, rtol=0.06)
    # the predictive at new rows: a*'E[v] and k** - |a*|^2 + a*' Cov(v) a*
    new = pd.DataFrame({"x1": [0.3, -1.7], "x2": [1.1, 0.0]})
    interval = fit.predict_interval(new)
    a_new = whitened_features(fit.result.kernel, fit.result.locations, fit.model.new_inputs(new), fit.result.jitter)
    exact_var = fit.result.kernel.diag(fit.model.new_inputs(new)) - np.sum(a_new**2, axis=1)
    exact_var += np.einsum("ij,jk,ik->i", a_new, exact_cov, a_new)
    np.testing.assert_allclose(interval["mean"], a_new @ exact_mean, atol=0.06 * np.sqrt(exact_var).min())
    np.testing.assert_allclose(interval["sd"], np.sqrt(exact_var), rtol=0.06)
    assert "Sampling:" in str(fit.summary()) and "max R-hat" in str(fit.summary())


def test_learned_hyperparameters_come_from_the_vb_fit():
    data = _frame(150, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        vb = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(), inducing=15, seed=4)
        em = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(), inducing=15, seed=4, method="em")
        ep = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(), inducing=15, seed=4, vb="accurate")
    for fit in (em, ep):
        assert fit.result.hyperparameters_from == "inducing" and fit.kernel.learned == ()
        assert fit.kernel.lengthscale == pytest.approx(vb.kernel.lengthscale, rel=1e-10)
        assert fit.kernel.variance == pytest.approx(vb.kernel.variance, rel=1e-10)
        np.testing.assert_array_equal(fit.result.locations, vb.result.locations)
        assert "fixed at the values of the VB fit" in str(fit.summary())
        assert fit.lower_bound.size == 0  # only VB computes a lower bound
    # EP's q(v) and VB's agree in the mean (VB's SDs are narrower)
    scale = np.sqrt(np.diag(ep.result.cov))
    assert np.max(np.abs(ep.result.mean - vb.result.mean) / scale) < 1.0


def test_a_kernel_with_other_blocks_is_refused_for_every_engine():
    data = _frame(60).assign(g=np.repeat(["p", "q", "r"], 20))
    for options in ({"method": "gibbs"}, {"method": "em"}, {"vb": "accurate"}):
        with pytest.raises(bayesvm.BayesvmError, match="with no additive blocks beside it"):
            bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", data, kernel=RBF(), **options)
    with pytest.raises(bayesvm.BayesvmError, match="goes with method='vb'"):
        bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(), method="gibbs", vb="accurate")
