"""Elimination of one term onto a dense Schur complement equals the dense reference."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from bayesvm.linalg import schur as sparse_schur
from bayesvm.linalg.schur import elimination_layout, schur_sparse_posterior
from bayesvm.linalg.sparse import sparse_gaussian_posterior


def _crossed(n=400, levels_a=40, levels_b=30, p=3, slope=True, seed=0):
    """C = [X | Z_a (intercept and slope per level of a) | Z_b], the prior, and the eliminated index."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, p - 1))])
    a, b = rng.integers(0, levels_a, n), rng.integers(0, levels_b, n)
    K = 2 if slope else 1
    za = np.column_stack([np.ones(n), X[:, 1]])[:, :K]
    za[:7, K - 1] = 0.0  # structural zeros inside the eliminated term
    rows = np.repeat(np.arange(n), K)
    Za = sp.csr_matrix((za.ravel(), (rows, (a[:, None] * K + np.arange(K)).ravel())), shape=(n, levels_a * K))
    Zb = sp.csr_matrix((np.ones(n), (np.arange(n), b)), shape=(n, levels_b))
    C = sp.hstack([sp.csr_matrix(X), Za, Zb], format="csr")
    C.eliminate_zeros()
    eliminated = p + np.arange(levels_a * K).reshape(levels_a, K)
    N = C.shape[1]
    cov_a = np.array([[1.5, 0.4], [0.4, 0.8]])[:K, :K]
    prior = sp.block_diag(
        [sp.diags(np.full(p, 0.01)), sp.kron(sp.eye(levels_a), np.linalg.inv(cov_a)), sp.eye(levels_b) / 0.7],
        format="csr",
    )
    assert prior.shape == (N, N)
    return C, prior, eliminated, rng


