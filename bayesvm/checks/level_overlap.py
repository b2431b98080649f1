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

from .score_weights import score_weights
from .separation import Separation


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
    ``sum_i lambda_i s_ij = 0`` (module docstring; the weights by
    :func:`bayesvm.checks.score_weights.score_weights` on :class:`_LevelRows`)."""
    n, p = SX.shape
    scale = np.abs(SX).max(axis=0)
    SX = SX / np.where(scale > 0, scale, 1.0)
    columns_one_sign = (SX.min(axis=0) >= 0) & (SX.max(axis=0) > 0) | (SX.max(axis=0) <= 0) & (SX.min(axis=0) < 0)
    if columns_one_sign.any():
        return False  # a fixed column separates the rest by itself
    rows = _LevelRows(SX, z, level, n_levels)
    lam = score_weights(rows, n, p + n_levels)
    return lam is not None and rows.certified(lam)


class _LevelRows:
    """:class:`bayesvm.checks.score_weights.ScoreSystem` of ``[SX, z e_level]``: coefficients ``(b_x, b_z)`` stacked,
    Newton's system solved with the levels' diagonal block eliminated (:func:`_solve`)."""

    def __init__(self, SX: np.ndarray, z: np.ndarray, level: np.ndarray, n_levels: int) -> None:
        self.SX, self.z, self.level, self.n_levels = SX, z, level, n_levels
        self.touched = np.bincount(level, weights=np.abs(z), minlength=n_levels) > 0

    def margins(self, coef: np.ndarray) -> np.ndarray:
        p = self.SX.shape[1]
        return self.SX @ coef[:p] + self.z * coef[p:][self.level]

    def scores(self, weights: np.ndarray) -> np.ndarray:
        return np.concatenate([self.SX.T @ weights, _level_sums(self.z * weights, self.level, self.n_levels)])

    def newton_step(self, curvature: np.ndarray, gradient: np.ndarray) -> np.ndarray | None:
        p = self.SX.shape[1]
        step = _solve(self.SX, self.z, self.level, self.n_levels, self.touched, curvature, gradient[:p], gradient[p:])
        return None if step is None else np.concatenate(step)

    def certified(self, lam: np.ndarray) -> bool:
        """``lam`` projected onto the null space of ``S'`` (``lam - S (S'S)^{-1} S' lam``): every entry positive and
        ``S'`` of it zero to rounding."""
        SX, z, level, n_levels = self.SX, self.z, self.level, self.n_levels
        solved = _solve(SX, z, level, n_levels, self.touched, np.ones_like(lam), SX.T @ lam,
                        _level_sums(z * lam, level, n_levels))  # fmt: skip
        if solved is None:
            return False
        coef_x, coef_z = solved
        projected = lam - (SX @ coef_x + z * coef_z[level])
        residual = max(
            np.abs(SX.T @ projected).max(initial=0.0), np.abs(_level_sums(z * projected, level, n_levels)).max()
        )
        return bool(residual <= 1e-9 * projected.sum() and projected.min() > 1e-12)


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
