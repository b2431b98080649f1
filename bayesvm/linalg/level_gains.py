"""The gains ``G_j = P_jj^-1 P_jd`` of a blocked factor's levels on the dense part, dense or over each level's columns.

A :class:`bayesvm.linalg.dense.GaussianPosterior` recovers its blocked effects from the dense part through
``theta_j | theta_d ~ N(mu_j - G_j (theta_d - mu_d), P_jj^-1)``.  ``G_j`` is nonzero only on the columns that level
``j``'s rows touch (``P_jd = sum_i w_i z_i d_i'``), so where the dense part is wide and mostly zero (two grouping
factors, :mod:`bayesvm.linalg.row_pattern`) the dense ``(J, K, q)`` array is almost all zeros: on a nested design of
1,600 mothers in 160 communities about 97%.  The accurate fit keeps one posterior per node of its variance lattice,
hundreds of them, and held 2 GB of those zeros.  :class:`PatternGains` keeps the values on each level's columns only,
sharing the pattern's index arrays with every other node of the same fit (and in a saved file, where the codec
stores shared arrays once); :class:`DenseGains` is the same interface over the dense array.  :func:`level_gains` gives
either from what a posterior holds (files saved before hold the dense array).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import compiled
from .row_pattern import RowPattern, level_parts, pattern_level_covariances
from .row_threads import in_two_parts


def level_covariances(gain: np.ndarray, cov_d: np.ndarray, block_inv: np.ndarray) -> np.ndarray:
    """Each level's marginal covariance ``P_jj^-1 + G_j S^-1 G_j'`` (``(J, K, K)``) from dense gains: the diagonal
    blocks of ``G S^-1 G'`` by one BLAS product, without a ``(JK)``-square matrix (a three-operand ``einsum`` took 12
    times as long)."""
    q = cov_d.shape[0]
    spread = (gain.reshape(-1, q) @ cov_d).reshape(gain.shape)
    return block_inv + (spread[:, :, None, :] * gain[:, None, :, :]) @ np.ones(q)


@dataclass(frozen=True, eq=False)
class DenseGains:
    """``G`` as a dense ``(J, K, q)`` array."""

    array: np.ndarray

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.array.shape

    def dense(self) -> np.ndarray:
        return self.array

    def times(self, x: np.ndarray) -> np.ndarray:
        """``G x``: ``(J, K)`` for ``x`` of shape ``(q,)``, ``(S, J, K)`` for draws ``(S, q)`` (one BLAS product, not a
        batched ``(J, K, q) @ q`` product)."""
        J, K, q = self.array.shape
        flat = self.array.reshape(J * K, q)
        return (flat @ x).reshape(J, K) if x.ndim == 1 else (x @ flat.T).reshape(x.shape[0], J, K)

    def take(self, levels: np.ndarray) -> np.ndarray:
        """The gains of the given levels, ``(n, K, q)``."""
        return np.take(self.array, levels, axis=0)

    def support(self) -> np.ndarray:
        """``(J, q)``: where some ``G_jk`` is nonzero."""
        return np.any(self.array != 0.0, axis=1)

    def aligned(self, pattern: RowPattern) -> np.ndarray:
        """The values on a pattern's level entries (which hold the support): ``(nnz, K)``."""
        return np.ascontiguousarray(self.array[pattern.entry_levels, :, pattern.level_cols])

    def covariances(self, cov_d: np.ndarray, block_inv: np.ndarray) -> np.ndarray:
        return level_covariances(self.array, cov_d, block_inv)

    def check_shapes(self, J: int, K: int, q: int) -> None:
        """Raise ``ValueError`` unless these are ``(J, K, q)`` gains."""
        if self.array.shape != (J, K, q):
            raise ValueError("the posterior's gains do not fit its means")


