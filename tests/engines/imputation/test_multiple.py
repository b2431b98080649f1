"""The imputation model's data-augmentation sampler (``bayesvm.engines.imputation.multiple``) against exact answers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bayesvm.engines.imputation.normal_model import (
    ImputationState,
    _inverse_wishart,
    imputation_step,
    marginal_moments,
    missing_patterns,
)
from bayesvm.model.problems import ImputationProblem

RNG = np.random.default_rng(11)
N, V = 200, 3
Y = np.where(RNG.random(N) < 0.4, 1.0, -1.0)
TRUE_B = np.array([[0.2, -0.1, 0.0], [0.5, 0.0, -0.3]])
TRUE_SIGMA = np.array([[1.0, 0.6, 0.1], [0.6, 1.0, 0.2], [0.1, 0.2, 1.0]])
Z = np.column_stack([np.ones(N), Y]) @ TRUE_B + RNG.multivariate_normal(np.zeros(V), TRUE_SIGMA, size=N)


def _problem(missing):
    return ImputationProblem(
        base=SimpleNamespace(y=Y), columns=np.arange(V), alpha=np.zeros(V), gamma=np.ones(V),
        z=np.where(missing, 0.0, Z), missing=missing, mean_variance=1e8, df=V + 1.0, scale=0.01 * np.eye(V),
    )  # fmt: skip


def test_inverse_wishart_draws_have_the_inverse_wishart_mean():
    scale, df = np.array([[2.0, 0.5], [0.5, 1.0]]), 9.0
    draws = np.array([_inverse_wishart(df, scale, RNG) for _ in range(20000)])
    np.testing.assert_allclose(draws.mean(axis=0), scale / (df - 2 - 1), rtol=0.03, atol=0.005)


def test_complete_data_chain_samples_the_conjugate_posterior():
    """No missing values: B | z and Sigma | z are known exactly (matrix-normal / inverse-Wishart)."""
    problem = _problem(np.zeros((N, V), dtype=bool))
    state = ImputationState(z=problem.z.copy(), B=np.zeros((2, V)), sigma=np.eye(V))
    B_draws, S_draws = [], []
    for step in range(3000):
        imputation_step(state, problem, Y, [], RNG)
        if step >= 200:
            B_draws.append(state.B)
            S_draws.append(state.sigma)
    U = np.column_stack([np.ones(N), Y])
    G = U.T @ U + np.eye(2) / problem.mean_variance
    B_hat = np.linalg.solve(G, U.T @ Z)
    scale = problem.scale + Z.T @ Z - B_hat.T @ G @ B_hat
    S_mean = scale / (problem.df + N - V - 1)
    B_draws, S_draws = np.array(B_draws), np.array(S_draws)
    se_B = np.sqrt(np.outer(np.diag(np.linalg.inv(G)), np.diag(S_mean)) / len(B_draws)) * 3  # autocorrelated: x3
    assert np.all(np.abs(B_draws.mean(axis=0) - B_hat) < 4 * se_B)
    np.testing.assert_allclose(S_draws.mean(axis=0), S_mean, atol=0.02)
    # the reported moments over the classes
    mu, sigma = marginal_moments(B_hat, S_mean, Y)
    np.testing.assert_allclose(mu, Z.mean(axis=0), atol=1e-8)
    np.testing.assert_allclose(sigma, np.cov(Z.T, ddof=0), atol=0.05)


def test_missing_values_are_drawn_from_the_conditional_normal():
    missing = np.zeros((N, V), dtype=bool)
    missing[:40, 0] = True
    missing[40:60, :2] = True
    problem = _problem(missing)
    patterns = missing_patterns(missing)
    B, S = TRUE_B.copy(), TRUE_SIGMA.copy()
    rows = {0: 5, 1: 45}  # one row of each pattern
    draws = {k: [] for k in rows}
    for _ in range(2000):
        state = ImputationState(z=problem.z.copy(), B=B.copy(), sigma=S.copy())
        imputation_step(state, problem, Y, patterns, RNG)
        for k, i in rows.items():
            draws[k].append(state.z[i, missing[i]])
    for k, i in rows.items():
        mis, obs = missing[i], ~missing[i]
        mean_i = np.array([1.0, Y[i]]) @ B
        A = S[np.ix_(mis, obs)] @ np.linalg.inv(S[np.ix_(obs, obs)])
        cond_mean = mean_i[mis] + A @ (Z[i, obs] - mean_i[obs])
        cond_cov = S[np.ix_(mis, mis)] - A @ S[np.ix_(obs, mis)]
        d = np.array(draws[k])
        se = np.sqrt(np.diag(cond_cov) / len(d))
        assert np.all(np.abs(d.mean(axis=0) - cond_mean) < 4 * se), (k, d.mean(axis=0), cond_mean)
        np.testing.assert_allclose(np.cov(d.T).reshape(cond_cov.shape), cond_cov, rtol=0.1, atol=0.02)


# ----- multiple imputation on the sparse path -------------------------------------------------
def _crossed_problems():
    """One model with crossed random intercepts and a missing predictor, laid out dense (Schur over the larger
    factor) and sparse (every coefficient in the sparse factorisation)."""
    import pandas as pd
    import scipy.sparse as sp

    from bayesvm.formula.bars import parse_formula
    from bayesvm.formula.design import build_design
    from bayesvm.model import build_model
    from bayesvm.priors import PriorSet

    rng = np.random.default_rng(4)
    n = 600
    g, h = rng.integers(0, 30, n), rng.integers(0, 12, n)
    X = rng.normal(size=(n, 2))
    eta = X @ [1.0, -0.8] + rng.normal(0, 0.8, 30)[g] + rng.normal(0, 0.5, 12)[h]
    data = pd.DataFrame(X, columns=["a", "b"]).assign(y=(rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), g=g, h=h)
    data.loc[rng.random(n) < 0.2, "b"] = np.nan
    design = build_design(parse_formula("y ~ a + b + (1 | g) + (1 | h)"), data, missing="impute")
    dense = build_model(design, "learn", PriorSet(), True).imputation_problem("mi")
    sparse = build_model(design, "learn", PriorSet(), True, max_dense_columns=0).imputation_problem("mi")
    assert not sp.issparse(dense.base.D) and sp.issparse(sparse.base.D)
    return dense, sparse


def test_sparse_path_multiple_imputation_vb_equals_the_dense_layout():
    """The same completed data sets (same seed) give the same mean-field optimum on either layout."""
    from bayesvm.engines.imputation.multiple import fit_mi_vb

    dense, sparse = _crossed_problems()
    z = np.where(dense.missing, 0.3, dense.z)
    np.testing.assert_allclose(sparse.design(z).toarray()[:, :3], dense.design(z)[:, :3])  # the fixed columns
    np.testing.assert_array_equal(sparse.design(z).toarray()[:, 3:], sparse.base.D.toarray()[:, 3:])
    a = fit_mi_vb(dense, imputations=3, seed=5, tol=1e-10)
    b = fit_mi_vb(sparse, imputations=3, seed=5, tol=1e-10)
    for fit_a, fit_b in zip(a.fits, b.fits):
        np.testing.assert_allclose(fit_b.theta.mean_d[:3], fit_a.theta.mean_d[:3], atol=1e-5)
        np.testing.assert_allclose(
            [c.expected_precision()[0, 0] for c in fit_b.components],
            [c.expected_precision()[0, 0] for c in fit_a.components],
            rtol=1e-4,
        )


# (29 s: the sparse path's sampler is checked against the Schur path in tests/engines/linear/test_gibbs.py and the
# imputation chain's target in tests/engines/imputation/test_joint_model.py; suite time)
@pytest.mark.slow
def test_sparse_path_multiple_imputation_gibbs_targets_the_dense_posterior():
    from bayesvm.engines.imputation.joint_model import sample_impute_gibbs

    dense, sparse = _crossed_problems()
    runs = [
        sample_impute_gibbs(problem, draws=700, tune=200, chains=2, seed=seed, progress=False)
        for problem, seed in ((dense, 1), (sparse, 2))
    ]
    means = [r.theta_d[..., :3].reshape(-1, 3).mean(axis=0) for r in runs]
    sd = runs[0].theta_d[..., :3].reshape(-1, 3).std(axis=0)
    assert np.all(np.abs(means[1] - means[0]) < 0.3 * sd), (means, sd)
    for c in (1, 2):  # the random intercepts' variances (the penalty's has a heavy IG(0.01, 0.01) tail)
        dense_draws, sparse_draws = runs[0].components[c][..., 0, 0].ravel(), runs[1].components[c][..., 0, 0].ravel()
        assert abs(sparse_draws.mean() - dense_draws.mean()) < 0.3 * dense_draws.std(), c
