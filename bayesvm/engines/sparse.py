"""Sparse Gaussian algebra for models with several large grouping factors.

When the random effects outside the largest grouping factor are too many for the dense
Schur complement of ``linalg.py``, the whole precision

    P = C' diag(w) C + blockdiag(prior precisions)

is kept sparse and factorised as ``P = Pi' L D L' Pi`` by SuperLU with a symmetric
fill-reducing ordering and no pivoting (``SymmetricMode``; an SPD matrix needs none).
The VB updates need, besides ``P^{-1} b`` and ``log|P|``, only entries of
``Sigma = P^{-1}`` inside the sparsity pattern of ``P``: the diagonal blocks of the random
effects and ``c_i' Sigma c_i`` for each row (every pair of columns used by one row is an
entry of ``C' W C``).  These come from the Takahashi recursion (Takahashi, Fagan & Chin
1973; Erisman & Tinney 1975) on the pattern of ``L``:

    Z = D^{-1} L^{-1} + (I - L') Z,   so for column j with s = struct(L[:, j]) (rows > j)
    Z[s, j] = -Z[s, s] L[s, j],       Z[j, j] = 1 / d_j - L[s, j]' Z[s, j],

where every ``Z[s, s]`` entry is again in the pattern (the rows of one column of a
Cholesky factor form a clique of the filled graph).  Columns are processed by fundamental
supernodes (consecutive columns with one shared pattern), each a few dense operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import splu


class SparseFactorError(np.linalg.LinAlgError):
    """The sparse factorisation did not give a symmetric LDL' (matrix not SPD?)."""


