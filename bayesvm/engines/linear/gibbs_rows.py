"""The row-wise half of a Gibbs iteration of the linear Bayesian SVM (Luts & Ormerod 2014, Appendix A, step 2).

Given ``theta``, each row's ``omega_i = 1 / a_i ~ InverseGaussian(1 / |1 - y_i c_i' theta|, 1)``
(:func:`inverse_gaussian`, from standard normals and uniforms drawn in bulk by :class:`LatentDraws`), the log
pseudo-likelihood and the row sums the next ``theta | omega`` draw needs (:class:`DenseRows`, compiled where numba
is installed, in two halves on the row threads where the rows split).

Class weights ``w_i`` (:mod:`bayesvm.model.class_weights`): row ``i``'s factor ``exp(-2 w_i max(0, 1 - y_i f_i))`` is
the augmented row of the design row ``w_i c_i`` with margin ``m_i = w_i`` instead of 1 (:func:`scaled_by_weights`,
:func:`row_margins`, :func:`linear_terms`); the compiled passes assume margin 1, so weighted rows take numpy's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from ...linalg.dense import BlockedFactor
from ...linalg.row_sums import (
    SPLIT_ROWS,
    LevelSums,
    RowStatistics,
    chunked_gram_and_product,
    row_statistics,
    splits_rows,
)
from ...linalg.row_threads import row_pool
from ...model.problems import VBProblem
from . import compiled_rows

#: Smallest |1 - y f| used for the inverse-Gaussian mean (a draw exactly on the margin has probability 0).
MARGIN_FLOOR = 1e-12


def inverse_gaussian(mean: np.ndarray, normals: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """``InverseGaussian(mean, 1)`` draws from standard normals and uniforms (Michael, Schucany & Haas 1976).

    With ``Y = mean nu^2``, the smaller root of the MSH quadratic is written without cancellation,
    ``X = 4 mean Y / (Y + sqrt(Y (Y + 4)))^2`` (the textbook ``mean + mean/2 (Y - sqrt(4Y + Y^2))`` loses every
    digit once ``mean`` is large, as it is near the margin); ``X`` is kept with probability
    ``mean / (mean + X)``, else ``mean^2 / X``.  Consumes ``normals`` and ``uniforms`` as buffers.  The compiled
    row pass (:func:`compiled_rows.inverse_gaussian_scalar`) does the same operations in the same order.
    """
    y = np.square(normals, out=normals)
    y *= mean
    t = y + 4.0
    t *= y
    np.sqrt(t, out=t)
    t += y
    np.square(t, out=t)
    x = y
    x *= 4.0
    x *= mean
    x /= t
    t = np.add(mean, x, out=t)
    t *= uniforms
    flipped = np.divide(mean, x, out=uniforms)
    flipped *= mean
    np.copyto(x, flipped, where=t > mean)
    return x


def level_boundary_split(blocked: BlockedFactor | None, n: int) -> int:
    """Where to split ``n`` rows in two halves: ``n // 2``, moved to the nearer boundary between levels when
    the blocked factor's codes are sorted, so that each half's per-level sums cover levels of its own."""
    half = n // 2
    if blocked is None or n < 2:
        return half
    codes = blocked.codes
    if np.any(codes[1:] < codes[:-1]):
        return half
    start = int(np.searchsorted(codes, codes[half], side="left"))
    stop = int(np.searchsorted(codes, codes[half], side="right"))
    return start if half - start <= stop - half else stop


class LatentDraws:
    """``omega_i ~ InverseGaussian(1 / margin_i, 1)`` for every row (Appendix A).

    On many rows (:data:`linalg.SPLIT_ROWS`) the rows are split in two fixed halves at ``split`` (default
    ``n // 2``), each with its own generator spawned from the chain's.  A half draws its standard normals and
    uniforms in bulk and transforms them (:func:`inverse_gaussian`), in its own thread (numpy releases the
    GIL in both), and the compiled row pass takes the same numbers.  :class:`DenseRows` draws the next numbers
    (:meth:`prefetch`) while the caller draws ``theta``, so the two overlap.  The split does not depend on the
    machine, so a seed gives the same chain everywhere.
    """

    def __init__(self, rng: np.random.Generator, n: int, split: int | None = None):
        self.rng, self.n = rng, n
        self.split = n >= SPLIT_ROWS
        self._pending = None
        if self.split:
            at = n // 2 if split is None else split
            self.halves = [slice(0, at), slice(at, n)]
            children = np.random.SeedSequence(rng.integers(2**63, size=4)).spawn(2)
            self.generators = [np.random.default_rng(child) for child in children]

    def random_numbers(self, half: int) -> tuple[np.ndarray, np.ndarray]:
        """The standard normals and uniforms of ``half``'s next draw."""
        rows = self.halves[half]
        size = len(range(*rows.indices(rows.stop)))
        generator = self.generators[half]
        return generator.standard_normal(size), generator.random(size)

    def prefetch(self) -> None:
        """Start drawing both halves' next random numbers in the row threads: they do not depend on ``theta``, so
        they overlap the caller's ``theta`` draw (the same numbers in the same order as drawn on demand)."""
        self._pending = [row_pool().submit(self.random_numbers, h) for h in range(2)]

    def next_numbers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Both halves' next random numbers: the prefetched ones (waited for here, in the caller), or drawn now."""
        pending, self._pending = self._pending, None
        if pending is None:
            return list(row_pool().map(self.random_numbers, range(2)))
        return [future.result() for future in pending]

    def draw_half(self, half: int, margin: np.ndarray, numbers: tuple | None = None) -> np.ndarray:
        """The draws of ``half`` given its rows' margins (and its random numbers, if already drawn)."""
        return inverse_gaussian(1.0 / margin, *(numbers or self.random_numbers(half)))

    def whole_numbers(self) -> tuple[np.ndarray, np.ndarray]:
        """The standard normals and uniforms of an unsplit draw of every row (the numpy and the compiled row pass
        take the same numbers, so a seed gives the same chain with and without numba)."""
        n = self.n
        return self.rng.standard_normal(n), self.rng.random(n)

    def __call__(self, margin: np.ndarray) -> np.ndarray:
        if not self.split:
            return inverse_gaussian(1.0 / margin, *self.whole_numbers())
        out = np.empty(margin.size)

        def draw(half: int) -> None:
            rows = self.halves[half]
            out[rows] = self.draw_half(half, margin[rows])

        list(row_pool().map(draw, range(2)))
        return out


class DenseRows:
    """The row-wise half of a dense-path iteration: ``f = C theta``, ``omega | theta``, the log pseudo-likelihood
    ``-2 sum (1 - y f)_+`` and the row sums of the next ``theta`` draw (:class:`linalg.RowStatistics`).

    Where the rows split (:func:`linalg.splits_rows`) all of it runs in the two fixed halves of
    :class:`LatentDraws`, one thread each, in one hand-off per iteration, with the draws of
    :class:`LatentDraws`.  There it runs compiled (:func:`compiled_rows.row_pass`, per-level sums included)
    when numba is installed and each half's levels are its own (rows sorted by level, split at a level
    boundary: :func:`level_boundary_split`); otherwise with numpy, the per-level sums (sparse products, which
    hold the GIL) staying in the caller.  ``compiled=None`` chooses; ``True``/``False`` force it (tests).
    """

    def __init__(
        self,
        D: np.ndarray,
        y: np.ndarray,
        blocked: BlockedFactor | None,
        latent: LatentDraws,
        compiled: bool | None = None,
        margins: np.ndarray | None = None,
    ):
        self.D, self.y, self.blocked, self.latent = D, y, blocked, latent
        self.margins = margins  # each row's margin m_i (class weights on a scaled design), None: 1 (module docstring)
        if margins is not None:
            compiled = False  # (the compiled row pass has margin 1)
        n = y.size
        self.fused = latent.split and splits_rows(n, D.shape[1])
        if self.fused:
            can_compile = self._levels_split() and compiled_rows.available()
        else:  # one pass over every row; a row outside every level (code -1) stays with numpy
            can_compile = compiled_rows.available() and (blocked is None or bool(np.all(blocked.codes >= 0)))
        self.compiled = can_compile
        if compiled is not None:
            if compiled and not can_compile:
                raise ValueError("the compiled row pass needs numba (and, on split rows, sorted levels)")
            self.compiled = compiled
        self.f, self.omega = np.empty(n), np.empty(n)
        if self.compiled:
            self._compiled_buffers()
        elif self.fused and blocked is not None:
            K = blocked.K
            self.wz, self.wzz, self.zr = np.empty((n, K)), np.empty((n, K * K)), np.empty((n, K))

    def _levels_split(self) -> bool:
        """Whether the halves' level ranges are disjoint (always true without a blocked factor)."""
        if self.blocked is None:
            return True
        self.level_ranges = []
        for rows in self.latent.halves:
            codes = self.blocked.codes[rows]
            self.level_ranges.append((int(codes.min()), int(codes.max()) + 1) if codes.size else (0, 0))
        (_, stop), (start, _) = self.level_ranges
        return bool(np.all(self.blocked.codes >= 0)) and stop <= start

    def _compiled_buffers(self) -> None:
        q = self.D.shape[1]
        self.D = np.ascontiguousarray(self.D)
        # each row's nonzero columns where the dense part is wide and mostly zero (whole passes only)
        self.no_rows = np.zeros(0, dtype=np.int64)
        self.row_ptr, self.row_cols = compiled_rows.sparse_rows(self.D) if not self.fused else (self.no_rows,) * 2
        self.parts = [(np.zeros((q, q)), np.zeros(q)) for _ in range(2)]
        if self.blocked is None:
            self.codes, self.values = np.zeros(0, dtype=np.int64), np.zeros((self.y.size, 0))
            self.levels = LevelSums(np.zeros((0, 0, 0)), np.zeros((0, 0, q)), np.zeros((0, 0)))
            self.level_ranges = [(0, 0), (0, 0)]
        else:
            J, K = self.blocked.n_levels, self.blocked.K
            self.codes, self.values = self.blocked.codes, np.ascontiguousarray(self.blocked.values)
            # levels without rows stay zero; each half zeroes and fills its own range
            self.levels = LevelSums(np.zeros((J, K, K)), np.zeros((J, K, q)), np.zeros((J, K)))

    def predictor(self, theta_d: np.ndarray, theta_b: np.ndarray, rows: slice = slice(None)) -> np.ndarray:
        """``f`` on ``rows`` (no ``(n, K)`` temporaries); every row in one compiled loop where the row pass over
        every row is compiled."""
        if self.compiled and not self.fused and rows == slice(None):
            f = np.empty(self.y.size)
            compiled_rows.predictor(self.D, self.row_ptr, self.row_cols, self.codes, self.values, theta_d, theta_b, f)
            return f
        f = self.D[rows] @ theta_d
        if self.blocked is not None:
            codes, values = self.blocked.codes[rows], self.blocked.values[rows]
            for k in range(self.blocked.K):
                f += values[:, k] * theta_b[codes, k]
        return f

    def __call__(self, theta_d: np.ndarray, theta_b: np.ndarray) -> tuple[float, np.ndarray, RowStatistics]:
        """``(log pseudo-likelihood at theta, omega, row sums)``; the arrays are buffers reused by the next call."""
        if not self.fused and self.compiled:
            return self._compiled_whole(theta_d, theta_b)
        if not self.fused:
            f = self.predictor(theta_d, theta_b)
            margin = row_margins(self.margins, self.y, f)
            omega = self.latent(np.maximum(np.abs(margin), MARGIN_FLOOR))
            stats = row_statistics(self.D, omega, linear_terms(self.y, omega, self.margins), self.blocked)
            return -2.0 * float(np.sum(np.maximum(margin, 0.0))), omega, stats
        half = self._compiled_half if self.compiled else self._half
        numbers = self.latent.next_numbers()
        parts = list(row_pool().map(lambda h: half(h, theta_d, theta_b, numbers[h]), range(2)))
        self.latent.prefetch()  # the next call's random numbers, drawn while the caller draws theta
        gram = parts[0][0] + parts[1][0]
        stats = RowStatistics(0.5 * (gram + gram.T), parts[0][1] + parts[1][1])
        if self.compiled:
            stats = RowStatistics(stats.gram, stats.product, levels=self.levels)
        elif self.blocked is not None:
            stats = RowStatistics(stats.gram, stats.product, self.wz, self.wzz, self.zr)
        return -2.0 * (parts[0][2] + parts[1][2]), self.omega, stats

    def _half(self, h: int, theta_d: np.ndarray, theta_b: np.ndarray, numbers: tuple) -> tuple:
        rows = self.latent.halves[h]
        f = self.f[rows] = self.predictor(theta_d, theta_b, rows)
        y = self.y[rows]
        margins = None if self.margins is None else self.margins[rows]
        margin = row_margins(margins, y, f)
        hinge = float(np.sum(np.maximum(margin, 0.0)))
        omega = self.omega[rows] = self.latent.draw_half(h, np.maximum(np.abs(margin), MARGIN_FLOOR), numbers)
        r = linear_terms(y, omega, margins)
        if self.blocked is not None:  # as linalg.row_statistics, written straight into the buffers (no temporaries
            # of every row to copy in)
            z = self.blocked.values[rows]
            wz = self.wz[rows] = z * omega[:, None]
            self.wzz[rows] = (wz[:, :, None] * z[:, None, :]).reshape(z.shape[0], -1)
            self.zr[rows] = z * r[:, None]
        return (*chunked_gram_and_product(self.D[rows], omega, r), hinge)

    def _compiled_whole(self, theta_d: np.ndarray, theta_b: np.ndarray) -> tuple[float, np.ndarray, RowStatistics]:
        """:meth:`__call__` on rows that do not split: one compiled pass over every row (the numbers of
        :meth:`LatentDraws.whole_numbers`, as the numpy path draws them)."""
        normals, uniforms = self.latent.whole_numbers()
        gram, product = self.parts[0]
        levels = self.levels
        hinge = compiled_rows.row_pass(
            self.D, self.row_ptr, self.row_cols, self.y, self.codes, self.values, theta_d, theta_b, normals, uniforms,
            MARGIN_FLOOR, 0,
            self.omega, gram, product, levels.blocks, levels.cross, levels.rhs,
        )  # fmt: skip
        stats = RowStatistics(0.5 * (gram + gram.T), product, levels=levels if self.blocked is not None else None)
        return -2.0 * float(hinge), self.omega, stats

    def _compiled_half(self, h: int, theta_d: np.ndarray, theta_b: np.ndarray, numbers: tuple) -> tuple:
        rows = self.latent.halves[h]
        normals, uniforms = numbers
        start, stop = self.level_ranges[h]
        gram, product = self.parts[h]
        codes = self.codes[rows] if self.codes.size else self.codes
        levels = self.levels
        hinge = compiled_rows.row_pass(
            self.D[rows],
            self.no_rows,
            self.no_rows,
            self.y[rows],
            codes,
            self.values[rows],
            theta_d,
            theta_b,
            normals,
            uniforms,
            MARGIN_FLOOR,
            start,
            self.omega[rows],
            gram,
            product,
            levels.blocks[start:stop],
            levels.cross[start:stop],
            levels.rhs[start:stop],
        )
        return gram, product, float(hinge)


def scaled_by_weights(problem: VBProblem) -> VBProblem:
    """The problem with each row of the design (dense part and blocked values) times its class weight, and no
    weights: with margins ``m_i = omega_i`` its chain is the weighted problem's (module docstring)."""
    weights = problem.weights
    D = sp.csr_matrix(sp.diags(weights) @ problem.D) if sp.issparse(problem.D) else problem.D * weights[:, None]
    blocked = problem.blocked
    if blocked is not None:
        blocked = BlockedFactor(blocked.codes, blocked.values * weights[:, None], blocked.n_levels)
    return replace(problem, D=D, blocked=blocked, weights=None)


def row_margins(margins: np.ndarray | None, y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``m_i - y_i f_i`` (``m_i = 1`` where ``margins`` is None): the hinge's argument."""
    return (1.0 if margins is None else margins) - y * f


def linear_terms(y: np.ndarray, omega: np.ndarray, margins: np.ndarray | None) -> np.ndarray:
    """``y_i (1 + m_i w_i)``: the rows' linear terms of ``theta | w`` (``m_i = 1`` where ``margins`` is None)."""
    return y * (1.0 + (omega if margins is None else margins * omega))


def weighted_rows(y: np.ndarray, omega: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The rows' weights and linear terms in ``theta | w`` and ``z | w``: ``w_i`` and ``y_i (1 + w_i)``; with class
    weights ``omega_i`` the row is the augmented row of design row ``omega_i c_i`` and margin ``omega_i``
    (:func:`scaled_by_weights`), so ``omega_i^2 w_i`` and ``y_i omega_i (1 + omega_i w_i)``."""
    if weights is None:
        return omega, y * (1.0 + omega)
    return weights * weights * omega, y * weights * (1.0 + weights * omega)
