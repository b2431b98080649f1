"""The Gibbs sampler against exact answers: quadrature and an independent sampler on the
marginal pseudo-posterior exp(-2 sum hinge) x prior (the augmentation integrates out)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import bayesvm
from bayesvm.engines.gibbs import sample_gibbs
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from bayesvm.results.diagnostics import mcmc_diagnostics
from tests.conftest import simulate_logistic
from tests.engines.test_vb import schur_and_sparse


def _small_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(0.4 + 1.2 * x))), 1, -1)
    return pd.DataFrame({"x": x, "y": y, "g": [f"g{k}" for k in rng.integers(0, 5, n)]})


def _ess(draws: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return float(az.ess(draws))


def _gibbs(formula, data, penalty, seed=1, draws=4000, tune=500, chains=4):
    design = build_design(parse_formula(formula), data)
    problem = build_model(design, penalty, PriorSet(), standardize=False).problem()
    return problem, sample_gibbs(problem, draws=draws, tune=tune, chains=chains, seed=seed, progress=False)


def _log_target_fixed(beta_grid, X, y, precision):
    """log of exp(-2 sum hinge) x N(0, 1/precision) prior, for a grid of coefficient vectors."""
    f = beta_grid @ X.T
    hinge = np.maximum(0.0, 1.0 - y * f).sum(axis=-1)
    return -2.0 * hinge - 0.5 * (beta_grid**2 * precision).sum(axis=-1)


def test_one_coefficient_matches_quadrature():
    data = _small_data()
    problem, result = _gibbs("y ~ 0 + x", data, penalty=0.5)
    grid = np.linspace(-3, 6, 20001)[:, None]
    logp = _log_target_fixed(grid, problem.D, problem.y, problem.fixed_precision)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = float(np.sum(w * grid[:, 0]))
    sd = float(np.sqrt(np.sum(w * (grid[:, 0] - mean) ** 2)))
    draws = result.theta_d[..., 0]
    mcse = sd / np.sqrt(_ess(draws))
    assert abs(draws.mean() - mean) < 4 * mcse, (draws.mean(), mean, mcse)
    assert abs(draws.std() / sd - 1) < 0.05


def test_two_coefficients_match_quadrature():
    data = _small_data(seed=3)
    problem, result = _gibbs("y ~ x", data, penalty=0.5)
    b0, b1 = np.meshgrid(np.linspace(-3, 3.5, 701), np.linspace(-2, 5, 701), indexing="ij")
    grid = np.stack([b0, b1], axis=-1)
    logp = _log_target_fixed(grid, problem.D, problem.y, problem.fixed_precision)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    for j in range(2):
        mean = float(np.sum(w * grid[..., j]))
        sd = float(np.sqrt(np.sum(w * (grid[..., j] - mean) ** 2)))
        draws = result.theta_d[..., j]
        mcse = sd / np.sqrt(_ess(draws))
        assert abs(draws.mean() - mean) < 4 * mcse, (j, draws.mean(), mean, mcse)
        assert abs(draws.std() / sd - 1) < 0.06, (j, draws.std(), sd)


def _random_walk_metropolis(logp, x0, steps, scale, rng):
    """Independent check: plain random-walk Metropolis on the exact (marginal) pseudo-posterior."""
    x, lp = x0.copy(), logp(x0)
    out = np.empty((steps, x0.size))
    for i in range(steps):
        proposal = x + scale * rng.standard_normal(x.size)
        lp_new = logp(proposal)
        if np.log(rng.random()) < lp_new - lp:
            x, lp = proposal, lp_new
        out[i] = x
    return out


def test_random_intercept_matches_independent_metropolis():
    data = _small_data(n=40, seed=5)
    problem, result = _gibbs("y ~ x + (1 | g)", data, penalty=None, draws=6000, tune=1000)
    design = build_design(parse_formula("y ~ x + (1 | g)"), data)
    X, y = design.X, design.y
    (term,) = design.re_terms
    codes = term.codes
    a, b = 0.01, 0.01  # IG(A, B) default prior

    def logp(v):  # v = (beta0, beta1, u_1..u_5, log sigma^2)
        beta, u, t = v[:2], v[2:7], v[7]
        f = X @ beta + u[codes]
        s2 = np.exp(t)
        return (
            -2.0 * np.maximum(0.0, 1.0 - y * f).sum()
            - 0.5 * 1e-8 * beta @ beta
            - 0.5 * u @ u / s2
            - 2.5 * t
            - (a + 1.0) * t
            - b / s2
            + t  # Jacobian of sigma^2 = exp(t)
        )

    rng = np.random.default_rng(11)
    start = np.concatenate(
        [result.theta_d[0, -1], result.theta_b[0, -1, :, 0], [np.log(result.components[0][0, -1, 0, 0])]]
    )
    chain = _random_walk_metropolis(logp, start, 150_000, 0.12, rng)[20_000:]
    gibbs = np.concatenate([result.theta_d.reshape(-1, 2), result.theta_b.reshape(-1, 5)], axis=1)
    for j in range(7):
        sd = chain[:, j].std()
        mcse = np.sqrt(sd**2 / _ess(chain[None, :, j]) + gibbs[:, j].var() / _ess(gibbs[:, j].reshape(4, -1)))
        assert abs(gibbs[:, j].mean() - chain[:, j].mean()) < 4 * mcse, (
            j,
            gibbs[:, j].mean(),
            chain[:, j].mean(),
            mcse,
        )


def test_same_seed_same_draws_and_chains_differ():
    data = _small_data()
    _, a = _gibbs("y ~ x + (1 | g)", data, penalty="learn", seed=7, draws=50, tune=10, chains=2)
    _, b = _gibbs("y ~ x + (1 | g)", data, penalty="learn", seed=7, draws=50, tune=10, chains=2)
    _, c = _gibbs("y ~ x + (1 | g)", data, penalty="learn", seed=8, draws=50, tune=10, chains=2)
    np.testing.assert_array_equal(a.theta_d, b.theta_d)
    np.testing.assert_array_equal(a.components[0], b.components[0])
    assert not np.allclose(a.theta_d[0], a.theta_d[1])
    assert not np.allclose(a.theta_d, c.theta_d)


def test_parallel_chains_equal_serial_chains():
    data = _small_data()
    design = build_design(parse_formula("y ~ x + (1 | g)"), data)
    problem = build_model(design, None, PriorSet(), True).problem()
    serial = sample_gibbs(problem, draws=30, tune=5, chains=2, seed=3, cores=1, progress=False)
    parallel = sample_gibbs(problem, draws=30, tune=5, chains=2, seed=3, cores=2, progress=False)
    np.testing.assert_array_equal(serial.theta_d, parallel.theta_d)


def test_vb_means_close_to_gibbs_without_random_effects(capsys):
    data, formula = simulate_logistic(400, 5)
    vb = bayesvm.bsvm(formula, data, penalty="learn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        gibbs = bayesvm.bsvm(
            formula, data, penalty="learn", method="gibbs", draws=2000, tune=500, seed=1, progress=False
        )
    gibbs_sd = np.sqrt(np.diag(gibbs.fixef_cov))
    assert np.all(np.abs(vb.fixef - gibbs.fixef) < 0.5 * gibbs_sd)
    ratio = np.sqrt(np.diag(vb.fixef_cov)) / gibbs_sd
    print("VB / Gibbs posterior SD ratio (no random effects):", np.round(ratio, 2).tolist())


def test_toenail_chains_converge_and_seeds_agree():
    toenail = bayesvm.datasets.load_toenail()
    kw = dict(penalty=None, method="gibbs", draws=8000, tune=2000, chains=4, cores=2, progress=False)
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        a = bayesvm.bsvm(formula, toenail, seed=1, **kw)
        b = bayesvm.bsvm(formula, toenail, seed=2, **kw)
    diag_a = mcmc_diagnostics(a)
    assert diag_a["r_hat"].max() <= 1.01, diag_a
    for name in a.fixef.index:
        se = np.sqrt(a.fixef_cov.loc[name, name] / diag_a.loc[name, "ess_bulk"] * 2)
        assert abs(a.fixef[name] - b.fixef[name]) < 4 * se, name
    # the random-intercept variance: mean-field VB is far off here, Gibbs runs agree with each other
    va, vb_ = a.variance_components[0].mean[0, 0], b.variance_components[0].mean[0, 0]
    assert abs(va - vb_) / va < 0.1
    assert stats.describe(a.result.log_posterior.ravel()).variance > 0


@pytest.mark.parametrize("path", ["sparse", "sparse-general"])
def test_sparse_path_sampler_agrees_with_schur_path(path, monkeypatch):
    data = _small_data(n=60, seed=6).assign(h=lambda d: [f"h{k}" for k in np.arange(len(d)) % 4])
    design = build_design(parse_formula("y ~ x + (1 | g) + (1 | h)"), data)
    problems = schur_and_sparse(design, 0.5, False, path, monkeypatch)
    runs = {
        limit: sample_gibbs(problems[name], draws=3000, tune=300, chains=2, seed=limit + 1, progress=False)
        for name, limit in (("schur", 2000), (path, 0))
    }
    # same layout either way: theta_d = [beta, u_g, u_h] on the sparse path; [beta, u_h] + blocked u_g otherwise
    sparse, schur = runs[0], runs[2000]
    for j in range(2):  # the fixed effects
        a, b = sparse.theta_d[..., j], schur.theta_d[..., j]
        se = np.sqrt(a.var() / _ess(a) + b.var() / _ess(b))
        assert abs(a.mean() - b.mean()) < 4 * se, (j, a.mean(), b.mean(), se)
    for c in range(2):  # sigma^2 of (1 | g) and (1 | h): few groups, heavy tails: compare medians
        a, b = sparse.components[c].ravel(), schur.components[c].ravel()
        assert abs(np.log(np.median(a)) - np.log(np.median(b))) < 0.5, (c, np.median(a), np.median(b))


def test_rows_split_in_two_threads_sample_the_same_posterior(monkeypatch):
    """The two-half latent draws (large data) against the one-generator sampler on the same model."""
    from bayesvm.engines import gibbs, linalg

    data = _small_data(n=60, seed=3)
    runs = []
    for split in (False, True):
        monkeypatch.setattr(gibbs, "SPLIT_ROWS", 10 if split else 10**9)
        monkeypatch.setattr(linalg, "SPLIT_ROWS", 10 if split else 10**9)  # the fused row halves too
        problem, result = _gibbs("y ~ x + (1 | g)", data, penalty=None, draws=3000, tune=300, chains=2, seed=4)
        runs.append(np.concatenate([result.theta_d.reshape(-1, 2), result.theta_b.reshape(-1, 5)], axis=1))
    one, two = runs
    assert not np.array_equal(one, two)  # the split path really ran (different streams)
    for j in range(one.shape[1]):
        a, b = one[:, j], two[:, j]
        mcse = np.sqrt(a.var() / _ess(a.reshape(2, -1)) + b.var() / _ess(b.reshape(2, -1)))
        assert abs(a.mean() - b.mean()) < 4 * mcse, (j, a.mean(), b.mean(), mcse)


@pytest.mark.parametrize("K", [1, 2])
def test_fused_row_halves_equal_the_separate_steps(K, monkeypatch):
    """``DenseRows`` in two threaded halves gives the same ``f``, the same latent draws and the same row sums as
    computing ``f``, drawing ``omega`` and summing the rows one step after another."""
    from bayesvm.engines import gibbs, linalg
    from bayesvm.engines.linalg import BlockedFactor, row_statistics

    monkeypatch.setattr(gibbs, "SPLIT_ROWS", 100)
    monkeypatch.setattr(linalg, "SPLIT_ROWS", 100)
    monkeypatch.setattr(linalg, "ROW_CHUNK", 37)
    rng = np.random.default_rng(0)
    n, q, J = 1001, 4, 30
    D = rng.standard_normal((n, q))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    blocked = BlockedFactor(codes=np.sort(rng.integers(0, J, n)), values=rng.standard_normal((n, K)), n_levels=J)
    theta_d, theta_b = rng.standard_normal(q), rng.standard_normal((J, K))
    fused = gibbs.DenseRows(D, y, blocked, gibbs.LatentDraws(np.random.default_rng(5), n))
    assert fused.fused
    f, omega, stats = fused(theta_d, theta_b)
    latent = gibbs.LatentDraws(np.random.default_rng(5), n)
    f_ref = D @ theta_d + np.einsum("ik,ik->i", blocked.values, theta_b[blocked.codes])
    omega_ref = latent(np.maximum(np.abs(1.0 - y * f_ref), gibbs.MARGIN_FLOOR))
    ref = row_statistics(D, omega_ref, y * (1.0 + omega_ref), blocked)
    np.testing.assert_allclose(f, f_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(omega, omega_ref, rtol=1e-12)
    for name in ("gram", "product", "wz", "wzz", "zr"):
        np.testing.assert_allclose(getattr(stats, name), getattr(ref, name), rtol=1e-12, atol=1e-12, err_msg=name)