@dataclass(frozen=True, eq=False)
class SelectedInverse:
    """Entries of ``P^{-1}`` on the pattern of the factor, looked up in the original ordering."""

    perm: np.ndarray  # B[perm[i], perm[j]] = P[i, j]
    keys: np.ndarray  # sorted col * N + row of stored strictly-lower entries of Z (factor ordering)
    lower: np.ndarray  # their values
    diag: np.ndarray  # diagonal of Z (factor ordering)

    @property
    def size(self) -> int:
        return self.diag.size

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``Sigma[rows, cols]`` (broadcast); every pair must lie in the pattern."""
        rows, cols = np.broadcast_arrays(np.asarray(rows), np.asarray(cols))
        a, b = self.perm[rows], self.perm[cols]
        hi, lo = np.maximum(a, b), np.minimum(a, b)
        out = np.empty(a.shape)
        on_diag = hi == lo
        out[on_diag] = self.diag[hi[on_diag]]
        key = lo[~on_diag] * self.size + hi[~on_diag]
        pos = np.searchsorted(self.keys, key)
        pos = np.minimum(pos, self.keys.size - 1) if self.keys.size else pos
        if self.keys.size == 0 or np.any(self.keys[pos] != key):
            raise SparseFactorError("a requested covariance entry lies outside the factor's pattern")
        out[~on_diag] = self.lower[pos]
        return out

    def diagonal(self) -> np.ndarray:
        return self.diag[self.perm]


def _supernodes(L: sp.csc_matrix) -> np.ndarray:
    """Start of each fundamental supernode: column j+1 continues j's supernode when
    ``struct(j) = {j+1} + struct(j+1)`` (same pattern below the diagonal block)."""
    N = L.shape[0]
    counts = np.diff(L.indptr)
    first_row = np.full(N, -1)
    has = counts > 0
    first_row[has] = L.indices[L.indptr[:-1][has]]
    joins = np.zeros(N, dtype=bool)
    joins[1:] = (first_row[:-1] == np.arange(1, N)) & (counts[:-1] == counts[1:] + 1)
    return np.flatnonzero(~joins)


def _selected_inverse(L: sp.csc_matrix, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Supernodal Takahashi recursion on a unit lower factor ``L`` (strictly lower part, CSC, sorted).

    For a supernode ``J`` (consecutive columns sharing the pattern ``S`` below them) with
    ``B = L D L'`` and ``Z = B^{-1}``, the rows ``J`` of ``L' Z = D^{-1} L^{-1}`` give
    ``Z[J, S] = -A Z[S, S]`` and ``Z[J, J] = L_JJ^{-T} D_J^{-1} L_JJ^{-1} + A Z[S, S] A'`` with
    ``A = L_JJ^{-T} L_SJ'``: one dense step per supernode, supernodes from last to first.
    """
    N = d.size
    indptr, indices, data = L.indptr, L.indices, L.data
    keys = np.repeat(np.arange(N, dtype=np.int64), np.diff(indptr)) * N + indices
    lower = np.zeros(indices.size)
    diag = np.zeros(N)
    starts = _supernodes(L)
    ends = np.append(starts[1:], N)
    for j0, j1 in zip(starts[::-1], ends[::-1]):
        t = j1 - j0
        below = indices[indptr[j1 - 1] : indptr[j1]]  # S: pattern below the supernode
        # dense blocks L_JJ (unit lower) and L_SJ from the stored columns
        L_JJ = np.eye(t)
        L_SJ = np.empty((below.size, t))
        for c in range(t):
            col = data[indptr[j0 + c] : indptr[j0 + c + 1]]
            L_JJ[c + 1 :, c] = col[: t - c - 1]
            L_SJ[:, c] = col[t - c - 1 :]
        inv_JJ = sla.solve_triangular(L_JJ, np.eye(t), lower=True, unit_diagonal=True)
        Z_JJ = inv_JJ.T @ (inv_JJ / d[j0:j1, None])
        if below.size:
            hi = np.maximum(below[:, None], below[None, :])
            lo = np.minimum(below[:, None], below[None, :])
            Z_SS = np.empty(hi.shape)
            eq = hi == lo
            Z_SS[eq] = diag[hi[eq]]
            wanted = lo[~eq] * N + hi[~eq]
            pos = np.searchsorted(keys, wanted)
            if np.any(keys[np.minimum(pos, keys.size - 1)] != wanted):
                raise SparseFactorError("the factor's pattern is not closed under elimination")
            Z_SS[~eq] = lower[pos]
            A = sla.solve_triangular(L_JJ.T, L_SJ.T, lower=False, unit_diagonal=True)
            Z_JS = -A @ Z_SS
            Z_JJ = Z_JJ - Z_JS @ A.T
        diag[j0:j1] = np.diag(Z_JJ)
        for c in range(t):
            lo_, hi_ = indptr[j0 + c], indptr[j0 + c + 1]
            lower[lo_ : lo_ + t - c - 1] = Z_JJ[c + 1 :, c]
            if below.size:
                lower[lo_ + t - c - 1 : hi_] = Z_JS[c]
    return keys, lower, diag


