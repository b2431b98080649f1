"""EP's compiled predictive moments equal those of the general solve (the Schur elimination and the row predictor),
with and without a blocked factor and with rows outside it; a Schur complement that is not positive definite hands
the sweep back; EP with the compiled pass is EP with the general solve."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bayesvm.engines.hyperparameters import Hyperparameters
from bayesvm.engines.linear import ep, ep_moments
from bayesvm.formula import build_design, parse_formula
from bayesvm.linalg import compiled
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from tests.conftest import simulate_grouped

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _problem(formula: str, outside: bool = False):
    data = simulate_grouped(n_groups=20, per_group=9, p=3, seed=5)
    problem = build_model(build_design(parse_formula(formula), data), "learn", PriorSet(), standardize=True).problem()
    if outside:  # (rows that belong to no level of the factor: codes -1)
        codes = problem.blocked.codes.copy()
        codes[::7] = -1
        problem = dataclasses.replace(problem, blocked=dataclasses.replace(problem.blocked, codes=codes))
    hyper = Hyperparameters(problem.components)
    precisions = hyper.precisions(np.linspace(-0.5, 0.8, hyper.size))
    return problem, precisions


@pytest.mark.parametrize(
    "formula, outside",
    [("y ~ x1 + x2 + x3 + (1 | g)", False), ("y ~ x1 + x2 + x3 + (1 | g)", True), ("y ~ x1 + x2 * x3", False)],
)
def test_compiled_moments_equal_the_general_solve(formula, outside):
    problem, precisions = _problem(formula, outside)
    _moments_equal_the_general_solve(problem, precisions)


def test_blas_moments_equal_the_general_solve(monkeypatch):
    """A design without a blocked factor and at least ``BLAS_FROM_COLUMNS`` columns takes the BLAS products."""
    monkeypatch.setattr(ep_moments, "BLAS_FROM_COLUMNS", 3)
    problem, precisions = _problem("y ~ x1 + x2 * x3")
    _moments_equal_the_general_solve(problem, precisions)
    tau = np.full(problem.n, -5.0)  # (negative site precisions: S is indefinite, the sweep is handed back)
    assert ep_moments.sweep_moments(problem, precisions)(tau, np.zeros(problem.n)) is None
    start = (np.zeros(problem.n), np.zeros(problem.n))
    blas_state = ep.run_ep(problem, precisions, *start)
    monkeypatch.setattr(ep_moments, "sweep_moments", lambda problem, precisions: None)
    general_state = ep.run_ep(problem, precisions, *start)
    assert blas_state.n_iter == general_state.n_iter
    np.testing.assert_allclose(blas_state.log_evidence, general_state.log_evidence, rtol=1e-12)


def _moments_equal_the_general_solve(problem, precisions):
    rng = np.random.default_rng(2)
    tau, nu = rng.gamma(2.0, 0.5, problem.n), rng.normal(size=problem.n)
    mean, var = ep._posterior_solver(problem, precisions)(tau, nu)[1]
    found = ep_moments.sweep_moments(problem, precisions)(tau, nu)
    np.testing.assert_allclose(found[0], mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(found[1], var, rtol=1e-10)
    moved = ep_moments.sweep_moments(problem, precisions)(tau * 1.01, nu)  # (other sites, other moments)
    assert not np.allclose(moved[1], var, rtol=1e-6)


def test_a_schur_complement_that_is_not_positive_definite_hands_the_sweep_back():
    problem, precisions = _problem("y ~ x1 + x2 + x3 + (1 | g)")
    tau = np.full(problem.n, -5.0)  # (negative site precisions: P is indefinite)
    assert ep_moments.sweep_moments(problem, precisions)(tau, np.zeros(problem.n)) is None


def test_ep_with_the_compiled_pass_is_ep_with_the_general_solve(monkeypatch):
    problem, precisions = _problem("y ~ x1 + x2 + x3 + (1 | g)")
    start = (np.zeros(problem.n), np.zeros(problem.n))
    compiled_state = ep.run_ep(problem, precisions, *start)
    monkeypatch.setattr(ep_moments, "sweep_moments", lambda problem, precisions: None)
    general_state = ep.run_ep(problem, precisions, *start)
    assert compiled_state.n_iter == general_state.n_iter
    np.testing.assert_allclose(compiled_state.theta.mean_d, general_state.theta.mean_d, rtol=1e-9)
    np.testing.assert_allclose(compiled_state.log_evidence, general_state.log_evidence, rtol=1e-12)
