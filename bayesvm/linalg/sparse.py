"""Sparse Gaussian algebra for models with several large grouping factors.

When the random effects outside the largest grouping factor are too many for the dense
Schur complement of ``linalg.py``, the whole precision

    P = C' diag(w) C + blockdiag(prior precisions)

is kept sparse and factorised as ``P = Pi' L D L' Pi``: by CHOLMOD (supernodal, AMD/METIS
ordering) when scikit-sparse is installed (``pip install "bayesvm[cholmod]"`` after SuiteSparse,
e.g. Debian's ``libsuitesparse-dev``), else by SuperLU with a symmetric fill-reducing ordering
and no pivoting (``SymmetricMode``; an SPD matrix needs none).  ``BAYESVM_CHOLMOD=0`` in the
environment chooses SuperLU.
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

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import splu

try:
    from sksparse import cholmod
except ImportError:  # SuperLU serves
    cholmod = None

#: Environment variable that chooses SuperLU over an installed CHOLMOD when set to ``0``.
CHOLMOD_SWITCH = "BAYESVM_CHOLMOD"


def sparse_backend() -> str:
    """``"cholmod"`` when scikit-sparse is importable and not switched off, else ``"superlu"``."""
    return "cholmod" if cholmod is not None and os.environ.get(CHOLMOD_SWITCH, "1") != "0" else "superlu"


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
        a, b = self.perm[rows].astype(np.int64), self.perm[cols].astype(np.int64)  # keys reach N^2 > 2^31
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


#: Roughly the most entries (``Z[S, S]`` and the blocks) gathered at once for one batch of supernodes (memory).
BATCH_ENTRIES = 4_000_000


def _lookup(keys: np.ndarray, lower: np.ndarray, diag: np.ndarray, rows: np.ndarray, N: int) -> np.ndarray:
    """``Z[rows_a, rows_b]`` for every pair of the last axis of ``rows`` (``(..., s)`` -> ``(..., s, s)``): diagonal
    entries from ``diag``, the others from the stored strictly-lower entries (looked up by key)."""
    hi = np.maximum(rows[..., :, None], rows[..., None, :])
    lo = np.minimum(rows[..., :, None], rows[..., None, :])
    Z = np.empty(hi.shape)
    eq = hi == lo
    Z[eq] = diag[hi[eq]]
    wanted = lo[~eq] * N + hi[~eq]
    pos = np.searchsorted(keys, wanted)
    if wanted.size and np.any(keys[np.minimum(pos, keys.size - 1)] != wanted):
        raise SparseFactorError("the factor's pattern is not closed under elimination")
    Z[~eq] = lower[pos]
    return Z


#: Largest supernode done in a batch with others of its shape (bigger ones are BLAS work, done one by one).
BATCH_WIDTH = 16


def _supernode_batch(firsts, t, indptr, indices, data, d, keys, lower, diag) -> None:
    """The recursion for supernodes of ``t`` columns starting at ``firsts``, none below another (one depth of the
    tree), vectorised over those with the same number ``s`` of rows below (``t = 1``: ``Z[j, S] = -Z[S, S] l``,
    ``Z[j, j] = 1 / d_j - Z[j, S] . l``; in general the step of :func:`_supernode_step` with a batch axis)."""
    N = d.size
    sizes = indptr[firsts + t] - indptr[firsts + t - 1]  # rows below the last column
    inner = np.arange(t)
    for s in np.unique(sizes):
        group = firsts[sizes == s]
        for chunk in np.array_split(group, max(1, group.size * (s + t) ** 2 // BATCH_ENTRIES)):
            B = chunk.size
            cols = chunk[:, None] + inner  # (B, t)
            # column c holds t - c - 1 entries of L_JJ, then s of L_SJ
            head = indptr[cols]  # (B, t)
            L_JJ = np.broadcast_to(np.eye(t), (B, t, t)).copy()
            for c in range(t - 1):
                L_JJ[:, c + 1 :, c] = data[head[:, c, None] + np.arange(t - c - 1)]
            at_below = head[:, :, None] + (t - inner - 1)[None, :, None] + np.arange(s)  # (B, t, s)
            L_SJ = data[at_below]  # (B, t, s): L_SJ transposed
            inv_JJ = np.linalg.inv(L_JJ) if t > 1 else L_JJ
            Z_JJ = np.swapaxes(inv_JJ, 1, 2) @ (inv_JJ / d[cols][:, :, None])
            if s:
                Z_SS = _lookup(keys, lower, diag, indices[at_below[:, -1, :]], N)  # (B, s, s)
                A = np.swapaxes(inv_JJ, 1, 2) @ L_SJ  # L_JJ^{-T} L_SJ'
                Z_JS = -(A @ Z_SS)
                Z_JJ = Z_JJ - Z_JS @ np.swapaxes(A, 1, 2)
                lower[at_below] = Z_JS
            diag[cols] = np.diagonal(Z_JJ, axis1=1, axis2=2)
            for c in range(t - 1):
                lower[head[:, c, None] + np.arange(t - c - 1)] = Z_JJ[:, c + 1 :, c]


def _supernode_levels(starts: np.ndarray, ends: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Depth of each supernode in the supernodal elimination tree (roots 0).  A supernode's pattern below lies in
    its ancestors, so supernodes of one depth are independent once every smaller depth is done."""
    last = ends - 1
    has_below = indptr[last + 1] > indptr[last]
    owner = np.repeat(np.arange(starts.size), ends - starts)  # supernode of each column
    parent = np.full(starts.size, -1)
    parent[has_below] = owner[indices[indptr[last[has_below]]]]
    level = [0] * starts.size
    parents = parent.tolist()
    for J in range(starts.size - 1, -1, -1):  # a parent comes after its children
        if parents[J] >= 0:
            level[J] = level[parents[J]] + 1
    return np.asarray(level)


