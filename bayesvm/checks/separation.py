"""Complete and quasi-complete separation: the linear-programming test of Konis (2007).

For ``y_i`` in {-1, +1} and design rows ``c_i``, the classes are *separated* in direction ``d != 0``
when ``y_i c_i'd >= 0`` for every row: moving the coefficients along ``d`` never increases any row's
hinge loss, and decreases it for every row with ``y_i c_i'd > 0``.  The pseudo-likelihood then stays
at its maximum as the coefficients run to infinity along ``d``, so in that direction only the prior
bounds the posterior (an improper posterior under a flat prior).  The separation is *complete* when
a direction has ``y_i c_i'd > 0`` on every row, *quasi-complete* otherwise.

Overlapping classes are settled first, and fast, by a certificate that no direction separates
(:func:`_overlap_certificate`: Stiemke's alternative, with the weights from a logistic fit's score
equation).  Where there is none, one linear programme (``scipy.optimize.linprog``, HiGHS) finds the largest set of rows any direction
isolates: maximise ``sum_i t_i`` subject to ``t_i <= y_i c_i'd``, ``0 <= t_i <= 1``, ``|d_j| <= B``
(columns scaled to unit maximum, so the box is comparable across columns).  The cone of separating
directions is convex, so the optimum puts ``t_i > 0`` on the union of every direction's isolated
rows.  Which coefficients can diverge is decided per column, as ``detectseparation`` reports it, but
without its ``2 p`` programmes: every separating direction is zero on the rows left unisolated and the
optimum is strictly positive on the rest, so the diverging columns are the support of the null space of
the unisolated rows (:func:`_diverging_columns`; checked against the ``2 p`` programmes in the tests).
That needs a dense SVD, so beyond :data:`EXACT_COLUMNS` columns (the ``[X, Z]`` test of the random
effects) the columns on which the optimal direction is non-zero are reported instead.  Under complete
separation every coefficient can diverge (the cone is open), which names every column and so none.  The
culprit a user acts on is then a column that separates the same rows by itself (with the intercept): one
small feasibility programme per column (:func:`_separating_alone`), up to :data:`ALONE_COLUMNS` columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse as sp

from .score_weights import score_weights

#: Columns up to which each coefficient's divergence is decided exactly (a dense SVD of the unisolated rows).
EXACT_COLUMNS = 2_000
#: Columns up to which each is tried as the one that separates by itself (a small programme each).
ALONE_COLUMNS = 40
#: Box bound on the scaled direction (large, so that ``t_i <= 1`` binds before the box does).
BOX = 1e3
#: A row is isolated when its separated margin ``t_i`` exceeds this.
ROW_TOL = 1e-7
#: Columns up to which the overlap certificate (a dense ``p x p`` Newton system) is tried before the programme.
CERTIFICATE_COLUMNS = 500


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
    alone
        The non-constant columns that isolate the same rows by themselves, with the intercept where there
        is one (empty when no single column does, and beyond :data:`ALONE_COLUMNS` columns).
    """

    kind: str
    columns: tuple[str, ...] = ()
    isolated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    direction: np.ndarray = field(default_factory=lambda: np.zeros(0))
    alone: tuple[str, ...] = ()

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
    if p <= CERTIFICATE_COLUMNS and _overlap_certificate(signed) is not None:
        return Separation("none", isolated=np.zeros(n, dtype=bool), direction=np.zeros(p))
    t, d = _largest_isolated_set(signed)
    isolated = t > ROW_TOL
    if not isolated.any():
        return Separation("none", isolated=isolated, direction=np.zeros(p))
    kind = "complete" if isolated.all() else "quasi-complete"
    if kind == "complete":  # the cone of separating directions is open: every coefficient can diverge
        diverging = np.ones(p, dtype=bool)
    elif p <= exact_columns:
        diverging = _diverging_columns(signed, isolated)
    else:
        diverging = np.abs(d) > 1e-9 * np.abs(d).max()
    columns = tuple(str(names[j]) for j in np.flatnonzero(diverging))
    if p > min(exact_columns, ALONE_COLUMNS):
        return Separation(kind, columns, isolated, d / scale)
    alone = _separating_alone(signed, isolated, _constant_columns(C))
    return Separation(kind, columns, isolated, d / scale, tuple(str(names[j]) for j in np.flatnonzero(alone)))


