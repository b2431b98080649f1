"""Sparse designs whose largest grouping factor is eliminated onto a dense Schur complement.

On the sparse path (several large grouping factors, e.g. crossed ``(1|a) + (1|b)``) the
precision ``P = C' diag(w) C + prior`` is sparse, but after a fill-reducing ordering its
Cholesky factor is not: for crossed factors each level of ``a`` links every level of ``b``
it meets, so eliminating ``a`` leaves a Schur complement on ``b`` that is dense.  A general
sparse factorisation then spends its time in scattered small supernodes.  This module takes
the structure instead.  Split the coefficients into ``A``, the ``J x K`` coefficients of the
largest single term (block-diagonal in ``P``: a row has one level), and the ``q`` others
``R`` (fixed effects and the other factors):

    P = [[P_AA, P_AR], [P_RA, P_RR]],   G = P_AA^{-1} P_AR,   S = P_RR - P_RA G   (q x q, dense),

    Sigma_RR = S^{-1},   Sigma_AR = -G S^{-1},   Sigma_AA = P_AA^{-1} + G S^{-1} G',
    log|P| = log|S| + sum_l log|P_l|.

``G`` is sparse: level ``l``'s rows are non-zero only on the columns ``R_l`` that its rows
use (its *pattern*).  The VB updates need ``Sigma`` only inside the pattern of ``P``: the
diagonal blocks, ``Sigma_RR`` and ``Sigma_AR`` on the pattern of ``G``, which is
``W = G S^{-1}`` evaluated at ``sum_l |R_l|^2`` entries.  Neither ``Sigma`` nor the
``(JK) x q`` matrix ``G S^{-1}`` is ever formed; the cost of a solve is
``O(nnz(C) + sum_l |R_l|^2 K^2 + q^3)`` with the ``q^3`` in LAPACK.

Used when ``q`` is at most :data:`MAX_SCHUR_COLUMNS` and the Schur complement is dense
enough (:data:`MIN_SCHUR_DENSITY`) that a dense factorisation is the right tool; otherwise
(nested factors, where ``S`` stays sparse) the general sparse factorisation of
:mod:`bayesvm.linalg.sparse` serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.linalg import lapack, solve_triangular

from ..memory import available_memory

#: Largest Schur complement (columns outside the eliminated term) factorised densely: 12,000 columns is a 1.2 GB
#: matrix and ``12,000^3 / 3`` multiply-adds per solve.
MAX_SCHUR_COLUMNS = 12_000

#: Smallest fraction of non-zeros of the Schur complement for which a dense factorisation
#: is used.  Nested factors give a Schur complement with about ``1/q`` of its entries
#: non-zero, where the sparse factorisation is far cheaper.
MIN_SCHUR_DENSITY = 0.01

#: Pairs of pattern entries (or of a row's entries) processed at once in the pair loops.
PAIR_CHUNK = 4_000_000

#: A row's quadratic form over pairs of its stored entries costs about this many multiply-adds of the sparse-dense
#: product ``d cov`` per pair (numpy's gathers): the product serves where ``nnz(d) q`` is below this many times the
#: pairs.
PAIR_COST = 30

#: Entries of the dense ``rows x q`` product computed at once by :func:`_row_quadratic_by_product`.
PRODUCT_CHUNK = 4_000_000


@dataclass(frozen=True, eq=False)
class EliminationLayout:
    """Which coefficients are eliminated, and the maps from rows to the pattern (built once per design).

    Attributes
    ----------
    C
        The full design (CSR), ``n x N``.
    eliminated
        ``(J, K)`` column indices of the eliminated term (level ``l``'s ``K`` coefficients).
    rest
        The other ``q`` columns, increasing.
    row_level, z
        Each row's level of the eliminated term (``-1``: none) and its ``K`` values there.
    C_rest
        ``C[:, rest]`` (CSR).
    keys
        Sorted ``l * q + r`` for every pair (level ``l``, rest column ``r``) used by some row:
        the pattern of ``P_AR`` and ``G``.  ``level_ptr[l]:level_ptr[l + 1]`` are level ``l``'s.
    entry_pos
        For every stored entry of ``C_rest`` in a row with a level, its position in ``keys``
        (``-1`` for rows without a level).
    """

    C: sp.csr_matrix
    eliminated: np.ndarray
    rest: np.ndarray
    row_level: np.ndarray
    z: np.ndarray
    C_rest: sp.csr_matrix
    keys: np.ndarray
    level_ptr: np.ndarray
    entry_pos: np.ndarray

    @property
    def J(self) -> int:
        return self.eliminated.shape[0]

    @property
    def K(self) -> int:
        return self.eliminated.shape[1]

    @property
    def q(self) -> int:
        return self.rest.size

    @cached_property
    def entry_row(self) -> np.ndarray:
        """Row of every stored entry of ``C_rest``."""
        return np.repeat(np.arange(self.C_rest.shape[0]), np.diff(self.C_rest.indptr))

    @cached_property
    def key_level(self) -> np.ndarray:
        return self.keys // self.q

    @cached_property
    def key_col(self) -> np.ndarray:
        return self.keys % self.q

    @cached_property
    def column_role(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For every column of ``C``: its level (``-1`` if in ``rest``), its term index and its rest position."""
        N = self.C.shape[1]
        level, term, pos = np.full(N, -1), np.full(N, -1), np.full(N, -1)
        level[self.eliminated.ravel()] = np.repeat(np.arange(self.J), self.K)
        term[self.eliminated.ravel()] = np.tile(np.arange(self.K), self.J)
        pos[self.rest] = np.arange(self.q)
        return level, term, pos

    def level_matrix(self, values: np.ndarray) -> sp.csr_matrix:
        """The ``(J K) x q`` CSR matrix with row ``l K + k`` holding ``values[:, k]`` on level ``l``'s pattern."""
        J, K = self.J, self.K
        lengths = np.repeat(np.diff(self.level_ptr), K)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        starts = np.repeat(self.level_ptr[:-1], K)
        pos = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        term = np.repeat(np.tile(np.arange(K), J), lengths)
        return sp.csr_matrix((values[pos, term], self.key_col[pos], indptr), shape=(J * K, self.q))


def elimination_layout(
    C: sp.csr_matrix, eliminated: np.ndarray, dense_complement: bool = True
) -> EliminationLayout | None:
    """The layout that eliminates the columns ``eliminated`` (``J x K``), or ``None`` where it does not apply.

    It does not apply when a row uses two levels of the term.  With ``dense_complement`` (the exact
    path, which factorises ``S`` densely) it also does not apply when more than
    :data:`MAX_SCHUR_COLUMNS` columns remain or their dense matrices would not fit in the available
    memory, or when the Schur complement would be sparser than :data:`MIN_SCHUR_DENSITY` (the
    general sparse factorisation is then cheaper).  The probe estimator
    (:mod:`bayesvm.linalg.probes`) only applies ``S`` to vectors and takes any layout.
    """
    C = sp.csr_matrix(C)
    C.sum_duplicates()
    n, N = C.shape
    eliminated = np.asarray(eliminated)
    J, K = eliminated.shape
    level_of, term_of = np.full(N, -1), np.full(N, -1)
    level_of[eliminated.ravel()] = np.repeat(np.arange(J), K)
    term_of[eliminated.ravel()] = np.tile(np.arange(K), J)
    rest = np.flatnonzero(level_of < 0)
    q = rest.size
    if q == 0 or (dense_complement and q > MAX_SCHUR_COLUMNS):
        return None
    entry_row = np.repeat(np.arange(n), np.diff(C.indptr))
    in_term = level_of[C.indices] >= 0
    rows, levels = entry_row[in_term], level_of[C.indices[in_term]]
    row_level = np.full(n, -1)
    row_level[rows] = levels
    if np.any(row_level[rows] != levels):
        return None
    z = np.zeros((n, K))
    z[rows, term_of[C.indices[in_term]]] = C.data[in_term]
    C_rest = C[:, rest].tocsr()
    C_rest.sort_indices()
    rest_rows = np.repeat(np.arange(n), np.diff(C_rest.indptr))
    with_level = row_level[rest_rows] >= 0
    keys, inverse = np.unique(row_level[rest_rows[with_level]] * q + C_rest.indices[with_level], return_inverse=True)
    entry_pos = np.full(C_rest.nnz, -1)
    entry_pos[with_level] = inverse.ravel()
    level_ptr = np.searchsorted(keys // q, np.arange(J + 1))
    if dense_complement and not _dense_complement_pays(keys % q, level_ptr, C_rest, J, q):
        return None
    return EliminationLayout(
        C=C,
        eliminated=eliminated,
        rest=rest,
        row_level=row_level,
        z=z,
        C_rest=C_rest,
        keys=keys,
        level_ptr=level_ptr,
        entry_pos=entry_pos,
    )


def oversized_dense_complement(C: sp.csr_matrix, eliminated: np.ndarray) -> int | None:
    """``q`` when eliminating ``eliminated`` would leave a dense complement (crossed factors) too large for the
    dense factorisation (:data:`MAX_SCHUR_COLUMNS`, or memory), so that the exact path falls back to the
    general sparse factorisation with its dense supernodes; otherwise ``None``.  Cheap unless ``q`` is large."""
    q = C.shape[1] - np.asarray(eliminated).size
    if q <= MAX_SCHUR_COLUMNS and 8.0 * q * q * 4 <= available_memory():
        return None
    layout = elimination_layout(C, eliminated, dense_complement=False)
    if layout is None:
        return None
    if _schur_density(layout.key_col, layout.level_ptr, layout.C_rest, layout.J, layout.q) < MIN_SCHUR_DENSITY:
        return None
    return layout.q


def _dense_complement_pays(cols: np.ndarray, level_ptr: np.ndarray, C_rest: sp.csr_matrix, J: int, q: int) -> bool:
    """Whether ``S`` is dense enough (:data:`MIN_SCHUR_DENSITY`) for a dense factorisation and fits in memory."""
    # density of S = P_RR - P_RA G: the pattern of C_rest' C_rest and of the level patterns' cross products
    sizes = np.diff(level_ptr).astype(float)
    if min(float(np.sum(sizes**2)) + C_rest.nnz, q * q) < MIN_SCHUR_DENSITY * q * q:
        return False
    if _schur_density(cols, level_ptr, C_rest, J, q) < MIN_SCHUR_DENSITY:
        return False
    return 8.0 * q * q * 4 <= available_memory()  # S, its factor, its inverse and a product's dense copy


def _schur_density(cols: np.ndarray, level_ptr: np.ndarray, C_rest: sp.csr_matrix, J: int, q: int) -> float:
    """Fraction of non-zeros in the pattern of ``S``: exact for up to 256 columns, otherwise measured on
    256 columns chosen at random (with a fixed seed; the columns of ``S`` are exchangeable enough for a
    go / no-go decision against :data:`MIN_SCHUR_DENSITY`)."""
    pattern = sp.csr_matrix((np.ones(cols.size), cols, level_ptr), shape=(J, q))
    rest_pattern = sp.csr_matrix((np.ones(C_rest.nnz), C_rest.indices, C_rest.indptr), shape=C_rest.shape)
    columns = np.arange(q) if q <= 256 else np.sort(np.random.default_rng(0).choice(q, 256, replace=False))
    sampled = pattern[:, columns].T @ pattern + rest_pattern[:, columns].T @ rest_pattern
    return sampled.nnz / (columns.size * q)


def per_level(layout: EliminationLayout, weights: np.ndarray) -> np.ndarray:
    """``(J, K)`` sums ``sum_{i in level l} weights_i z_i``."""
    seen = layout.row_level >= 0
    lev = layout.row_level[seen]
    zw = layout.z[seen] * weights[seen, None]
    return np.stack([np.bincount(lev, weights=zw[:, k], minlength=layout.J) for k in range(layout.K)], axis=1)


def _prior_blocks(layout: EliminationLayout, prior: sp.spmatrix) -> tuple[np.ndarray, sp.csr_matrix]:
    """The prior's ``(J, K, K)`` blocks on the eliminated term and its ``R x R`` part; it must not couple them."""
    prior = sp.csr_matrix(prior)
    idx = layout.eliminated
    J, K = idx.shape
    rows = np.broadcast_to(idx[:, :, None], (J, K, K)).ravel()
    cols = np.broadcast_to(idx[:, None, :], (J, K, K)).ravel()
    blocks = np.asarray(prior[rows, cols]).reshape(J, K, K)
    level, _, _ = layout.column_role
    coo = prior.tocoo()
    a_row, a_col = level[coo.row], level[coo.col]
    mixed = ((a_row >= 0) != (a_col >= 0)) | ((a_row >= 0) & (a_row != a_col))
    if np.any(coo.data[mixed] != 0):
        raise ValueError("the prior couples the eliminated term with other coefficients")
    return blocks, prior[layout.rest][:, layout.rest].tocsr()


@dataclass(frozen=True, eq=False)
class SchurSparsePosterior:
    """``q(theta) = N(mu, P^{-1})`` through the elimination of one term (same role as ``SparseGaussianPosterior``).

    ``mean_d`` is the full mean in the design's column order; ``cov_rest = S^{-1}``;
    ``block_inv = P_l^{-1}``; ``gain`` and ``cross`` are ``G`` and ``W = G S^{-1}`` on the
    pattern (``(len(keys), K)``); ``cov_blocks`` the ``(J, K, K)`` blocks ``Sigma_ll``.
    """

    layout: EliminationLayout
    mean_d: np.ndarray
    chol: np.ndarray
    cov_rest: np.ndarray
    block_inv: np.ndarray
    gain: np.ndarray
    cross: np.ndarray
    cov_blocks: np.ndarray
    logdet_precision: float
    weights: np.ndarray
    prior: sp.csr_matrix

    @property
    def dim(self) -> int:
        return self.mean_d.size

    @property
    def mean_b(self) -> np.ndarray:
        return np.zeros((0, 0))

    @cached_property
    def _gain_matrix(self) -> sp.csr_matrix:
        return self.layout.level_matrix(self.gain)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """``P^{-1} rhs`` for ``rhs`` of shape ``(N,)`` or ``(N, m)``."""
        lay = self.layout
        rhs = np.asarray(rhs, dtype=float)
        vec = rhs.ndim == 1
        b = rhs.reshape(rhs.shape[0], -1)
        b_A = b[lay.eliminated.ravel()].reshape(lay.J, lay.K, -1)
        part_A = np.einsum("jkl,jlm->jkm", self.block_inv, b_A)
        x_R = lapack.dpotrs(self.chol, b[lay.rest] - self._gain_matrix.T @ b_A.reshape(lay.J * lay.K, -1), lower=1)[0]
        x_A = part_A.reshape(lay.J * lay.K, -1) - self._gain_matrix @ x_R
        out = np.empty_like(b)
        out[lay.rest] = x_R
        out[lay.eliminated.ravel()] = x_A
        return out[:, 0] if vec else out

    def cov_entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``Sigma[rows, cols]`` (broadcast) for pairs inside the pattern of ``P``."""
        lay = self.layout
        rows, cols = np.broadcast_arrays(np.asarray(rows), np.asarray(cols))
        level, term, pos = lay.column_role
        out = np.empty(rows.shape)
        la, lb = level[rows], level[cols]
        both_rest = (la < 0) & (lb < 0)
        out[both_rest] = self.cov_rest[pos[rows[both_rest]], pos[cols[both_rest]]]
        both_term = (la >= 0) & (lb >= 0)
        if np.any(la[both_term] != lb[both_term]):
            raise ValueError("a requested covariance entry lies outside the pattern (two levels of one term)")
        out[both_term] = self.cov_blocks[la[both_term], term[rows[both_term]], term[cols[both_term]]]
        mixed = ~(both_rest | both_term)
        if np.any(mixed):
            a_col = np.where(la >= 0, rows, cols)[mixed]
            r_col = np.where(la >= 0, cols, rows)[mixed]
            key = level[a_col] * lay.q + pos[r_col]
            at = np.minimum(np.searchsorted(lay.keys, key), lay.keys.size - 1)
            if lay.keys.size == 0 or np.any(lay.keys[at] != key):
                raise ValueError("a requested covariance entry lies outside the pattern of the precision")
            out[mixed] = -self.cross[at, term[a_col]]
        return out

    def variance(self) -> np.ndarray:
        lay = self.layout
        out = np.empty(self.dim)
        out[lay.rest] = np.diag(self.cov_rest)
        out[lay.eliminated.ravel()] = np.diagonal(self.cov_blocks, axis1=1, axis2=2).ravel()
        return out

    def predictor(
        self, C: sp.csr_matrix, codes: None = None, values: None = None, training: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f_i = c_i' theta``.

        Training rows: ``c_i' Sigma c_i = z_i' Sigma_ll z_i - 2 z_i' W_l d_i + d_i' S^{-1} d_i`` with every
        entry inside the pattern.  New rows (levels in new combinations) use solves, 256 rows at a time.
        """
        C = sp.csr_matrix(C)
        mean = C @ self.mean_d
        if not training:
            var = np.empty(C.shape[0])
            for start in range(0, C.shape[0], 256):
                block = C[start : start + 256]
                var[start : start + 256] = np.einsum("ij,ji->i", block.toarray(), self.solve(block.T.toarray()))
            return mean, var
        lay = self.layout
        n = C.shape[0]
        seen = lay.row_level >= 0
        lev = np.where(seen, lay.row_level, 0)
        var = np.where(seen, np.einsum("ik,ikl,il->i", lay.z, self.cov_blocks[lev], lay.z), 0.0)
        # -2 z_i' W_l d_i: one term per stored entry of d_i
        d = lay.C_rest
        has = lay.entry_pos >= 0
        rows = lay.entry_row[has]
        cross = np.einsum("ek,ek->e", lay.z[rows], self.cross[lay.entry_pos[has]]) * d.data[has]
        var -= 2.0 * np.bincount(rows, weights=cross, minlength=n)
        return mean, var + _row_quadratic(d, self.cov_rest)

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        lay = self.layout
        dev_R = solve_triangular(self.chol, rng.standard_normal((lay.q, size)), lower=True, trans="T")
        chol_b = np.linalg.cholesky(self.block_inv)
        eps = rng.standard_normal((lay.J, lay.K, size))
        dev_A = np.einsum("jkl,jlm->jkm", chol_b, eps).reshape(lay.J * lay.K, size) - self._gain_matrix @ dev_R
        out = np.empty((self.dim, size))
        out[lay.rest] = dev_R
        out[lay.eliminated.ravel()] = dev_A
        return self.mean_d + out.T, np.zeros((size, 0, 0))

    def log_density(self, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
        """``log q(theta)`` for draws ``(S, N)``."""
        return gaussian_log_density(
            self.layout.C, self.weights, self.prior, self.mean_d, self.logdet_precision, theta_d
        )


def gaussian_log_density(
    C: sp.csr_matrix, w: np.ndarray, prior: sp.csr_matrix, mean: np.ndarray, logdet: float, theta: np.ndarray
) -> np.ndarray:
    """``log N(theta; mean, P^{-1})`` for draws ``(S, N)`` with ``P = C' diag(w) C + prior`` and ``log|P| = logdet``:
    ``(theta - mu)' P (theta - mu) = sum_i w_i (c_i' dev)^2 + dev' prior dev``, no factorisation needed."""
    dev = (theta - mean).T
    quad = w @ (C @ dev) ** 2 + np.sum(dev * (prior @ dev), axis=0)
    return -0.5 * quad + 0.5 * logdet - 0.5 * mean.size * np.log(2 * np.pi)


def _symmetrize_lower(a: np.ndarray, block: int = 1024) -> np.ndarray:
    """Copy the lower triangle of ``a`` onto its upper triangle in place (column blocks; no ``q x q`` temporary)."""
    q = a.shape[0]
    for i0 in range(0, q, block):
        i1 = min(i0 + block, q)
        diag = a[i0:i1, i0:i1]
        diag[...] = np.tril(diag) + np.tril(diag, -1).T
        a[i0:i1, i1:] = a[i1:, i0:i1].T
    return a


def _row_quadratic(d: sp.csr_matrix, cov: np.ndarray) -> np.ndarray:
    """``d_i' cov d_i`` for every row of a sparse ``d``: over every pair of its stored entries (in chunks), or from
    the sparse-dense product ``d cov`` where that costs less (:data:`PAIR_COST`)."""
    n = d.shape[0]
    counts = np.diff(d.indptr)
    pairs = counts.astype(np.int64) ** 2
    if float(d.nnz) * cov.shape[0] < PAIR_COST * float(np.sum(pairs)):
        return _row_quadratic_by_product(d, cov)
    ends = np.cumsum(pairs)
    out = np.zeros(n)
    start = 0
    while start < n:
        stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + PAIR_CHUNK, side="right")), start + 1)
        rows = np.arange(start, stop)
        p = pairs[rows]
        row_of_pair = np.repeat(rows, p)
        offset = np.arange(row_of_pair.size) - np.repeat(np.cumsum(p) - p, p)
        width = counts[row_of_pair]
        first = d.indptr[row_of_pair] + offset // width
        second = d.indptr[row_of_pair] + offset % width
        values = d.data[first] * d.data[second] * cov[d.indices[first], d.indices[second]]
        out[start:stop] = np.bincount(row_of_pair - start, weights=values, minlength=stop - start)
        start = stop
    return out


