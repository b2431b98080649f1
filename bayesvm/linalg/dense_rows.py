"""Compiled row loop of the dense predictor with a blocked factor (where numba is installed).

:meth:`bayesvm.linalg.dense.GaussianPosterior.predictor` gives each row's mean and variance of
``f_i = d_i' theta_d + z_i' theta_j``: ``d_i' mu_d + z_i' mu_j`` and ``r_i' S^-1 r_i + z_i' P_jj^-1 z_i`` with
``r_i = d_i - G_j' z_i``.  The numpy path forms the residual rows ``r_i`` as an ``(n, q)`` copy of ``D`` minus the
gathered gains and then ``(R S^-1) * R``; EP calls it once per sweep, and on lme4's VerbAgg (7,584 rows, 30 columns,
316 levels) it was half of each sweep.  Here ``A = D S^-1`` is one BLAS product per chunk of rows and the rest is
``O(q K)`` per row, with no ``(n, q)`` temporaries: ``S^-1 r_i = A_i - sum_k z_ik (S^-1 G_j')_k`` (``S^-1 G_j'`` once
per level) and ``r_i' S^-1 r_i`` is the dot product of ``r_i`` with it.  Forming ``S^-1 r_i`` instead of expanding
``d' S^-1 d - 2 z' G S^-1 d + z' G S^-1 G' z`` keeps the rounding relative to ``|d_i| |r_i|``, not ``|d_i|^2`` (a
level's gains absorb most of an intercept column, so ``r_i`` can be much smaller than ``d_i``).
"""

from __future__ import annotations

from .compiled import compile_nogil, numba


def _level_rows_predictor(D, A, codes, values, mean_d, mean_b, gains, spread, block_inv, mean, var):
    """Rows of ``D`` (a chunk) with ``A = D S^-1``, their level ``codes`` (``-1``: none) and ``values`` ``(n, K)``:
    ``mean`` and ``var`` of ``f_i`` (module docstring); ``gains`` ``G`` and ``spread = G S^-1`` are ``(J, K, q)``."""
    n, q = D.shape
    K = values.shape[1]
    for i in range(n):
        m = 0.0
        for a in range(q):
            m += D[i, a] * mean_d[a]
        j = codes[i]
        if j < 0:
            v = 0.0
            for a in range(q):
                v += D[i, a] * A[i, a]
            mean[i], var[i] = m, v
            continue
        v = 0.0
        for k in range(K):
            m += values[i, k] * mean_b[j, k]
            for k2 in range(K):
                v += values[i, k] * values[i, k2] * block_inv[j, k, k2]
        for a in range(q):
            r, s = D[i, a], A[i, a]
            for k in range(K):
                r -= values[i, k] * gains[j, k, a]
                s -= values[i, k] * spread[j, k, a]
            v += r * s
        mean[i], var[i] = m, v


def _draws_hinge_sums(D, codes, values, y, weights, theta_d, theta_b, out):
    """``out[s] = sum_i omega_i max(0, 1 - y_i f_si)`` with ``f_si = d_i' theta_d[s] + z_i' theta_b[s, j(i)]`` (rows
    with ``codes == -1``: no level term) for draws ``theta_d (S, q)``, ``theta_b (S, J, K)``: the hinge
    pseudo-likelihood's exponent (Polson & Scott 2011, eq. (2)) at each draw, row by row without the ``(S, n)``
    predictor."""
    n, q = D.shape
    K = values.shape[1]
    for s in range(theta_d.shape[0]):
        total = 0.0
        for i in range(n):
            f = 0.0
            for a in range(q):
                f += D[i, a] * theta_d[s, a]
            j = codes[i]
            if j >= 0:
                for k in range(K):
                    f += values[i, k] * theta_b[s, j, k]
            total += weights[i] * max(1.0 - y[i] * f, 0.0)  # (by max, not a branch: a draw's side is random)
        out[s] = total


if numba is not None:
    level_rows_predictor = compile_nogil(_level_rows_predictor)
    draws_hinge_sums = compile_nogil(_draws_hinge_sums)
else:  # never called: callers check compiled.available()
    level_rows_predictor = draws_hinge_sums = None
