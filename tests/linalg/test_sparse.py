"""The sparse factorisation (``bayesvm.linalg.sparse``) with both backends, CHOLMOD and SuperLU, against dense
linear algebra; fits through either backend are compared in ``test_vb.py``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from bayesvm.linalg import sparse
from bayesvm.linalg.sparse import SparseCholesky, SparseFactorError

#: CHOLMOD is the optional ``[cholmod]`` extra (scikit-sparse builds against SuiteSparse): skipped without it
NO_CHOLMOD = pytest.mark.skipif(sparse.cholmod is None, reason="scikit-sparse (pip install 'bayesvm[cholmod]') absent")
BACKENDS = [pytest.param("cholmod", marks=NO_CHOLMOD), "superlu"]


def _precision(n_rows: int, levels: tuple[int, int], seed: int) -> sp.csc_matrix:
    """``C' W C + prior`` of two crossed factors and two fixed columns (the structure the sparse path sees)."""
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(0, m, n_rows) for m in levels)
    rows = np.arange(n_rows)
    C = sp.hstack(
        [
            sp.csr_matrix(np.column_stack([np.ones(n_rows), rng.standard_normal(n_rows)])),
            sp.csr_matrix((np.ones(n_rows), (rows, a)), shape=(n_rows, levels[0])),
            sp.csr_matrix((rng.standard_normal(n_rows), (rows, b)), shape=(n_rows, levels[1])),
        ]
    ).tocsr()
    w = rng.gamma(2.0, 1.0, n_rows)
    prior = sp.diags(np.r_[1e-2, 1e-2, np.full(sum(levels), 0.7)])
    return (C.T @ sp.diags(w) @ C + prior).tocsc()


