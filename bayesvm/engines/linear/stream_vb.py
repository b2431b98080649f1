"""Full-batch mean-field VB (Alg. 1-2) by streaming over data partitions.

Each pass over the partitions computes, for the current ``q(beta) = N(mu, Sigma)``, per partition:
``e_i = (1 - y_i x_i'mu)^2 + x_i'Sigma x_i``, ``chi_i = max(e_i, floor)``, ``w_i = chi_i^(-1/2)`` and the
sums ``X'WX``, ``X'y(1 + w)`` and ``sum_i [y_i x_i'mu - 1 - sqrt(chi_i) + (chi_i - e_i) / (2 sqrt chi_i)]``
(the data term of the bound, :func:`~bayesvm.engines.augmentation.data_lower_bound`).  The driver then
records the bound of the complete ``q`` (``q(beta)``, the new ``q(a)``, ``q(sigma_u^2)``) and solves for
the next ``q(beta)``.  These are exactly the sweeps of :func:`bayesvm.engines.linear.vb.fit_vb`, one pass per sweep,
with memory ``O(p^2)`` on the driver; ``chi`` is never stored.  The in-memory fit groups its sweeps in SQUAREM cycles on
``log chi`` of every row; here the cycles extrapolate the row sums instead (the natural parameters of ``q(theta)`` are
linear in them) with the components (:func:`fit_streamed_vb`).  Random effects of small terms stream as dense columns of
the partitions' rows (``p`` counts them), each term with its variance component, updated like the penalty's
(Alg. 2 step 4; the half-t through its auxiliary variable, inverse-Wishart terms alike).

The largest grouping factor (``problem.blocked``, ``J`` levels of ``K`` columns) streams as its per-level sums: each
partition also returns, for the levels it holds, ``sum w z z'``, ``sum w z d'`` and ``sum z y (1 + w)``; the driver adds
them by level and eliminates every level's block onto the ``p x p`` Schur complement, as the in-memory dense path
does (:func:`bayesvm.linalg.dense.gaussian_from_statistics`).  The predictor's mean and variance of a partition's rows
come from the broadcast ``q(theta)`` (its per-level gains and block inverses, ``O(J K p)``), so memory is
``O(J K p)`` on the driver and on each worker, never ``O(J^2)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...linalg.dense import (
    BlockedFactor,
    GaussianPosterior,
    blas_threads,
    gaussian_from_natural,
    gaussian_from_statistics,
)
from ...linalg.row_sums import LevelSums, RowStatistics, row_statistics
from ...model.problems import VBProblem
from ..augmentation import data_lower_bound, inverse_a_mean, update_chi
from ..components import (
    decode_components,
    encode_components,
    initial_component,
    prior_precisions,
    second_moments,
    update_component,
)
from .vb import ABSOLUTE_TOL, VBResult, lower_bound


def row_weights(y: np.ndarray, mean_f: np.ndarray, var_f: np.ndarray) -> tuple[np.ndarray, float]:
    """``(E[1/a_i], data term of the bound)`` of a partition's rows: ``chi_i = (1 - y_i mu_f)^2 + Var(f_i)`` (Alg. 2
    step 3), ``w_i = chi_i^(-1/2)`` and :func:`~bayesvm.engines.augmentation.data_lower_bound`."""
    expected_sq = (1.0 - y * mean_f) ** 2 + var_f
    chi = update_chi(expected_sq)
    return inverse_a_mean(chi), data_lower_bound(y, mean_f, expected_sq, chi)


def partition_sums(D: np.ndarray, y: np.ndarray, mean: np.ndarray | None, cov: np.ndarray | None) -> tuple:
    """``(X'WX, X'y(1 + w), data term, rows)`` of one partition; ``mean=None``: the start, ``w = 1``."""
    if y.size == 0:
        p = D.shape[1]
        return np.zeros((p, p)), np.zeros(p), 0.0, 0
    if mean is None:
        w, data = np.ones(y.size), 0.0
    else:
        w, data = row_weights(y, D @ mean, np.einsum("ij,ij->i", D @ cov, D))
    return (D * w[:, None]).T @ D, D.T @ (y * (1.0 + w)), data, y.size


def partition_level_sums(rows: tuple, y: np.ndarray, theta: GaussianPosterior | None, n_levels: int) -> tuple:
    """``(D'WD, D'y(1 + w), data term, rows, levels, blocks, cross, rhs)`` of one partition whose rows are
    ``(D, codes, values)`` of the dense columns and the blocked factor: the sums of :func:`partition_sums` and, for
    each ``levels[j]`` among the partition's levels, ``sum w z z'`` ``(K, K)``, ``sum w z d'`` ``(K, p)`` and
    ``sum z y (1 + w)`` ``(K,)``; ``theta=None``: the start, ``w = 1``."""
    D, codes, values = rows
    if y.size == 0:
        p, K = D.shape[1], values.shape[1]
        return np.zeros((p, p)), np.zeros(p), 0.0, 0, np.zeros(0, dtype=np.int64), *_no_levels(K, p)
    if theta is None:
        w, data = np.ones(y.size), 0.0
    else:
        w, data = row_weights(y, *theta.predictor(D, codes, values))
    gram, product, levels, blocks, cross, rhs = weighted_level_sums(rows, w, y * (1.0 + w))
    return gram, product, data, y.size, levels, blocks, cross, rhs


def weighted_level_sums(rows: tuple, w: np.ndarray, r: np.ndarray) -> tuple:
    """``(D'WD, D'r, levels, blocks, cross, rhs)`` of rows ``(D, codes, values)`` with weights ``w`` and right-hand
    side ``r``: for each ``levels[j]`` among the rows' levels, ``sum w z z'``, ``sum w z d'`` and ``sum z r``."""
    D, codes, values = rows
    if w.size == 0:
        p, K = D.shape[1], values.shape[1]
        return np.zeros((p, p)), np.zeros(p), np.zeros(0, dtype=np.int64), *_no_levels(K, p)
    levels, local = own_levels(codes)
    blocked = BlockedFactor(codes=local, values=values, n_levels=levels.size)
    stats = row_statistics(D, w, r, blocked)
    sums = stats.level_sums(blocked, D)
    return stats.gram, stats.product, levels, sums.blocks, sums.cross, sums.rhs


