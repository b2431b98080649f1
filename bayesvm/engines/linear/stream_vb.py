"""Full-batch mean-field VB (Alg. 1-2) by streaming over data partitions.

Each pass over the partitions computes, for the current ``q(beta) = N(mu, Sigma)``, per partition:
``e_i = (1 - y_i x_i'mu)^2 + x_i'Sigma x_i``, ``chi_i = max(e_i, floor)``, ``w_i = chi_i^(-1/2)`` and the
sums ``X'WX``, ``X'y(1 + w)`` and ``sum_i [y_i x_i'mu - 1 - sqrt(chi_i) + (chi_i - e_i) / (2 sqrt chi_i)]``
(the data term of the bound, :func:`~bayesvm.engines.augmentation.data_lower_bound`).  The driver then
records the bound of the complete ``q`` (``q(beta)``, the new ``q(a)``, ``q(sigma_u^2)``) and solves for
the next ``q(beta)``.  These are exactly the sweeps of :func:`bayesvm.engines.linear.vb.fit_vb` (without its
SQUAREM acceleration, which would need ``chi`` for every row), one pass per sweep, with memory
``O(p^2)`` on the driver; ``chi`` is never stored.  Random effects of small terms stream as dense columns of
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

import numpy as np

from ...linalg.dense import (
    BlockedFactor,
    GaussianPosterior,
    blas_threads,
    gaussian_from_natural,
    gaussian_from_statistics,
)
from ...linalg.row_sums import LevelSums, RowStatistics, row_statistics
from ..augmentation import data_lower_bound, inverse_a_mean, update_chi
from .vb import (
    ABSOLUTE_TOL,
    VBProblem,
    VBResult,
    initial_component,
    lower_bound,
    prior_precisions,
    second_moments,
    update_component,
)


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
    levels = np.unique(codes[codes >= 0])
    local = np.where(codes >= 0, np.searchsorted(levels, codes), -1)  # the partition's own levels, 0..J_k-1
    blocked = BlockedFactor(codes=local, values=values, n_levels=levels.size)
    stats = row_statistics(D, w, y * (1.0 + w), blocked)
    sums = stats.level_sums(blocked, D)
    return stats.gram, stats.product, data, y.size, levels, sums.blocks, sums.cross, sums.rhs


def _no_levels(K: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((0, K, K)), np.zeros((0, K, p)), np.zeros((0, K))


def _added_by_level(parts: list, n_levels: int, K: int, p: int) -> LevelSums:
    """The partitions' per-level sums added level by level (a level's rows may span partitions)."""
    blocks, cross, rhs = np.zeros((n_levels, K, K)), np.zeros((n_levels, K, p)), np.zeros((n_levels, K))
    for part in parts:
        levels = part[4]  # (unique within a partition: a plain indexed addition)
        blocks[levels] += part[5]
        cross[levels] += part[6]
        rhs[levels] += part[7]
    return LevelSums(blocks=blocks, cross=cross, rhs=rhs)


def fit_streamed_vb(problem: VBProblem, map_partitions, tol: float = 1e-8, max_iter: int = 500) -> VBResult:
    """Coordinate ascent with one pass over the partitions per sweep, stopped as the in-memory sweeps are (the
    bound's increase below ``tol`` relative and :data:`bayesvm.engines.linear.vb.ABSOLUTE_TOL` nats).

    ``problem`` gives the prior (``fixed_precision``, the penalty component; its rows are not used);
    ``map_partitions(func, *args)`` applies ``func(D, y, *args)`` to every partition's standardised design
    rows and returns the list of results (dask, or a plain loop for in-memory pieces).
    """
    start = time.perf_counter()
    p = problem.D.shape[1]
    blocked = problem.blocked
    J, K = (0, 0) if blocked is None else (blocked.n_levels, blocked.K)
    components = [initial_component(c) for c in problem.components]
    theta: GaussianPosterior | None = None
    bounds: list[float] = []
    decreases: list[int] = []
    converged = False
    with blas_threads(p):
        for _ in range(max_iter + 1):
            if blocked is None:
                parts = map_partitions(
                    partition_sums, None if theta is None else theta.mean_d, None if theta is None else theta.cov_d
                )
            else:
                parts = map_partitions(partition_level_sums, theta, J)
            G = sum(part[0] for part in parts)
            r = sum(part[1] for part in parts)
            if theta is not None:  # the bound of the complete q after the previous sweep
                data = sum(part[2] for part in parts)
                seconds = [second_moments(c, theta) for c in problem.components]
                empty = np.zeros(0)
                rest = lower_bound(problem, empty, theta, empty, empty, empty, components, seconds)
                bounds.append(data + rest)
                if len(bounds) > 1:
                    change = bounds[-1] - bounds[-2]
                    if change < -1e-8 * abs(bounds[-2]):
                        decreases.append(len(bounds))
                    if abs(change) < min(tol * abs(bounds[-1]), ABSOLUTE_TOL):  # (as the in-memory sweeps stop)
                        converged = True
                        break
                if len(bounds) >= max_iter:
                    break
            prior_dd, prior_b = prior_precisions(problem, [post.expected_precision() for post in components])
            if blocked is None:
                theta = gaussian_from_natural(G + prior_dd, r)
            else:
                levels = _added_by_level(parts, J, K, p)
                theta = gaussian_from_statistics(RowStatistics(G, r, levels=levels), prior_dd, J, K, prior_b)
            components = [
                update_component(c, second_moments(c, theta), post) for c, post in zip(problem.components, components)
            ]
    return VBResult(
        theta=theta, components=components, chi=np.zeros(0), lower_bound=np.array(bounds), converged=converged,
        n_iter=len(bounds), elapsed=time.perf_counter() - start, decreases=decreases,
    )  # fmt: skip
