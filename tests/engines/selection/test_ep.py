"""Accurate VB for selection priors (``bayesvm.engines.selection.ep``).

* Each slope site's tilted moments (normaliser, mean, variance, inclusion probability, ``P(beta > 0)``) equal
  numerical integrals of ``N(beta; m, v) s(beta)``, for spike-and-slab, lasso and Laplace-zero sites, also far in
  the tails.
* The prior of the scale's hyperparameter, with its Jacobian, integrates to 1.
* On a two-coefficient model (intercept and one selected slope), EP's evidence, means and inclusion probability
  match a two-dimensional quadrature of the exact pseudo-posterior, and the evidence does not depend on the
  slopes' artificial base precision.
* Agreement with the Gibbs samplers on a model with a random intercept is checked through ``bsvm()`` in
  ``tests/test_combinations.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

from bayesvm.engines.selection import ep as selection_ep
from bayesvm.engines.selection.ep import (
    fit_selection_accurate,
    run_selection_ep,
    scale_log_prior,
    slope_tilted,
    slope_widths,
)
from bayesvm.model.problems import SelectionProblem
from bayesvm.priors import InverseGamma, LaplaceZero, Lasso, SpikeSlab

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)

PRIORS = [(SpikeSlab(pi=0.3, nu=2.0), 4.0), (Lasso(nu=0.7), 0.7), (LaplaceZero(rho=0.2), 1.3)]
CAVITIES = [(0.0, 1.0), (1.5, 0.3), (-3.0, 2.0), (0.2, 0.01), (8.0, 0.5), (-40.0, 1.0)]


def _continuous_and_mass(prior, width):
    """The site's density off zero and its point mass at zero."""
    if isinstance(prior, SpikeSlab):
        return (lambda b: prior.pi * norm.pdf(b, 0.0, np.sqrt(width))), 1.0 - prior.pi
    laplace = lambda b: np.exp(-np.abs(b) / width) / (2.0 * width)  # noqa: E731
    if isinstance(prior, Lasso):
        return laplace, 0.0
    return (lambda b: prior.rho * laplace(b)), 1.0 - prior.rho


@pytest.mark.parametrize("prior,width", PRIORS, ids=lambda x: type(x).__name__ if not np.isscalar(x) else "")
@pytest.mark.parametrize("m,v", CAVITIES)
def test_slope_tilted_moments_match_integrals(prior, width, m, v):
    density, mass = _continuous_and_mass(prior, width)
    cavity = lambda b: norm.pdf(b, m, np.sqrt(v))  # noqa: E731
    lo, hi = m - 40 * np.sqrt(v) - 40 * width, m + 40 * np.sqrt(v) + 40 * width

    def moment(k, lower=lo, upper=hi):
        return integrate.quad(lambda b: b**k * cavity(b) * density(b), lower, upper, points=[0.0, m], limit=400)[0]

    continuous = moment(0)
    z = continuous + mass * cavity(0.0)
    mean = moment(1) / z
    var = moment(2) / z - mean**2
    positive = moment(0, 0.0, hi) / z
    got = slope_tilted(prior, np.array([m]), np.array([v]), np.array([width]))
    if z > 1e-12:  # (far in the tails quad loses the mass; the closed forms stay finite, checked below)
        assert got.log_z[0] == pytest.approx(np.log(z), abs=1e-6)
        assert got.mean[0] == pytest.approx(mean, abs=1e-6 * (1 + abs(mean)))
        assert got.var[0] == pytest.approx(var, abs=1e-6 * (1 + var))
        assert got.p_include[0] == pytest.approx(continuous / z, abs=1e-7)
        assert got.p_positive[0] == pytest.approx(positive, abs=1e-7)
    for value in (got.log_z, got.mean, got.var, got.p_include, got.p_positive):
        assert np.all(np.isfinite(value))


@pytest.mark.parametrize("prior", [LaplaceZero(rho=0.3, variance=InverseGamma(2.0, 1.5)), Lasso(a=2.0, b=0.5)])
def test_scale_prior_with_its_jacobian_integrates_to_one(prior):
    total = integrate.quad(lambda t: np.exp(scale_log_prior(prior, np.array([t]))), -30.0, 30.0, limit=400)[0]
    assert total == pytest.approx(1.0, abs=1e-6)


