"""The levels' gains kept over their columns (bayesvm.linalg.level_gains.PatternGains) act as the dense array does."""

import numpy as np
import pytest

from bayesvm.linalg import compiled, level_gains, row_pattern
from bayesvm.linalg.dense import GaussianPosterior, gaussian_posterior
from bayesvm.linalg.level_gains import DenseGains, PatternGains

from .test_row_pattern import _nested_design

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _posteriors(K=2, seed=0):
    rng = np.random.default_rng(seed)
    D, blocked = _nested_design(rng, K=K, unassigned=4)
    pattern = row_pattern.row_pattern(D, blocked.codes, blocked.n_levels)
    n, q = D.shape
    w = rng.gamma(2.0, 1.0, n)
    r = rng.choice([-1.0, 1.0], n) * (1.0 + w)
    args = (D, w, r, np.eye(q), blocked, np.eye(K) * 1.3)
    return gaussian_posterior(*args), gaussian_posterior(*args, pattern), pattern, rng


@pytest.mark.parametrize("K", [1, 2])
def test_pattern_gains_act_as_the_dense_array(K):
    dense, compressed, pattern, rng = _posteriors(K)
    full, kept = DenseGains(dense.gain), compressed.gains
    assert isinstance(kept, PatternGains) and kept.shape == full.shape
    assert kept.level_ptr is pattern.level_ptr and kept.level_cols is pattern.level_cols  # shared, not copied
    assert kept.values.size < 0.2 * full.array.size
    np.testing.assert_allclose(kept.dense(), full.array, rtol=1e-10, atol=1e-13)
    x, draws = rng.standard_normal(full.shape[2]), rng.standard_normal((7, full.shape[2]))
    np.testing.assert_allclose(kept.times(x), full.times(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kept.times(draws), full.times(draws), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(full.times(draws)[3], full.times(draws[3]), rtol=1e-12)
    levels = rng.integers(0, full.shape[0], 25)
    np.testing.assert_allclose(kept.take(levels), full.take(levels), rtol=1e-10, atol=1e-13)
    assert np.array_equal(kept.support() | full.support(), kept.support())  # holds every nonzero
    cov_d = compressed.cov_d
    np.testing.assert_allclose(kept.covariances(cov_d, compressed.block_inv), full.covariances(cov_d, dense.block_inv))


def test_covariances_without_numba(monkeypatch):
    """A file saved where numba ran is read by a process without it: the covariances then run dense."""
    _, compressed, _, _ = _posteriors(2, seed=3)
    kept = compressed.gains
    compiled_covs = kept.covariances(compressed.cov_d, compressed.block_inv)
    monkeypatch.setattr(level_gains.compiled, "available", lambda: False)
    np.testing.assert_allclose(kept.covariances(compressed.cov_d, compressed.block_inv), compiled_covs, rtol=1e-12)


def test_aligned_to_a_wider_layout():
    """Values on a pattern holding more columns per level (new rows' patterns take the gains' support and their own):
    the gains where they are kept, zero elsewhere; a pattern missing a kept column is refused."""
    dense, compressed, pattern, rng = _posteriors(1, seed=5)
    kept = compressed.gains
    J, _, q = kept.shape
    D, blocked = _nested_design(np.random.default_rng(5), K=1, unassigned=4)
    wider = row_pattern.row_pattern(D, blocked.codes, J, kept.support() | (rng.random((J, q)) < 0.02))
    assert wider.level_cols.size > pattern.level_cols.size
    np.testing.assert_allclose(kept.aligned(wider), DenseGains(dense.gain).aligned(wider), atol=1e-13)
    assert kept.aligned(pattern) is kept.values
    narrower = row_pattern.row_pattern(D[:200], blocked.codes[:200], J)  # some levels lose rows and columns
    with pytest.raises(RuntimeError, match="every column"):
        kept.aligned(narrower)


def test_posterior_reads_dense_gains_as_stored_before():
    """Saved files from before hold the dense array in ``gain``: every method reads it through the same interface."""
    dense, compressed, _, rng = _posteriors(2, seed=7)
    old = GaussianPosterior(**{**vars(compressed), "gain": dense.gain})
    assert isinstance(old.gains, DenseGains)
    draws_old, draws_new = old.sample(np.random.default_rng(1), 5), compressed.sample(np.random.default_rng(1), 5)
    for left, right in zip(draws_old, draws_new):
        np.testing.assert_allclose(left, right, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(old.log_density(*draws_old), compressed.log_density(*draws_old), rtol=1e-10)
    center, shift, matrix = dense.mean_d, rng.standard_normal(dense.mean_d.size) * 0.1, np.eye(dense.mean_d.size) * 1.1
    for name in ["mean_b", "cov_b"]:
        np.testing.assert_allclose(
            getattr(old.moved(center, shift, matrix), name), getattr(compressed.moved(center, shift, matrix), name),
            rtol=1e-10, atol=1e-12,
        )  # fmt: skip