@dataclass(frozen=True, eq=False)
class PatternGains:
    """``G`` over each level's columns: ``values[t, k] = G[j, k, level_cols[t]]`` for the entries ``t`` of level ``j``
    (``level_ptr[j] <= t < level_ptr[j + 1]``, ``entry_levels[t] = j``: the
    :class:`bayesvm.linalg.row_pattern.RowPattern`'s level arrays, shared); every other entry of ``G`` is zero.
    ``q``: the dense part's columns."""

    level_ptr: np.ndarray
    level_cols: np.ndarray
    entry_levels: np.ndarray
    values: np.ndarray
    q: int
    #: the pattern's :attr:`~bayesvm.linalg.row_pattern.RowPattern.level_parts` (None: computed when needed, as for
    #: gains read from a file)
    parts: tuple[int, bool] | None = None

    @classmethod
    def from_dense(cls, gain: np.ndarray, pattern: RowPattern) -> PatternGains:
        """The entries of dense gains on ``pattern``'s level columns (which hold their support)."""
        values = np.ascontiguousarray(gain[pattern.entry_levels, :, pattern.level_cols])
        return cls(
            pattern.level_ptr, pattern.level_cols, pattern.entry_levels, values, gain.shape[2], pattern.level_parts
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.level_ptr.size - 1, self.values.shape[1], self.q)

    def _matrix(self, k: int) -> sp.csr_array:
        """``G_{., k, .}`` as a ``J x q`` CSR matrix over the shared index arrays."""
        return sp.csr_array((self.values[:, k], self.level_cols, self.level_ptr), shape=(self.shape[0], self.q))

    def dense(self) -> np.ndarray:
        J, K, q = self.shape
        out = np.zeros((J, K, q))
        out[self.entry_levels, :, self.level_cols] = self.values
        return out

    def times(self, x: np.ndarray) -> np.ndarray:
        """``G x``: ``(J, K)`` for ``x`` of shape ``(q,)``, ``(S, J, K)`` for draws ``(S, q)``."""
        J, K, _ = self.shape
        if x.ndim == 1:  # each level's sum of its entries' products
            products = self.values * x[self.level_cols, None]
            return np.stack([np.bincount(self.entry_levels, products[:, k], minlength=J) for k in range(K)], axis=1)
        return np.stack([self._matrix(k) @ x.T for k in range(K)], axis=-1).transpose(1, 0, 2)

    def take(self, levels: np.ndarray) -> np.ndarray:
        """The gains of the given levels, ``(n, K, q)``."""
        return np.stack([self._matrix(k)[levels].toarray() for k in range(self.shape[1])], axis=1)

    def support(self) -> np.ndarray:
        """``(J, q)``: the levels' columns (where ``G_j`` can be nonzero)."""
        out = np.zeros((self.shape[0], self.q), dtype=bool)
        out[self.entry_levels, self.level_cols] = True
        return out

    def aligned(self, pattern: RowPattern) -> np.ndarray:
        """The values on a pattern's level entries, which hold these (new rows' patterns add their own columns to
        the gains' support): ``(nnz, K)``; on the pattern they were formed on, the values themselves."""
        if pattern.level_cols is self.level_cols:
            return self.values
        J, q = self.shape[0], self.q
        mine = self.entry_levels * q + self.level_cols  # sorted: by level, then column
        theirs = pattern.entry_levels * q + pattern.level_cols
        at = np.minimum(np.searchsorted(mine, theirs), max(mine.size - 1, 0))
        found = mine[at] == theirs if mine.size else np.zeros(theirs.size, dtype=bool)
        if np.count_nonzero(found) != mine.size:
            raise RuntimeError("the layout does not hold every column of the gains")  # a caller's bug, not the user's
        return np.where(found[:, None], self.values[at], 0.0) if J else np.zeros((0, self.values.shape[1]))

    def check_shapes(self, J: int, K: int, q: int) -> None:
        """Raise ``ValueError`` unless these are ``(J, K, q)`` gains on a valid layout: ``level_ptr`` runs from 0 to
        the entries, each level's columns are increasing and below ``q``, and ``entry_levels`` names each entry's
        level (a loaded file's gains are checked before compiled loops read them without bounds checks)."""
        ptr, cols, levels, values = self.level_ptr, self.level_cols, self.entry_levels, self.values
        arrays = all(
            isinstance(a, np.ndarray) and a.ndim == d and (d == 2 or np.issubdtype(a.dtype, np.integer))
            for a, d in ((ptr, 1), (cols, 1), (levels, 1), (values, 2))
        )
        if not arrays or self.q != q or values.shape != (cols.size, K) or ptr.size != J + 1 or levels.size != cols.size:
            raise ValueError("the posterior's gains do not fit its means")
        within = np.diff(cols) > 0
        if (
            ptr[0] != 0 or ptr[-1] != cols.size or np.any(np.diff(ptr) < 0)
            or (cols.size and (cols.min() < 0 or cols.max() >= q))
            or not np.array_equal(levels, np.repeat(np.arange(J), np.diff(ptr)))
            or np.any(~within & (levels[1:] == levels[:-1]))
        ):  # fmt: skip
            raise ValueError("the posterior's gains are not on a valid layout")

    def covariances(self, cov_d: np.ndarray, block_inv: np.ndarray) -> np.ndarray:
        """Each level's ``P_jj^-1 + G_j S^-1 G_j'`` over its pairs of columns (compiled; dense without numba, as a
        file saved with numba is read by a process without it)."""
        if not compiled.available():
            return level_covariances(self.dense(), cov_d, block_inv)
        out = np.empty_like(block_inv)

        def levels_covariances(_, levels: slice) -> None:  # levels write disjoint blocks of out
            pattern_level_covariances(
                self.values, self.level_ptr, self.level_cols, cov_d, block_inv, out, levels.start, levels.stop
            )

        cut, split = level_parts(self.level_ptr) if self.parts is None else self.parts
        in_two_parts(levels_covariances, len(block_inv), cut, split)
        return out


def level_gains(gain: np.ndarray | PatternGains | DenseGains) -> PatternGains | DenseGains:
    """The gains' interface over what a posterior holds (a dense array in files saved before :class:`PatternGains`)."""
    return gain if isinstance(gain, (PatternGains, DenseGains)) else DenseGains(np.asarray(gain))
