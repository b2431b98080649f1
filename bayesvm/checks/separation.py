"""Complete and quasi-complete separation: the linear-programming test of Konis (2007).

For ``y_i`` in {-1, +1} and design rows ``c_i``, the classes are *separated* in direction ``d != 0``
when ``y_i c_i'd >= 0`` for every row: moving the coefficients along ``d`` never increases any row's
hinge loss, and decreases it for every row with ``y_i c_i'd > 0``.  The pseudo-likelihood then stays
at its maximum as the coefficients run to infinity along ``d``, so in that direction only the prior
bounds the posterior (an improper posterior under a flat prior).  The separation is *complete* when
a direction has ``y_i c_i'd > 0`` on every row, *quasi-complete* otherwise.

One linear programme (``scipy.optimize.linprog``, HiGHS) finds the largest set of rows any direction
isolates: maximise ``sum_i t_i`` subject to ``t_i <= y_i c_i'd``, ``0 <= t_i <= 1``, ``|d_j| <= B``
(columns scaled to unit maximum, so the box is comparable across columns).  The cone of separating
directions is convex, so the optimum puts ``t_i > 0`` on the union of every direction's isolated
rows.  Which coefficients can diverge is decided per column, as ``detectseparation`` reports it: the
largest and smallest ``d_j`` over the same cone (``2 p`` small programmes), for up to
:data:`EXACT_COLUMNS` columns; beyond that, the columns on which the optimal direction is non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import scipy.sparse as sp

#: Columns up to which each coefficient's divergence is decided by its own two programmes.
EXACT_COLUMNS = 40
#: Box bound on the scaled direction (large, so that ``t_i <= 1`` binds before the box does).
BOX = 1e3
#: A row is isolated when its separated margin ``t_i`` exceeds this.
ROW_TOL = 1e-7


@dataclass(frozen=True)
class Separation:
    """The outcome of the test.

    Attributes
    ----------
    kind
        ``"none"``, ``"quasi-complete"`` or ``"complete"``.
    columns
        Names of the coefficients that can run to infinity.
    isolated
        Boolean mask of the rows some separating direction isolates (``y_i c_i'd > 0``).
    direction
        One separating direction on the columns' own scale (zeros if none).
    """

    kind: str
    columns: tuple[str, ...] = ()
    isolated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    direction: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def separated(self) -> bool:
        return self.kind != "none"


def detect_separation(
    C, y: np.ndarray, names: list[str] | tuple[str, ...], exact_columns: int = EXACT_COLUMNS
) -> Separation:
    """Konis's test on the design ``C`` (dense or sparse, full column rank) for labels ``y`` in {-1, +1}."""
    n, p = C.shape
    scale = _column_scale(C)
    signed = (sp.diags(y) @ sp.csr_matrix(C)) @ sp.diags(1.0 / scale) if sp.issparse(C) else (y[:, None] * C) / scale
    t, d = _largest_isolated_set(signed)
    isolated = t > ROW_TOL
    if not isolated.any():
        return Separation("none", isolated=isolated, direction=np.zeros(p))
    kind = "complete" if isolated.all() else "quasi-complete"
    if p <= exact_columns:
        diverging = _diverging_columns(signed)
    else:
        diverging = np.abs(d) > 1e-9 * np.abs(d).max()
    columns = tuple(str(names[j]) for j in np.flatnonzero(diverging))
    return Separation(kind, columns=columns, isolated=isolated, direction=d / scale)


def _column_scale(C) -> np.ndarray:
    if sp.issparse(C):
        scale = np.asarray(abs(C).max(axis=0).todense()).ravel()
    else:
        scale = np.abs(C).max(axis=0)
    return np.where(scale > 0, scale, 1.0)


def _largest_isolated_set(signed) -> tuple[np.ndarray, np.ndarray]:
    """``max sum t`` s.t. ``t <= signed d``, ``0 <= t <= 1``, ``|d| <= BOX``; returns ``(t, d)``."""
    n, p = signed.shape
    # variables [d (p), t (n)]; constraint t_i - signed_i d <= 0
    A = sp.hstack([-sp.csr_matrix(signed), sp.identity(n, format="csr")], format="csr")
    cost = np.concatenate([np.zeros(p), -np.ones(n)])
    bounds = [(-BOX, BOX)] * p + [(0.0, 1.0)] * n
    res = scipy.optimize.linprog(cost, A_ub=A, b_ub=np.zeros(n), bounds=bounds, method="highs")
    if res.status != 0:  # pragma: no cover - the programme is always feasible (d = 0, t = 0) and bounded
        return np.zeros(n), np.zeros(p)
    return res.x[p:], res.x[:p]


def _diverging_columns(signed) -> np.ndarray:
    """Columns ``j`` with ``max |d_j| > 0`` over the separating cone ``signed d >= 0``, ``|d| <= 1``."""
    n, p = signed.shape
    A = -sp.csr_matrix(signed)
    out = np.zeros(p, dtype=bool)
    for j in range(p):
        for sign in (1.0, -1.0):
            cost = np.zeros(p)
            cost[j] = -sign
            res = scipy.optimize.linprog(cost, A_ub=A, b_ub=np.zeros(n), bounds=[(-1.0, 1.0)] * p, method="highs")
            if res.status == 0 and -res.fun > 1e-7:
                out[j] = True
                break
    return out
