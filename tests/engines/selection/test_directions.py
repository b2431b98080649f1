"""Line moves of the selection samplers (:mod:`bayesvm.engines.selection.directions`) against exact answers.

* each route's draw of ``t`` follows the one-dimensional conditional (quadrature), the vague-prior rejection
  route included;
* a chain of line moves alone keeps the posterior of an intercept and two Laplace slopes (grid quadrature);
* the samplers with the line moves (and no other model moves) match exact enumeration of the models, and a line
  move that leaves out the Laplace rows' linear part is caught by the same check.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from bayesvm.engines.selection import directions
from bayesvm.engines.selection.directions import LineMoves, _draw_weak
from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.engines.selection.marginal_pairs import SlopePrior, draw_value, window
from bayesvm.priors import SpikeSlab

from ..model_enumeration import sampled_model_probabilities
from .test_moves import _correlated, _spike_slab_exact

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _line_case(seed: int = 0, n: int = 30):
    """Hinge rows, two Laplace rows and the linear and quadratic terms of one line's conditional."""
    rng = np.random.default_rng(seed)
    a = np.r_[rng.normal(0.5, 1.0, n), 0.7, -0.4]
    b = np.r_[rng.normal(0.0, 1.0, n), 0.5, -0.9]
    return a, b


def _cdf(log_density):
    grid = np.linspace(-20, 20, 100001)
    density = np.exp([log_density(t) for t in grid])
    cdf = integrate.cumulative_trapezoid(density, grid, initial=0.0)
    return lambda x: np.interp(x, grid, cdf / cdf[-1])


@pytest.mark.parametrize("quad", [1e-3, 0.0], ids=["vague", "none"])
def test_the_vague_prior_draw_follows_the_density(quad):
    a, b = _line_case()
    laplace_linear, gauss_linear = 0.3, 0.05

    def log_density(t):
        return -2.0 * np.sum(np.maximum(0.0, a - b * t)) + (laplace_linear + gauss_linear) * t - 0.5 * quad * t * t

    rng = np.random.default_rng(1)
    draws = [_draw_weak(a, b, 0.5, laplace_linear, quad, gauss_linear, rng)[0] for _ in range(3000)]
    draws = [t for t in draws if t is not None]  # (a draw after any number of rejections is exact)
    assert len(draws) > 2900  # None (hand over to the Gaussian route) after 20 rejections: rare
    assert stats.kstest(draws, _cdf(log_density)).pvalue > 0.01


def test_the_gaussian_draw_with_a_linear_term_follows_the_density():
    a, b = _line_case(2)
    quad, linear = 0.8, -0.6

    def log_density(t):
        return -2.0 * np.sum(np.maximum(0.0, a - b * t)) + linear * t - 0.5 * quad * t * t

    pieces, log_masses, _ = window(a, b, SlopePrior(precision=quad), 0.0, 0.2, linear)
    rng = np.random.default_rng(3)
    draws = [draw_value(pieces, log_masses, *rng.random(2)) for _ in range(3000)]
    assert stats.kstest(draws, _cdf(log_density)).pvalue > 0.01


class _AllIn:
    """The step interface of :class:`LineMoves` for two Laplace slopes, both included."""

    gamma = np.array([1, 1])
    inv_scale = np.array([1.3, 0.8])

    def pair_priors(self):
        return np.zeros(2), self.inv_scale, np.zeros(2)

    def apply_line(self, coef):
        pass


@pytest.mark.parametrize("intercept_precision", [0.5, 1e-8], ids=["gaussian-route", "vague-route"])
def test_line_moves_alone_keep_the_posterior(intercept_precision):
    """An intercept and two correlated slopes with Laplace priors: the chain's means match grid quadrature."""
    rng = np.random.default_rng(0)
    n = 30
    x1 = rng.standard_normal(n)
    X = np.column_stack([np.ones(n), x1, x1 + 0.3 * rng.standard_normal(n)])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-1.5 * x1)), 1.0, -1.0)
    step = _AllIn()
    b0, b1, b2 = np.meshgrid(np.linspace(-3, 2, 101), np.linspace(-4, 8, 121), np.linspace(-8, 4, 121), indexing="ij")
    log_post = -0.5 * intercept_precision * b0**2 - step.inv_scale[0] * np.abs(b1) - step.inv_scale[1] * np.abs(b2)
    for i in range(n):
        log_post -= 2.0 * np.maximum(0.0, 1.0 - y[i] * (b0 + b1 * X[i, 1] + b2 * X[i, 2]))
    weight = np.exp(log_post - log_post.max())
    exact = np.array([np.sum(weight * grid) for grid in (b0, b1, b2)]) / weight.sum()
    means = []
    for seed in range(4):
        moves = LineMoves(y, X, np.array([0]), np.array([intercept_precision]), np.array([1, 2]), tune=0, lines=1)
        moves.factor = np.linalg.cholesky(np.array([[1.0, 0.3, 0.2], [0.3, 1.0, 0.8], [0.2, 0.8, 1.0]]))
        chain_rng, coef, kept = np.random.default_rng(seed), np.zeros(3), []
        for _ in range(3000):
            kept.append(moves.run(step, coef, chain_rng, X.T @ X).copy())
        means.append(np.mean(kept[300:], axis=0))
    means = np.array(means)
    se = means.std(axis=0, ddof=1) / np.sqrt(len(means))
    assert np.all(np.abs(means.mean(axis=0) - exact) < 4 * se + 0.01), (means.mean(axis=0), exact, se)


def _lines_only(problem, draws=2500, seed=3):
    return sample_selection(
        problem,
        draws=draws,
        tune=300,
        chains=2,
        seed=seed,
        progress=False,
        swaps=False,
        pairs=False,
        exchanges=False,
        lines=True,
    )


@pytest.mark.slow  # (12 s; line moves are the default with Laplace-zero only, and that sampler, lines included, is
# checked against enumeration in CI: test_moves.py::test_laplace_zero_with_swaps_and_pairs_matches_enumeration)
def test_spike_slab_with_line_moves_matches_enumeration():
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    sampled = sampled_model_probabilities(_lines_only(problem), 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))


def test_a_line_move_without_the_likelihood_is_caught(monkeypatch):
    """The chain check fails when the line's conditional leaves out the hinge rows (the prior alone)."""
    original = directions.window

    def prior_only(a, b, prior, center, half_width, linear=0.0):
        return original(a[:0], b[:0], prior, center, half_width, linear)

    monkeypatch.setattr(directions, "window", prior_only)
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    sampled = sampled_model_probabilities(_lines_only(problem, draws=800), 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert not np.all(np.abs(sampled - exact) < 4 * se + 0.01)
