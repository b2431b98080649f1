"""EP's predictive moments ``(E f_i, var f_i)`` under ``q(theta)`` at its sites, in one compiled pass per sweep.

Each sweep of parallel EP (:func:`bayesvm.engines.linear.ep.run_ep`) needs only the rows' predictive means and
variances of ``q(theta) = N(P^{-1} C' nu, P^{-1})``, ``P = C' diag(tau) C + prior``; the Gaussian itself is needed
once, after the last sweep.  For a dense part ``D`` (``q`` columns) and at most one blocked factor of one column ``v``
(``(1 | g)``, ``(0 + x | g)``) the elimination of the levels is scalar per level (the Schur complement, as
:func:`bayesvm.linalg.dense.gaussian_posterior` forms it), so the whole pass is a few loops over the rows:

    p_j = prior_b + sum_{i in j} tau_i v_i^2,   c_j = sum_{i in j} tau_i v_i d_i,   r_j = sum_{i in j} v_i nu_i
    S = D' diag(tau) D + prior_dd - sum_j c_j c_j' / p_j,   s = D' nu - sum_j c_j r_j / p_j
    mean_d = S^{-1} s,   mean_b_j = (r_j - c_j' mean_d) / p_j
    E f_i = d_i' mean_d + v_i mean_b_j,   var f_i = e_i' S^{-1} e_i + v_i^2 / p_j,   e_i = d_i - v_i c_j / p_j

(the last from the blocks of ``P^{-1}``: ``Sigma_dd = S^{-1}``, ``Sigma_bd = -diag(1/p) C S^{-1}``,
``Sigma_bb = diag(1/p) + diag(1/p) C S^{-1} C' diag(1/p)``).  Rows outside the factor (``codes < 0``) have
``e_i = d_i`` and no level term.  Without a blocked factor and with :data:`BLAS_FROM_COLUMNS` columns or more, the
two ``O(n q^2)`` sums run as BLAS products instead (:func:`_blas_moments`, numba or not).  Where numba is off (with a
blocked factor or fewer columns), the design is sparse or has a pattern, or the factor has several columns, the
caller keeps the general solve; where ``S`` is not positive definite the pass says so and the caller takes the
general solve (with its square-root fallback) for that sweep.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg

from ..components import prior_precisions
from . import compiled_rows


def _moments(D, codes, v, tau, nu, prior_dd, prior_b, n_levels, mean_f, var_f):
    """The module docstring's pass into ``mean_f`` and ``var_f``; False (and nothing written) where ``S`` is not
    positive definite."""
    n, q = D.shape
    S = prior_dd.copy()
    s = np.zeros(q)
    p = np.full(n_levels, prior_b)
    c = np.zeros((n_levels, q))
    r = np.zeros(n_levels)
    for i in range(n):
        w = tau[i]
        for a in range(q):
            wd = w * D[i, a]
            s[a] += D[i, a] * nu[i]
            for b in range(a + 1):
                S[a, b] += wd * D[i, b]
        j = codes[i]
        if j >= 0:
            wv = w * v[i]
            p[j] += wv * v[i]
            r[j] += v[i] * nu[i]
            for a in range(q):
                c[j, a] += wv * D[i, a]
    for j in range(n_levels):
        for a in range(q):
            gain = c[j, a] / p[j]
            s[a] -= gain * r[j]
            for b in range(a + 1):
                S[a, b] -= gain * c[j, b]
    L = np.zeros((q, q))  # S = L L' (lower triangle of S)
    for a in range(q):
        total = S[a, a]
        for k in range(a):
            total -= L[a, k] * L[a, k]
        if not total > 0.0:
            return False
        L[a, a] = np.sqrt(total)
        for b in range(a + 1, q):
            total = S[b, a]
            for k in range(a):
                total -= L[b, k] * L[a, k]
            L[b, a] = total / L[a, a]
    W = np.zeros((q, q))  # W = L^{-1} (lower triangular): S^{-1} = W' W
    for a in range(q):
        W[a, a] = 1.0 / L[a, a]
        for b in range(a + 1, q):
            total = 0.0
            for k in range(a, b):
                total -= L[b, k] * W[k, a]
            W[b, a] = total / L[b, b]
    half = np.zeros(q)  # W s, then mean_d = W' W s (loops: no BLAS binding to compile)
    for a in range(q):
        for b in range(a + 1):
            half[a] += W[a, b] * s[b]
    mean_d = np.zeros(q)
    for a in range(q):
        for b in range(a, q):
            mean_d[a] += W[b, a] * half[b]
    mean_b = np.zeros(n_levels)
    for j in range(n_levels):
        total = r[j]
        for a in range(q):
            total -= c[j, a] * mean_d[a]
        mean_b[j] = total / p[j]
    e = np.empty(q)
    for i in range(n):
        j = codes[i]
        mean = 0.0
        for a in range(q):
            mean += D[i, a] * mean_d[a]
            e[a] = D[i, a]
        level_var = 0.0
        if j >= 0:
            mean += v[i] * mean_b[j]
            scale = v[i] / p[j]
            for a in range(q):
                e[a] -= scale * c[j, a]
            level_var = v[i] * scale
        quadratic = 0.0
        for a in range(q):
            total = 0.0
            for b in range(a + 1):
                total += W[a, b] * e[b]
            quadratic += total * total
        mean_f[i] = mean
        var_f[i] = quadratic + level_var
    return True


if compiled_rows.numba is not None:
    _moments = compiled_rows.compile_nogil(_moments)


#: From this many dense columns, and without a blocked factor, the pass runs its two ``O(n q^2)`` parts
#: (``D' diag(tau) D`` and each row's ``d_i' S^{-1} d_i``) as BLAS products on the whole design
#: (:func:`_blas_moments`); below, the compiled row loop, whose scalar triangles beat a BLAS call's overhead on a
#: handful of columns (the two break even about here).  With a blocked factor the level sums' gathers cost BLAS's
#: saving back, so the loop stays.
BLAS_FROM_COLUMNS = 24


def _blas_moments(D, tau, nu, prior_dd):
    """The module docstring's pass without a blocked factor, by whole-design products: ``S = D' diag(tau) D +
    prior_dd`` (the full symmetric prior), ``mean_f = D S^{-1} D' nu`` and ``var f_i = |L^{-1} d_i|^2`` (``S = L L'``);
    None where ``S`` is not positive definite."""
    S = D.T @ (D * tau[:, None]) + prior_dd
    try:
        L = np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        return None
    mean_f = D @ scipy.linalg.cho_solve((L, True), D.T @ nu)
    half = scipy.linalg.solve_triangular(L, D.T, lower=True, check_finite=False)  # L^{-1} d_i, column by column
    return mean_f, np.einsum("qn,qn->n", half, half)


def sweep_moments(problem, precisions: list[np.ndarray]) -> Callable | None:
    """``(tau, nu) -> (mean_f, var_f)`` by the compiled pass (module docstring), or None where it does not apply; the
    function returns None for a sweep whose Schur complement is not positive definite."""
    blocked = problem.blocked
    if problem.is_sparse or problem.row_pattern is not None:
        return None
    if blocked is None and problem.D.shape[1] >= BLAS_FROM_COLUMNS:  # (numpy alone: with or without numba)
        D, full = np.asarray(problem.D, dtype=float), np.array(prior_precisions(problem, precisions)[0], dtype=float)
        return lambda tau, nu: _blas_moments(D, np.asarray(tau, dtype=float), np.asarray(nu, dtype=float), full)
    if not compiled_rows.available() or (blocked is not None and blocked.values.shape[1] != 1):
        return None
    D = np.ascontiguousarray(problem.D, dtype=float)
    n = D.shape[0]
    prior_dd, prior_b = prior_precisions(problem, precisions)
    prior_dd = np.ascontiguousarray(np.tril(prior_dd))
    if blocked is None:
        codes, v, level_prior, n_levels = np.full(n, -1, dtype=np.int64), np.zeros(n), 0.0, 0
    else:
        codes = np.ascontiguousarray(blocked.codes, dtype=np.int64)
        v = np.ascontiguousarray(blocked.values[:, 0], dtype=float)
        level_prior, n_levels = float(prior_b[0, 0]), int(blocked.n_levels)

    def moments(tau: np.ndarray, nu: np.ndarray):
        mean_f, var_f = np.empty(n), np.empty(n)
        tau, nu = np.ascontiguousarray(tau, dtype=float), np.ascontiguousarray(nu, dtype=float)
        if not _moments(D, codes, v, tau, nu, prior_dd, level_prior, n_levels, mean_f, var_f):
            return None
        return mean_f, var_f

    return moments
