"""The Gibbs sampler against exact answers: quadrature and an independent sampler on the
marginal pseudo-posterior exp(-2 sum hinge) x prior (the augmentation integrates out)."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import bayesvm
from bayesvm.engines.linear.gibbs import sample_gibbs
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from bayesvm.results.diagnostics import mcmc_diagnostics
from tests.conftest import simulate_logistic
from tests.engines.linear.test_vb import schur_and_sparse


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


def _gibbs(formula, data, penalty, seed=1, draws=4000, tune=500, chains=4, priors=None):
    design = build_design(parse_formula(formula), data)
    problem = build_model(design, penalty, PriorSet() if priors is None else priors, standardize=False).problem()
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


# (--runslow, suite time: 22 s; the default sampler on a half-t random intercept is checked against exact
# quadrature in CI, tests/engines/linear/test_interweave.py::test_gibbs_with_moves_matches_quadrature)
@pytest.mark.slow
@pytest.mark.parametrize("prior", ["half-t", "paper"])
def test_random_intercept_matches_independent_metropolis(prior):
    """Gibbs (with the half-t's auxiliary variable) against random-walk Metropolis on the marginal density, whose
    variance prior is written here independently: scipy's half-t on sigma, or IG(0.01, 0.01) on sigma^2."""
    data = _small_data(n=40, seed=5)
    priors = PriorSet.paper() if prior == "paper" else PriorSet()
    problem, result = _gibbs("y ~ x + (1 | g)", data, penalty=None, draws=3000, tune=1000, priors=priors)
    design = build_design(parse_formula("y ~ x + (1 | g)"), data)
    X, y = design.X, design.y
    (term,) = design.re_terms
    codes = term.codes

    def log_variance_prior(t):  # log p(log sigma^2 = t), up to a constant (checked against scipy below)
        if prior == "paper":  # sigma^2 ~ IG(0.01, 0.01), times the Jacobian e^t
            return -1.01 * t - 0.01 * np.exp(-t) + t
        # sigma ~ half-t(3, 2.5): density (1 + sigma^2 / (3 * 2.5^2))^-2, times d sigma / d t = sigma / 2
        return -2.0 * np.log1p(np.exp(t) / (3 * 2.5**2)) + t / 2

    reference = (
        stats.invgamma(0.01, scale=0.01).logpdf(np.exp([0.3, 2.0])) + np.array([0.3, 2.0])
        if prior == "paper"
        else stats.t(3, scale=2.5).logpdf(np.exp(np.array([0.3, 2.0]) / 2)) + np.array([0.3, 2.0]) / 2
    )
    assert np.diff([log_variance_prior(0.3), log_variance_prior(2.0)]) == pytest.approx(np.diff(reference))

    def logp(v):  # v = (beta0, beta1, u_1..u_5, log sigma^2)
        beta, u, t = v[:2], v[2:7], v[7]
        f = X @ beta + u[codes]
        s2 = np.exp(t)
        return (
            -2.0 * np.maximum(0.0, 1.0 - y * f).sum()
            - 0.5 * 1e-8 * beta @ beta
            - 0.5 * u @ u / s2
            - 2.5 * t
            + log_variance_prior(t)
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
    serial = sample_gibbs(problem, draws=30, tune=5, chains=3, seed=3, cores=1, progress=False)
    parallel = sample_gibbs(problem, draws=30, tune=5, chains=3, seed=3, cores=2, progress=False)  # 2, then 1
    np.testing.assert_array_equal(serial.theta_d, parallel.theta_d)


def test_the_warm_up_runs_once_in_the_parent_before_forking(monkeypatch):
    """The engine's warm-up (one throwaway iteration, loading numba's functions for the forked workers) runs in
    the parent, once, and does not change the chains' draws."""
    import multiprocessing

    from bayesvm.engines.linear import gibbs

    data = _small_data()
    design = build_design(parse_formula("y ~ x + (1 | g)"), data)
    problem = build_model(design, None, PriorSet(), True).problem()
    calls = []
    original = gibbs._load_compiled
    monkeypatch.setattr(gibbs, "_load_compiled", lambda *a: calls.append(a) or original(*a))
    monkeypatch.setattr(gibbs.compiled_rows, "available", lambda: True)
    serial = sample_gibbs(problem, draws=20, tune=5, chains=2, seed=4, cores=1, progress=False)
    assert calls == []  # no workers, nothing to warm
    parallel = sample_gibbs(problem, draws=20, tune=5, chains=2, seed=4, cores=2, progress=False)
    assert len(calls) == (1 if multiprocessing.get_context().get_start_method() == "fork" else 0)
    np.testing.assert_array_equal(serial.theta_d, parallel.theta_d)


def _failing_chain(problem, draws, tune, thin, seed, show):
    if seed.spawn_key[-1] == 1:
        raise ValueError("chain 2 failed")
    return {"draws": draws}


def _dying_chain(problem, draws, tune, thin, seed, show):
    os._exit(3)


def test_a_chain_worker_failure_is_raised_in_the_parent():
    """A chain's exception reaches the caller; a worker that dies without a result is named, not waited on."""
    from bayesvm.engines.gibbs_driver import run_chains

    assert run_chains(_failing_chain, None, 5, 0, 1, 1, 0, 2, False) == [{"draws": 5}]
    with pytest.raises(ValueError, match="chain 2 failed"):
        run_chains(_failing_chain, None, 5, 0, 1, 3, 0, 2, False)
    with pytest.raises(RuntimeError, match="chain [12] ended without a result"):  # whichever is seen first
        run_chains(_dying_chain, None, 5, 0, 1, 2, 0, 2, False)


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


@pytest.mark.slow  # a reference run against long chains (CI's 15 minutes); --runslow runs it
def test_toenail_chains_converge_and_seeds_agree():
    toenail = bayesvm.datasets.load_toenail()
    # the paper's example and prior; with the moves of engines/linear/interweave.py 4 x 1,500 draws mix better
    # than the paper's sampler's 4 x 8,000 did (benchmarks/gibbs_mixing.py)
    kw = dict(penalty=None, method="gibbs", draws=1500, tune=1000, chains=4, cores=2, progress=False,
              priors=bayesvm.priors.PriorSet.paper())  # fmt: skip
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


# (the general sparse factorisation, the fallback, runs with --runslow for suite time; tests/linalg/test_sparse.py
# checks its solves and selected inverse in CI)
@pytest.mark.parametrize("path", ["sparse", pytest.param("sparse-general", marks=pytest.mark.slow)])
def test_sparse_path_sampler_agrees_with_schur_path(path, monkeypatch):
    data = _small_data(n=60, seed=6).assign(h=lambda d: [f"h{k}" for k in np.arange(len(d)) % 4])
    design = build_design(parse_formula("y ~ x + (1 | g) + (1 | h)"), data)
    problems = schur_and_sparse(design, 0.5, False, path, monkeypatch)
    runs = {
        limit: sample_gibbs(problems[name], draws=2000, tune=300, chains=2, seed=limit + 1, progress=False)
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
    from bayesvm.engines.linear import gibbs_rows
    from bayesvm.linalg import row_sums as linalg

    data = _small_data(n=60, seed=3)
    runs = []
    for split in (False, True):
        monkeypatch.setattr(gibbs_rows, "SPLIT_ROWS", 10 if split else 10**9)
        monkeypatch.setattr(linalg, "SPLIT_ROWS", 10 if split else 10**9)  # the fused row halves too
        problem, result = _gibbs("y ~ x + (1 | g)", data, penalty=None, draws=3000, tune=300, chains=2, seed=4)
        runs.append(np.concatenate([result.theta_d.reshape(-1, 2), result.theta_b.reshape(-1, 5)], axis=1))
    one, two = runs
    assert not np.array_equal(one, two)  # the split path really ran (different streams)
    for j in range(one.shape[1]):
        a, b = one[:, j], two[:, j]
        mcse = np.sqrt(a.var() / _ess(a.reshape(2, -1)) + b.var() / _ess(b.reshape(2, -1)))
        assert abs(a.mean() - b.mean()) < 4 * mcse, (j, a.mean(), b.mean(), mcse)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("K", [0, 1, 2])
def test_fused_row_halves_equal_the_separate_steps(K, compiled, monkeypatch):
    """``DenseRows`` in two threaded halves (numpy, or the compiled row pass) gives the same log pseudo-likelihood,
    the same latent draws and the same row sums as computing ``f``, drawing ``omega`` and summing the rows one step
    after another."""
    from bayesvm.engines.joint import log_pseudo_likelihood
    from bayesvm.engines.linear import gibbs_rows
    from bayesvm.linalg import row_sums as linalg
    from bayesvm.linalg.dense import BlockedFactor
    from bayesvm.linalg.row_sums import row_statistics

    monkeypatch.setattr(gibbs_rows, "SPLIT_ROWS", 100)
    monkeypatch.setattr(linalg, "SPLIT_ROWS", 100)
    monkeypatch.setattr(linalg, "ROW_CHUNK", 37)
    rng = np.random.default_rng(0)
    n, q, J = 1001, 4, 30
    D = rng.standard_normal((n, q))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    codes = np.sort(rng.integers(0, J, n))
    blocked = BlockedFactor(codes=codes, values=rng.standard_normal((n, K)), n_levels=J) if K else None
    theta_d, theta_b = rng.standard_normal(q), rng.standard_normal((J, K)) if K else np.zeros((0, 0))
    split = gibbs_rows.level_boundary_split(blocked, n)
    fused = gibbs_rows.DenseRows(
        D, y, blocked, gibbs_rows.LatentDraws(np.random.default_rng(5), n, split), compiled=compiled
    )
    assert fused.fused and fused.compiled == compiled
    latent = gibbs_rows.LatentDraws(np.random.default_rng(5), n, split)
    f_ref = D @ theta_d + (np.einsum("ik,ik->i", blocked.values, theta_b[codes]) if K else 0.0)
    for _ in range(2):  # the second call reuses the buffers (the compiled pass zeroes its accumulators)
        loglik, omega, stats = fused(theta_d, theta_b)
        omega_ref = latent(np.maximum(np.abs(1.0 - y * f_ref), gibbs_rows.MARGIN_FLOOR))
        ref = row_statistics(D, omega_ref, y * (1.0 + omega_ref), blocked)
        assert loglik == pytest.approx(log_pseudo_likelihood(y, f_ref), rel=1e-12)
        np.testing.assert_allclose(omega, omega_ref, rtol=1e-12)
        for name in ("gram", "product"):
            np.testing.assert_allclose(getattr(stats, name), getattr(ref, name), rtol=1e-12, atol=1e-12, err_msg=name)
        if K:
            sums, ref_sums = stats.level_sums(blocked, D), ref.level_sums(blocked, D)
            for name in ("blocks", "cross", "rhs"):
                np.testing.assert_allclose(getattr(sums, name), getattr(ref_sums, name), rtol=1e-12, atol=1e-12)
            assert (stats.levels is not None) == compiled


def test_compiled_row_pass_gives_the_numpy_chain(monkeypatch):
    """With the rows split, a seed gives the same chain with the compiled row pass as with numpy (both take the
    same normals and uniforms; only the order of floating-point sums differs)."""
    from bayesvm.engines.linear import compiled_rows, gibbs_rows
    from bayesvm.linalg import row_sums as linalg

    assert compiled_rows.available()
    monkeypatch.setattr(gibbs_rows, "SPLIT_ROWS", 10)
    monkeypatch.setattr(linalg, "SPLIT_ROWS", 10)
    data = _small_data(n=60, seed=3)
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, switch)
        # (60 iterations: the over-relaxed direction moves reflect through the slice's middle, which carries each
        # iteration's last-digit differences into the next; after about 100 iterations they decide a branch and the
        # two chains part, as two seeds would)
        _, runs[switch] = _gibbs("y ~ x + (1 | g)", data, penalty=None, draws=60, tune=0, chains=1, seed=9)
    compiled, plain = runs["1"], runs["0"]
    np.testing.assert_allclose(compiled.theta_d, plain.theta_d, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(compiled.theta_b, plain.theta_b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(compiled.log_posterior, plain.log_posterior, rtol=1e-7)


def test_compiled_iteration_on_unsplit_rows_gives_the_numpy_chain(monkeypatch):
    """On rows that do not split (every small data set), a seed gives the same chain with numba as without: the
    compiled row pass over every row and the compiled random-intercept draw (``compiled_rows.intercept_draw``) take
    the normals and uniforms the numpy path takes (only the order of floating-point sums differs; the compiled draw
    is the fused iteration's where the problem has its structure, ``fused_iteration.coefficient_draw``, or inside its
    whole iterations, ``fused_iteration.fused_chain``)."""
    from bayesvm.engines.linear import compiled_rows, fused_iteration, gibbs_rows

    assert compiled_rows.available()
    calls = []
    original, fused = compiled_rows.intercept_draw, fused_iteration.coefficient_draw
    whole = fused_iteration.fused_chain
    monkeypatch.setattr(compiled_rows, "intercept_draw", lambda *args: calls.append(1) or original(*args))
    monkeypatch.setattr(fused_iteration, "coefficient_draw", lambda *args: calls.append(1) or fused(*args))

    def whole_iterations(*args):  # FusedIteration.run: its iterations' compiled draws
        completed, refused = whole(*args)
        calls.extend([1] * completed)
        return completed, refused

    monkeypatch.setattr(fused_iteration, "fused_chain", whole_iterations)
    data = _small_data(n=60, seed=3)
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, switch)
        calls.clear()
        # (80 iterations, as in test_compiled_row_pass_gives_the_numpy_chain)
        _, runs[switch] = _gibbs("y ~ x + (1 | g)", data, penalty="learn", draws=60, tune=20, chains=1, seed=9)
        assert (len(calls) >= 79) == (switch == "1")  # the compiled draw ran (every iteration but the first)
    compiled, plain = runs["1"], runs["0"]
    assert gibbs_rows.SPLIT_ROWS > 60
    np.testing.assert_allclose(compiled.theta_d, plain.theta_d, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(compiled.theta_b, plain.theta_b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(compiled.log_posterior, plain.log_posterior, rtol=1e-9)


def test_compiled_intercept_draw_equals_the_general_draw_and_falls_back():
    """``compiled_rows.intercept_draw`` (and its uncompiled source) make ``linalg.gaussian_draw``'s draw from the
    same standard normals, and refuse a Schur complement that is not positive definite."""
    from bayesvm.engines.linear import compiled_rows
    from bayesvm.linalg.dense import BlockedFactor, gaussian_draw
    from bayesvm.linalg.row_sums import row_statistics

    rng = np.random.default_rng(1)
    n, q, J = 300, 4, 17
    D = rng.standard_normal((n, q))
    blocked = BlockedFactor(codes=rng.integers(0, J, n), values=rng.uniform(0.5, 2.0, (n, 1)), n_levels=J)
    w, r = rng.gamma(2.0, 1.0, n), rng.standard_normal(n)
    prior_dd, prior_b = np.diag(rng.uniform(0.1, 2.0, q)), np.array([[0.7]])
    stats = row_statistics(D, w, r, blocked)
    sums = stats.level_sums(blocked, D)
    expected = gaussian_draw(D, w, r, prior_dd, blocked, prior_b, np.random.default_rng(5), stats=stats)
    normals = np.random.default_rng(5)
    eps_d, eps_b = normals.standard_normal(q), normals.standard_normal((J, 1))
    for kernel in (compiled_rows.intercept_draw, compiled_rows._intercept_draw):
        theta_d, theta_b = np.empty(q), np.empty((J, 1))
        assert kernel(stats.gram, stats.product, prior_dd, sums.blocks, sums.cross, sums.rhs, 0.7, eps_d, eps_b,
                      theta_d, theta_b)  # fmt: skip
        np.testing.assert_allclose(theta_d, expected[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(theta_b, expected[1], rtol=1e-10, atol=1e-12)
    indefinite = -np.eye(q) * 1e6
    assert not compiled_rows.intercept_draw(
        stats.gram, stats.product, indefinite, sums.blocks, sums.cross, sums.rhs, 0.7, eps_d, eps_b, theta_d, theta_b
    )


def test_compiled_coordinate_moves_give_the_numpy_chain(monkeypatch):
    """The coordinate and direction moves (the fixed effects, ``w`` integrated out) compiled in one loop each draw
    the chain of the numpy loop, on columns with every row and on dummy columns with a few (standardize=False
    keeps their zeros)."""
    from bayesvm.engines.linear import compiled_rows

    assert compiled_rows.available()
    data = _small_data(n=80, seed=4)
    data["h"] = np.where(np.arange(80) % 5 == 0, "rare", "common")
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, switch)
        _, runs[switch] = _gibbs("y ~ x + h", data, penalty="learn", draws=150, tune=0, chains=1, seed=2)
    # (the row pass is compiled too: its sums in another order differ in the last digits, which 150 iterations carry
    # and grow, to 2e-7 relative on one machine; another chain would differ by the posterior SD, about 0.1 here)
    np.testing.assert_allclose(runs["1"].theta_d, runs["0"].theta_d, rtol=1e-5, atol=1e-7)


def test_compiled_row_pass_is_refused_where_it_cannot_run(monkeypatch):
    from bayesvm.engines.linear import gibbs_rows
    from bayesvm.linalg import row_sums as linalg
    from bayesvm.linalg.dense import BlockedFactor

    monkeypatch.setattr(gibbs_rows, "SPLIT_ROWS", 100)
    monkeypatch.setattr(linalg, "SPLIT_ROWS", 100)
    rng = np.random.default_rng(0)
    n = 400
    D, y = rng.standard_normal((n, 3)), np.where(rng.random(n) < 0.5, 1.0, -1.0)
    shuffled = BlockedFactor(codes=rng.integers(0, 20, n), values=np.ones((n, 1)), n_levels=20)
    # levels in both halves: the halves' per-level sums would collide, so numpy serves
    rows = gibbs_rows.DenseRows(
        D, y, shuffled, gibbs_rows.LatentDraws(rng, n, gibbs_rows.level_boundary_split(shuffled, n))
    )
    assert rows.fused and not rows.compiled
    with pytest.raises(ValueError, match="sorted levels"):
        gibbs_rows.DenseRows(D, y, shuffled, gibbs_rows.LatentDraws(rng, n), compiled=True)
    ordered = shuffled.take(shuffled.sorted_order())
    rows = gibbs_rows.DenseRows(
        D, y, ordered, gibbs_rows.LatentDraws(rng, n, gibbs_rows.level_boundary_split(ordered, n))
    )
    assert rows.compiled
    monkeypatch.setenv("BAYESVM_NUMBA", "0")
    rows = gibbs_rows.DenseRows(
        D, y, ordered, gibbs_rows.LatentDraws(rng, n, gibbs_rows.level_boundary_split(ordered, n))
    )
    assert not rows.compiled


def test_level_boundary_split():
    from bayesvm.engines.linear import gibbs_rows
    from bayesvm.linalg.dense import BlockedFactor

    def split(codes):
        return gibbs_rows.level_boundary_split(
            BlockedFactor(np.asarray(codes), np.ones((len(codes), 1)), 10), len(codes)
        )

    assert split([0, 0, 0, 1, 1, 1, 1, 2, 2, 2]) == 3  # n // 2 = 5 is inside level 1 (rows 3-6): its start is nearer
    assert split([0, 1, 1, 1, 1, 1, 1, 2, 2, 2]) == 7  # level 1 spans rows 1-6: its end is nearer
    assert split([0, 0, 0, 0, 0, 1, 1, 1, 1, 1]) == 5  # already a boundary
    assert split([1, 0, 0, 0, 0, 1, 1, 1, 1, 1]) == 5  # unsorted: n // 2
    assert gibbs_rows.level_boundary_split(None, 11) == 5


@pytest.mark.parametrize("mean", [1e-3, 0.3, 1.0, 40.0, 1e4, 1e8, 1e12])
def test_inverse_gaussian_transform(mean):
    """The bulk transform draws InverseGaussian(mean, 1) at every scale of the mean, including the huge means of
    rows on the margin, and the compiled scalar version returns the same numbers."""
    from bayesvm.engines.linear import compiled_rows, gibbs_rows

    rng = np.random.default_rng(int(np.log10(mean) + 10))
    normals, uniforms = rng.standard_normal(100_000), rng.random(100_000)
    expected = [compiled_rows.inverse_gaussian_scalar(mean, a, b) for a, b in zip(normals[:200], uniforms[:200])]
    draws = gibbs_rows.inverse_gaussian(np.full(normals.size, mean), normals, uniforms)
    assert np.all(draws > 0) and np.all(np.isfinite(draws))
    np.testing.assert_allclose(draws[:200], expected, rtol=1e-15)
    assert stats.kstest(draws, stats.invgauss(mu=mean, scale=1.0).cdf).pvalue > 1e-3
