"""The row sums of :mod:`bayesvm.linalg.row_sums` (chunked, threaded, by level) equal their one-shot versions."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.linalg import dense as linalg
from bayesvm.linalg import row_sums


@pytest.fixture
def rows():
    rng = np.random.default_rng(0)
    n, q = 5000, 7
    return rng.standard_normal((n, q)), rng.gamma(2.0, 1.0, n), rng.standard_normal(n)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("chunk", [8192, 333])
def test_gram_and_product_match_the_one_shot_products(rows, split, chunk, monkeypatch):
    D, w, r = rows
    monkeypatch.setattr(row_sums, "ROW_CHUNK", chunk)
    monkeypatch.setattr(row_sums, "SPLIT_ROWS", 1000 if split else 10**12)
    assert row_sums.splits_rows(*D.shape) == split
    gram, product = row_sums.weighted_gram_and_product(D, w, r)
    np.testing.assert_allclose(gram, D.T @ (w[:, None] * D), rtol=1e-12)
    np.testing.assert_allclose(product, D.T @ r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("K", [1, 2])
def test_level_sums_by_the_dense_membership_matrix_match_the_sparse_ones(K, monkeypatch):
    """Small factors sum their levels by one dense product, large ones by sparse products: the same sums, rows of no
    level (code -1) and levels without rows included."""
    rng = np.random.default_rng(7)
    n, q, J = 60, 3, 9
    codes = rng.integers(-1, J - 1, n)  # level J - 1 has no rows
    blocked = linalg.BlockedFactor(codes=codes, values=rng.standard_normal((n, K)), n_levels=J)
    D, w, r = rng.standard_normal((n, q)), rng.exponential(size=n), rng.standard_normal(n)
    stats_ = row_sums.row_statistics(D, w, r, blocked)
    assert blocked.is_small
    small = stats_.level_sums(blocked, D)
    monkeypatch.setattr(linalg, "DENSE_INDICATOR_ENTRIES", 0)
    assert not blocked.is_small
    large = stats_.level_sums(blocked, D)
    for name in ("blocks", "cross", "rhs"):
        np.testing.assert_allclose(getattr(small, name), getattr(large, name), rtol=1e-12, atol=1e-12)
    seen = codes >= 0
    expected = np.zeros((J, K, q))
    np.add.at(expected, codes[seen], (w[seen, None] * blocked.values[seen])[:, :, None] * D[seen, None, :])
    np.testing.assert_allclose(small.cross, expected, rtol=1e-12, atol=1e-12)
