"""Blocked (chunked, threaded) row products equal their one-shot versions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bayesvm.engines.linear import gibbs_rows
from bayesvm.linalg import dense as linalg
from bayesvm.linalg.dense import GaussianPosterior, spd_inverse


@pytest.fixture
def rows():
    rng = np.random.default_rng(0)
    n, q = 5000, 7
    return rng.standard_normal((n, q)), rng.gamma(2.0, 1.0, n), rng.standard_normal(n)


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
    monkeypatch.setattr(gibbs_rows, "SPLIT_ROWS", 1000)
    n = 40_000
    margin = np.where(np.arange(n) % 2 == 0, 0.5, 2.0)
    draws = gibbs_rows.LatentDraws(np.random.default_rng(7), n)
    assert draws.split
    omega = draws(margin)
    again = gibbs_rows.LatentDraws(np.random.default_rng(7), n)(margin)
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


def _slopes_problem(seed=0, levels=15, per=6):
    """``(1 + x | g)`` with the same two columns fixed (flat prior) and random: each level's effects can absorb a row."""
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(levels), per)
    x = rng.standard_normal(codes.size)
    D = np.column_stack([np.ones(codes.size), x])
    blocked = linalg.BlockedFactor(codes=codes, values=D.copy(), n_levels=levels)
    w = rng.gamma(2.0, 1.0, codes.size)
    r = rng.standard_normal(codes.size) * w
    prior_b = np.array([[1.2, -0.4], [-0.4, 0.9]])
    return D, w, r, np.eye(2) * 1e-8, blocked, prior_b


def _reference_mean(D, w, r, prior_dd, blocked, prior_b):
    """The joint posterior mean of ``(theta_d, theta_b)`` by least squares on the stacked square roots (QR: no
    normal equations, so no cancellation)."""
    n, q, J, K = D.shape[0], D.shape[1], blocked.n_levels, blocked.K
    design = np.zeros((n + q + J * K, q + J * K))
    root = np.sqrt(w)
    design[:n, :q] = D * root[:, None]
    for i in range(n):
        design[i, q + K * blocked.codes[i] : q + K * (blocked.codes[i] + 1)] = blocked.values[i] * root[i]
    design[n : n + q, :q] = np.linalg.cholesky(prior_dd).T
    for j in range(J):
        design[n + q + K * j : n + q + K * (j + 1), q + K * j : q + K * (j + 1)] = np.linalg.cholesky(prior_b).T
    target = np.concatenate([r / root, np.zeros(q + J * K)])
    return np.linalg.lstsq(design, target, rcond=None)[0][:q]


def test_square_root_schur_matches_the_subtracted_one():
    D, w, r, prior_dd, blocked, prior_b = _slopes_problem()
    stats = linalg.row_statistics(D, w, r, blocked)
    sums = stats.level_sums(blocked, D)
    blocks = sums.blocks + prior_b
    gain = np.linalg.inv(blocks) @ sums.cross
    subtracted = stats.gram + prior_dd - np.einsum("jkq,jkp->qp", sums.cross, gain)
    schur, rhs = linalg.square_root_schur(D, w, r, prior_dd, blocked, prior_b)
    np.testing.assert_allclose(schur, subtracted, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rhs, stats.product - np.einsum("jkq,jk->q", gain, sums.rhs), rtol=1e-9, atol=1e-9)


def test_a_row_on_the_margin_leaves_the_draw_exact():
    """A Gibbs draw within 1e-9 of the margin gives its row a weight near 1e10 (the inverse Gaussian's mean is
    ``1 / |1 - y f|``); with a flat fixed-effect prior the subtracted Schur complement is then rounding noise and not
    positive definite.  The elimination falls back to the square-root form and gets the exact mean."""
    D, w, r, prior_dd, blocked, prior_b = _slopes_problem(seed=1)
    w[7] = 4e10
    r[7] = 0.3 * w[7]
    stats = linalg.row_statistics(D, w, r, blocked)
    sums = stats.level_sums(blocked, D)
    gain = np.linalg.inv(sums.blocks + prior_b) @ sums.cross
    subtracted = stats.gram + prior_dd - np.einsum("jkq,jkp->qp", sums.cross, gain)
    assert np.linalg.eigvalsh(subtracted)[0] < 0 or not np.allclose(
        subtracted, linalg.square_root_schur(D, w, r, prior_dd, blocked, prior_b)[0], rtol=1e-3
    )  # the subtraction has lost it
    mean, _ = linalg.gaussian_mean(D, w, r, prior_dd, blocked, prior_b)
    np.testing.assert_allclose(mean, _reference_mean(D, w, r, prior_dd, blocked, prior_b), rtol=1e-6, atol=1e-8)
    theta_d, theta_b = linalg.gaussian_draw(D, w, r, prior_dd, blocked, prior_b, np.random.default_rng(0))
    assert np.all(np.isfinite(theta_d)) and np.all(np.isfinite(theta_b))


def test_blas_threads_limits_blas_without_rescanning_the_libraries():
    """One BLAS thread inside ``blas_threads`` for a small block, the default restored after; the libraries are found
    once (a scan of every loaded shared library costs milliseconds) and again only after more modules were imported."""
    from threadpoolctl import threadpool_info

    from bayesvm.linalg import dense

    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    with dense.blas_threads(10):
        inside = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        controller = dense._CONTROLLER[0]
    assert inside and all(n == 1 for n in inside)
    assert [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"] == before
    with dense.blas_threads(10):
        assert dense._CONTROLLER[0] is controller