def _selected_inverse(L: sp.csc_matrix, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Supernodal Takahashi recursion on a unit lower factor ``L`` (strictly lower part, CSC, sorted).

    For a supernode ``J`` (consecutive columns sharing the pattern ``S`` below them) with
    ``B = L D L'`` and ``Z = B^{-1}``, the rows ``J`` of ``L' Z = D^{-1} L^{-1}`` give
    ``Z[J, S] = -A Z[S, S]`` and ``Z[J, J] = L_JJ^{-T} D_J^{-1} L_JJ^{-1} + A Z[S, S] A'`` with
    ``A = L_JJ^{-T} L_SJ'``: one dense step per supernode, from the roots of the elimination tree down.
    Supernodes of one depth are independent (:func:`_supernode_levels`); the narrow ones of one width are
    done together (:func:`_supernode_batch`; e.g. the 10^5 levels of a nested factor, whose pattern is the
    parent level and the fixed effects), one batched step instead of one per supernode.
    """
    N = d.size
    indptr, data = L.indptr, L.data
    indices = L.indices.astype(np.int64)  # keys col * N + row reach N^2 > 2^31
    keys = np.repeat(np.arange(N, dtype=np.int64), np.diff(indptr)) * N + indices
    lower = np.zeros(indices.size)
    diag = np.zeros(N)
    starts = _supernodes(L)
    ends = np.append(starts[1:], N)
    levels = _supernode_levels(starts, ends, indptr, indices)
    order = np.argsort(levels, kind="stable")
    bounds = np.flatnonzero(np.diff(levels[order])) + 1
    for members in np.split(order, bounds):
        widths = ends[members] - starts[members]
        for t in np.unique(widths[widths <= BATCH_WIDTH]):
            _supernode_batch(starts[members[widths == t]], int(t), indptr, indices, data, d, keys, lower, diag)
        for j0, j1 in zip(starts[members[widths > BATCH_WIDTH]], ends[members[widths > BATCH_WIDTH]]):
            _supernode_step(j0, j1, indptr, indices, data, d, keys, lower, diag)
    return keys, lower, diag


def _supernode_step(j0, j1, indptr, indices, data, d, keys, lower, diag) -> None:
    """The recursion for the supernode of columns ``j0 .. j1 - 1`` (its ancestors done)."""
    N, t = d.size, j1 - j0
    below = indices[indptr[j1 - 1] : indptr[j1]]  # S: pattern below the supernode
    # dense blocks L_JJ (unit lower) and L_SJ from the stored columns
    L_JJ = np.eye(t)
    L_SJ = np.empty((below.size, t))
    for c in range(t):
        col = data[indptr[j0 + c] : indptr[j0 + c + 1]]
        L_JJ[c + 1 :, c] = col[: t - c - 1]
        L_SJ[:, c] = col[t - c - 1 :]
    inv_JJ = sla.solve_triangular(L_JJ, np.eye(t), lower=True, unit_diagonal=True, check_finite=False)
    Z_JJ = inv_JJ.T @ (inv_JJ / d[j0:j1, None])
    if below.size:
        Z_SS = _lookup(keys, lower, diag, below, N)
        A = sla.solve_triangular(L_JJ.T, L_SJ.T, lower=False, unit_diagonal=True, check_finite=False)
        Z_JS = -A @ Z_SS
        Z_JJ = Z_JJ - Z_JS @ A.T
    diag[j0:j1] = np.diag(Z_JJ)
    for c in range(t):
        lo_, hi_ = indptr[j0 + c], indptr[j0 + c + 1]
        lower[lo_ : lo_ + t - c - 1] = Z_JJ[c + 1 :, c]
        if below.size:
            lower[lo_ + t - c - 1 : hi_] = Z_JS[c]


@dataclass(frozen=True, eq=False)
class SparseCholesky:
    """``P = Pi' L D L' Pi`` with solves, log-determinant and the selected inverse."""

    solver: Callable[[np.ndarray], np.ndarray]  # P^{-1} rhs
    perm: np.ndarray  # original index -> factor index
    d: np.ndarray
    L_strict: sp.csc_matrix
    backend: str

    @classmethod
    def factor(cls, precision: sp.spmatrix, backend: str | None = None) -> SparseCholesky:
        """Factorise with ``backend`` (``"cholmod"`` or ``"superlu"``; default :func:`sparse_backend`)."""
        P = sp.csc_matrix(precision)
        if (backend or sparse_backend()) == "cholmod":
            return cls._cholmod(P)
        lu = splu(P, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        if not np.array_equal(lu.perm_r, lu.perm_c):
            raise SparseFactorError("SuperLU pivoted: the posterior precision is not positive definite")
        d = lu.U.diagonal()
        if np.any(d <= 0) or not np.all(np.isfinite(d)):
            raise SparseFactorError("the posterior precision is not positive definite")
        L = sp.tril(lu.L, k=-1, format="csc")
        L.sort_indices()
        return cls(solver=lu.solve, perm=np.asarray(lu.perm_c), d=d, L_strict=L, backend="superlu")

    @classmethod
    def _cholmod(cls, P: sp.csc_matrix) -> SparseCholesky:
        """CHOLMOD's factor, converted to ``L D L'`` for the selected inverse (``P[p][:, p] = L D L'``)."""
        if cholmod is None:
            raise ImportError("CHOLMOD needs scikit-sparse: pip install 'bayesvm[cholmod]'")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", cholmod.CholmodWarning)  # a not-PD warning is an error here
                factor = cholmod.cholesky(P)
                L, D = factor.L_D()
        except (cholmod.CholmodError, cholmod.CholmodWarning) as err:
            raise SparseFactorError(f"the posterior precision is not positive definite (CHOLMOD: {err})") from err
        d = D.diagonal()
        if np.any(d <= 0) or not np.all(np.isfinite(d)):
            raise SparseFactorError("the posterior precision is not positive definite")
        L = sp.tril(L, k=-1, format="csc")
        L.sort_indices()
        return cls(solver=factor, perm=np.argsort(factor.P()), d=d, L_strict=L, backend="cholmod")

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return self.solver(rhs)

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
