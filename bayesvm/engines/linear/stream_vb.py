"""Full-batch mean-field VB (Alg. 1-2) by streaming over data partitions.

Each pass over the partitions computes, for the current ``q(beta) = N(mu, Sigma)``, per partition:
``e_i = (1 - y_i x_i'mu)^2 + x_i'Sigma x_i``, ``chi_i = max(e_i, floor)``, ``w_i = chi_i^(-1/2)`` and the
sums ``X'WX``, ``X'y(1 + w)`` and ``sum_i [y_i x_i'mu - 1 - sqrt(chi_i) + (chi_i - e_i) / (2 sqrt chi_i)]``
(the data term of the bound, :func:`~bayesvm.engines.augmentation.data_lower_bound`).  The driver then
records the bound of the complete ``q`` (``q(beta)``, the new ``q(a)``, ``q(sigma_u^2)``) and solves for
the next ``q(beta)``.  These are exactly the sweeps of :func:`bayesvm.engines.linear.vb.fit_vb` (without its
SQUAREM acceleration, which would need ``chi`` for every row), one pass per sweep, with memory
``O(p^2)`` on the driver; ``chi`` is never stored.  Random effects stream as dense columns of the
partitions' rows (``p`` counts them), each term with its variance component, updated like the penalty's
(Alg. 2 step 4; the half-t through its auxiliary variable, inverse-Wishart terms alike).
"""

from __future__ import annotations

import time

import numpy as np

from ...linalg.dense import GaussianPosterior, blas_threads, gaussian_from_natural
from ..augmentation import update_chi
from .vb import (
    VBProblem,
    VBResult,
    initial_component,
    lower_bound,
    prior_precisions,
    second_moments,
    update_component,
)


def partition_sums(D: np.ndarray, y: np.ndarray, mean: np.ndarray | None, cov: np.ndarray | None) -> tuple:
    """``(X'WX, X'y(1 + w), data term, rows)`` of one partition; ``mean=None``: the start, ``w = 1``."""
    if y.size == 0:
        p = D.shape[1]
        return np.zeros((p, p)), np.zeros(p), 0.0, 0
    if mean is None:
        w, data = np.ones(y.size), 0.0
    else:
        mean_f = D @ mean
        e = (1.0 - y * mean_f) ** 2 + np.einsum("ij,ij->i", D @ cov, D)
        chi = update_chi(e)
        root = np.sqrt(chi)
        w = 1.0 / root
        data = float(np.sum(y * mean_f - 1.0 - root + (chi - e) / (2.0 * root)))
    return (D * w[:, None]).T @ D, D.T @ (y * (1.0 + w)), data, y.size


def fit_streamed_vb(problem: VBProblem, map_partitions, tol: float = 1e-8, max_iter: int = 500) -> VBResult:
    """Coordinate ascent with one pass over the partitions per sweep.

    ``problem`` gives the prior (``fixed_precision``, the penalty component; its rows are not used);
    ``map_partitions(func, *args)`` applies ``func(D, y, *args)`` to every partition's standardised design
    rows and returns the list of results (dask, or a plain loop for in-memory pieces).
    """
    start = time.perf_counter()
    p = problem.D.shape[1]
    if problem.blocked is not None:
        raise ValueError("streamed VB keeps every coefficient in one dense q: no blocked factor")
    components = [initial_component(c) for c in problem.components]
    theta: GaussianPosterior | None = None
    bounds: list[float] = []
    decreases: list[int] = []
    converged = False
    with blas_threads(p):
        for _ in range(max_iter + 1):
            parts = map_partitions(
                partition_sums, None if theta is None else theta.mean_d, None if theta is None else theta.cov_d
            )
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
                    if abs(change) < tol * abs(bounds[-1]):
                        converged = True
                        break
                if len(bounds) >= max_iter:
                    break
            precision = prior_precisions(problem, [post.expected_precision() for post in components])[0]
            theta = gaussian_from_natural(G + precision, r)
            components = [
                update_component(c, second_moments(c, theta), post) for c, post in zip(problem.components, components)
            ]
    return VBResult(
        theta=theta, components=components, chi=np.zeros(0), lower_bound=np.array(bounds), converged=converged,
        n_iter=len(bounds), elapsed=time.perf_counter() - start, decreases=decreases,
    )  # fmt: skip
