"""The package's PSIS (bayesvm.results.psis) is ArviZ's algorithm: the same weights and shape on the same ratios."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.results.psis import psis

az = pytest.importorskip("arviz")
pytestmark = pytest.mark.skipif(not hasattr(az, "psislw"), reason="ArviZ 0.x's psislw is the reference")


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: rng.standard_normal(1000),  # a light tail
        lambda rng: 3.0 * rng.standard_normal(4000),  # a heavier one, more draws
        lambda rng: rng.standard_t(2, 1000),  # very heavy: k above 0.7
        lambda rng: np.concatenate([np.zeros(990), rng.exponential(size=10)]),  # a short tail among ties
        lambda rng: np.zeros(500),  # constant: nothing to smooth
    ],
    ids=["normal", "wide", "student-t", "ties", "constant"],
)
def test_the_same_weights_and_shape_as_arviz(make):
    ratios = make(np.random.default_rng(4))
    ours, k = psis(ratios)
    theirs, their_k = az.psislw(ratios.copy())
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    assert k == pytest.approx(float(their_k), rel=1e-12) or (np.isinf(k) and np.isinf(their_k))


def test_rows_are_smoothed_one_by_one():
    ratios = np.random.default_rng(5).standard_normal((7, 800)) * np.arange(1, 8)[:, None]
    weights, shapes = psis(ratios)
    for row, w, k in zip(ratios, weights, shapes):
        one_w, one_k = psis(row)
        np.testing.assert_array_equal(w, one_w)
        assert k == one_k
    np.testing.assert_allclose(np.exp(weights).sum(axis=1), 1.0)
