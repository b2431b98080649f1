"""The over-relaxed variance draw keeps its inverse gamma (bayesvm.engines.overrelax); the samplers that make it are
checked against quadrature in tests/engines/linear/test_interweave.py and test_collapsed_variance.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bayesvm.engines.overrelax import (
    _gamma_from_normal_score,
    _gamma_normal_score,
    _relaxed_gamma,
    compiled_relaxed_gamma,
    relaxed_inverse_gamma,
)
from bayesvm.linalg import compiled


@pytest.mark.parametrize("shape,scale", [(150.0, 900.0), (2.5, 0.3), (0.6, 1e-4)])
def test_relaxed_inverse_gamma_keeps_the_inverse_gamma(shape, scale):
    rng = np.random.default_rng(1)
    target = stats.invgamma(shape, scale=scale)
    current = target.rvs(size=20_000, random_state=rng)
    new = np.array([relaxed_inverse_gamma(shape, scale, c, rng, 0.95) for c in current])
    assert stats.kstest(new, target.cdf).pvalue > 1e-3
    scores = stats.norm.ppf(target.cdf(current)), stats.norm.ppf(target.cdf(new))
    assert np.corrcoef(*scores)[0, 1] == pytest.approx(-0.95, abs=0.01)  # the step on the normal scores
    # a chain of steps from a start far in the tail reaches the target
    chain, value = np.empty(5_000), 1e3 * target.ppf(0.999)
    for i in range(chain.size):
        value = relaxed_inverse_gamma(shape, scale, value, rng, 0.95)
        chain[i] = value
    assert stats.kstest(chain[100:], target.cdf).pvalue > 1e-3


@pytest.mark.parametrize("shape", [0.6, 3.0, 150.0])
def test_normal_scores_are_exact_in_both_tails(shape):
    for p in (1e-200, 1e-12, 0.3, 0.5, 0.9, 1 - 1e-12):
        value = stats.gamma(shape).ppf(p)
        if not value > 0:
            continue
        z = _gamma_normal_score(shape, value)
        assert z == pytest.approx(stats.norm.ppf(p), rel=1e-6, abs=1e-8)
        assert _gamma_from_normal_score(shape, z) == pytest.approx(value, rel=1e-6)
    upper = stats.gamma(shape).isf(1e-100)  # beyond 1 - 1e-16 the score comes from the upper tail
    assert _gamma_normal_score(shape, upper) == pytest.approx(-stats.norm.ppf(1e-100), rel=1e-6)


@pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
def test_compiled_step_is_the_numpy_step():
    """The compiled step (scipy's C functions called from numba) gives the numpy step's value on the same normal,
    in the middle and in both tails of the gamma, where both tails' regularised functions take over."""
    rng = np.random.default_rng(3)
    for shape in (0.6, 3.0, 150.0):
        values = stats.gamma(shape).ppf(np.concatenate([rng.random(200), [1e-200, 1e-12, 1 - 1e-12]]))
        for value, normal in zip(values[values > 0], rng.standard_normal(values.size)):
            expected = _relaxed_gamma(shape, value, 0.95, normal)
            assert compiled_relaxed_gamma(shape, value, 0.95, normal) == pytest.approx(expected, rel=1e-14)