def own_levels(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(levels, local codes)``: the levels a partition's rows hold and each row's level numbered among them
    (``0..J_k-1``; -1 stays -1)."""
    levels = np.unique(codes[codes >= 0])
    return levels, np.where(codes >= 0, np.searchsorted(levels, codes), -1)


def _no_levels(K: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((0, K, K)), np.zeros((0, K, p)), np.zeros((0, K))


def added_by_level(parts: list, n_levels: int, K: int, p: int, first: int = 4) -> LevelSums:
    """The partitions' per-level sums added level by level (a level's rows may span partitions): each part holds
    ``levels, blocks, cross, rhs`` from position ``first`` on."""
    blocks, cross, rhs = np.zeros((n_levels, K, K)), np.zeros((n_levels, K, p)), np.zeros((n_levels, K))
    for part in parts:
        levels = part[first]  # (unique within a partition: a plain indexed addition)
        blocks[levels] += part[first + 1]
        cross[levels] += part[first + 2]
        rhs[levels] += part[first + 3]
    return LevelSums(blocks=blocks, cross=cross, rhs=rhs)


@dataclass
class StreamState:
    """A state of the streamed sweeps: ``q(theta)`` (None before the first pass), the row sums it was solved from
    (``stats``) and the components' ``q``."""

    theta: GaussianPosterior | None
    stats: RowStatistics | None
    components: list


