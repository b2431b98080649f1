"""Swap moves of the selection samplers (:mod:`bayesvm.engines.selection.moves`) against exact answers.

Two strongly correlated predictors and one independent one: the swaps are proposed and accepted often,
and the sampled model probabilities must still equal exact enumeration of the models (quadrature of
``exp(-2 sum hinge) x prior`` per model).  A swap that ignores the hinge likelihood is caught by the
same check.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from bayesvm.engines.selection import moves as selection_moves
from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.engines.selection.moves import SwapMoves, swap_weights
from bayesvm.model.problems import SelectionProblem
from bayesvm.priors import InverseGamma, LaplaceZero, SpikeSlab

from ..model_enumeration import enumerate_models, sampled_model_probabilities

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _correlated(p: int, prior, n: int = 30, seed: int = 4) -> SelectionProblem:
    """``x_2 = x_1 + noise`` (correlation about 0.95), ``x_3`` independent; y from ``x_1`` alone."""
    rng = np.random.default_rng(seed)
    x1 = rng.standard_normal(n)
    X = np.column_stack([x1, x1 + 0.3 * rng.standard_normal(n), rng.standard_normal(n)])[:, :p]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-1.5 * x1)), 1.0, -1.0)
    return SelectionProblem(
        y=y, X=X, selected=np.arange(p), fixed_precision=np.zeros(p), prior=prior, prior_scale=np.ones(p)
    )


def _spike_slab_exact(problem: SelectionProblem, prior: SpikeSlab) -> np.ndarray:
    p = problem.m

    def log_prior_of_model(on, integral):
        base = len(on) * np.log(prior.pi) + (p - len(on)) * np.log1p(-prior.pi)
        if integral is None:
            return base
        grid_points, cell, log_lik = integral
        return base + float(logsumexp(log_lik + stats.norm(0, prior.nu).logpdf(grid_points).sum(axis=1)) + np.log(cell))

    return enumerate_models(problem, log_prior_of_model)


def _counting_moves(monkeypatch, move_type=SwapMoves) -> list:
    """Every instance of ``move_type`` the sampler makes (their proposal and acceptance counts)."""
    made: list = []
    original = move_type.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(move_type, "__init__", init)
    return made


def test_weights_are_symmetric_positive_and_signed():
    X = np.random.default_rng(0).standard_normal((50, 4))
    X[:, 1] = -X[:, 0] + 0.1 * X[:, 1]
    weights, signs = swap_weights(X, np.arange(4))
    np.testing.assert_allclose(weights, weights.T)
    assert np.all(np.diag(weights) == 0) and np.all(weights[~np.eye(4, dtype=bool)] > 0)
    assert signs[0, 1] == -1 and weights[0, 1] > 0.9


@pytest.mark.slow  # (21 s, the swaps alone; the default spike-and-slab sampler, swaps included, is checked against
# enumeration in CI: tests/engines/selection/test_selection.py::test_spike_slab_model_probabilities_match_enumeration)
def test_spike_slab_with_swaps_matches_enumeration(monkeypatch):
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    made = _counting_moves(monkeypatch)
    result = sample_selection(problem, draws=8000, tune=500, chains=2, seed=3, progress=False, pairs=False)
    sampled = sampled_model_probabilities(result, 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))
    accepted = sum(m.accepted for m in made) / sum(m.proposed for m in made)
    assert accepted > 0.02  # the test exercises the swaps (about 4% of 32,000 proposals)


@pytest.mark.slow  # (20 s: the power of the enumeration check above, not a check of the sampler; suite time)
def test_a_swap_that_ignores_the_likelihood_is_caught(monkeypatch):
    """The same check fails when the swaps accept without the hinge-likelihood ratio."""
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    monkeypatch.setattr(selection_moves, "hinge_log_likelihood", lambda y, f: 0.0)
    result = sample_selection(problem, draws=8000, tune=500, chains=2, seed=3, progress=False, pairs=False)
    sampled = sampled_model_probabilities(result, 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert not np.all(np.abs(sampled - exact) < 4 * se + 0.01)


def _laplace_zero_exact(problem: SelectionProblem, prior: LaplaceZero) -> np.ndarray:
    """Exact model probabilities of a two-slope Laplace-zero problem: each model's hinge likelihood times the Laplace
    slab, the scale integrated over its inverse gamma on a grid."""
    log_s2 = np.linspace(-8, 6, 141)
    log_w = stats.invgamma(a=prior.variance.a, scale=prior.variance.b).logpdf(np.exp(log_s2)) + log_s2
    log_w += np.log(log_s2[1] - log_s2[0])

    def log_prior_of_model(on, integral):
        base = len(on) * np.log(prior.rho) + (problem.m - len(on)) * np.log1p(-prior.rho)
        if integral is None:
            return base
        grid_points, cell, log_lik = integral
        sigma = np.sqrt(np.exp(log_s2))[:, None, None]
        log_lap = (-np.log(2 * sigma) - np.abs(grid_points)[None] / sigma).sum(axis=-1)
        return base + float(logsumexp(logsumexp(log_lik[None] + log_lap, axis=1) + np.log(cell) + log_w))

    return enumerate_models(problem, log_prior_of_model)


def test_laplace_zero_with_swaps_and_pairs_matches_enumeration():
    prior = LaplaceZero(rho=0.4, variance=InverseGamma(2.0, 1.0))
    problem = _correlated(2, prior, n=20, seed=6)
    exact = _laplace_zero_exact(problem, prior)
    result = sample_selection(problem, draws=6000, tune=500, chains=2, seed=5, progress=False)
    sampled = sampled_model_probabilities(result, 2)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))
    # the Rao-Blackwellised inclusion probabilities (each draw's P(gamma_k = 1 | the rest), averaged) too
    inclusion = np.array([exact[[1, 3]].sum(), exact[[2, 3]].sum()])  # bit k of the model index: slope k in
    rao_blackwell = result.include_probability.mean(axis=(0, 1))
    assert np.all(np.abs(rao_blackwell - inclusion) < 0.02), (np.round(rao_blackwell, 3), np.round(inclusion, 3))
