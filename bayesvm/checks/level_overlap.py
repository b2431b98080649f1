"""Separation on ``[X, Z]`` for one grouping factor of one column, settled by its structure instead of a programme.

With a single term ``(1 | g)`` or ``(0 + x | g)``, ``Z`` has one column per level and at most one nonzero per row
(``z_i = v_i`` in the column of row ``i``'s level).  A level whose rows' signed entries ``s_i = y_i v_i`` all have one
sign separates its rows by itself: its own coefficient, run to infinity, raises each of their margins and touches no
other row.  Those rows are therefore isolated.  If the remaining rows ``R`` (and the columns that touch them) admit
an overlap certificate, weights ``lambda > 0`` with ``S_R' lambda = 0`` (Stiemke's alternative, as
:func:`bayesvm.checks.separation.detect_separation` uses it), no direction raises a margin in ``R`` without lowering
another, so the largest isolated set, the linear programme's answer, is exactly the one-sign levels' rows.

The certificate's weights come from a logistic fit's score equation, as in the general test, by Newton's method
on the structure: the levels' block of the Hessian is diagonal, so each step eliminates it (the Schur complement on
the ``p`` fixed columns, ``O(n p^2)``) instead of factorising a ``(p + J)``-square matrix.  Where the certificate does
not come (a combination of fixed effects and levels separates more rows), :func:`one_factor_separation` returns None
and the caller runs the programme.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.special

from .separation import CERTIFICATE_ITERATIONS, Separation


def one_factor_separation(
    X: np.ndarray, codes: np.ndarray, values: np.ndarray, y: np.ndarray, names
) -> Separation | None:
    """:func:`bayesvm.checks.separation.detect_separation` of ``C = [X, Z]`` (``names`` its columns) for one factor of
    one column (row ``i`` in level ``codes[i]``, ``-1`` for none, with value ``values[i]``), or None where the structure
    does not settle it (module docstring)."""
    n, p = X.shape
    n_levels = len(names) - p
    s = np.where(codes >= 0, y * values, 0.0)
    level = np.where(codes >= 0, codes, 0)
    positive = np.bincount(level, weights=(s > 0).astype(float), minlength=n_levels) > 0
    negative = np.bincount(level, weights=(s < 0).astype(float), minlength=n_levels) > 0
    one_sign = positive != negative
    isolated = (s != 0) & one_sign[level]
    separating = np.flatnonzero(one_sign)
    direction = np.zeros(p + n_levels)
    direction[p + separating] = np.where(positive[separating], 1.0, -1.0)
    if isolated.all():
        return Separation("complete", tuple(str(name) for name in names), isolated, direction)
    rest = ~isolated
    if not _overlaps(y[rest, None] * X[rest], s[rest], level[rest], n_levels):
        return None
    kind = "quasi-complete" if isolated.any() else "none"
    columns = tuple(str(names[p + j]) for j in separating) if isolated.any() else ()
    return Separation(kind, columns, isolated, direction if isolated.any() else np.zeros(p + n_levels))


def _overlaps(SX: np.ndarray, z: np.ndarray, level: np.ndarray, n_levels: int) -> bool:
    """Whether rows ``[SX, z e_level]`` (signed) have an overlap certificate: ``lambda > 0`` with every column's
    ``sum_i lambda_i s_ij = 0`` (module docstring)."""
    n, p = SX.shape
    scale = np.abs(SX).max(axis=0)
    SX = SX / np.where(scale > 0, scale, 1.0)
    touched = np.bincount(level, weights=np.abs(z), minlength=n_levels) > 0
    columns_one_sign = (SX.min(axis=0) >= 0) & (SX.max(axis=0) > 0) | (SX.max(axis=0) <= 0) & (SX.min(axis=0) < 0)
    if columns_one_sign.any():
        return False  # a fixed column separates the rest by itself
    beta_x, beta_z = np.zeros(p), np.zeros(n_levels)
    objective = -n * np.log(2.0)
    for _ in range(CERTIFICATE_ITERATIONS):
        eta = SX @ beta_x + z * beta_z[level]
        if eta.min() >= 0 and eta.max() > 0:
            return False  # the fit's own coefficients separate
        lam = scipy.special.expit(-eta)
        grad_x, grad_z = SX.T @ lam, _level_sums(z * lam, level, n_levels)
        step = _solve(SX, z, level, n_levels, touched, lam * (1.0 - lam), grad_x, grad_z)
        if step is None:
            return False
        step_x, step_z = step
        decrement = grad_x @ step_x + grad_z @ step_z
        if decrement < 1e-20 * n:  # at the maximum to rounding: project its weights onto the null space exactly
            return _certified(SX, z, level, n_levels, touched, lam)
        size = 1.0
        while size > 1e-10:  # backtracking, with the rounding of the sum allowed for
            trial_x, trial_z = beta_x + size * step_x, beta_z + size * step_z
            value = -np.logaddexp(0.0, -(SX @ trial_x + z * trial_z[level])).sum()
            if value >= objective - 1e-13 * abs(objective):
                break
            size /= 2
        else:
            return False
        beta_x, beta_z, objective = trial_x, trial_z, value
        if objective > -1e-6 or max(np.abs(beta_x).max(initial=0.0), np.abs(beta_z).max(initial=0.0)) > 1e8:
            return False  # running off along a separating direction
    return False


def _level_sums(values: np.ndarray, level: np.ndarray, n_levels: int) -> np.ndarray:
    return np.bincount(level, weights=values, minlength=n_levels)


#: Eigenvalues of the Schur complement below this share of its largest are taken as zero (a rank-deficient ``S``).
RANK_TOL = 1e-10


def _solve(SX, z, level, n_levels, touched, w, rhs_x, rhs_z):
    """A solution of ``H (x, z) = (rhs_x, rhs_z)`` for ``H = S' diag(w) S`` (``S = [SX, z e_level]``; the right-hand
    sides here lie in the range of ``S'``, so one exists), the levels' diagonal block eliminated:
    ``(A - B D^-1 B') x = rhs_x - B D^-1 rhs_z`` by the Schur complement's pseudo-inverse, ``z_j = (rhs_z_j - B_j' x) /
    D_j``; None where it cannot be decomposed.  Levels no row touches take 0.  A step that is not exact only fails the
    final certificate's test (the caller then runs the programme)."""
    p = SX.shape[1]
    D = _level_sums(w * z * z, level, n_levels)
    wz = w * z
    B = np.stack([_level_sums(wz * SX[:, a], level, n_levels) for a in range(p)]) if p else np.zeros((0, n_levels))
    inverse = np.where(touched & (D > 0), 1.0 / np.where(D > 0, D, 1.0), 0.0)
    schur = SX.T @ (w[:, None] * SX) - (B * inverse) @ B.T
    try:  # (pseudo-inverse: a fixed column in the levels' span, the intercept of (1 | g), leaves S rank deficient)
        values, vectors = scipy.linalg.eigh(schur)
    except (np.linalg.LinAlgError, ValueError):
        return None
    kept = values > RANK_TOL * max(values.max(initial=0.0), 0.0)
    x = vectors[:, kept] @ ((vectors[:, kept].T @ (rhs_x - B @ (inverse * rhs_z))) / values[kept])
    return x, inverse * (rhs_z - B.T @ x)


def _certified(SX, z, level, n_levels, touched, lam) -> bool:
    """``lam`` projected onto the null space of ``S'`` (``lam - S (S'S)^{-1} S' lam``): every entry positive and
    ``S'`` of it zero to rounding."""
    solved = _solve(
        SX, z, level, n_levels, touched, np.ones_like(lam), SX.T @ lam, _level_sums(z * lam, level, n_levels)
    )
    if solved is None:
        return False
    coef_x, coef_z = solved
    projected = lam - (SX @ coef_x + z * coef_z[level])
    residual = max(np.abs(SX.T @ projected).max(initial=0.0), np.abs(_level_sums(z * projected, level, n_levels)).max())
    return bool(residual <= 1e-9 * projected.sum() and projected.min() > 1e-12)