def _two_coefficients(prior, effect=0.8, n=40, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(0.3 + effect * x))), 1.0, -1.0)
    X = np.column_stack([np.ones(n), x])
    return SelectionProblem(y=y, X=X, selected=np.array([1]), fixed_precision=np.array([0.1, 1.0]), prior=prior,
                            prior_scale=np.ones(1))  # fmt: skip


def _exact(problem, width):
    """``log Z``, ``P(gamma = 1 | y)`` and the posterior means by quadrature on a fine grid."""
    y, x, prior = problem.y, problem.X[:, 1], problem.prior
    a, b = np.linspace(-6, 6, 601), np.linspace(-8, 8, 1601)
    A, B = np.meshgrid(a, b, indexing="ij")
    log_lik = -2.0 * np.maximum(0.0, 1.0 - y * (A[..., None] + B[..., None] * x)).sum(-1)
    log_a = norm.logpdf(A, 0.0, np.sqrt(10.0))
    density, mass = _continuous_and_mass(prior, width)
    da, db = a[1] - a[0], b[1] - b[0]
    slab = np.exp(log_lik + log_a) * density(B)
    spike = np.exp(-2.0 * np.maximum(0.0, 1.0 - y * a[:, None]).sum(-1) + norm.logpdf(a, 0.0, np.sqrt(10.0)))
    z_slab, z_spike = slab.sum() * da * db, mass * spike.sum() * da
    z = z_slab + z_spike
    mean_a = ((slab * A).sum() * da * db + mass * (spike * a).sum() * da) / z
    return np.log(z), z_slab / z, mean_a, (slab * B).sum() * da * db / z


@pytest.mark.parametrize("prior", [SpikeSlab(pi=0.3, nu=1.5), Lasso(nu=0.5), LaplaceZero(rho=0.3)], ids=repr)
def test_ep_matches_quadrature_on_two_coefficients(prior):
    problem = _two_coefficients(prior)
    width = slope_widths(problem, np.array([np.log(0.25)]))  # Laplace-zero: sigma_u = 0.5
    n = problem.X.shape[0]
    state = run_selection_ep(problem, [], width, np.r_[np.ones(n), 1.0], np.r_[2.0 * problem.y, 0.0], max_iter=500)
    log_z, p_include, mean_a, mean_b = _exact(problem, width[0])
    assert state.converged
    assert state.log_evidence == pytest.approx(log_z, abs=0.02)
    assert state.tilted.p_include[0] == pytest.approx(p_include, abs=0.01)
    assert state.theta.mean_d == pytest.approx([mean_a, mean_b], abs=0.04)


def test_the_evidence_does_not_depend_on_the_slopes_base_precision(monkeypatch):
    """The slopes' tiny base precision is only there for a finite determinant: with its correction the evidence
    is the same for another value of it (an evidence without the correction moves by ``log(kappa'/kappa) / 2``
    per slope, here 3.5), and it matches the quadrature."""
    problem = _two_coefficients(Lasso(nu=0.5))
    width = slope_widths(problem, np.zeros(0))
    n = problem.X.shape[0]
    start = (np.r_[np.ones(n), 1.0], np.r_[2.0 * problem.y, 0.0])
    default = run_selection_ep(problem, [], width, *start, max_iter=500).log_evidence
    monkeypatch.setattr(selection_ep, "SLOPE_BASE_PRECISION", 1e-5)
    other = run_selection_ep(problem, [], width, *start, max_iter=500).log_evidence
    assert other == pytest.approx(default, abs=1e-3)
    assert default == pytest.approx(_exact(problem, width[0])[0], abs=0.02)