def _row_quadratic_by_product(d: sp.csr_matrix, cov: np.ndarray) -> np.ndarray:
    """``d_i' cov d_i`` from ``d cov`` (chunks of rows of at most :data:`PRODUCT_CHUNK` entries), read at ``d``'s
    stored entries."""
    n, q = d.shape
    out = np.empty(n)
    step = max(1, PRODUCT_CHUNK // max(q, 1))
    for start in range(0, n, step):
        block = d[start : start + step]
        product = block @ cov
        rows = np.repeat(np.arange(block.shape[0]), np.diff(block.indptr))
        out[start : start + step] = np.bincount(
            rows, weights=block.data * product[rows, block.indices], minlength=block.shape[0]
        )
    return out


def _gain_times_cov(layout: EliminationLayout, gain: np.ndarray, cov_rest: np.ndarray) -> np.ndarray:
    """``W = G S^{-1}`` on the pattern: ``W[(l, r), k] = sum_{v in R_l} G[(l, v), k] S^{-1}[v, r]``.

    Levels are taken in order of pattern size, in batches of similar size (within 25%) and at most
    :data:`PAIR_CHUNK` pairs; each batch gathers its levels' blocks ``S^{-1}[R_l, R_l]`` into one
    padded ``(B, s, s)`` array and multiplies them by ``G_l`` in one batched product.  Padding
    carries zero gain and its outputs are dropped.
    """
    ptr, col = layout.level_ptr, layout.key_col
    q = cov_rest.shape[0]
    flat_cov = cov_rest.ravel(order="K")  # symmetric, so either memory order gives S^{-1}[v, r] at v q + r
    index_type = np.int32 if q * q < 2**31 else np.int64
    col = col.astype(index_type)
    sizes = np.diff(ptr)
    order = np.argsort(sizes, kind="stable")
    order = order[sizes[order] > 0]
    out = np.zeros_like(gain)
    i = 0
    while i < order.size:
        smallest = sizes[order[i]]
        stop = int(np.searchsorted(sizes[order], 1.25 * smallest, side="right"))
        width = int(sizes[order[stop - 1]])
        stop = min(stop, i + max(1, PAIR_CHUNK // (width * width)))
        width = int(sizes[order[stop - 1]])
        levels = order[i:stop]
        slot = np.arange(width)
        valid = slot[None, :] < sizes[levels, None]
        pos = np.where(valid, ptr[levels, None] + slot[None, :], 0)
        idx = col[pos]
        g = np.where(valid[:, :, None], gain[pos], 0.0)  # (B, s, K)
        flat = (idx * index_type(q))[:, :, None] + idx[:, None, :]
        block = np.take(flat_cov, flat)  # (B, s, s): S^{-1}[R_l, R_l], symmetric
        out[pos[valid]] = np.matmul(block, g)[valid]
        i = stop
    return out


@dataclass(frozen=True, eq=False)
class _Elimination:
    """``P`` after eliminating the term: the Cholesky factor of ``S``, ``P_l^{-1}``, ``G`` and the mean."""

    chol: np.ndarray
    block_inv: np.ndarray
    gain: np.ndarray  # G on the pattern, (len(keys), K)
    gain_matrix: sp.csr_matrix  # the same as a (J K) x q matrix
    mean: np.ndarray  # full mean, design column order
    logdet: float


@dataclass(frozen=True, eq=False)
class TermElimination:
    """The eliminated term's blocks ``P_l``, and ``P_AR`` and ``G = P_AA^{-1} P_AR`` on the pattern."""

    block_inv: np.ndarray  # (J, K, K): P_l^{-1}
    logdet_blocks: float  # sum_l log|P_l|
    cross: np.ndarray  # P_AR on the pattern, (len(keys), K)
    gain: np.ndarray  # G on the pattern, (len(keys), K)
    prior_rest: sp.csr_matrix  # the prior's R x R part
    prior_blocks: np.ndarray  # (J, K, K): the prior's blocks on the eliminated term


def eliminate_term(layout: EliminationLayout, w: np.ndarray, prior: sp.spmatrix) -> TermElimination:
    """``P_l = sum_{i in l} w_i z_i z_i' + prior_l``, ``P_AR`` and ``G`` for ``P = C' diag(w) C + prior``."""
    lay = layout
    J, K = lay.J, lay.K
    prior_blocks, prior_rest = _prior_blocks(lay, prior)
    seen = lay.row_level >= 0
    lev, zs, ws = lay.row_level[seen], lay.z[seen], w[seen]
    blocks = prior_blocks.copy()
    for k in range(K):
        for m in range(k, K):
            s = np.bincount(lev, weights=ws * zs[:, k] * zs[:, m], minlength=J)
            blocks[:, k, m] += s
            if m != k:
                blocks[:, m, k] += s
    chol_b = np.linalg.cholesky(blocks)  # raises LinAlgError if some P_l is not positive definite
    block_inv = np.linalg.inv(blocks)
    logdet_b = 2.0 * float(np.sum(np.log(np.diagonal(chol_b, axis1=1, axis2=2))))
    d = lay.C_rest
    has = lay.entry_pos >= 0
    rows, pos = lay.entry_row[has], lay.entry_pos[has]
    wd = w[rows] * d.data[has]
    cross = np.stack([np.bincount(pos, weights=wd * lay.z[rows, k], minlength=lay.keys.size) for k in range(K)], axis=1)
    gain = np.einsum("ekl,el->ek", block_inv[lay.key_level], cross)
    return TermElimination(block_inv, logdet_b, cross, gain, prior_rest, prior_blocks)


def _eliminate(layout: EliminationLayout, w: np.ndarray, rhs_weights: np.ndarray, prior: sp.spmatrix) -> _Elimination:
    lay = layout
    term = eliminate_term(lay, w, prior)
    block_inv, cross, gain, prior_rest, d = term.block_inv, term.cross, term.gain, term.prior_rest, lay.C_rest
    cross_m, gain_m = lay.level_matrix(cross), lay.level_matrix(gain)
    # S = P_RR - P_RA G, dense
    schur = (cross_m.T @ gain_m).toarray()
    np.negative(schur, out=schur)
    direct = (d.T @ sp.diags(w) @ d + prior_rest).tocoo()  # no duplicate entries after the product
    schur[direct.row, direct.col] += direct.data
    chol, info = lapack.dpotrf(schur.T, lower=1, clean=1, overwrite_a=1)  # symmetric: the Fortran-order view
    if info != 0:
        raise np.linalg.LinAlgError("the posterior precision is not positive definite")
    # mean: mu_R = S^{-1} (r_R - G' r_A), mu_A = P_l^{-1} r_l - G mu_R
    r_A = per_level(lay, rhs_weights)
    mu_R = lapack.dpotrs(chol, d.T @ rhs_weights - gain_m.T @ r_A.ravel(), lower=1)[0]
    mu_A = np.einsum("jkl,jl->jk", block_inv, r_A).ravel() - gain_m @ mu_R
    mean = np.empty(lay.C.shape[1])
    mean[lay.rest], mean[lay.eliminated.ravel()] = mu_R, mu_A
    logdet = 2.0 * float(np.sum(np.log(np.diag(chol)))) + term.logdet_blocks
    return _Elimination(chol, block_inv, gain, gain_m, mean, logdet)


def schur_sparse_mean(
    layout: EliminationLayout, w: np.ndarray, rhs_weights: np.ndarray, prior: sp.spmatrix
) -> np.ndarray:
    """``P^{-1} C' rhs_weights`` only (the M-step of EM)."""
    return _eliminate(layout, w, rhs_weights, prior).mean


def schur_sparse_draw(
    layout: EliminationLayout, w: np.ndarray, rhs_weights: np.ndarray, prior: sp.spmatrix, rng: np.random.Generator
) -> np.ndarray:
    """One draw from ``N(P^{-1} C' r, P^{-1})`` (the Gibbs block step): ``theta_R = mu_R + L^{-T} eps`` with
    ``S = L L'``, then ``theta_A = mu_A - G (theta_R - mu_R) + P_l^{-1/2} eps_A``; no inverse is formed."""
    e = _eliminate(layout, w, rhs_weights, prior)
    lay = layout
    dev_R = lapack.dtrtrs(e.chol, rng.standard_normal(lay.q), lower=1, trans=1)[0]
    noise = np.einsum("jkl,jl->jk", np.linalg.cholesky(e.block_inv), rng.standard_normal((lay.J, lay.K)))
    out = e.mean.copy()
    out[lay.rest] += dev_R
    out[lay.eliminated.ravel()] += noise.ravel() - e.gain_matrix @ dev_R
    return out


def schur_sparse_posterior(
    layout: EliminationLayout, w: np.ndarray, rhs_weights: np.ndarray, prior: sp.spmatrix
) -> SchurSparsePosterior:
    """``q(theta)`` for ``P = C' diag(w) C + prior`` by eliminating ``layout``'s term (Alg. 2 steps 2-3)."""
    lay = layout
    e = _eliminate(lay, w, rhs_weights, prior)
    gain, J, K = e.gain, lay.J, lay.K
    # covariances inside the pattern
    cov_rest = _symmetrize_lower(lapack.dpotri(e.chol, lower=1)[0])
    W = _gain_times_cov(lay, gain, cov_rest)
    spread = np.stack(
        [
            np.stack([np.bincount(lay.key_level, weights=W[:, k] * gain[:, m], minlength=J) for m in range(K)], -1)
            for k in range(K)
        ],
        axis=1,
    )
    cov_blocks = e.block_inv + 0.5 * (spread + np.swapaxes(spread, 1, 2))
    return SchurSparsePosterior(
        layout=lay,
        mean_d=e.mean,
        chol=e.chol,
        cov_rest=cov_rest,
        block_inv=e.block_inv,
        gain=gain,
        cross=W,
        cov_blocks=cov_blocks,
        logdet_precision=e.logdet,
        weights=np.asarray(w, dtype=float),
        prior=sp.csr_matrix(prior),
    )
