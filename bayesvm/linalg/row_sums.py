"""The row sums a sweep or a draw needs: ``D' W D``, ``D' r`` and a blocked factor's per-level sums.

For weights ``w`` and a right-hand side ``r`` (VB's ``E[1/a_i]`` and ``y_i (1 + E[1/a_i])``, a Gibbs draw's, EP's
site parameters), every engine forms ``D' diag(w) D`` and ``D' r`` over the dense columns and, with a blocked factor
(:class:`bayesvm.linalg.dense.BlockedFactor`), the per-level sums ``sum w z z'``, ``sum w z_k d'`` and ``sum z r`` that
the Schur elimination of :mod:`bayesvm.linalg.dense` takes.  Rows are taken in chunks of :data:`ROW_CHUNK` (the
weighted copy of a chunk stays in cache), in two threaded halves on many rows and few columns (:func:`splits_rows`),
or over each row's nonzero columns on a sparse pattern (:func:`pattern_statistics`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .row_pattern import RowPattern, pattern_sums
from .row_threads import SINGLE_THREAD_BELOW, THREADS_ABOVE_WORK, in_two_parts, row_pool


class LevelFactor(Protocol):
    """What the sums read of a blocked grouping factor (met by :class:`bayesvm.linalg.dense.BlockedFactor`): each
    row's level (``codes``, -1 for none) and its ``K`` values, and how to sum rows by level."""

    codes: np.ndarray
    values: np.ndarray
    n_levels: int

    @property
    def K(self) -> int: ...

    @property
    def is_small(self) -> bool: ...

    def aggregate(self, rows: np.ndarray) -> np.ndarray: ...

    def weighted_sum(self, weights: np.ndarray, rows: np.ndarray) -> np.ndarray: ...


#: Rows per chunk of the row-wise products (keeps the temporaries in cache).
ROW_CHUNK = 8192


def weighted_gram(D: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``D' diag(w) D`` accumulated over chunks of rows (the weighted copy of a chunk stays in cache;
    measured faster than one product and than BLAS ``syrk`` on row-major data), symmetrised."""
    n, q = D.shape
    out = np.zeros((q, q))
    for start in range(0, n, ROW_CHUNK):
        chunk = D[start : start + ROW_CHUNK]
        out += chunk.T @ (chunk * w[start : start + ROW_CHUNK, None])
    return 0.5 * (out + out.T)


#: From this many rows, row-wise work that runs with one BLAS thread (few columns) is split into two
#: halves computed in two threads (numpy releases the GIL in its products and ufuncs).  The split is
#: fixed, so results do not depend on the machine.
SPLIT_ROWS = 200_000


def splits_rows(n: int, q: int) -> bool:
    """Whether row-wise products over ``n x q`` run as two threaded halves (where BLAS runs one thread)."""
    return n >= SPLIT_ROWS and q < SINGLE_THREAD_BELOW and float(n) * q * q < THREADS_ABOVE_WORK


def chunked_gram_and_product(D: np.ndarray, w: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, q = D.shape
    gram, product = np.zeros((q, q)), np.zeros(q)
    for start in range(0, n, ROW_CHUNK):
        chunk = D[start : start + ROW_CHUNK]
        gram += chunk.T @ (chunk * w[start : start + ROW_CHUNK, None])
        product += r[start : start + ROW_CHUNK] @ chunk
    return gram, product


def weighted_gram_and_product(D: np.ndarray, w: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``D' diag(w) D`` and ``D' r`` from one pass over the rows (as :func:`weighted_gram`); two threaded
    halves on many rows and few columns (:func:`splits_rows`)."""
    n, q = D.shape
    if splits_rows(n, q):
        half = n // 2
        parts = list(
            row_pool().map(
                lambda rows: chunked_gram_and_product(D[rows], w[rows], r[rows]), [slice(0, half), slice(half, n)]
            )
        )
        gram, product = parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]
    else:
        gram, product = chunked_gram_and_product(D, w, r)
    return 0.5 * (gram + gram.T), product


