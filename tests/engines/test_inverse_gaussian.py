"""Inverse Gaussian draws for the selection samplers' mixing variables (:mod:`bayesvm.engines.inverse_gaussian`)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bayesvm.engines.inverse_gaussian import WALD_MAX_MEAN, draw_inverse_gaussian, stable_inverse_gaussian


@pytest.mark.parametrize("mean", [0.05, 1.0, 30.0, 1e5, 1e12, 1e40, 1e300])
def test_the_stable_draws_follow_the_inverse_gaussian(mean):
    """Kolmogorov-Smirnov against scipy's ``invgauss`` (``IG(mean, 1)`` is ``invgauss(mu=mean)``), where numpy's
    ``wald`` returns 0 from a mean of about 1e15 on."""
    draws = stable_inverse_gaussian(np.full(20_000, mean), 1.0, np.random.default_rng(1))
    assert np.all(np.isfinite(draws)) and np.all(draws > 0)
    assert stats.kstest(draws, stats.invgauss(mu=mean).cdf).pvalue > 1e-3
    if mean >= 1e12:
        assert np.all(np.random.default_rng(1).wald(np.full(5, 1e20), 1.0) == 0.0)  # what it replaced


def test_an_infinite_mean_gives_the_levy_limit_and_a_wrong_cdf_is_caught():
    draws = stable_inverse_gaussian(np.full(20_000, np.inf), 2.0, np.random.default_rng(2))
    assert stats.kstest(draws, stats.levy(scale=2.0).cdf).pvalue > 1e-3
    assert stats.kstest(draws, stats.levy(scale=1.6).cdf).pvalue < 1e-6  # the test can fail


def test_ordinary_means_draw_what_numpy_drew_and_large_ones_are_finite():
    mean = np.array([0.3, 2.0, 50.0])
    np.testing.assert_array_equal(
        draw_inverse_gaussian(mean, 1.0, np.random.default_rng(3)), np.random.default_rng(3).wald(mean, 1.0)
    )
    mixed = draw_inverse_gaussian(np.array([1.0, 10 * WALD_MAX_MEAN, np.inf]), 1.0, np.random.default_rng(4))
    assert np.all(np.isfinite(mixed)) and np.all(mixed > 0)