class StreamedSweeps:
    """One pass over the partitions per sweep (module docstring): :meth:`sweep` maps a state to the next and returns
    the bound of the state it started from (the pass computes its data term from the rows); :meth:`encode` and
    :meth:`decode` map a state to an unconstrained vector and back for SQUAREM (the row sums as they are: ``q(theta)``'s
    natural parameters are linear in them; the components as :func:`bayesvm.engines.components.encode_components`)."""

    def __init__(self, problem: VBProblem, map_partitions):
        self.problem, self.map_partitions = problem, map_partitions
        self.p = problem.D.shape[1]
        blocked = problem.blocked
        self.J, self.K = (0, 0) if blocked is None else (blocked.n_levels, blocked.K)

    def initial_state(self) -> StreamState:
        return StreamState(None, None, [initial_component(c) for c in self.problem.components])

    def sweep(self, state: StreamState) -> tuple[StreamState, float | None]:
        """The next state (Alg. 2: ``q(a)`` and the row sums at ``state.theta``, then ``q(theta)``, then each
        component) and the bound of ``state`` (None for the start, which has no ``q(theta)``)."""
        problem, theta = self.problem, state.theta
        if self.J == 0:
            parts = self.map_partitions(
                partition_sums, None if theta is None else theta.mean_d, None if theta is None else theta.cov_d
            )
        else:
            parts = self.map_partitions(partition_level_sums, theta, self.J)
        G = sum(part[0] for part in parts)
        r = sum(part[1] for part in parts)
        bound = None
        if theta is not None:  # the bound of the complete q of `state`
            data = sum(part[2] for part in parts)
            seconds = [second_moments(c, theta) for c in problem.components]
            empty = np.zeros(0)
            bound = data + lower_bound(problem, empty, theta, empty, empty, empty, state.components, seconds)
        levels = None if self.J == 0 else added_by_level(parts, self.J, self.K, self.p)
        stats = RowStatistics(G, r, levels=levels)
        return self.solved(stats, state.components), bound

    def solved(self, stats: RowStatistics, components: list) -> StreamState:
        """``q(theta)`` from the row sums given the components' expected precisions, then each component."""
        problem = self.problem
        prior_dd, prior_b = prior_precisions(problem, [post.expected_precision() for post in components])
        if self.J == 0:
            theta = gaussian_from_natural(stats.gram + prior_dd, stats.product)
        else:
            theta = gaussian_from_statistics(stats, prior_dd, self.J, self.K, prior_b)
        updated = [
            update_component(c, second_moments(c, theta), post) for c, post in zip(problem.components, components)
        ]
        return StreamState(theta, stats, updated)

    def encode(self, state: StreamState) -> np.ndarray:
        stats = state.stats
        parts = [stats.gram.ravel(), stats.product]
        if stats.levels is not None:
            parts += [stats.levels.blocks.ravel(), stats.levels.cross.ravel(), stats.levels.rhs.ravel()]
        return np.concatenate(parts + [encode_components(state.components)])

    def decode(self, x: np.ndarray, like: StreamState) -> StreamState:
        """The state whose row sums and components are ``x`` (shapes from ``like``), ``q(theta)`` solved from them."""
        pieces, pos = [], 0
        shapes = [like.stats.gram.shape, like.stats.product.shape]
        if like.stats.levels is not None:
            levels = like.stats.levels
            shapes += [levels.blocks.shape, levels.cross.shape, levels.rhs.shape]
        for shape in shapes:
            size = int(np.prod(shape))
            pieces.append(x[pos : pos + size].reshape(shape))
            pos += size
        gram = 0.5 * (pieces[0] + pieces[0].T)
        levels = None if len(pieces) == 2 else LevelSums(*pieces[2:])
        components = decode_components(x[pos:], like.components)
        state = self.solved(RowStatistics(gram, pieces[1], levels=levels), components)
        if not np.all(np.isfinite(state.theta.mean_d)):
            raise FloatingPointError("an extrapolated state without a finite q(theta)")
        return state


