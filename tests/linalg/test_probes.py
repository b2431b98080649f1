"""The probe engine against the exact posterior: exact parts to 1e-8, estimates within their stated error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from bayesvm.engines.components import sparse_prior
from bayesvm.engines.linear.vb import fit_vb, probe_bound_noise
from bayesvm.linalg import probes as sparse_probes
from bayesvm.linalg.probes import probe_posterior
from tests.conftest import simulate_grouped
from tests.engines.linear.test_vb import _problem
from tests.engines.mc_bound import mc_lower_bound

CROSSED_SLOPE = "y ~ x1 + x2 + (1 + x1 | g) + (1 | h)"
FORMULAS = [CROSSED_SLOPE, "y ~ x1 + (1 | g) + (1 | h)", "y ~ x1 + (1 | g/h)"]


def _data(n_groups: int, per_group: int, seed: int, other_levels: int = 80):
    """Grouped data whose second factor ``h`` has ``other_levels`` levels: more coefficients than the
    preconditioner's dense block takes, so the probes have work on both factors."""
    data = simulate_grouped(n_groups=n_groups, per_group=per_group, p=2, seed=seed, slope_sd=0.4)
    data["h"] = [f"h{k}" for k in np.random.default_rng(seed).integers(0, other_levels, len(data))]
    return data


def _setup(formula: str, probes: int, seed: int = 3):
    """A sparse-path problem, a q(theta) state mid-fit, and the exact precision at that state."""
    data = _data(90, 4, 11)
    problem = dataclasses.replace(_problem(formula, data, penalty=None, max_dense_columns=0), probes=probes)
    rng = np.random.default_rng(seed)
    w = rng.gamma(1.0, 1.0, problem.n) + 0.05
    precisions = [np.eye(c.k) * (1.0 + 0.3 * k) + 0.1 * (c.k > 1) for k, c in enumerate(problem.components)]
    prior = sparse_prior(problem, precisions)
    rhs = problem.y * (1.0 + w)
    layout, block = problem.probe_layout
    theta = probe_posterior(layout, w, rhs, prior, probes, 7, block)
    precision = (problem.D.T @ sp.diags(w) @ problem.D + prior).toarray()
    mean = np.linalg.solve(precision, problem.D.T @ rhs)
    return problem, theta, precision, mean, block


@pytest.mark.parametrize("formula", FORMULAS)
def test_exact_parts_equal_the_dense_solve(formula):
    """Mean, solves and every covariance with the fixed effects come from conjugate gradients, to 1e-8."""
    problem, theta, precision, mean, block = _setup(formula, probes=8)
    cov = np.linalg.inv(precision)
    np.testing.assert_allclose(theta.mean_d, mean, rtol=1e-8, atol=1e-10)
    rhs = np.random.default_rng(0).standard_normal((mean.size, 3))
    np.testing.assert_allclose(theta.solve(rhs), cov @ rhs, rtol=1e-8, atol=1e-10)
    fixed = theta.layout.rest[block]
    np.testing.assert_array_equal(fixed, np.flatnonzero(problem.fixed_precision > 0))  # the fixed effects
    assert theta.op.single.sum() >= 70  # the other factor is left to the probes
    everything = np.arange(mean.size)
    np.testing.assert_allclose(
        theta.cov_entries(fixed[:, None], everything[None, :]), cov[fixed], rtol=1e-8, atol=1e-10
    )
    np.testing.assert_allclose(theta.variance()[fixed], np.diag(cov)[fixed], rtol=1e-8)


@pytest.mark.parametrize("formula", FORMULAS)
def test_row_variances_within_their_stated_error(formula):
    """The Rao-Blackwellised row variances scatter around the exact ones as their standard errors say."""
    problem, theta, precision, _, _ = _setup(formula, probes=400)
    C = problem.D.toarray()
    exact = np.einsum("ij,ji->i", C, np.linalg.solve(precision, C.T))
    parts, coord, t_j = theta._training_parts
    estimate, se = theta._row_variances(parts, coord, t_j)
    _, predicted = theta.predictor(problem.D, training=True)
    np.testing.assert_array_equal(estimate, predicted)
    # rows whose conditional variance given one coordinate is already exact (nested factors: the
    # complement is diagonal off the fixed effects) have no Monte Carlo error
    exact_rows = se < 1e-10 * exact
    np.testing.assert_allclose(estimate[exact_rows], exact[exact_rows], rtol=1e-8)
    z = (estimate - exact)[~exact_rows] / se[~exact_rows]
    assert z.size > 0 or "/" in formula
    if z.size == 0:
        return
    assert 0.5 < np.sqrt(np.mean(z**2)) < 1.6, np.sqrt(np.mean(z**2))
    assert np.max(np.abs(z)) < 5.0
    assert abs(np.mean(z)) < 4.0 / np.sqrt(z.size) + 0.3  # no bias beyond the probes' correlation across rows
    # new rows (here: the same rows passed as new data) take the same estimator
    _, again = theta.predictor(problem.D[:40])
    np.testing.assert_allclose(again, estimate[:40], rtol=1e-12)