def test_a_model_without_hyperparameters_is_one_ep_fit():
    """Spike-and-slab (fixed pi, nu) without random effects: one node, the EP fit at its convergence."""
    problem = _two_coefficients(SpikeSlab(pi=0.3, nu=1.5))
    result = fit_selection_accurate(problem)
    assert result.weights.tolist() == [1.0] and result.converged
    n = problem.X.shape[0]
    state = run_selection_ep(problem, [], slope_widths(problem, np.zeros(0)), np.r_[np.ones(n), 1.0],
                             np.r_[2.0 * problem.y, 0.0], max_iter=500)  # fmt: skip
    np.testing.assert_allclose(result.thetas[0].mean_d, state.theta.mean_d, atol=1e-4)
    assert result.slopes.p_include == pytest.approx(state.tilted.p_include, abs=1e-4)
    assert result.log_evidence == pytest.approx(state.log_evidence, abs=1e-3)


def test_negative_slope_precisions_that_make_q_improper_are_floored(monkeypatch):
    """A spike-and-slab site whose tilted variance exceeds its cavity's gets a negative precision; where such sites
    together make the precision indefinite (spam does), EP floors every slope site's precision at 0 and goes on.
    Simulated here by a solver that refuses any negative slope precision, as an indefinite Cholesky would."""
    problem = _two_coefficients(SpikeSlab(pi=0.3, nu=1.5), effect=0.25)  # ambiguous slope: a negative site
    width = slope_widths(problem, np.zeros(0))
    n = problem.X.shape[0]
    start = (np.r_[np.ones(n), 1.0], np.r_[2.0 * problem.y, 0.0])
    free = run_selection_ep(problem, [], width, *start, max_iter=500)
    assert free.tau[n:].min() < 0 and not free.clipped
    real = selection_ep.gaussian_posterior

    def indefinite(C, tau, nu, *rest):
        if np.any(tau[n:] < 0):
            raise np.linalg.LinAlgError("the posterior precision is not positive definite")
        return real(C, tau, nu, *rest)

    monkeypatch.setattr(selection_ep, "gaussian_posterior", indefinite)
    floored = run_selection_ep(problem, [], width, *start, max_iter=500)
    assert floored.clipped and floored.converged and floored.tau[n:].min() >= 0.0
    assert np.isfinite(floored.log_evidence) and 0.0 < floored.tilted.p_include[0] < 1.0


def test_the_default_path_stops_at_the_first_node_where_ep_fails(monkeypatch):
    """``stop_at_failure`` (the default ``vb``, which falls back to mean-field VB on any failure) raises at the first
    failed node, after that node's attempts; without it the search goes on to other nodes (and here, with EP failing
    everywhere, ends with no converged node)."""
    from bayesvm.engines.hyper_grid import AccurateFitError
    from bayesvm.engines.linear.ep import EP_ATTEMPTS

    problem = _two_coefficients(LaplaceZero(0.3))
    real, calls = selection_ep.run_selection_ep, []

    def never_converges(*args, **kwargs):
        calls.append(1)
        state = real(*args, **{**kwargs, "max_iter": 2})
        state.converged = False
        return state

    monkeypatch.setattr(selection_ep, "run_selection_ep", never_converges)
    with pytest.raises(AccurateFitError, match="EP did not converge at a node"):
        fit_selection_accurate(problem, stop_at_failure=True)
    assert len(calls) == len(EP_ATTEMPTS)  # one node (no warm start yet), every damping
    calls.clear()
    with pytest.raises(AccurateFitError, match="converged at no node"):
        fit_selection_accurate(problem)
    assert len(calls) > 3 * len(EP_ATTEMPTS)


def test_warm_starts_get_a_capped_budget_before_the_cold_start():
    """Each warm start at most WARM_SWEEPS per damping, then the cold start's whole schedule, then the warm start's
    strongest damping in full (a warm start that fails oscillates for its whole budget; the cold start often converges
    in tens of sweeps)."""
    schedule = ((0.7, 200), (0.3, 1000), (0.1, 4000))
    warm = object()
    order = selection_ep._attempt_order([warm], schedule)
    cap = selection_ep.WARM_SWEEPS
    assert order == [
        (warm, 0.7, 200), (warm, 0.3, cap), (warm, 0.1, cap),
        (None, 0.7, 200), (None, 0.3, 1000), (None, 0.1, 4000),
        (warm, 0.1, 4000),
    ]  # fmt: skip
    assert selection_ep._attempt_order([], schedule) == [(None, d, s) for d, s in schedule]
