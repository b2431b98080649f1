"""Structured Gaussian algebra for ``theta = (theta_d, theta_b)``.

``theta_d`` holds the dense columns ``D`` (fixed effects plus the random effects of the
smaller grouping factors); ``theta_b`` holds the random effects of one grouping factor
with ``J`` levels and ``K`` terms per level.  Row ``i`` of the full design is
``c_i = (d_i, e_{l(i)} (x) z_i)``, so the precision

    P = [[P_dd, P_db], [P_bd, blockdiag(P_1, ..., P_J)]]

has a block-diagonal ``theta_b`` part and is factorised by the Schur complement
``S = P_dd - P_db P_bb^{-1} P_bd`` (DESIGN section 5): a sweep costs
``O(n q^2 + J K^3 + J K q^2 + q^3)`` and never forms a ``(q + J K)``-square matrix.

Identities used (``G_l = P_l^{-1} P_{l,d}``, ``h_i = G_{l(i)}' z_i``):

* ``mu_d = S^{-1} (r_d - G' r_b)``, ``mu_l = P_l^{-1} r_l - G_l mu_d``;
* ``Cov(theta_d) = S^{-1}``, ``Cov(theta_l) = P_l^{-1} + G_l S^{-1} G_l'``;
* ``c_i' P^{-1} c_i = (d_i - h_i)' S^{-1} (d_i - h_i) + z_i' P_l^{-1} z_i``;
* ``log|P| = log|S| + sum_l log|P_l|``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import lapack
from threadpoolctl import ThreadpoolController

from . import compiled
from .dense_rows import level_rows_predictor
from .level_gains import DenseGains, PatternGains, level_gains
from .row_pattern import RowPattern, pattern_predictor, pattern_schur
from .row_sums import ROW_CHUNK, RowStatistics, pattern_statistics, row_statistics
from .row_threads import SINGLE_THREAD_BELOW, THREADS_ABOVE_WORK, in_row_halves, in_two_parts

#: How many :func:`blas_threads` contexts that hold BLAS at one thread are open (BLAS limits are process-wide):
#: inside one, :func:`small_lapack` has nothing to do.
_SINGLE_THREADED = [0]


@contextmanager
def _one_blas_thread():
    with _controller().limit(limits=1, user_api="blas"):
        _SINGLE_THREADED[0] += 1
        try:
            yield
        finally:
            _SINGLE_THREADED[0] -= 1


def blas_threads(n_columns: int, n_rows: int = 0) -> AbstractContextManager:
    """Context in which an engine runs: one BLAS thread for small dense blocks, the default otherwise."""
    if n_columns < SINGLE_THREAD_BELOW and float(n_rows) * n_columns**2 < THREADS_ABOVE_WORK:
        return _one_blas_thread()
    return nullcontext()


#: The process's BLAS libraries as :func:`_controller` last found them, and ``len(sys.modules)`` then.
_CONTROLLER: list = [None, -1]


def _controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS libraries, found once and again only after more modules were imported
    (one of them may have loaded another BLAS, e.g. CHOLMOD's): finding them scans every loaded shared library, which
    ``threadpool_limits`` would otherwise pay at every engine run and every check."""
    if _CONTROLLER[1] != len(sys.modules):
        _CONTROLLER[0] = ThreadpoolController()
        _CONTROLLER[1] = len(sys.modules)
    return _CONTROLLER[0]


def small_lapack(q: int) -> AbstractContextManager:
    """One BLAS thread for LAPACK on a small ``q x q`` matrix inside a threaded engine: right after a
    threaded product OpenBLAS can stall a small ``dpotri`` for far longer than the factorisation takes."""
    if q < SINGLE_THREAD_BELOW and not _SINGLE_THREADED[0]:  # (the limit itself costs little)
        return _controller().limit(limits=1, user_api="blas")
    return nullcontext()


def runs_with_blas_threads(size: Callable[..., int]) -> Callable:
    """Decorator: run the engine inside :func:`blas_threads` of ``size(*args, **kwargs)`` columns."""

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def engine(*args, **kwargs):
            with blas_threads(size(*args, **kwargs)):
                return func(*args, **kwargs)

        return engine

    return decorate


