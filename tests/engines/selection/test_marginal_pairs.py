"""The ``(gamma_k, beta_k)`` updates with the augmentation integrated out
(:mod:`bayesvm.engines.selection.marginal_pairs`) against exact answers.

* the segments' integral equals quadrature of ``exp(-2 sum hinge) x prior``, whatever the first window;
* the draws follow that density (Kolmogorov-Smirnov against its quadrature CDF);
* the compiled sweep makes the numpy sweep's draws on the same uniforms;
* a sampler whose only model moves are these updates (no swaps) matches exact enumeration of the models, and a
  prior constant left out of the inclusion odds is caught by the same check.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from bayesvm.engines.linear import compiled_rows
from bayesvm.engines.selection import marginal_pairs
from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.engines.selection.marginal_pairs import SlopePrior, draw_pair, segments, window
from bayesvm.model.problems import SelectionProblem
from bayesvm.priors import SpikeSlab

from ..model_enumeration import sampled_model_probabilities
from .test_moves import _correlated, _spike_slab_exact

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)

PRIORS = [SlopePrior(precision=0.7), SlopePrior(scale=1.3)]


def _case(seed: int = 0, n: int = 12):
    rng = np.random.default_rng(seed)
    return rng.normal(0.5, 1.0, n), rng.normal(0.0, 1.0, n)


def _log_density(a, b, prior):
    def log_density(t):
        value = -2.0 * np.sum(np.maximum(0.0, a - b * t))
        return value - (0.5 * prior.precision * t * t if prior.precision > 0 else abs(t) / prior.scale)

    return log_density


@pytest.mark.parametrize("prior", PRIORS, ids=["gaussian", "laplace"])
@pytest.mark.parametrize("span", [(0.0, np.inf), (0.3, 0.05), (-4.0, 0.5)])
def test_segment_integral_matches_quadrature(prior, span):
    a, b = _case()
    log_density = _log_density(a, b, prior)
    kinks = list(np.clip(a / b, -49, 49)) + [0.0]
    exact = np.log(integrate.quad(lambda t: np.exp(log_density(t)), -50, 50, points=kinks, limit=500)[0])
    pieces, log_masses, _ = window(a, b, prior, *span)
    assert np.log(np.sum(np.exp(log_masses))) == pytest.approx(exact, abs=1e-7)
    full = segments(a, b, prior).log_masses()
    assert np.log(np.sum(np.exp(full))) == pytest.approx(exact, abs=1e-7)


@pytest.mark.parametrize("prior", PRIORS, ids=["gaussian", "laplace"])
def test_draws_follow_the_density(prior):
    a, b = _case(1)
    log_density = _log_density(a, b, prior)
    grid = np.linspace(-10, 10, 40001)
    density = np.exp([log_density(t) for t in grid])
    cdf = integrate.cumulative_trapezoid(density, grid, initial=0.0)
    cdf /= cdf[-1]
    rng = np.random.default_rng(2)
    draws = np.array([draw_pair(a, b, prior, 50.0, rng.random(3), 0.3, 1.0)[1] for _ in range(4000)])
    assert stats.kstest(draws, lambda x: np.interp(x, grid, cdf)).pvalue > 0.01


def test_inclusion_probability_is_the_evidence_ratio():
    """``P(gamma = 1) = expit(log odds + log Z_1 - log Z_0)``: the sampled frequency at odds set to give 1/2."""
    a, b = _case(3)
    prior = SlopePrior(precision=0.7)
    log_density = _log_density(a, b, prior)
    z1 = integrate.quad(lambda t: np.exp(log_density(t)), -50, 50, points=list(np.clip(a / b, -49, 49)), limit=500)[0]
    log_z1 = np.log(z1) + prior.log_constant()
    log_z0 = -2.0 * np.sum(np.maximum(0.0, a))
    rng = np.random.default_rng(4)
    odds = log_z0 - log_z1  # P(include) = 1/2
    included = np.mean([draw_pair(a, b, prior, odds, rng.random(3))[0] for _ in range(6000)])
    assert abs(included - 0.5) < 4 * np.sqrt(0.25 / 6000)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba not installed")
@pytest.mark.parametrize("prior_type", ["spike-slab", "laplace-zero"])
def test_compiled_sweep_makes_the_numpy_draws(monkeypatch, prior_type):
    from bayesvm.priors import InverseGamma, LaplaceZero

    rng = np.random.default_rng(1)
    n = 200
    X = rng.standard_normal((n, 6))
    X[:, 3] = np.where(rng.random(n) < 0.8, 0.0, X[:, 3])  # a sparse column: only its rows are visited
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X[:, 0] + X[:, 1])), 1.0, -1.0)
    X = np.column_stack([np.ones(n), X])
    prior = SpikeSlab(pi=0.4, nu=1.5) if prior_type == "spike-slab" else LaplaceZero(0.4, InverseGamma(2.0, 1.0))
    problem = SelectionProblem(
        y=y, X=X, selected=np.arange(1, 7), fixed_precision=np.r_[0.01, np.zeros(6)], prior=prior,
        prior_scale=np.ones(6),
    )  # fmt: skip
    compiled = sample_selection(problem, draws=20, tune=0, chains=1, seed=3, progress=False, swaps=False)
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    plain = sample_selection(problem, draws=20, tune=0, chains=1, seed=3, progress=False, swaps=False)
    np.testing.assert_allclose(compiled.theta_d, plain.theta_d, atol=1e-7)
    np.testing.assert_array_equal(compiled.include, plain.include)
    np.testing.assert_allclose(compiled.include_probability, plain.include_probability, atol=1e-9)
    probability = compiled.include_probability
    assert np.all((probability >= 0) & (probability <= 1)) and np.any((probability > 0.01) & (probability < 0.99))


def _pairs_only(problem, seed=3):
    return sample_selection(problem, draws=3000, tune=300, chains=2, seed=seed, progress=False, swaps=False)


def _exact_inclusion(model_probabilities: np.ndarray, p: int) -> np.ndarray:
    """``P(gamma_k = 1 | y)`` from the probabilities of the ``2^p`` models (bit k of the index = slope k in)."""
    codes = np.arange(2**p)
    return np.array([model_probabilities[(codes >> k) & 1 == 1].sum() for k in range(p)])


def _batch_variance(draws: np.ndarray, batches: int = 30) -> np.ndarray:
    """Variance of the means of ``batches`` consecutive batches of each chain's ``(draws, m)`` draws, averaged over
    the chains: the Monte Carlo variance of an estimate from one batch."""
    per_chain = [np.array_split(chain, batches) for chain in draws]
    means = np.array([[batch.mean(axis=0) for batch in chain] for chain in per_chain])  # (chains, batches, m)
    return means.var(axis=1, ddof=1).mean(axis=0)


def test_spike_slab_with_marginal_pairs_matches_enumeration():
    """The model probabilities, and the inclusion probabilities both as the share of draws with each slope in and
    Rao-Blackwellised (the average of each draw's ``P(gamma_k = 1 | the rest)``), equal exact enumeration; the
    Rao-Blackwellised estimate varies less from batch to batch of the same chains."""
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    result = _pairs_only(problem)
    sampled = sampled_model_probabilities(result, 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))
    inclusion = _exact_inclusion(exact, 3)
    rao_blackwell = result.include_probability.mean(axis=(0, 1))
    assert np.all(np.abs(rao_blackwell - inclusion) < 0.02), (np.round(rao_blackwell, 3), np.round(inclusion, 3))
    # (the substitute x_2's share moves with x_1's state, which conditioning on the rest cannot average away: 0.85
    # of the indicators' batch variance there; 0.02 for the independent x_3)
    rb_variance, share_variance = _batch_variance(result.include_probability), _batch_variance(result.include * 1.0)
    assert np.all(rb_variance <= share_variance) and rb_variance.sum() < 0.8 * share_variance.sum()


def test_sampler_with_strong_exchanges_matches_enumeration(monkeypatch):
    """Slopes 0 and 1 are near substitutes (columns correlated 0.95; on 100 rows their indicators correlate about
    -0.6), so the tuning draws make them a strong pair and the kept draws exchange them repeatedly: the model
    probabilities still equal exact enumeration."""
    made = []
    original = marginal_pairs.MarginalPairs.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(marginal_pairs.MarginalPairs, "__init__", init)
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior, n=100)
    exact = _spike_slab_exact(problem, prior)
    sampled = sampled_model_probabilities(_pairs_only(problem), 3)
    assert all(m.strong.tolist() == [[0, 1]] for m in made) and made
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))


def test_a_wrong_prior_constant_is_caught(monkeypatch):
    """The same check fails when the slab's normalising constant is left out of the inclusion odds."""
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    monkeypatch.setattr(marginal_pairs, "LOG_2PI", 0.0)
    result = _pairs_only(problem)
    sampled = sampled_model_probabilities(result, 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert not np.all(np.abs(sampled - exact) < 4 * se + 0.01)
    rao_blackwell = result.include_probability.mean(axis=(0, 1))  # the Rao-Blackwellised estimate is caught too
    assert not np.all(np.abs(rao_blackwell - _exact_inclusion(exact, 3)) < 0.02)


class _FakeStep:
    """The step interface of :class:`MarginalPairs` for two slopes with fixed priors (slope 0 included)."""

    def __init__(self, precision, inv_scale, log_odds):
        self.gamma = np.array([1, 0])
        self.priors = (np.asarray(precision, float), np.asarray(inv_scale, float), np.asarray(log_odds, float))
        self.include = self.value = None

    def pair_priors(self):
        return self.priors

    def apply_pairs(self, include, value):
        self.include, self.value = include.copy(), value.copy()


@pytest.mark.parametrize("strong", [False, True], ids=["sweep", "strong-pair-repeated"])
@pytest.mark.parametrize("numba_on", ["1", "0"], ids=["compiled", "numpy"])
@pytest.mark.parametrize("prior", PRIORS, ids=["gaussian", "laplace"])
def test_exchange_draws_the_pair_given_one_in(monkeypatch, prior, numba_on, strong):
    """From ``(slope 0 in, slope 1 out)``, an exchange keeps slope 0 with the probability that quadrature of the
    two one-slope models gives (the other coefficient, an intercept, held fixed) and draws the included value
    from its density: the mean over the draws of each model matches the quadrature mean.  So does a sweep that
    exchanges the pair :data:`marginal_pairs.STRONG_EXCHANGES` more times (strong substitutes)."""
    if numba_on == "1" and not compiled_rows.available():
        pytest.skip("numba not installed")
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, numba_on)
    rng = np.random.default_rng(7)
    n = 40
    x = rng.standard_normal((n, 2))
    x[:, 1] = 0.8 * x[:, 0] + 0.6 * x[:, 1]  # correlated near-substitutes
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-1.5 * x[:, 0])), 1.0, -1.0)
    X = np.column_stack([np.ones(n), x])
    precision = [prior.precision] * 2
    inv_scale = [0.0 if prior.precision > 0 else 1.0 / prior.scale] * 2
    log_odds = [0.4, -0.3]
    evidence, means = [], []
    for k in (1, 2):
        log_density = _log_density(1.0 - y * 0.2, y * X[:, k], prior)  # intercept fixed at 0.2
        kinks = list(np.clip((1.0 - y * 0.2) / (y * X[:, k]), -29, 29)) + [0.0]
        mass = integrate.quad(lambda t, f=log_density: np.exp(f(t)), -30, 30, points=kinks, limit=500)[0]
        first = integrate.quad(lambda t, f=log_density: t * np.exp(f(t)), -30, 30, points=kinks, limit=500)[0]
        evidence.append(np.log(mass) + prior.log_constant() + log_odds[k - 1])
        means.append(first / mass)
    keep = 1.0 / (1.0 + np.exp(evidence[1] - evidence[0]))
    pairs = marginal_pairs.MarginalPairs(y, X, np.array([1, 2]))
    if strong:
        pairs.strong = np.array([[0, 1]], dtype=np.int64)
    kept, values = [], []
    draws = 3000
    for _ in range(draws):
        step = _FakeStep(precision, inv_scale, log_odds)
        coef = np.array([0.2, 0.5, 0.0])
        pairs.exchange(step, coef, rng)
        assert step.include.tolist() in ([1, 0], [0, 1])
        assert coef[1] == step.value[0] and coef[2] == step.value[1]
        kept.append(step.include[0] == 1)
        values.append(step.value[0] if kept[-1] else step.value[1])
    kept, values = np.array(kept), np.array(values)
    assert abs(kept.mean() - keep) < 4 * np.sqrt(keep * (1 - keep) / draws), (kept.mean(), keep)
    for model, mean in ((kept, means[0]), (~kept, means[1])):
        se = values[model].std() / np.sqrt(model.sum())
        assert abs(values[model].mean() - mean) < 4 * se, (values[model].mean(), mean)