@pytest.mark.parametrize("backend", BACKENDS)
def test_factor_solves_determinant_and_selected_inverse_equal_dense_algebra(backend):
    P = _precision(400, (30, 25), seed=1)
    dense = P.toarray()
    factor = SparseCholesky.factor(P, backend=backend)
    assert factor.backend == backend
    rhs = np.random.default_rng(2).standard_normal((P.shape[0], 3))
    np.testing.assert_allclose(factor.solve(rhs), np.linalg.solve(dense, rhs), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(factor.solve(rhs[:, 0]), np.linalg.solve(dense, rhs[:, 0]), rtol=1e-9, atol=1e-11)
    assert factor.logdet == pytest.approx(np.linalg.slogdet(dense)[1], rel=1e-11)
    inverse = np.linalg.inv(dense)
    selected = factor.selected_inverse()
    np.testing.assert_allclose(selected.diagonal(), np.diag(inverse), rtol=1e-9)
    rows, cols = P.nonzero()  # every entry in the pattern of P is in the pattern of the factor
    np.testing.assert_allclose(selected.entries(rows, cols), inverse[rows, cols], rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_deviations_have_the_inverse_as_covariance(backend):
    P = _precision(150, (8, 6), seed=3)
    factor = SparseCholesky.factor(P, backend=backend)
    draws = factor.sample_deviation(np.random.default_rng(4), 40_000)
    inverse = np.linalg.inv(P.toarray())
    se = np.sqrt((np.diag(inverse)[:, None] * np.diag(inverse)[None, :] + inverse**2) / draws.shape[0])
    z = (np.cov(draws.T) - inverse) / se
    assert np.max(np.abs(z)) < 5.5 and np.sqrt(np.mean(z**2)) < 1.3


@pytest.mark.parametrize("backend", BACKENDS)
def test_not_positive_definite_is_refused(backend):
    P = _precision(200, (10, 10), seed=5).tolil()
    P[3, 3] = -50.0
    with pytest.raises(SparseFactorError, match="not positive definite"):
        SparseCholesky.factor(P.tocsc(), backend=backend)


@NO_CHOLMOD
def test_backends_share_the_orderings_meaning():
    """Both backends' ``perm`` map an original index to its factor index, so the selected inverses agree."""
    P = _precision(600, (40, 35), seed=6)
    one, two = (SparseCholesky.factor(P, backend=b).selected_inverse() for b in ("cholmod", "superlu"))
    rows, cols = P.nonzero()
    np.testing.assert_allclose(one.entries(rows, cols), two.entries(rows, cols), rtol=1e-9, atol=1e-12)


def test_backend_choice(monkeypatch):
    assert sparse.sparse_backend() == ("superlu" if sparse.cholmod is None else "cholmod")
    monkeypatch.setenv(sparse.CHOLMOD_SWITCH, "0")
    assert sparse.sparse_backend() == "superlu"
    assert SparseCholesky.factor(_precision(100, (5, 5), seed=7)).backend == "superlu"
    monkeypatch.setattr(sparse, "cholmod", None)
    monkeypatch.setenv(sparse.CHOLMOD_SWITCH, "1")
    assert sparse.sparse_backend() == "superlu"
    with pytest.raises(ImportError, match="scikit-sparse"):
        SparseCholesky.factor(_precision(100, (5, 5), seed=7), backend="cholmod")


@pytest.mark.parametrize("backend", BACKENDS)
def test_selected_inverse_beyond_int32_keys(backend):
    """Past N = 46,341 columns the entry keys ``col * N + row`` exceed 2^31: they must not wrap around (a
    nested design with 50,002 columns; entries checked against solves, which do not use the recursion)."""
    rng = np.random.default_rng(8)
    n, schools, per = 60_000, 5_000, 9  # 50,002 columns (a few classes without rows: prior only)
    school = rng.integers(0, schools, n)
    klass = school * per + rng.integers(0, per, n)
    rows = np.arange(n)
    C = sp.hstack(
        [
            sp.csr_matrix(np.column_stack([np.ones(n), rng.standard_normal(n)])),
            sp.csr_matrix((np.ones(n), (rows, school)), shape=(n, schools)),
            sp.csr_matrix((np.ones(n), (rows, klass)), shape=(n, schools * per)),
        ]
    ).tocsr()
    P = (C.T @ sp.diags(rng.gamma(2.0, 1.0, n)) @ C + sp.diags(np.r_[1e-2, 1e-2, np.full(C.shape[1] - 2, 0.5)])).tocsc()
    assert P.shape[0] ** 2 > 2**31
    factor = SparseCholesky.factor(P, backend=backend)
    selected = factor.selected_inverse()
    for j in (0, 1, 2 + schools - 1, P.shape[0] - 1):  # the fixed effects, the last school, the last class
        column = factor.solve(np.eye(P.shape[0], 1, -j).ravel())
        pattern = P[:, j].nonzero()[0]
        np.testing.assert_allclose(selected.entries(pattern, np.full(pattern.size, j)), column[pattern], rtol=1e-9)


def test_batched_supernodes_equal_one_at_a_time(monkeypatch):
    """The recursion batched by depth and width (in small chunks here) equals the one-supernode-at-a-time step."""
    P = _precision(500, (40, 12), seed=9)
    factor = SparseCholesky.factor(P, backend="superlu")
    widths = np.diff(np.append(sparse._supernodes(factor.L_strict), P.shape[0]))
    assert widths.min() == 1 and widths.max() > 3  # both single columns and wide supernodes
    batched = sparse._selected_inverse(factor.L_strict, factor.d)
    monkeypatch.setattr(sparse, "BATCH_ENTRIES", 50)  # many chunks
    chunked = sparse._selected_inverse(factor.L_strict, factor.d)
    monkeypatch.setattr(sparse, "BATCH_WIDTH", 0)  # every supernode on its own
    single = sparse._selected_inverse(factor.L_strict, factor.d)
    for a, b, c in zip(batched, chunked, single):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(b, c, rtol=1e-12, atol=1e-15)