def _overlap_certificate(signed) -> np.ndarray | None:
    """Weights ``lambda > 0`` with ``signed' lambda = 0``, proving that no direction separates; else None.

    By Stiemke's alternative (Mangasarian 1969, Thm 2.4.5) exactly one holds: some ``d`` has ``signed d
    >= 0`` with at least one row positive (separation, complete or quasi-complete), or some ``lambda`` with
    every entry positive has ``signed' lambda = 0``.  The second is what the score equation of a logistic
    fit gives when its maximum exists (Albert & Anderson 1984): :func:`bayesvm.checks.score_weights.score_weights`
    finds it by Newton's method in a few steps on overlapping classes (costing ``O(n p^2)`` each, where the
    programme costs minutes at 10^5 rows); the weights are then projected exactly onto the null space of
    ``signed'`` and accepted only if every entry stays positive.  On separated data the fit diverges and
    the programme decides.
    """
    n, p = signed.shape
    dense = not sp.issparse(signed)
    S = signed if dense else sp.csr_matrix(signed)
    low, high = (S.min(axis=0), S.max(axis=0)) if dense else (S.min(axis=0).toarray(), S.max(axis=0).toarray())
    if np.any((np.ravel(low) >= 0) & (np.ravel(high) > 0)) or np.any((np.ravel(high) <= 0) & (np.ravel(low) < 0)):
        return None  # one column separates by itself (a level whose rows are all one class): no certificate
    lam = score_weights(_SignedRows(S, dense), n, p)
    if lam is None:
        return None
    gram = S.T @ S if dense else (S.T @ S).toarray()
    try:
        coef = scipy.linalg.cho_solve(scipy.linalg.cho_factor(gram), S.T @ lam)
    except (np.linalg.LinAlgError, ValueError):
        return None
    projected = lam - S @ coef
    exact = np.abs(S.T @ projected).max() <= 1e-9 * projected.sum()
    return projected if exact and projected.min() > 1e-12 else None


class _SignedRows:
    """:class:`bayesvm.checks.score_weights.ScoreSystem` of a full-rank signed design, Newton's system by Cholesky."""

    def __init__(self, S, dense: bool) -> None:
        self.S, self.dense = S, dense

    def margins(self, coef: np.ndarray) -> np.ndarray:
        return self.S @ coef

    def scores(self, weights: np.ndarray) -> np.ndarray:
        return self.S.T @ weights

    def newton_step(self, curvature: np.ndarray, gradient: np.ndarray) -> np.ndarray | None:
        S = self.S
        H = S.T @ (curvature[:, None] * S) if self.dense else (S.T @ sp.diags(curvature) @ S).toarray()
        try:
            return scipy.linalg.cho_solve(scipy.linalg.cho_factor(H), gradient)
        except (np.linalg.LinAlgError, ValueError):
            return None


def _constant_columns(C) -> np.ndarray:
    if sp.issparse(C):
        C = sp.csc_matrix(C)
        high = np.asarray(C.max(axis=0).todense()).ravel()
        low = np.asarray(C.min(axis=0).todense()).ravel()
    else:
        high, low = C.max(axis=0), C.min(axis=0)
    return (high == low) & (high != 0)


def _separating_alone(signed, isolated: np.ndarray, constant: np.ndarray) -> np.ndarray:
    """Columns that isolate the rows ``isolated`` by themselves, with the constant columns free.

    One feasibility programme per non-constant column ``j``: ``signed[:, K] d >= 1`` on the isolated
    rows and ``>= 0`` on the others, over ``K = {j} + constant columns`` (homogeneous, so the margin 1 is
    only a scale).
    """
    S = sp.csc_matrix(signed)
    margins = -np.asarray(isolated, dtype=float)
    alone = np.zeros(S.shape[1], dtype=bool)
    for j in np.flatnonzero(~constant):
        keep = constant.copy()
        keep[j] = True
        res = scipy.optimize.linprog(np.zeros(int(keep.sum())), A_ub=-S[:, keep], b_ub=margins,
                                     bounds=(None, None), method="highs")  # fmt: skip
        alone[j] = res.status == 0
    return alone


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


def _diverging_columns(signed, isolated: np.ndarray) -> np.ndarray:
    """Columns ``j`` with ``d_j != 0`` for some ``d`` in the separating cone ``signed d >= 0``.

    Every direction of the cone is zero on the rows the largest programme leaves unisolated (``N``), and
    that programme's direction is strictly positive on the others, so the cone is full-dimensional in the
    null space of ``signed_N`` and has the same support: ``j`` diverges when ``e_j`` is not orthogonal to
    that null space (an SVD of ``signed_N``; Konis 2007 and ``detectseparation`` solve ``2 p`` programmes
    for the same answer).
    """
    n, p = signed.shape
    rows = signed[~isolated]
    rows = rows.toarray() if sp.issparse(rows) else np.asarray(rows)
    if rows.shape[0] > p:  # the null space of a tall matrix is that of its triangular factor
        rows = scipy.linalg.qr(rows, mode="r")[0][:p]
    if rows.shape[0] == 0:
        return np.ones(p, dtype=bool)
    _, sv, vt = scipy.linalg.svd(rows, full_matrices=True)
    rank = int((sv > max(rows.shape) * np.finfo(float).eps * max(sv.max(initial=0.0), 1.0) * 1e3).sum())
    null = vt[rank:]
    return np.linalg.norm(null, axis=0) > 1e-8 if null.size else np.zeros(p, dtype=bool)
