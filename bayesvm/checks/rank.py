"""Rank deficiency of the fixed-effect design, found and named before any engine runs.

Following R's ``lm`` and lme4 (``fixed-effect model matrix is rank deficient so dropping k columns``),
columns are examined in formula order and a column is *aliased* when it lies in the span of the
columns before it: its component orthogonal to them is below ``tol`` times its norm.  Without
column pivoting, the Householder QR factor ``R`` of the column-normalised design gives exactly that
component as ``|R_jj|``, so one LAPACK call decides every column.  Aliased columns are dropped from the
model (they carry no information the data can separate) and reported as aliased, never with a
posterior.  Each is explained: a constant column (the intercept's alias), a copy or multiple of an
earlier column, or a linear combination of named earlier columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

#: Relative tolerance for a column's component orthogonal to the columns before it (R's ``lm`` uses 1e-7).
RANK_TOL = 1e-7
#: Rows used for the QR; beyond this many the Gram matrix's Cholesky factor gives ``R`` (tolerance squared).
QR_MAX_ROWS = 200_000
#: Aliased combinations whose largest coefficients are named (a least-squares fit each); the rest are called
#: combinations (``summary()`` lists 8 aliased columns by name)
EXPLAINED_COMBINATIONS = 20


@dataclass(frozen=True)
class Aliased:
    """One aliased column: its name and why (``"constant"``, ``"duplicate of 'x1'"``, ...)."""

    name: str
    reason: str

    @property
    def combination(self) -> bool:
        """Aliased as a combination of several earlier columns (not constant, zero, a copy or a multiple): on a
        design with more columns than rows every column past the rank is one, whatever the population holds."""
        return self.reason.startswith("a linear combination") or self.reason == "linearly dependent"


def aliased_columns(X: np.ndarray, names: tuple[str, ...] | list[str]) -> list[Aliased]:
    """The aliased columns of ``X`` in formula order, each with its reason (module docstring)."""
    n, p = X.shape
    if p == 0:
        return []
    norms = np.sqrt(np.einsum("ij,ij->j", X, X))
    zero = norms == 0
    scaled = X / np.where(zero, 1.0, norms)
    diag = _r_diagonal(scaled)
    aliased = (np.abs(diag) < RANK_TOL) | zero
    found = []
    intercept = [j for j, name in enumerate(names) if name == "(Intercept)"]
    for count, j in enumerate(np.flatnonzero(aliased)):
        explain = count < EXPLAINED_COMBINATIONS and n >= p  # (past the rank of a wide design, any column is one)
        found.append(Aliased(str(names[j]), _reason(X, j, aliased, names, zero[j], intercept, explain)))
    return found


def _r_diagonal(scaled: np.ndarray) -> np.ndarray:
    n, p = scaled.shape
    if n <= QR_MAX_ROWS:
        R = scipy.linalg.qr(scaled, mode="r", check_finite=False)[0]
        return np.diag(R[: min(n, p), :p]) if n >= p else np.concatenate([np.diag(R[:n, :n]), np.zeros(p - n)])
    gram = scaled.T @ scaled
    diag = np.zeros(p)
    kept: list[int] = []
    for j in range(p):  # sequential Cholesky on the kept columns (p is small when n is this large)
        if kept:
            coef = np.linalg.solve(gram[np.ix_(kept, kept)], gram[kept, j])
            resid = gram[j, j] - gram[kept, j] @ coef
        else:
            resid = gram[j, j]
        diag[j] = np.sqrt(max(resid, 0.0))
        if diag[j] >= np.sqrt(RANK_TOL):
            kept.append(j)
        else:
            diag[j] = 0.0
    return diag


def _reason(X: np.ndarray, j: int, aliased: np.ndarray, names, zero: bool, intercept: list[int], explain: bool) -> str:
    """Why column ``j`` is aliased: all zero, constant, a copy or multiple of an earlier kept column (found from one
    product with the earlier columns: the squared residual of ``x_j`` on ``x_k`` is ``|x_j|^2 - (x_j . x_k)^2 /
    |x_k|^2``, then confirmed value by value), or a combination of earlier columns, whose largest coefficients are
    named where ``explain`` (a least-squares fit on every earlier column)."""
    column = X[:, j]
    if zero:
        return "all zero"
    if np.ptp(column) == 0:
        return "constant (the intercept's alias)" if intercept and intercept[0] < j else "constant"
    earlier = np.flatnonzero(~aliased[:j])
    if not earlier.size:
        return "linearly dependent"
    others = X[:, earlier]
    products, squares = column @ others, np.einsum("ij,ij->j", others, others)
    with np.errstate(divide="ignore", invalid="ignore"):
        left = float(column @ column) - np.where(squares > 0, products**2 / squares, 0.0)
    for k in np.flatnonzero(left <= 1e-12 * float(column @ column)):
        scale = float(products[k] / squares[k]) if squares[k] > 0 else 0.0
        if scale != 0 and np.allclose(column, scale * others[:, k], rtol=1e-9, atol=0):
            name = names[earlier[k]]
            return f"duplicate of {name!r}" if scale == 1 else f"{scale:.6g} x {name!r}"
    if not explain:
        return "a linear combination of earlier columns"
    coef, *_ = np.linalg.lstsq(others, column, rcond=None)
    big = np.argsort(-np.abs(coef))[: min(4, len(coef))]
    terms = " + ".join(f"{coef[i]:.4g} x {names[earlier[i]]!r}" for i in sorted(big) if abs(coef[i]) > 1e-8)
    return f"a linear combination of earlier columns ({terms})"