#: Entries of ``rows`` below which :meth:`BlockedFactor.weighted_sum` weights the rows densely.
SMALL_WEIGHTED_SUM = 200_000
#: Levels x rows up to which the level sums are one dense product with the membership matrix: on a few dozen rows
#: scipy's sparse product is mostly dispatch, much of a small EP sweep.
DENSE_INDICATOR_ENTRIES = 40_000


@dataclass(frozen=True, eq=False)
class BlockedFactor:
    """The grouping factor eliminated by the Schur complement.

    ``codes[i]`` is the level of row ``i`` (``-1``: no random effect, e.g. an unseen level),
    ``values[i]`` its ``K`` term values.
    """

    codes: np.ndarray
    values: np.ndarray
    n_levels: int

    @property
    def K(self) -> int:
        return self.values.shape[1]

    def check_shapes(self, n: int | None = None) -> None:
        """Raise ``ValueError`` unless ``codes`` are integers in ``[-1, n_levels)`` with one row of ``values`` each (and
        ``n`` of them where given): a loaded file's factor is checked before compiled loops index by it."""
        codes, values = getattr(self, "codes", None), getattr(self, "values", None)
        if not (
            isinstance(codes, np.ndarray) and codes.ndim == 1 and np.issubdtype(codes.dtype, np.integer)
            and isinstance(values, np.ndarray) and values.ndim == 2 and values.shape[0] == codes.size
            and isinstance(self.n_levels, (int, np.integer)) and (n is None or codes.size == n)
        ):  # fmt: skip
            raise ValueError("the grouping factor's codes and values do not fit together")
        if codes.size and (codes.min() < -1 or codes.max() >= self.n_levels):
            raise ValueError("the grouping factor's codes name levels it does not have")

    def sorted_order(self) -> np.ndarray:
        """A row permutation that makes every level's rows contiguous."""
        return np.argsort(self.codes, kind="stable")

    def take(self, rows: np.ndarray) -> BlockedFactor:
        """The factor restricted to / reordered by ``rows``."""
        return BlockedFactor(codes=self.codes[rows], values=self.values[rows], n_levels=self.n_levels)

    @cached_property
    def _indicator(self) -> sp.csr_matrix:
        """The ``J x n`` level-membership matrix (rows with ``codes == -1`` belong to no level)."""
        seen = np.flatnonzero(self.codes >= 0)
        order = seen[np.argsort(self.codes[seen], kind="stable")]
        indptr = np.searchsorted(self.codes[order], np.arange(self.n_levels + 1))
        return sp.csr_matrix((np.ones(order.size), order, indptr), shape=(self.n_levels, self.codes.size))

    def weighted_sum(self, weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``sum_{i in level j} weights_i rows_i`` for every level: ``J x r`` from ``rows`` (``n x r``), one
        sparse-dense product (faster than ``np.add.reduceat`` on many rows).  Below :data:`SMALL_WEIGHTED_SUM` entries
        the rows are weighted first and summed by the cached indicator (building a weighted sparse matrix would cost
        more than the sum)."""
        ind = self._indicator
        if rows.size < SMALL_WEIGHTED_SUM:
            return ind @ (rows * weights[:, None])
        weighted = sp.csr_matrix((weights[ind.indices], ind.indices, ind.indptr), shape=ind.shape)
        return weighted @ rows

    @property
    def is_small(self) -> bool:
        """Whether the membership matrix is stored dense too (:data:`DENSE_INDICATOR_ENTRIES`)."""
        return self.n_levels * self.codes.size <= DENSE_INDICATOR_ENTRIES

    @cached_property
    def _dense_indicator(self) -> np.ndarray:
        return self._indicator.toarray()

    def aggregate(self, rows: np.ndarray) -> np.ndarray:
        """Sum ``rows`` (``n x r``) within each level, giving ``J x r``."""
        return (self._dense_indicator if self.is_small else self._indicator) @ rows


@dataclass(frozen=True, eq=False)
class GaussianPosterior:
    """``q(theta) = N(mu, P^{-1})`` in structured form.

    Attributes
    ----------
    mean_d, cov_d
        Mean and covariance of ``theta_d`` (``cov_d = S^{-1}``).
    mean_b, cov_b
        ``(J, K)`` means and ``(J, K, K)`` marginal covariances of the blocked effects.
    gain
        ``G = P_bb^{-1} P_bd``: a dense ``(J, K, q)`` array, or over each level's columns
        (:class:`bayesvm.linalg.level_gains.PatternGains`) where the dense part is wide and mostly zero; read it
        through :attr:`gains`.
    block_inv
        ``P_l^{-1}``, ``(J, K, K)``.
    logdet_precision
        ``log |P|``.
    """

    mean_d: np.ndarray
    cov_d: np.ndarray
    mean_b: np.ndarray
    cov_b: np.ndarray
    gain: np.ndarray | PatternGains
    block_inv: np.ndarray
    logdet_precision: float

    @property
    def gains(self) -> PatternGains | DenseGains:
        """The gains ``G`` (:mod:`bayesvm.linalg.level_gains`), whichever way they are stored."""
        return level_gains(self.gain)

    @property
    def dim(self) -> int:
        return self.mean_d.size + self.mean_b.size

    def check_shapes(self) -> None:
        """Raise ``ValueError`` unless the arrays fit together (``q`` dense coefficients, ``J`` levels of ``K``): a
        loaded file's posterior is checked before the compiled predictor reads it without bounds checks."""
        arrays = ("mean_d", "cov_d", "mean_b", "cov_b", "block_inv")
        if not all(isinstance(getattr(self, name), np.ndarray) for name in arrays):
            raise ValueError("the posterior's means and covariances are not arrays")
        q = self.mean_d.shape[0] if self.mean_d.ndim == 1 else -1
        J, K = self.mean_b.shape if self.mean_b.ndim == 2 else (-1, -1)
        expected = {"cov_d": (q, q), "cov_b": (J, K, K), "block_inv": (J, K, K)}
        if self.mean_b.size == 0:
            expected = {"cov_d": (q, q)}
        for name, shape in expected.items():
            if q < 0 or J < 0 or getattr(self, name).shape != shape:
                raise ValueError(f"the posterior's {name} does not fit its means")
        if self.mean_b.size:
            if not isinstance(self.gain, (np.ndarray, PatternGains)):
                raise ValueError("the posterior's gains are not an array")
            self.gains.check_shapes(J, K, q)

    def cov_entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``Cov(theta_d)[rows, cols]`` (broadcast)."""
        return self.cov_d[rows, cols]

    def variance(self) -> np.ndarray:
        """Variances of ``theta_d``."""
        return np.diag(self.cov_d)

    def predictor(
        self,
        D: np.ndarray,
        codes: np.ndarray | None,
        values: np.ndarray | None,
        pattern: RowPattern | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f_i = d_i' theta_d + z_i' theta_{l(i)}`` under q, row by row.

        Rows with ``codes == -1`` get no blocked random effect.  ``pattern``: the rows' and levels' nonzero columns of
        ``D`` with these ``codes`` (:func:`bayesvm.linalg.row_pattern.row_pattern`), over which the sums then run.
        """
        if pattern is not None:
            return self._pattern_predictor(D, codes, values, pattern)
        if codes is None or not self.mean_b.size:
            return self._mean_and_quadratic_rows(D)
        if compiled.available() and isinstance(self.gains, DenseGains):
            return self._compiled_level_rows(D, codes, values)
        mean = D @ self.mean_d
        var = 0.0
        seen = codes >= 0
        z = np.where(seen[:, None], values, 0.0)
        idx = np.where(seen, codes, 0)
        gain, mean_b = self.gains.take(idx), np.take(self.mean_b, idx, axis=0)
        block_inv = np.take(self.block_inv, idx, axis=0)
        resid = D.copy()
        for k in range(z.shape[1]):  # K is the handful of terms per level
            mean = mean + z[:, k] * mean_b[:, k]
            resid -= z[:, k, None] * gain[:, k, :]
            for l in range(z.shape[1]):
                var = var + z[:, k] * z[:, l] * block_inv[:, k, l]
        return mean, var + self._quadratic_rows(resid)

    def _compiled_level_rows(self, D, codes, values) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predictor` with a blocked factor and dense gains by the compiled row loop of
        :mod:`bayesvm.linalg.dense_rows`: ``D S^-1`` one BLAS product per chunk of rows, the rest ``O(q K)`` per row."""
        n, q = D.shape
        gains = self.gains.dense()
        if q != self.mean_d.size or values.shape[1] != self.mean_b.shape[1] or np.max(codes, initial=-1) >= len(gains):
            raise ValueError(
                "the rows do not fit the posterior's coefficients"
            )  # (the loop reads without bounds checks)
        J, K, _ = gains.shape
        spread = (gains.reshape(J * K, q) @ self.cov_d).reshape(J, K, q)
        codes = np.asarray(codes, dtype=np.int64)
        mean, var = np.empty(n), np.empty(n)

        def predict(part: slice) -> None:
            for start in range(part.start, part.stop, ROW_CHUNK):
                rows = slice(start, min(part.stop, start + ROW_CHUNK))
                chunk = D[rows]
                level_rows_predictor(
                    chunk, chunk @ self.cov_d, codes[rows], values[rows], self.mean_d, self.mean_b, gains, spread,
                    self.block_inv, mean[rows], var[rows],
                )  # fmt: skip

        if q < SINGLE_THREAD_BELOW:  # (BLAS runs one thread in the engines: the halves use both CPUs)
            in_row_halves(n, predict)
        else:
            predict(slice(0, n))
        return mean, var

    def _pattern_predictor(self, D, codes, values, pattern: RowPattern) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predictor` over each row's (or its level's) nonzero columns (:mod:`bayesvm.linalg.row_pattern`)."""
        n = D.shape[0]
        mean, var = np.empty(n), np.empty(n)
        none = np.zeros(0, dtype=np.int64)
        has_levels = codes is not None and self.mean_b.size > 0
        if D.shape[1] != self.mean_d.size or (
            has_levels and (values.shape[1] != self.mean_b.shape[1] or np.max(codes, initial=-1) >= len(self.mean_b))
        ):  # (the compiled loop reads without bounds checks)
            raise ValueError("the rows do not fit the posterior's coefficients")
        gains = self.gains.aligned(pattern) if has_levels else np.zeros((0, 1))
        codes = codes if has_levels else none
        values = values if has_levels else np.zeros((n, 1))
        mean_b = self.mean_b if has_levels else np.zeros((0, 1))
        block_inv = self.block_inv if has_levels else np.zeros((0, 1, 1))

        def predict(_, rows: slice) -> None:
            pattern_predictor(
                D, pattern.row_ptr, pattern.row_cols, codes, values, pattern.level_ptr, pattern.level_cols, self.mean_d,
                self.cov_d, mean_b, gains, block_inv, mean, var, np.empty(max(pattern.width, 1)), rows.start,
                rows.stop,
            )  # fmt: skip

        in_two_parts(predict, n, *pattern.row_parts)
        return mean, var

    def _mean_and_quadratic_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``r_i' mu_d`` and ``r_i' S^{-1} r_i`` from one pass over the rows (one product per chunk with
        ``[S^{-1} | mu_d]``, while the chunk is in cache)."""
        n = rows.shape[0]
        mean, quad = np.empty(n), np.empty(n)
        both = np.column_stack([self.cov_d, self.mean_d])
        for start in range(0, n, ROW_CHUNK):
            chunk = rows[start : start + ROW_CHUNK]
            prod = chunk @ both
            mean[start : start + ROW_CHUNK] = prod[:, -1]
            quad[start : start + ROW_CHUNK] = np.einsum("ij,ij->i", prod[:, :-1], chunk)
        return mean, quad

    def _quadratic_rows(self, rows: np.ndarray) -> np.ndarray:
        """``r_i' S^{-1} r_i`` for each row, in chunks of rows (no ``n x q`` temporary)."""
        out = np.empty(rows.shape[0])
        for start in range(0, rows.shape[0], ROW_CHUNK):
            chunk = rows[start : start + ROW_CHUNK]
            out[start : start + ROW_CHUNK] = np.einsum("ij,ij->i", chunk @ self.cov_d, chunk)
        return out

    def log_density(self, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
        """``log q(theta)`` for draws ``theta_d (S, q)``, ``theta_b (S, J, K)``:
        ``log N(theta_d; mu_d, S^{-1}) + sum_l log N(theta_l; mu_l - G_l (theta_d - mu_d), P_l^{-1})``."""
        dev_d = theta_d - self.mean_d
        chol = np.linalg.cholesky(self.cov_d)
        half = sla.solve_triangular(chol, dev_d.T, lower=True)  # (q, S)
        out = -0.5 * np.sum(half**2, axis=0) - np.sum(np.log(np.diag(chol))) - 0.5 * dev_d.shape[1] * np.log(2 * np.pi)
        if self.mean_b.size:
            cond = theta_b - (self.mean_b - self.gains.times(dev_d))
            chol_b = np.linalg.cholesky(self.block_inv)  # (J, K, K)
            if chol_b.shape[1] == 1:  # one coefficient per level: the triangular solve is a division
                z = cond / chol_b[None, :, :, 0]
            else:
                z = np.linalg.solve(chol_b[None], cond[..., None])[..., 0]  # (S, J, K)
            logdet = np.sum(np.log(np.diagonal(chol_b, axis1=1, axis2=2)))
            out = out - 0.5 * np.sum(z**2, axis=(1, 2)) - logdet - 0.5 * self.mean_b.size * np.log(2 * np.pi)
        return out

    def moved(self, center: np.ndarray, shift: np.ndarray, matrix: np.ndarray) -> GaussianPosterior:
        """This q with ``theta_d`` carried by ``t -> center + shift + M (t - center)`` and the blocked effects'
        conditional given ``theta_d`` kept (:mod:`bayesvm.results.psis_correction`).

        ``theta_d' ~ N(c + s + M (mu_d - c), M S^{-1} M')``; ``theta_l | theta_d = t`` stays
        ``N(mu_l - G_l (t - mu_d), P_l^{-1})``, so ``mu_l' = mu_l - G_l (mu_d' - mu_d)`` and the marginal
        ``Sigma_ll' = P_l^{-1} + G_l S'^{-1} G_l'``; ``log |P'| = log |P| - 2 log |det M|``.
        """
        mean_d = center + shift + matrix @ (self.mean_d - center)
        cov_d = matrix @ self.cov_d @ matrix.T
        mean_b, cov_b = self.mean_b, self.cov_b
        if self.mean_b.size:
            mean_b = self.mean_b - self.gains.times(mean_d - self.mean_d)
            cov_b = self.gains.covariances(cov_d, self.block_inv)
        with small_lapack(matrix.shape[0]):
            logdet = self.logdet_precision - 2.0 * float(np.linalg.slogdet(matrix)[1])
        return replace(self, mean_d=mean_d, cov_d=cov_d, mean_b=mean_b, cov_b=cov_b, logdet_precision=logdet)

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Joint draws: ``theta_d`` of shape ``(size, q)`` and ``theta_b`` of shape ``(size, J, K)``."""
        q = self.mean_d.size
        dev_d = rng.standard_normal((size, q)) @ np.linalg.cholesky(self.cov_d).T
        theta_d = self.mean_d + dev_d
        if self.mean_b.size == 0:
            return theta_d, np.zeros((size,) + self.mean_b.shape)
        eps_b = rng.standard_normal((size,) + self.mean_b.shape)
        # theta_l | theta_d ~ N(mu_l - G_l (theta_d - mu_d), P_l^{-1})
        dev_b = np.einsum("jkl,sjl->sjk", np.linalg.cholesky(self.block_inv), eps_b)
        theta_b = self.mean_b - self.gains.times(dev_d) + dev_b
        return theta_d, theta_b


@dataclass(frozen=True, eq=False)
class _Eliminated:
    """The precision after eliminating ``theta_b``: Cholesky of ``S`` and what recovers ``theta_b``."""

    chol: np.ndarray  # lower Cholesky factor of the Schur complement S
    rhs: np.ndarray  # r_d - G' r_b
    block_inv: np.ndarray  # P_l^{-1}, (J, K, K)
    gain: np.ndarray | PatternGains  # G = P_bb^{-1} P_bd, (J, K, q), or on a pattern's level entries
    mean_b_part: np.ndarray  # P_l^{-1} r_l, (J, K)
    logdet_b: float


def spd_inverse(matrix: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive definite matrix through its Cholesky factor (LAPACK ``potrf`` / ``potri``),
    symmetric to rounding: for the small ``k x k`` covariances whose precisions the samplers need each iteration."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.shape == (1, 1):
        return 1.0 / matrix
    factor, info = lapack.dpotrf(matrix, lower=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"matrix is not positive definite (LAPACK potrf info {info})")
    inverse, info = lapack.dpotri(factor, lower=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"matrix is singular (LAPACK potri info {info})")
    return np.tril(inverse) + np.tril(inverse, -1).T


def pattern_schur_sums(cross: np.ndarray, gains: np.ndarray, pattern: RowPattern, schur: np.ndarray) -> np.ndarray:
    """``schur - sum_j P_dj G_j`` over the levels' pairs of columns (:func:`bayesvm.linalg.row_pattern.pattern_schur`,
    in place), in two parts of equal work on the row threads where it pays (part 1 into a zero matrix, added)."""
    parts = [schur]

    def subtract(part: int, levels: slice) -> None:
        out = schur if part == 0 else np.zeros_like(schur)
        pattern_schur(cross, gains, pattern.level_ptr, pattern.level_cols, out, levels.start, levels.stop)
        if part == 1:
            parts.append(out)

    in_two_parts(subtract, pattern.level_ptr.size - 1, *pattern.level_parts)
    return schur + parts[1] if len(parts) > 1 else schur


def _eliminate(
    D: np.ndarray,
    w: np.ndarray,
    rhs_weights: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    prior_b: np.ndarray | None,
    stats: RowStatistics | None = None,
    pattern: RowPattern | None = None,
) -> _Eliminated:
    """Eliminate ``theta_b`` from ``P = C' diag(w) C + prior`` (``stats``: the row sums, if already computed;
    ``pattern``: the rows' and levels' nonzero columns, over which the sums and the Schur complement then run)."""
    n, q = D.shape
    if stats is None:
        stats = (
            row_statistics(D, w, rhs_weights, blocked)
            if pattern is None
            else pattern_statistics(D, w, rhs_weights, blocked, pattern)
        )
    schur, rhs = stats.gram + prior_dd, stats.product
    if blocked is None:
        gain = np.zeros((0, 0, q))
        block_inv = np.zeros((0, 0, 0))
        mean_b_part = np.zeros((0, 0))
        logdet_b = 0.0
    else:
        K, J = blocked.K, blocked.n_levels
        sums = stats.level_sums(blocked, D)
        blocks, cross, rhs_b = sums.blocks + prior_b, sums.cross, sums.rhs
        if K == 1:
            block_inv = 1.0 / blocks
            logdet_b = float(np.sum(np.log(blocks)))
        else:
            block_inv = np.linalg.inv(blocks)
            logdet_b = float(np.sum(np.linalg.slogdet(blocks)[1]))
        mean_b_part = np.einsum("jkl,jl->jk", block_inv, rhs_b)
        if pattern is None:
            gain = cross * block_inv if K == 1 else block_inv @ cross  # K = 1: a broadcast, not J 1x1 products
            schur = schur - cross.reshape(J * K, q).T @ gain.reshape(J * K, q)
            rhs = rhs - gain.reshape(J * K, q).T @ rhs_b.ravel()
        else:  # the same sums on each level's entries (zero elsewhere), the Schur sums into schur (a new array)
            levels = pattern.entry_levels
            if K == 1:
                values = cross * block_inv[levels, 0]
            else:
                values = np.einsum("tkl,tl->tk", block_inv[levels], cross)
            gain = PatternGains(pattern.level_ptr, pattern.level_cols, levels, values, q, pattern.level_parts)
            schur = pattern_schur_sums(cross, values, pattern, schur)
            rhs = rhs - np.bincount(pattern.level_cols, np.einsum("tk,tk->t", values, rhs_b[levels]), minlength=q)
    with small_lapack(q):
        chol, info = lapack.dpotrf(schur, lower=1, clean=1)
    if info != 0 and blocked is not None and rhs_weights is not None:
        schur, rhs = square_root_schur(D, w, rhs_weights, prior_dd, blocked, prior_b)
        with small_lapack(q):
            chol, info = lapack.dpotrf(schur, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError("the posterior precision is not positive definite")
    return _Eliminated(chol, rhs, block_inv, gain, mean_b_part, logdet_b)


def square_root_schur(
    D: np.ndarray, w: np.ndarray, rhs_weights: np.ndarray, prior_dd: np.ndarray, blocked: BlockedFactor, prior_b
) -> tuple[np.ndarray, np.ndarray]:
    """The Schur complement ``S = P_dd - P_dl P_l^-1 P_ld`` and its right-hand side by orthogonal elimination, level
    by level: the fallback of :func:`_eliminate` when forming ``S`` by subtraction has lost it to cancellation.

    A row with an enormous weight (a Gibbs draw within about ``1e-8`` of the margin gets ``omega ~ 1e9``) puts the same
    huge term into ``D' W D`` and into ``P_dl P_l^-1 P_ld`` where its level's random effect can absorb it; their
    difference is then rounding noise larger than ``S`` itself.  Here each level's rows ``sqrt(w) [Z_j, D_j, t_j]``
    (``t = r / w``) are stacked under the Cholesky factor of its prior and reduced by a QR factorisation; the rows
    left below ``Z_j``'s triangle are the square root of the level's part of ``S`` and of its right-hand side, with
    no subtraction (a square-root information filter)."""
    q, K = D.shape[1], blocked.K
    root_w = np.sqrt(w)
    schur, rhs = np.array(prior_dd, dtype=float, copy=True), np.zeros(q)
    outside = blocked.codes < 0
    if np.any(outside):
        weighted = D[outside] * w[outside, None]
        schur += D[outside].T @ weighted
        rhs += D[outside].T @ rhs_weights[outside]
    prior_roots = np.linalg.cholesky(np.broadcast_to(prior_b, (blocked.n_levels, K, K)))
    order = np.argsort(blocked.codes, kind="stable")
    order = order[blocked.codes[order] >= 0]
    starts = np.searchsorted(blocked.codes[order], np.arange(blocked.n_levels + 1))
    for j in range(blocked.n_levels):
        rows = order[starts[j] : starts[j + 1]]
        if rows.size == 0:
            continue
        stacked = np.zeros((rows.size + K, K + q + 1))
        stacked[: rows.size, :K] = blocked.values[rows] * root_w[rows, None]
        stacked[: rows.size, K : K + q] = D[rows] * root_w[rows, None]
        stacked[: rows.size, -1] = rhs_weights[rows] / root_w[rows]
        stacked[rows.size :, :K] = prior_roots[j].T
        reduced = np.linalg.qr(stacked, mode="r")[K:, K:]  # below the level's triangle: [R_d, c]
        schur += reduced[:, :q].T @ reduced[:, :q]
        rhs += reduced[:, :q].T @ reduced[:, q]
    return schur, rhs


def gaussian_posterior(
    D: np.ndarray,
    w: np.ndarray,
    rhs_weights: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    prior_b: np.ndarray | None,
    pattern: RowPattern | None = None,
) -> GaussianPosterior:
    """Solve for ``q(theta) = N(P^{-1} C' r, P^{-1})`` with ``P = C' diag(w) C + prior``.

    Parameters
    ----------
    D
        Dense columns, ``(n, q)``.
    w
        Observation weights ``E[1/a_i]``.
    rhs_weights
        ``y_i (1 + E[1/a_i])`` so that the linear term is ``C' rhs_weights``.
    prior_dd
        Prior precision of ``theta_d`` (``q x q``).
    blocked, prior_b
        The blocked factor and its per-level prior precision ``(K, K)``.
    pattern
        The rows' and levels' nonzero columns of ``D`` (:func:`bayesvm.linalg.row_pattern.row_pattern`), or None:
        the sums over them are those over every column, without the zeros.
    """
    e = _eliminate(D, w, rhs_weights, prior_dd, blocked, prior_b, pattern=pattern)
    return _solved(e, D.shape[1], blocked is not None)


def gaussian_from_statistics(
    stats: RowStatistics, prior_dd: np.ndarray, n_levels: int, K: int, prior_b: np.ndarray | None
) -> GaussianPosterior:
    """:func:`gaussian_posterior` from the row sums alone: ``D' W D`` and ``D' r`` in ``stats.gram`` and
    ``stats.product`` and, with ``K`` columns of a blocked factor of ``n_levels`` levels, its per-level sums in
    ``stats.levels`` (summed over data partitions by the out-of-core engine: the same elimination, no rows)."""
    q = stats.gram.shape[0]
    blocked = None if K == 0 else BlockedFactor(np.zeros(0, dtype=np.int64), np.zeros((0, K)), int(n_levels))
    e = _eliminate(np.zeros((0, q)), np.zeros(0), None, prior_dd, blocked, prior_b, stats=stats)
    return _solved(e, q, blocked is not None)


def _solved(e: _Eliminated, q: int, has_blocked: bool) -> GaussianPosterior:
    """The posterior from an elimination: ``theta_d`` from the Schur complement's factor, then ``theta_b``."""
    with small_lapack(q):
        mean_d = lapack.dpotrs(e.chol, e.rhs, lower=1)[0]
        cov_d = lapack.dpotri(e.chol, lower=1)[0]
    cov_d = cov_d + np.tril(cov_d, -1).T  # dpotri fills the lower triangle only
    mean_b, cov_b = np.zeros((0, 0)), np.zeros((0, 0, 0))
    if has_blocked:  # over the levels' columns with a pattern: an accurate fit keeps hundreds of these
        gains = level_gains(e.gain)
        mean_b = e.mean_b_part - gains.times(mean_d)
        cov_b = gains.covariances(cov_d, e.block_inv)
    logdet = 2.0 * float(np.sum(np.log(np.diag(e.chol)))) + e.logdet_b
    return GaussianPosterior(
        mean_d=mean_d,
        cov_d=cov_d,
        mean_b=mean_b,
        cov_b=cov_b,
        gain=e.gain,
        block_inv=e.block_inv,
        logdet_precision=logdet,
    )


def gaussian_draw(
    D: np.ndarray,
    w: np.ndarray,
    rhs_weights: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    prior_b: np.ndarray | None,
    rng: np.random.Generator,
    stats: RowStatistics | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One draw from ``N(P^{-1} C' r, P^{-1})`` through the same elimination (Gibbs block step); ``stats``
    are the row sums for ``(w, r)`` when the caller computed them already.

    ``theta_d = S^{-1} rhs + L^{-T} eps`` (``S = L L'``), then
    ``theta_l | theta_d ~ N(P_l^{-1} (r_l - P_ld theta_d), P_l^{-1})``.
    """
    e = _eliminate(D, w, rhs_weights, prior_dd, blocked, prior_b, stats)
    mean_d = lapack.dpotrs(e.chol, e.rhs, lower=1)[0]
    eps = rng.standard_normal(mean_d.size)
    theta_d = mean_d + lapack.dtrtrs(e.chol, eps, lower=1, trans=1)[0]
    if blocked is None:
        return theta_d, np.zeros((0, 0))
    noise = rng.standard_normal(e.mean_b_part.shape)
    if blocked.K == 1:
        noise = noise * np.sqrt(e.block_inv[:, :, 0])
    else:
        noise = np.einsum("jkl,jl->jk", np.linalg.cholesky(e.block_inv), noise)
    return theta_d, e.mean_b_part - level_gains(e.gain).times(theta_d) + noise


def gaussian_mean(
    D: np.ndarray,
    w: np.ndarray,
    rhs_weights: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    prior_b: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """``P^{-1} C' r`` only (the M-step of EM): ``(theta_d, theta_b)`` without any covariance."""
    e = _eliminate(D, w, rhs_weights, prior_dd, blocked, prior_b)
    mean_d = lapack.dpotrs(e.chol, e.rhs, lower=1)[0]
    if blocked is None:
        return mean_d, np.zeros((0, 0))
    return mean_d, e.mean_b_part - level_gains(e.gain).times(mean_d)


def gaussian_from_natural(precision: np.ndarray, eta: np.ndarray) -> GaussianPosterior:
    """``N(P^-1 eta, P^-1)`` for a dense precision ``P`` (no blocked factor): the fixed-effect-only posterior."""
    chol, info = lapack.dpotrf(precision, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError("the posterior precision is not positive definite")
    p = eta.size
    mean = lapack.dpotrs(chol, eta, lower=1)[0]
    cov = lapack.dpotri(chol, lower=1)[0]
    cov = cov + np.tril(cov, -1).T
    return GaussianPosterior(
        mean_d=mean,
        cov_d=cov,
        mean_b=np.zeros((0, 0)),
        cov_b=np.zeros((0, 0, 0)),
        gain=np.zeros((0, 0, p)),
        block_inv=np.zeros((0, 0, 0)),
        logdet_precision=2.0 * float(np.sum(np.log(np.diag(chol)))),
    )
