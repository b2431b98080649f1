"""The dense path's products over each row's nonzero columns, where the dense part is wide and mostly zero.

With two grouping factors the smaller one's indicators sit in the dense part beside the fixed effects (mlmRev's
guImmun, ``(1 | mom) + (1 | comm)``: 2,159 rows, 177 dense columns, about 15 nonzero per row; the mothers are
eliminated).  Every EP or mean-field sweep of :func:`bayesvm.linalg.dense.gaussian_posterior` then forms, over all
``q`` columns,

* ``D' W D`` and ``D' r`` (``n q^2``),
* the Schur complement ``S = D' W D + prior - sum_j P_dj P_jj^-1 P_jd`` (``J q^2``),
* each level's marginal covariance ``P_jj^-1 + G_j S^-1 G_j'`` (``J q^2``), and
* each row's predictive variance ``r_i' S^-1 r_i + z_i' P_jj^-1 z_i`` with ``r_i = d_i - G_j' z_i`` (``n q^2``),

although row ``i`` touches only its own nonzero columns and level ``j``'s cross terms ``P_jd = sum_i w_i z_i d_i'``
and gains ``G_j = P_jj^-1 P_jd`` only the union of its rows' columns (:class:`RowPattern`).  Here the same sums run
over those columns only (a zero entry adds nothing), compiled with numba.  Where numba is not installed, or the
pattern is not sparse enough to pay
(:data:`LEVEL_PAIRS_SHARE`), :func:`row_pattern` gives None and the dense BLAS path runs.

Each loop takes a range of rows or levels, so that a long one runs as two parts of equal work, one per CPU
(:mod:`bayesvm.linalg.row_threads`; where, :attr:`RowPattern.row_parts` and :attr:`RowPattern.level_parts`): the
per-level outputs of disjoint levels or rows are disjoint, and the sums over rows or levels go into arrays of their
own for the second part, added at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from .compiled import available, compile_nogil, numba, sparse_rows
from .row_threads import balanced_cut

#: The pattern is used where the levels' pairs of columns, ``sum_j s_j^2`` (``s_j`` the columns of level ``j``), are
#: at most this share of the dense ``J q^2``: a compiled loop over pairs costs a few times a BLAS multiply-add.
LEVEL_PAIRS_SHARE = 0.1
#: Cost of a row or level in the loops' estimate beside its pairs of columns (``width^2``), in the same units: its
#: fixed work and cache misses (measured 40-300 ns a row, 1-2 ns a pair)
ITEM_COST = 50.0


@dataclass(frozen=True, eq=False)
class RowPattern:
    """Each row's nonzero columns (``row_ptr``, ``row_cols``: CSR's ``indptr`` and ``indices``) and each level's,
    the union of its rows' (``level_ptr``, ``level_cols``; empty without a blocked factor); ``width`` is the most
    columns of any level.  ``row_entries[t]``: where row entry ``t``'s column sits among its level's entries (an index
    into ``level_cols``; -1 for a row without a level); ``entry_levels[t]``: the level of level entry ``t``."""

    row_ptr: np.ndarray
    row_cols: np.ndarray
    level_ptr: np.ndarray
    level_cols: np.ndarray
    width: int
    row_entries: np.ndarray
    entry_levels: np.ndarray

    @cached_property
    def row_parts(self) -> tuple[int, bool]:
        """Where the loops over rows cut them into two parts of equal work, and whether they are worth two threads
        (:func:`bayesvm.linalg.row_threads.balanced_cut`; each row costs :data:`ITEM_COST` plus its pairs of
        columns).  Computed once per pattern: the sweeps call the loops thousands of times."""
        return balanced_cut(ITEM_COST + np.diff(self.row_ptr).astype(float) ** 2)

    @cached_property
    def level_parts(self) -> tuple[int, bool]:
        """:attr:`row_parts` for the loops over levels (each level's pairs of columns)."""
        return level_parts(self.level_ptr)


def level_parts(level_ptr: np.ndarray) -> tuple[int, bool]:
    """Where loops over levels with these pointers cut them into two parts of equal work, and whether to split."""
    return balanced_cut(ITEM_COST + np.diff(level_ptr).astype(float) ** 2)


def row_pattern(
    D, codes: np.ndarray | None, n_levels: int = 0, level_support: np.ndarray | None = None
) -> RowPattern | None:
    """The :class:`RowPattern` of a dense part ``D`` with level ``codes`` (``-1``: no level; None: no blocked factor)
    where it is wide and mostly zero (:func:`bayesvm.linalg.compiled.sparse_rows`, :data:`LEVEL_PAIRS_SHARE`) and
    numba can run, else None.

    ``level_support`` (``(n_levels, q)``, boolean): columns each level's pattern must hold besides its rows' own.  A
    fitted posterior's gains ``G_j`` are nonzero on the union of its *training* rows' columns; rows of new data can
    miss some of them (a dummy that is 0 in this row and 1 in another of the level), and the predictive variance
    needs every column of ``r_i = d_i - G_j' z_i``, so a pattern for new rows takes the gains' support here."""
    if sp.issparse(D) or not available():
        return None
    row_ptr, row_cols = sparse_rows(D)
    if row_ptr.size == 0:
        return None
    n, q = D.shape
    empty = np.zeros(0, dtype=np.int64)
    if codes is None or n_levels == 0:
        widths = np.diff(row_ptr)
        return RowPattern(row_ptr, row_cols, empty, empty, int(widths.max()) if n else 0, empty, empty)
    seen = np.flatnonzero(codes >= 0)
    membership = sp.csr_matrix((np.ones(seen.size), (codes[seen], seen)), shape=(n_levels, n))
    present = sp.csr_matrix((np.ones(row_cols.size), row_cols, row_ptr), shape=(n, q))
    levels = sp.csr_matrix(membership @ present)
    if level_support is not None:
        levels = sp.csr_matrix(levels + sp.csr_matrix(level_support, dtype=float))
    levels.sort_indices()
    widths = np.diff(levels.indptr)
    if float(np.sum(widths.astype(float) ** 2)) > LEVEL_PAIRS_SHARE * n_levels * float(q) ** 2:
        return None
    width = max(int(widths.max()) if n_levels else 0, int(np.diff(row_ptr).max()) if n else 0)
    level_ptr, level_cols = levels.indptr.astype(np.int64), levels.indices.astype(np.int64)
    entry_levels = np.repeat(np.arange(n_levels, dtype=np.int64), widths)
    row_codes = np.repeat(np.asarray(codes, dtype=np.int64), np.diff(row_ptr))
    keys = entry_levels * q + level_cols  # sorted: by level, then column
    row_entries = np.where(row_codes >= 0, np.searchsorted(keys, row_codes * q + row_cols), -1).astype(np.int64)
    return RowPattern(row_ptr, row_cols, level_ptr, level_cols, width, row_entries, entry_levels)


def add_row_pairs(D, i, row_ptr, row_cols, w, r, gram, product):
    """Row ``i``'s terms of ``D' W D`` and ``D' r`` over its listed nonzero columns (increasing): ``gram[a, b] += w D_ia
    D_ib`` for every pair with ``b <= a`` (the lower triangle: :func:`mirror_lower` completes it), ``product[a] += r
    D_ia`` (shared with the Gibbs row pass, :func:`bayesvm.engines.linear.compiled_rows._row_pass`)."""
    for t in range(row_ptr[i], row_ptr[i + 1]):
        a = row_cols[t]
        product[a] += r * D[i, a]
        wa = w * D[i, a]
        for t2 in range(row_ptr[i], t + 1):
            gram[a, row_cols[t2]] += wa * D[i, row_cols[t2]]


def mirror_lower(matrix):
    """Copy the lower triangle of a square matrix onto its upper one (after sums over pairs ``b <= a``)."""
    for a in range(matrix.shape[0]):
        for b in range(a):
            matrix[b, a] = matrix[a, b]


def quadratic_form(cov, cols, start, count, x):
    """``sum_t sum_t2 x_t cov[c_t, c_t2] x_t2`` over columns ``c_t = cols[start + t]`` of a symmetric ``cov``, from its
    lower triangle of pairs (each entry read once)."""
    total = 0.0
    for t in range(count):
        a = cols[start + t]
        inner = 0.5 * cov[a, a] * x[t]
        for t2 in range(t):
            inner += cov[a, cols[start + t2]] * x[t2]
        total += x[t] * inner
    return 2.0 * total


def add_level_blocks(values, i, local, w, r, blocks, rhs_b):
    """Row ``i``'s terms of its level's ``sum w z z'`` and ``sum z r`` (level index ``local``)."""
    K = values.shape[1]
    for k in range(K):
        z = values[i, k]
        rhs_b[local, k] += z * r
        for k2 in range(K):
            blocks[local, k, k2] += z * w * values[i, k2]


def add_level_row(D, i, row_ptr, row_cols, sparse, values, local, w, r, blocks, cross, rhs_b):
    """Row ``i``'s terms of its level's sums (index ``local``): ``sum w z z'``, ``sum w z_k d'`` (``(J, K, q)``, over
    the row's listed columns where ``sparse``, else every column) and ``sum z r`` (the Gibbs row pass,
    :func:`bayesvm.engines.linear.compiled_rows._row_pass`)."""
    add_level_blocks(values, i, local, w, r, blocks, rhs_b)
    for k in range(values.shape[1]):
        wz = values[i, k] * w
        if sparse:
            for t in range(row_ptr[i], row_ptr[i + 1]):
                cross[local, k, row_cols[t]] += wz * D[i, row_cols[t]]
        else:
            for a in range(D.shape[1]):
                cross[local, k, a] += wz * D[i, a]


def _pattern_sums(
    D, row_ptr, row_cols, row_entries, codes, values, w, r, gram, product, blocks, cross, rhs_b, first, last
):  # fmt: skip
    """``D' W D``, ``D' r`` and the per-level sums ``sum w z z'``, ``sum w z_k d'`` (on the levels' entries,
    ``cross[row_entries[t], k]``: ``(nnz, K)``) and ``sum z r`` (``codes`` of size 0: no blocked factor; rows of code
    ``-1`` belong to no level) over each row's listed columns, rows ``first..last``; zeroes them first."""
    gram[:] = 0.0
    product[:] = 0.0
    blocks[:] = 0.0
    cross[:] = 0.0
    rhs_b[:] = 0.0
    n = D.shape[0]
    K = values.shape[1]
    has_levels = codes.size == n and n > 0
    for i in range(first, last):
        add_row_pairs(D, i, row_ptr, row_cols, w[i], r[i], gram, product)
        if has_levels and codes[i] >= 0:
            add_level_blocks(values, i, codes[i], w[i], r[i], blocks, rhs_b)
            for k in range(K):
                wz = values[i, k] * w[i]
                for t in range(row_ptr[i], row_ptr[i + 1]):
                    cross[row_entries[t], k] += wz * D[i, row_cols[t]]
    mirror_lower(gram)


def _pattern_schur(cross, gains, level_ptr, level_cols, schur, first, last):
    """``schur -= sum_j P_dj G_j`` over levels ``first..last``, i.e. ``schur[a, b] -= sum_k cross[j, k, a] G[j, k,
    b]``, over each level's pairs of columns, from both on the levels' entries (``cross[t, k]``, ``gains[t, k]``:
    ``(nnz, K)``).  ``P_dj G_j = P_dj P_jj^-1 P_jd`` is symmetric: the pairs ``b <= a`` are summed and mirrored (from
    a symmetric ``schur``, the result is symmetric)."""
    K = cross.shape[1]
    for j in range(first, last):
        for t in range(level_ptr[j], level_ptr[j + 1]):
            a = level_cols[t]
            for t2 in range(level_ptr[j], t + 1):
                b = level_cols[t2]
                total = 0.0
                for k in range(K):
                    total += cross[t, k] * gains[t2, k]
                schur[a, b] -= total
    mirror_lower(schur)


def _pattern_level_covariances(values, level_ptr, level_cols, cov_d, block_inv, cov_b, first, last):
    """Each level's marginal covariance ``cov_b[j] = P_jj^-1 + G_j S^-1 G_j'`` over its pairs of columns, from the
    gains on the levels' entries (``values[t, k] = G[j, k, level_cols[t]]``,
    :class:`bayesvm.linalg.level_gains.PatternGains`), levels ``first..last``."""
    K = block_inv.shape[1]
    for j in range(first, last):
        start, stop = level_ptr[j], level_ptr[j + 1]
        for k in range(K):
            for m in range(k + 1):  # sum_{t, t2} v_tk C_{t t2} v_t2m over the pairs t2 <= t of the symmetric C
                total = 0.0
                for t in range(start, stop):
                    a = level_cols[t]
                    total += cov_d[a, a] * values[t, k] * values[t, m]
                    for t2 in range(start, t):
                        total += cov_d[a, level_cols[t2]] * (
                            values[t, k] * values[t2, m] + values[t2, k] * values[t, m]
                        )
                cov_b[j, k, m] = block_inv[j, k, m] + total
                cov_b[j, m, k] = block_inv[j, m, k] + total


def _pattern_predictor(
    D, row_ptr, row_cols, codes, values, level_ptr, level_cols, mean_d, cov_d, mean_b, gains, block_inv, mean, var,
    resid, first, last,
):  # fmt: skip
    """Each row's predictive mean ``d_i' mu_d + z_i' mu_j`` and variance ``r_i' S^-1 r_i + z_i' P_jj^-1 z_i``,
    ``r_i = d_i - G_j' z_i`` (:meth:`bayesvm.linalg.dense.GaussianPosterior.predictor`), over the row's columns, or
    its level's (which hold them) where it has one; ``gains[t, k] = G[j, k, level_cols[t]]`` on the levels' entries;
    ``resid`` is work space of the pattern's width; rows ``first..last``."""
    n = D.shape[0]
    K = values.shape[1]
    has_levels = codes.size == n and n > 0
    for i in range(first, last):
        m = 0.0
        for t in range(row_ptr[i], row_ptr[i + 1]):
            m += D[i, row_cols[t]] * mean_d[row_cols[t]]
        j = codes[i] if has_levels else -1
        v = 0.0
        if j < 0:
            count = row_ptr[i + 1] - row_ptr[i]
            for t in range(count):
                resid[t] = D[i, row_cols[row_ptr[i] + t]]
            mean[i], var[i] = m, quadratic_form(cov_d, row_cols, row_ptr[i], count, resid)
            continue
        start, count = level_ptr[j], level_ptr[j + 1] - level_ptr[j]
        for t in range(count):
            a = level_cols[start + t]
            x = D[i, a]
            for k in range(K):
                x -= values[i, k] * gains[start + t, k]
            resid[t] = x
        for k in range(K):
            m += values[i, k] * mean_b[j, k]
            for k2 in range(K):
                v += values[i, k] * values[i, k2] * block_inv[j, k, k2]
        mean[i], var[i] = m, v + quadratic_form(cov_d, level_cols, start, count, resid)


if numba is not None:
    add_row_pairs = compile_nogil(add_row_pairs, inline=True)
    mirror_lower = compile_nogil(mirror_lower, inline=True)
    quadratic_form = compile_nogil(quadratic_form, inline=True)
    add_level_blocks = compile_nogil(add_level_blocks, inline=True)
    add_level_row = compile_nogil(add_level_row, inline=True)
    pattern_sums = compile_nogil(_pattern_sums)
    pattern_schur = compile_nogil(_pattern_schur)
    pattern_level_covariances = compile_nogil(_pattern_level_covariances)
    pattern_predictor = compile_nogil(_pattern_predictor)
else:  # never called: row_pattern() gives None without numba
    pattern_sums = pattern_schur = pattern_level_covariances = pattern_predictor = None