def test_exchange_partners_learn_slopes_that_replace_each_other():
    """Slopes 0 and 1 replace each other in the tuning draws (their columns are independent): the exchanges then
    propose the pair most of the time; the weights are fixed after tuning."""
    rng = np.random.default_rng(0)
    n = 200
    X = rng.standard_normal((n, 3))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    pairs = marginal_pairs.MarginalPairs(y, X, np.arange(3), tune=100)
    for step in range(100):
        first = rng.random() < 0.5
        pairs.observe(step, np.array([first, not first, rng.random() < 0.5], dtype=np.int8))
    assert pairs.affinity[0, 1] == pytest.approx(1.0) and pairs.affinity[1, 0] == pytest.approx(1.0)
    assert pairs.affinity[0, 2] < 0.3 and np.all(np.diag(pairs.affinity) == 0)
    assert pairs.strong.tolist() == [[0, 1]]  # exchanged STRONG_EXCHANGES more times per sweep
    learned = pairs.affinity.copy()
    for step in range(100, 150):  # kept draws: nothing changes
        pairs.observe(step, np.array([1, 1, 0], dtype=np.int8))
    np.testing.assert_array_equal(pairs.affinity, learned)
    weights = marginal_pairs.swap_weights(X, np.arange(3))[0] + pairs.affinity
    assert weights[0, 1] / weights[0].sum() > 0.75