@dataclass(frozen=True, eq=False)
class SparseCholesky:
    """``P = Pi' L D L' Pi`` with solves, log-determinant and the selected inverse."""

    lu: object
    perm: np.ndarray
    d: np.ndarray
    L_strict: sp.csc_matrix

    @classmethod
    def factor(cls, precision: sp.spmatrix) -> SparseCholesky:
        P = sp.csc_matrix(precision)
        lu = splu(P, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        if not np.array_equal(lu.perm_r, lu.perm_c):
            raise SparseFactorError("SuperLU pivoted: the posterior precision is not positive definite")
        d = lu.U.diagonal()
        if np.any(d <= 0) or not np.all(np.isfinite(d)):
            raise SparseFactorError("the posterior precision is not positive definite")
        L = sp.tril(lu.L, k=-1, format="csc")
        L.sort_indices()
        return cls(lu=lu, perm=np.asarray(lu.perm_c), d=d, L_strict=L)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return self.lu.solve(rhs)

    @property
    def logdet(self) -> float:
        return float(np.sum(np.log(self.d)))

    def selected_inverse(self) -> SelectedInverse:
        keys, lower, diag = _selected_inverse(self.L_strict, self.d)
        return SelectedInverse(perm=self.perm, keys=keys, lower=lower, diag=diag)

    def sample_deviation(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draws of ``theta - mu ~ N(0, P^{-1})``, shape ``(size, N)``.

        With ``B = L D L'`` in factor order, ``x = L'^{-1} D^{-1/2} eps`` has covariance ``B^{-1}``.
        """
        N = self.d.size
        eps = rng.standard_normal((N, size)) / np.sqrt(self.d)[:, None]
        unit = (self.L_strict + sp.eye(N, format="csc")).T.tocsr()
        x = sp.linalg.spsolve_triangular(unit, eps, lower=False, unit_diagonal=True)
        return x[self.perm].T


@dataclass(frozen=True, eq=False)
class SparseGaussianPosterior:
    """``q(theta) = N(mu, P^{-1})`` for a sparse precision (same role as ``GaussianPosterior``)."""

    mean_d: np.ndarray
    factor: SparseCholesky
    selected: SelectedInverse

    @property
    def dim(self) -> int:
        return self.mean_d.size

    @property
    def logdet_precision(self) -> float:
        return self.factor.logdet

    @property
    def mean_b(self) -> np.ndarray:
        return np.zeros((0, 0))

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """``P^{-1} rhs``."""
        return self.factor.solve(rhs)

    def cov_entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return self.selected.entries(rows, cols)

    def variance(self) -> np.ndarray:
        return self.selected.diagonal()

    def predictor(
        self, C: sp.csr_matrix, codes: None = None, values: None = None, training: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f_i = c_i' theta``.

        For training rows every column pair of a row is in the pattern of ``P`` and the
        selected inverse gives ``c_i' Sigma c_i`` exactly; new rows may combine levels never
        seen together, so their variances come from solves (in chunks of 256 rows).
        """
        C = sp.csr_matrix(C)
        mean = C @ self.mean_d
        if training:
            counts = np.diff(C.indptr)
            pairs = counts * counts
            # every pair (j, k) of stored columns within each row
            row_of_pair = np.repeat(np.arange(C.shape[0]), pairs)
            offset = np.arange(row_of_pair.size) - np.repeat(np.cumsum(pairs) - pairs, pairs)
            width = counts[row_of_pair]
            first = C.indptr[row_of_pair] + offset // width
            second = C.indptr[row_of_pair] + offset % width
            values = C.data[first] * C.data[second] * self.selected.entries(C.indices[first], C.indices[second])
            return mean, np.bincount(row_of_pair, weights=values, minlength=C.shape[0])
        var = np.empty(C.shape[0])
        for start in range(0, C.shape[0], 256):
            block = C[start : start + 256]
            solved = self.factor.solve(block.T.toarray())
            var[start : start + 256] = np.einsum("ij,ji->i", block.toarray(), solved)
        return mean, var

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        return self.mean_d + self.factor.sample_deviation(rng, size), np.zeros((size, 0, 0))

    def log_density(self, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
        """``log q(theta)`` for draws ``theta_d (S, N)``: with ``B = L D L'`` in factor order,
        ``(theta - mu)' P (theta - mu) = sum_i d_i ((L' v)_i)^2``, ``v[perm] = theta - mu``."""
        f = self.factor
        v = np.empty_like(theta_d.T)
        v[f.perm] = (theta_d - self.mean_d).T
        lv = f.L_strict.T @ v + v
        quad = np.sum(f.d[:, None] * lv**2, axis=0)
        return -0.5 * quad + 0.5 * f.logdet - 0.5 * self.dim * np.log(2 * np.pi)


def sparse_gaussian_posterior(
    C: sp.csr_matrix, w: np.ndarray, rhs_weights: np.ndarray, prior: sp.spmatrix
) -> SparseGaussianPosterior:
    """``q(theta)`` for ``P = C' diag(w) C + prior`` (Alg. 2 steps 2-3, sparse)."""
    precision = (C.T @ sp.diags(w) @ C + prior).tocsc()
    factor = SparseCholesky.factor(precision)
    mean = factor.solve(C.T @ rhs_weights)
    return SparseGaussianPosterior(mean_d=mean, factor=factor, selected=factor.selected_inverse())