@pytest.mark.parametrize("formula", FORMULAS)
def test_coefficient_covariances_converge_to_the_exact_ones(formula):
    """Every entry the VB updates read (diagonal, within-level blocks, cross terms) is unbiased: the error
    with 2,000 probes is about a quarter of that with 125 (Monte Carlo error falls as 1 / sqrt(probes))."""
    errors = []
    for probes in (125, 2000):
        problem, theta, precision, _, _ = _setup(formula, probes=probes)
        cov = np.linalg.inv(precision)
        rng = np.random.default_rng(1)
        rows, cols = rng.integers(0, cov.shape[0], 400), rng.integers(0, cov.shape[0], 400)
        blocks = problem.components[0].index
        got = np.concatenate(
            [
                theta.variance(),
                theta.cov_entries(rows, cols),
                theta.cov_entries(blocks[:, :, None], blocks[:, None, :]).ravel(),
            ]
        )
        want = np.concatenate([np.diag(cov), cov[rows, cols], cov[blocks[:, :, None], blocks[:, None, :]].ravel()])
        errors.append(np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(np.diag(cov) ** 2)))
    assert errors[1] < 0.02
    assert errors[1] < 0.5 * errors[0], errors


def test_log_determinant_within_its_stated_error():
    problem, theta, precision, _, _ = _setup(CROSSED_SLOPE, probes=300)
    exact = np.linalg.slogdet(precision)[1]
    assert theta.logdet_se > 0
    assert abs(theta.logdet_precision - exact) < 4 * theta.logdet_se, (theta.logdet_precision, exact, theta.logdet_se)
    assert theta.report.logdet_se == theta.logdet_se


def test_draws_are_exact():
    problem, theta, precision, mean, _ = _setup(CROSSED_SLOPE, probes=8)
    draws, _ = theta.sample(np.random.default_rng(2), 20000)
    cov = np.linalg.inv(precision)
    sd = np.sqrt(np.diag(cov))
    assert np.max(np.abs(draws.mean(0) - mean) / sd) < 5 / np.sqrt(20000) * 1.0 + 0.02
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.05 * sd.max() ** 2)


def test_common_random_numbers():
    """The same seed gives the same estimates (a sweep is a deterministic map); another seed does not."""
    problem, a, *_ = _setup(CROSSED_SLOPE, probes=16)
    layout, block = problem.probe_layout
    args = (layout, a.weights, problem.y * (1.0 + a.weights), a.prior, 16)
    np.testing.assert_array_equal(probe_posterior(*args, 7, block).variance(), a.variance())
    assert not np.array_equal(probe_posterior(*args, 8, block).variance(), a.variance())


def test_conjugate_gradients_report_failure(monkeypatch):
    monkeypatch.setattr(sparse_probes, "MAX_CG_ITER", 1)
    with pytest.raises(sparse_probes.ProbeSolveError, match="conjugate gradients"):
        _setup(CROSSED_SLOPE, probes=4)


@pytest.mark.parametrize("formula", FORMULAS)
def test_fit_matches_the_exact_fit(formula):
    """A full fit with 64 probes lands on the exact VB answer within the probes' error, and its estimated
    bound never drops by more than its Monte Carlo error (:func:`probe_bound_noise`)."""
    data = _data(120, 5, 5)
    exact_problem = _problem(formula, data, penalty="learn", max_dense_columns=0)
    exact = fit_vb(exact_problem)
    probe = fit_vb(dataclasses.replace(exact_problem, probes=64))
    assert probe.converged and not probe.decreases
    bound = probe.lower_bound
    assert np.diff(bound).min() >= -probe_bound_noise(probe.theta, bound[-1])
    sd = np.sqrt(exact.theta.variance())
    assert np.max(np.abs(probe.theta.mean_d - exact.theta.mean_d) / sd) < 0.05
    np.testing.assert_allclose(np.sqrt(probe.theta.variance()), sd, rtol=0.1)
    fixed = np.flatnonzero(exact_problem.fixed_precision > 0)
    np.testing.assert_allclose(np.sqrt(probe.theta.variance()[fixed]), sd[fixed], rtol=0.01)
    for p, e in zip(probe.components, exact.components):
        np.testing.assert_allclose(p.expected_covariance(), e.expected_covariance(), rtol=0.03)
    assert abs(probe.lower_bound[-1] - exact.lower_bound[-1]) < 4 * 0.5 * probe.theta.logdet_se + 0.5


@pytest.mark.parametrize("formula", FORMULAS)
def test_estimated_bound_matches_monte_carlo(formula):
    """The estimated closed-form bound against a Monte Carlo estimate of E_q[log p - log q] under the exact q
    (draws from the exact covariance): within 3 standard errors of the two estimates combined."""
    data = simulate_grouped(n_groups=6, per_group=6, p=3, seed=11, slope_sd=0.5)
    problem = dataclasses.replace(_problem(formula, data, penalty="learn", max_dense_columns=0), probes=200)
    result = fit_vb(problem, max_iter=3)
    estimate, se = mc_lower_bound(problem, result, draws=4000, seed=5)
    closed = result.lower_bound[-1]
    combined = np.hypot(se, 0.5 * result.theta.logdet_se)
    assert abs(estimate - closed) < 3 * combined, (closed, estimate, se, result.theta.logdet_se)


def test_nested_factors_are_exact_with_few_probes():
    """Nested ``g/h``: after eliminating ``g:h`` the complement is diagonal outside the fixed effects, so the
    Rao-Blackwellised estimates (rows, every coefficient) leave nothing to chance."""
    problem, theta, precision, _, _ = _setup("y ~ x1 + (1 | g/h)", probes=4)
    cov = np.linalg.inv(precision)
    np.testing.assert_allclose(theta.variance(), np.diag(cov), rtol=1e-7)
    C = problem.D.toarray()
    _, rows = theta.predictor(problem.D, training=True)
    np.testing.assert_allclose(rows, np.einsum("ij,ji->i", C, cov @ C.T), rtol=1e-7)