def fit_streamed_vb(
    problem: VBProblem, map_partitions, tol: float = 1e-8, max_iter: int = 500, accelerate: bool = True
) -> VBResult:
    """Coordinate ascent with one pass over the partitions per sweep, stopped as the in-memory sweeps are (the
    bound's increase below ``tol`` relative and :data:`bayesvm.engines.linear.vb.ABSOLUTE_TOL` nats), or after
    ``max_iter`` passes.

    ``problem`` gives the prior (``fixed_precision``, the penalty component; its rows are not used);
    ``map_partitions(func, *args)`` applies ``func(D, y, *args)`` to every partition's standardised design
    rows and returns the list of results (dask, or a plain loop for in-memory pieces).

    With ``accelerate`` the sweeps are grouped in SQUAREM cycles (Varadhan & Roland 2008, scheme S3, as
    :mod:`bayesvm.engines.squarem`) on the row sums and the components: two sweeps from ``x0`` give ``x1`` and ``x2``,
    the state extrapolated from the three is solved for ``q(theta)``, and the pass from it is kept only if the bound it
    computes (of the extrapolated state) is at least that of ``x1`` (the pass gives the bound of the state it starts
    from, so ``x2``'s is not known yet; coordinate ascent from ``x1`` only raises it); else the sweeps go on from
    ``x2``.  The recorded bounds never decrease.  ``accelerate=False`` is the plain iteration, the in-memory
    ``fit_vb(..., accelerate=False)`` sweep for sweep.  ``n_iter`` counts every pass after the first (which only
    starts: it has no bound), kept or not.
    """
    start = time.perf_counter()
    sweeps = StreamedSweeps(problem, map_partitions)
    bounds: list[float] = []
    decreases: list[int] = []
    passes = 0

    def record(bound: float) -> bool:
        bounds.append(bound)
        if len(bounds) < 2:
            return False
        change = bounds[-1] - bounds[-2]
        if change < -1e-8 * abs(bounds[-2]):
            decreases.append(len(bounds))
        return abs(change) < min(tol * abs(bounds[-1]), ABSOLUTE_TOL)  # (as the in-memory sweeps stop)

    with blas_threads(sweeps.p):
        state, _ = sweeps.sweep(sweeps.initial_state())  # the start (w = 1) has no bound
        passes, final, converged = 1, state, False
        while passes <= max_iter:
            x0 = state
            x1, bound = sweeps.sweep(x0)
            passes += 1
            final, converged = x0, record(bound)
            if converged or passes > max_iter:
                break
            state = x1
            if not accelerate or passes + 2 > max_iter:
                continue
            x2, bound = sweeps.sweep(x1)
            passes += 1
            final, converged = x1, record(bound)
            if converged:
                break
            state = x2
            v0, v1, v2 = (sweeps.encode(x) for x in (x0, x1, x2))
            r, v = v1 - v0, v2 - 2.0 * v1 + v0
            norm_v = np.linalg.norm(v)
            if norm_v == 0.0 or not np.isfinite(norm_v):
                continue
            step = min(-1.0, -np.linalg.norm(r) / norm_v)
            try:
                with np.errstate(over="raise", invalid="raise"):
                    extrapolated = sweeps.decode(v0 - 2.0 * step * r + step**2 * v, x2)
            except (np.linalg.LinAlgError, FloatingPointError, ValueError, ZeroDivisionError):
                continue
            x3, bound = sweeps.sweep(extrapolated)
            passes += 1
            if bound is not None and np.isfinite(bound) and bound >= bounds[-1]:
                final, converged = extrapolated, record(bound)
                if converged:
                    break
                state = x3
    return VBResult(
        theta=final.theta, components=final.components, chi=np.zeros(0), lower_bound=np.array(bounds),
        converged=converged, n_iter=passes - 1, elapsed=time.perf_counter() - start, decreases=decreases,
    )  # fmt: skip
