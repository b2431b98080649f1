"""Blocked (chunked, threaded) row products equal their one-shot versions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bayesvm.engines.linear import gibbs
from bayesvm.linalg import dense as linalg
from bayesvm.linalg.dense import GaussianPosterior, spd_inverse, weighted_gram_and_product


@pytest.fixture
def rows():
    rng = np.random.default_rng(0)
    n, q = 5000, 7
    return rng.standard_normal((n, q)), rng.gamma(2.0, 1.0, n), rng.standard_normal(n)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("chunk", [8192, 333])
def test_gram_and_product_match_the_one_shot_products(rows, split, chunk, monkeypatch):
    D, w, r = rows
    monkeypatch.setattr(linalg, "ROW_CHUNK", chunk)
    monkeypatch.setattr(linalg, "SPLIT_ROWS", 1000 if split else 10**12)
    assert linalg.splits_rows(*D.shape) == split
    gram, product = weighted_gram_and_product(D, w, r)
    np.testing.assert_allclose(gram, D.T @ (w[:, None] * D), rtol=1e-12)
    np.testing.assert_allclose(product, D.T @ r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [8192, 333])
def test_fused_predictor_matches_the_dense_moments(rows, chunk, monkeypatch):
    D, _, _ = rows
    monkeypatch.setattr(linalg, "ROW_CHUNK", chunk)
    rng = np.random.default_rng(1)
    A = rng.standard_normal((D.shape[1], D.shape[1]))
    cov, mean = A @ A.T + np.eye(D.shape[1]), rng.standard_normal(D.shape[1])
    post = GaussianPosterior(mean, cov, np.zeros((0, 0)), np.zeros((0, 0, 0)), np.zeros((0, 0, 7)), None, 0.0)
    f_mean, f_var = post.predictor(D, None, None)
    np.testing.assert_allclose(f_mean, D @ mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f_var, np.einsum("ij,jk,ik->i", D, cov, D), rtol=1e-12)


def test_split_latent_draws_are_inverse_gaussian_and_reproducible(monkeypatch):
    monkeypatch.setattr(gibbs, "SPLIT_ROWS", 1000)
    n = 40_000
    margin = np.where(np.arange(n) % 2 == 0, 0.5, 2.0)
    draws = gibbs.LatentDraws(np.random.default_rng(7), n)
    assert draws.split
    omega = draws(margin)
    again = gibbs.LatentDraws(np.random.default_rng(7), n)(margin)
    np.testing.assert_array_equal(omega, again)
    for m in (0.5, 2.0):  # InverseGaussian(mean 1/m, shape 1) = scipy invgauss(mu = 1/m, scale = 1)
        sample = omega[margin == m]
        assert stats.kstest(sample, stats.invgauss(mu=1.0 / m, scale=1.0).cdf).pvalue > 1e-3
    # both halves carry draws (neither left empty nor copied from the other)
    assert not np.allclose(omega[: n // 2], omega[n // 2 :])


@pytest.mark.parametrize("k", [1, 2, 5])
def test_spd_inverse_is_the_symmetric_inverse(k):
    rng = np.random.default_rng(k)
    A = rng.standard_normal((k, k + 3))
    matrix = A @ A.T + 0.1 * np.eye(k)
    inverse = spd_inverse(matrix)
    np.testing.assert_allclose(inverse @ matrix, np.eye(k), atol=1e-10)
    np.testing.assert_array_equal(inverse, inverse.T)


def test_spd_inverse_refuses_an_indefinite_matrix():
    with pytest.raises(np.linalg.LinAlgError):
        spd_inverse(np.array([[1.0, 2.0], [2.0, 1.0]]))