@pytest.mark.parametrize("slope", [False, True])
def test_posterior_equals_the_dense_inverse(slope):
    C, prior, eliminated, rng = _crossed(slope=slope)
    n = C.shape[0]
    w = rng.gamma(2.0, 1.0, n)
    w[:5] = 0.0  # EP sites may carry no weight: the pattern must not depend on the values
    r = rng.standard_normal(n)
    layout = elimination_layout(C, eliminated)
    assert layout is not None
    post = schur_sparse_posterior(layout, w, r, prior)
    Cd = C.toarray()
    P = Cd.T @ (w[:, None] * Cd) + prior.toarray()
    cov = np.linalg.inv(P)
    mean = np.linalg.solve(P, Cd.T @ r)
    np.testing.assert_allclose(post.mean_d, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.solve(np.eye(P.shape[0])), cov, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.variance(), np.diag(cov), rtol=1e-8)
    assert abs(post.logdet_precision - np.linalg.slogdet(P)[1]) < 1e-8
    # every entry inside the pattern of P
    i, j = np.nonzero(np.abs(P) > 0)
    np.testing.assert_allclose(post.cov_entries(i, j), cov[i, j], rtol=1e-8, atol=1e-12)
    # predictor: training rows through the pattern, new rows through solves
    f_mean, f_var = post.predictor(C, training=True)
    np.testing.assert_allclose(f_mean, Cd @ mean, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(f_var, np.einsum("ij,jk,ik->i", Cd, cov, Cd), rtol=1e-8)
    new = sp.csr_matrix(Cd[:20][::-1] + np.roll(Cd[20:40], 1, axis=1))  # level combinations never seen
    np.testing.assert_allclose(post.predictor(new)[1], np.einsum("ij,jk,ik->i", new.toarray(), cov, new.toarray()))
    # log density and draws
    draws, _ = post.sample(rng, 4)
    np.testing.assert_allclose(
        post.log_density(draws, None), stats.multivariate_normal(mean, cov).logpdf(draws), rtol=1e-9
    )
    many, _ = post.sample(np.random.default_rng(3), 20000)
    z = (many.mean(axis=0) - mean) / np.sqrt(np.diag(cov) / 20000)
    assert np.max(np.abs(z)) < 5
    np.testing.assert_allclose(many.var(axis=0), np.diag(cov), rtol=0.1)


def test_agrees_with_the_general_sparse_factorisation():
    C, prior, eliminated, rng = _crossed(n=600, levels_a=50, levels_b=40)
    w, r = rng.gamma(2.0, 1.0, C.shape[0]), rng.standard_normal(C.shape[0])
    ours = schur_sparse_posterior(elimination_layout(C, eliminated), w, r, prior)
    general = sparse_gaussian_posterior(C, w, r, prior)
    np.testing.assert_allclose(ours.mean_d, general.mean_d, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ours.variance(), general.variance(), rtol=1e-8)
    np.testing.assert_allclose(ours.predictor(C, training=True)[1], general.predictor(C, training=True)[1], rtol=1e-8)
    assert abs(ours.logdet_precision - general.logdet_precision) < 1e-7


def test_chunked_pair_loops_give_the_unchunked_answer(monkeypatch):
    C, prior, eliminated, rng = _crossed(n=500)
    w, r = rng.gamma(2.0, 1.0, C.shape[0]), rng.standard_normal(C.shape[0])
    layout = elimination_layout(C, eliminated)
    whole = schur_sparse_posterior(layout, w, r, prior)
    monkeypatch.setattr(sparse_schur, "PAIR_CHUNK", 7)
    chunked = schur_sparse_posterior(layout, w, r, prior)
    np.testing.assert_allclose(chunked.cross, whole.cross, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(chunked.predictor(C, training=True)[1], whole.predictor(C, training=True)[1])


@pytest.mark.parametrize("pair_cost, product_chunk", [(0.0, 4_000_000), (1e9, 4_000_000), (1e9, 50)])
def test_row_quadratic_by_pairs_and_by_product_agree(monkeypatch, pair_cost, product_chunk):
    """Both ways of ``d_i' S^{-1} d_i`` (pairs of stored entries; the sparse-dense product, in chunks of rows) give the
    dense answer."""
    C, prior, eliminated, rng = _crossed(n=300)
    w, r = rng.gamma(2.0, 1.0, C.shape[0]), rng.standard_normal(C.shape[0])
    layout = elimination_layout(C, eliminated)
    monkeypatch.setattr(sparse_schur, "PAIR_COST", pair_cost)
    monkeypatch.setattr(sparse_schur, "PRODUCT_CHUNK", product_chunk)
    post = schur_sparse_posterior(layout, w, r, prior)
    Cd = C.toarray()
    cov = np.linalg.inv(Cd.T @ (w[:, None] * Cd) + prior.toarray())
    np.testing.assert_allclose(post.predictor(C, training=True)[1], np.einsum("ij,jk,ik->i", Cd, cov, Cd), rtol=1e-9)


def test_layout_declines_where_it_does_not_apply():
    C, _, eliminated, _ = _crossed(slope=False)
    # nested: 600 schools of two classes each, the classes eliminated: the Schur complement stays sparse
    # (the intercept's row and column and the diagonal: 0.5% of its entries)
    n = 2400
    school = np.repeat(np.arange(600), 4)
    klass = np.repeat(np.arange(1200), 2)
    X = sp.csr_matrix(np.ones((n, 1)))
    Zs = sp.csr_matrix((np.ones(n), (np.arange(n), school)), shape=(n, 600))
    Zc = sp.csr_matrix((np.ones(n), (np.arange(n), klass)), shape=(n, 1200))
    nested = sp.hstack([X, Zs, Zc], format="csr")
    assert elimination_layout(nested, 601 + np.arange(1200)[:, None]) is None
    assert sparse_schur._schur_density(*_pattern_of(nested, 601 + np.arange(1200)[:, None])) < 0.01
    # "levels" that share a row (the first row's a-level and b-level): not a single term
    first = C[0].indices
    assert elimination_layout(C, first[-2:][:, None]) is None
    assert elimination_layout(C, eliminated) is not None


def _pattern_of(C, eliminated):
    """The arguments of ``_schur_density`` for a design (by building the layout with every check off)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sparse_schur, "MIN_SCHUR_DENSITY", 0.0)
        layout = elimination_layout(C, eliminated)
    return layout.key_col, layout.level_ptr, layout.C_rest, layout.J, layout.q


def test_sampled_density_is_close_to_the_exact_one():
    C, _, eliminated, _ = _crossed(n=3000, levels_a=300, levels_b=400, slope=False)
    cols, ptr, C_rest, J, q = _pattern_of(C, eliminated)
    assert q > 256  # sampled
    pattern = sp.csr_matrix((np.ones(cols.size), cols, ptr), shape=(J, q))
    rest = sp.csr_matrix((np.ones(C_rest.nnz), C_rest.indices, C_rest.indptr), shape=C_rest.shape)
    exact = (pattern.T @ pattern + rest.T @ rest).nnz / q**2
    assert abs(sparse_schur._schur_density(cols, ptr, C_rest, J, q) - exact) < 0.2 * exact