@dataclass(frozen=True, eq=False)
class LevelSums:
    """Per-level sums of a blocked factor's rows: ``sum w z z'`` ``(J, K, K)``, ``sum w z_k d'`` ``(J, K, q)`` (or
    ``(nnz, K)`` on a :class:`RowPattern`'s level entries, from :func:`pattern_statistics`) and ``sum z r``
    ``(J, K)``."""

    blocks: np.ndarray
    cross: np.ndarray
    rhs: np.ndarray


@dataclass(frozen=True, eq=False)
class RowStatistics:
    """The row sums a draw or sweep needs for weights ``w`` and right-hand side ``r``: ``D' W D``, ``D' r``
    and, with a blocked factor, either the per-row terms its per-level sums aggregate (``w z``, ``w z z'``,
    ``z r``) or those per-level sums themselves (``levels``, from the compiled Gibbs row pass)."""

    gram: np.ndarray
    product: np.ndarray
    wz: np.ndarray | None = None  # (n, K)
    wzz: np.ndarray | None = None  # (n, K * K)
    zr: np.ndarray | None = None  # (n, K)
    levels: LevelSums | None = None

    def level_sums(self, blocked: LevelFactor, D: np.ndarray) -> LevelSums:
        """:class:`LevelSums` (aggregated from the per-row terms unless given)."""
        if self.levels is not None:
            return self.levels
        K, J = blocked.K, blocked.n_levels
        if blocked.is_small:  # one dense product over all the per-row terms
            n, q = D.shape
            wzd = (self.wz[:, :, None] * D[:, None, :]).reshape(n, K * q)
            sums = blocked.aggregate(np.hstack([self.wzz, wzd, self.zr]))
            return LevelSums(
                blocks=sums[:, : K * K].reshape(J, K, K),
                cross=sums[:, K * K : K * K + K * q].reshape(J, K, q),
                rhs=sums[:, K * K + K * q :],
            )
        return LevelSums(
            blocks=blocked.aggregate(self.wzz).reshape(J, K, K),
            cross=np.stack([blocked.weighted_sum(self.wz[:, k], D) for k in range(K)], axis=1),
            rhs=blocked.aggregate(self.zr),
        )


def row_statistics(D: np.ndarray, w: np.ndarray, r: np.ndarray, blocked: LevelFactor | None) -> RowStatistics:
    """:class:`RowStatistics` of all rows (``D' W D`` and ``D' r`` as :func:`weighted_gram_and_product`)."""
    gram, product = weighted_gram_and_product(D, w, r)
    if blocked is None:
        return RowStatistics(gram, product)
    z = blocked.values
    wz = z * w[:, None]
    wzz = (wz[:, :, None] * z[:, None, :]).reshape(z.shape[0], -1)
    return RowStatistics(gram, product, wz, wzz, z * r[:, None])


def pattern_statistics(
    D: np.ndarray, w: np.ndarray, r: np.ndarray, blocked: LevelFactor | None, pattern: RowPattern
) -> RowStatistics:
    """:func:`row_statistics` over each row's nonzero columns (:mod:`bayesvm.linalg.row_pattern`), with the level
    sums formed in the same pass (their cross terms on the pattern's level entries)."""
    n, q = D.shape
    K = 1 if blocked is None else blocked.K
    J = 0 if blocked is None else blocked.n_levels
    gram, product = np.empty((q, q)), np.empty(q)
    blocks, cross, rhs_b = np.empty((J, K, K)), np.empty((pattern.level_cols.size, K)), np.empty((J, K))
    codes = np.zeros(0, dtype=np.int64) if blocked is None else blocked.codes
    values = np.zeros((n, 1)) if blocked is None else blocked.values
    sums = [(gram, product, blocks, cross, rhs_b)]

    def add_rows(part: int, rows: slice) -> None:  # part 1 sums into arrays of its own, added below
        out = sums[0] if part == 0 else tuple(np.empty_like(a) for a in sums[0])
        pattern_sums(
            D, pattern.row_ptr, pattern.row_cols, pattern.row_entries, codes, values, w, r, *out, rows.start, rows.stop
        )  # fmt: skip
        if part == 1:
            sums.append(out)

    in_two_parts(add_rows, n, *pattern.row_parts)
    for whole, part in zip(*sums) if len(sums) > 1 else ():
        whole += part
    levels = None if blocked is None else LevelSums(blocks=blocks, cross=cross, rhs=rhs_b)
    return RowStatistics(gram, product, levels=levels)
