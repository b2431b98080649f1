"""Moves that the Gibbs sampler makes with the augmentation variables integrated out: partial non-centring of the
variance components, a global rescaling, and each fixed-effect coefficient given the rest.

The Gibbs sampler of Luts & Ormerod (2014, Appendix A) is *centred*: it draws the random effects ``u``
given their covariance ``Sigma`` and ``Sigma`` given ``u``.  Where the data say little about a level
(toenail: 179 of 294 patients never change class) its ``u_j`` follows ``Sigma`` closely and ``Sigma | u``
is narrow, so the pair crawls; for the informative levels the centred form is the right one.  Partial
non-centring (Papaspiliopoulos, Roberts & Skold 2007) rescales the variance together with the random
effects of the uninformative levels only: here the set ``S`` of levels whose rows all have one class,
fixed once from the data.  For coordinate ``k`` of a component this is a draw from the group
``{u_jk -> d u_jk for j in S, Sigma -> D Sigma D}``, ``D = diag(1, .., d, .., 1)``, ``d > 0``, by the
generalised Gibbs step of Liu & Sabatti (2000, Theorem 1; left-Haar measure ``dd / d``), the group form of
interweaving (Yu & Meng 2011).

The move is made with the augmentation variables integrated out, on the hinge pseudo-posterior
``pi(theta, Sigma | y)``; the sampler then draws the weights ``w | theta`` afresh before anything uses them
(a partially collapsed step: van Dyk & Park 2008).  With ``f_i = a_i + d b_i`` (``b_i`` the part of row
``i``'s predictor from coordinate ``k`` of the levels in ``S``) the move's density is

    pi(d) propto exp(-2 sum_i (1 - y_i (a_i + d b_i))_+)
                 prod_{j in S} p(D u_j | D Sigma D) d        (Jacobian of u_jk)
                 prod_{j not in S} p(u_j | D Sigma D)
                 p(D Sigma D) d^(k+1) / d                    (Jacobian of Sigma, Haar measure)

Each ``p(D u_j | D Sigma D) d = p(u_j | Sigma)`` is constant in ``d``; each kept level gives
``-log d - u_j' (D Sigma D)^-1 u_j / 2``, a quadratic in ``1/d``; the Jacobian of ``Sigma -> D Sigma D`` is
``d^(k+1)`` (the diagonal entry twice, the ``k - 1`` off-diagonal pairs once).  For a single-column
component (``k = 1``, ``s = sigma^2``) the prior term is ``p(d^2 s)``: the inverse gamma of the paper, or the
half-t's ``IG(nu/2, nu/a)`` given its auxiliary variable ``a`` (which the move leaves fixed); for an
inverse-Wishart term ``log p(D Sigma D) = -(nu + k + 1) log d - tr(Psi (D Sigma D)^-1) / 2 + const``.  The
move leaves ``pi(theta, Sigma | y)`` invariant, so the chain keeps its target (checked against quadrature
and against the paper's sampler in ``tests/engines/linear/test_interweave.py``).  ``log d`` is drawn by slice
sampling (Neal 2003), exactly.  The learned penalty's component gets the same move (its "levels" are the slopes) on
every :data:`PENALTY_EVERY`-th call, a fixed schedule, so the chain stays exact: given ``w`` the penalty's variance
and its slopes form a funnel that a chain can fall into and not leave.

Global rescaling (the parameter expansion of Liu & Wu 1999 in the group form of Liu & Sabatti 2000):
every coefficient times ``d`` and every covariance (the learned penalty's too) times ``d^2``, so ``f -> d f``.
A coefficient in a variance component keeps its conditional density with the Jacobian
(``p(d u | d^2 Sigma) d^dim = p(u | Sigma)``); a coefficient with a fixed ``N(0, 1/lambda_j)`` prior gives
``-lambda_j d^2 theta_j^2 / 2 + log d``; a single-column variance gives ``log p(d^2 s) + 2 log d``; a ``k x k``
inverse-Wishart term gives ``-(nu + k + 1) k log d - tr(Psi Sigma^-1) / (2 d^2) + k (k + 1) log d`` (the
Jacobian of ``Sigma -> d^2 Sigma`` on its ``k (k + 1) / 2`` entries); with the Haar measure ``dd / d`` and
``d = e^t`` the density of ``t`` is the product of these and ``exp(-2 sum_i (1 - d y_i f_i)_+)``.  This is the
direction in which the augmented sampler crawls.

Fixed-effect coordinates (a partially collapsed Gibbs step, van Dyk & Park 2008): each coefficient of a column
outside the random-effect terms, in turn, from ``pi(theta_j | theta_-j, Sigma, y)`` with ``w`` integrated out,
``exp(-2 sum_i (1 - y_i f_i)_+ - lambda_j theta_j^2 / 2)`` (``lambda_j`` the fixed prior precision or, for a
penalised slope, ``1 / sigma_u^2``), by slice sampling with width :data:`COORDINATE_WIDTH` ``/ ||x_j||``.  The
joint draw ``theta | w`` moves the coefficients together but only as far as ``w`` lets them; these steps break
that dependence.

Fixed-effect directions (the same partially collapsed step along other lines): one coordinate at a time crawls where
the columns are collinear (``visit`` and ``visit:treatment``; ``age`` and ``I(age**2)``), since each coefficient's
conditional is narrow along the line the others hold fixed.  After the coordinates, ``theta_F`` (the same columns) moves
along each eigenvector ``v_k`` of ``X_F' X_F``, fixed once from the design: ``theta_F + t v_k`` with ``t`` from
``exp(-2 sum_i (1 - y_i (f_i + t x_i' v_k))_+ - (theta_F + t v_k)' Lambda (theta_F + t v_k) / 2)`` by over-relaxed
slice sampling (Neal 2003, section 6: this density is log-concave, so its slice is an interval ``[L, R]`` and ``t = L +
R`` reflects the current point through its middle; :func:`bayesvm.engines.linear.compiled_rows.overrelaxed_line`
finds ``L`` and ``R`` exactly, as roots of the density's quadratic pieces, from first points near them set by a running
scale of each line, :func:`bayesvm.engines.linear.compiled_rows.line_start`, which changes only the passes it takes).  The reflection suppresses the random walk of
successive updates along a line.  A fixed direction makes each update a Gibbs step of the conditional along that line
(the lines do not depend on the state), so the target is kept; where the design changes between iterations (imputed
columns) the lines stay those of the chain's first design (fixed lines; only their row values ``X_F v_k`` follow the
design, which the step conditions on).  The mixing these moves buy is measured by ``benchmarks/gibbs_mixing.py``.  All moves are checked
against quadrature and against the paper's sampler in ``tests/engines/linear/test_interweave.py``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import variance_prior
from ..components import component_values
from . import compiled_rows

#: The learned penalty's rescaling runs on every ``PENALTY_EVERY``-th call of :class:`ScaleMoves` (module docstring).
PENALTY_EVERY = 4
#: Slice sampler: initial bracket width on ``log d`` and the most stepping-out and shrinking steps.
SLICE_WIDTH = 0.5
SLICE_STEPS = 50
#: Slice width on ``log sigma^2`` in the collapsed variance steps (its spread is about 1-3 where the data say little
#: about it), and the range outside which ``log sigma^2`` has density 0 there (``exp`` overflows beyond it; no prior or
#: data put mass there).
LOG_VARIANCE_WIDTH = 2.0
LOG_VARIANCE_RANGE = (-300.0, 300.0)
#: Rows up to which the global rescaling keeps the width :data:`SLICE_WIDTH`; beyond, its width shrinks as
#: ``1 / sqrt(rows)``, as the spread of ``log d`` does (a fixed constant of the chain, so the move stays exact; on
#: 10^6 rows it saves about 4 of the 8 passes over the rows that shrinking a bracket of 0.5 took)
GLOBAL_WIDTH_ROWS = 2_000
#: Slice width of a fixed-effect coefficient's update, in units of ``1 / ||x_j||`` (4 measured within 5% of the
#: fewest density evaluations on toenail, about 6 per update; 2 took 20% more)
COORDINATE_WIDTH = 4.0
#: The direction moves run where the fixed-effect columns' dense copy ``X_F V`` has at most this many entries (8 MB:
#: 100,000 rows by 10 columns).  Beyond, they are off: each line costs about a coordinate sweep of passes over the
#: rows, and with that many rows per coefficient the fixed effects are pinned by their data (the timings at 2 x 10^5
#: and 10^6 rows in the README are of the sampler without them).
DIRECTION_MAX_ENTRIES = 1_000_000


def _inverse_quadratic(weights: np.ndarray, k: int) -> tuple[float, float, float]:
    """``(w_kk, w_k., w_rest)`` such that ``sum_ab weights_ab s_a s_b = w_kk / d^2 + w_k. / d + w_rest`` for
    ``s = (1, .., 1/d, .., 1)`` (the ``k``-th entry ``1/d``)."""
    if weights.shape == (1, 1):  # a single-column component: every iteration, so without index arrays
        return float(weights[0, 0]), 0.0, 0.0
    rest = np.ones(weights.shape[0], dtype=bool)
    rest[k] = False
    return float(weights[k, k]), float(2.0 * np.sum(weights[k, rest])), float(np.sum(weights[np.ix_(rest, rest)]))


def _prior_terms(comp, cov: np.ndarray, k: int, aux) -> tuple[float, tuple[float, float, float], float]:
    """``log p(D Sigma D) = -power * log d - 0.5 * quadratic(1/d) + const`` as ``(power, quadratic, variance)``
    (module docstring): for a single column ``IG(shape, rate)`` in ``d^2 s`` gives ``power = 2 (shape + 1)``
    and ``quadratic = (2 rate / s, 0, 0)``; an inverse Wishart gives ``power = nu + k + 1`` and the quadratic of
    ``Psi * Sigma^-1``."""
    if not comp.is_wishart:
        shape, rate = variance_prior.conditional_inverse_gamma(comp, aux)  # (the half-t's given its auxiliary a)
        return 2.0 * (shape + 1.0), (2.0 * rate / float(cov[0, 0]), 0.0, 0.0), float(cov[0, 0])
    weights = comp.prior_scale * np.linalg.inv(cov)
    return comp.prior_df + comp.k + 1.0, _inverse_quadratic(weights, k), 0.0


def slice_sample_drawn(log_density, x0: float, width: float, exponential: float, uniforms: np.ndarray) -> float:
    """One slice-sampling update of a univariate density (stepping out, then shrinkage; Neal 2003) with its random
    numbers given: ``exponential`` sets the level, ``uniforms[0]`` places the bracket, ``uniforms[1:]`` are the
    shrinkage proposals (at most ``uniforms.size - 1``; then ``x0`` stays)."""
    return slice_sample_valued(log_density, x0, width, exponential, uniforms)[0]


def slice_sample_valued(
    log_density, x0: float, width: float, exponential: float, uniforms: np.ndarray, at_x0: float | None = None
) -> tuple[float, float]:
    """:func:`slice_sample_drawn` that also returns the log density at the new point, and takes it at ``x0`` where
    the caller knows it (``at_x0``): a caller whose density costs a pass over every level's intervals then does not
    evaluate the same point twice (the same draw either way)."""
    start = log_density(x0) if at_x0 is None else at_x0
    level = start - exponential
    left = x0 - width * uniforms[0]
    right = left + width
    for _ in range(SLICE_STEPS):
        if log_density(left) <= level:
            break
        left -= width
    for _ in range(SLICE_STEPS):
        if log_density(right) <= level:
            break
        right += width
    for u in uniforms[1:]:
        x = left + (right - left) * u
        value = log_density(x)
        if value > level:
            return x, value
        if x < x0:
            left = x
        else:
            right = x
    return x0, start  # the bracket shrank onto x0 (a density this narrow is already sampled by staying)


def slice_numbers(rng: np.random.Generator, updates: int) -> tuple[np.ndarray, np.ndarray]:
    """The random numbers of ``updates`` slice updates in two calls: each update's level (an exponential) and its
    bracket's and shrinkage's uniforms (a row of ``SLICE_STEPS + 1``)."""
    return rng.exponential(size=updates), rng.random((updates, SLICE_STEPS + 1))


def hinge_slice(
    a, b, c, log_scale: bool, x0: float, width: float, rng: np.random.Generator, compiled: bool | None = None
) -> float:
    """One slice update of ``log p(t) = -2 sum_i max(0, a_i - d b_i) + c_0 d^2 + c_1 / d + c_2 / d^2 + c_3 t`` with
    ``d = e^t`` (``log_scale``) or ``d = t``: compiled (:func:`bayesvm.engines.linear.compiled_rows.hinge_slice`)
    where numba is installed, else by numpy on the same random numbers (the same draw); ``compiled``: the caller's
    answer to :func:`compiled_rows.available` (None: ask it)."""
    return hinge_slice_drawn(a, b, c, log_scale, x0, width, rng.exponential(), rng.random(SLICE_STEPS + 1), compiled)


def hinge_slice_drawn(
    a, b, c, log_scale: bool, x0: float, width: float, exponential: float, uniforms, compiled: bool | None = None
) -> float:
    """:func:`hinge_slice` with its random numbers given (the level's ``exponential``, the bracket's and shrinkage's
    ``uniforms``)."""
    c = np.asarray(c, dtype=float)
    if compiled_rows.available() if compiled is None else compiled:
        return float(compiled_rows.hinge_slice(a, b, c, log_scale, x0, width, exponential, uniforms, SLICE_STEPS))

    def log_density(t):
        d = np.exp(t) if log_scale else t
        out = -2.0 * float(np.maximum(a - d * b, 0.0).sum()) + c[0] * d * d + c[3] * t
        if c[1] != 0.0 or c[2] != 0.0:
            out += c[1] / d + c[2] / (d * d)
        return out

    return slice_sample_drawn(log_density, x0, width, exponential, uniforms)


def fixed_directions(D, columns: np.ndarray, lines: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The direction moves' lines (module docstring): ``(V, X_F V)`` with ``V`` the eigenvectors of ``X_F' X_F`` for
    the design's ``columns`` (those of positive eigenvalue), or empty ``(len(columns), 0)`` and ``(n, 0)`` where
    fewer than two columns move or the dense copy would exceed :data:`DIRECTION_MAX_ENTRIES`.  ``lines``: keep these
    ``V`` (the chain's lines, fixed at its first design) and only carry them to this design."""
    n = D.shape[0]
    if columns.size < 2 or n * columns.size > DIRECTION_MAX_ENTRIES:
        return np.zeros((columns.size, 0)), np.zeros((n, 0))
    block = D[:, columns]
    block = block.toarray() if sp.issparse(block) else np.asarray(block, dtype=float)
    if lines is not None and lines.shape[0] == columns.size:
        return lines, np.ascontiguousarray(block @ lines)
    values, vectors = np.linalg.eigh(block.T @ block)
    keep = values > 1e-10 * max(float(values[-1]), 1e-300)
    vectors = np.ascontiguousarray(vectors[:, keep])
    return vectors, np.ascontiguousarray(block @ vectors)


def single_class_levels(problem, comp) -> np.ndarray:
    """``(J,)`` mask of the levels of ``comp`` whose rows all have one class (for the penalty component, whose
    "levels" are slopes, every one): the data barely inform these random effects, so they are rescaled with
    the variance while the others keep their values (partial non-centring: Papaspiliopoulos et al. 2007)."""
    if comp.source < 0:
        return np.ones(comp.n_levels, dtype=bool)
    y = problem.y
    if comp.blocked:
        codes, J = problem.blocked.codes, problem.blocked.n_levels
        positive = np.bincount(codes, weights=(y > 0).astype(float), minlength=J)
        count = np.bincount(codes, minlength=J)
        return (positive == 0) | (positive == count)
    column_rows = sp.csc_matrix(problem.D[:, comp.index[:, 0]])
    column_rows.data = np.ones_like(column_rows.data)
    positive = np.asarray(column_rows.T @ (y > 0).astype(float)).ravel()
    count = np.asarray(column_rows.sum(axis=0)).ravel()
    return (positive == 0) | (positive == count)


class ScaleMoves:
    """The rescaling moves of a problem's variance components (module docstring), with the level subsets fixed
    once from the data."""

    #: A random intercept's rescaling by :meth:`_blocked_intercept_move` (False: by the general loop of
    #: :meth:`_moves`, which the tests compare it with).
    intercept_path = True

    def __init__(self, problem, lines: np.ndarray | None = None):
        self.problem = problem
        self.compiled = compiled_rows.available()  # (asked once: the moves run every iteration)
        self.subsets = [single_class_levels(problem, comp) for comp in problem.components]
        self.movable = [bool(np.any(subset)) for subset in self.subsets]
        # the global move's slice width (module docstring, GLOBAL_WIDTH_ROWS)
        self.global_width = SLICE_WIDTH * min(1.0, float(np.sqrt(GLOBAL_WIDTH_ROWS / problem.y.size)))
        self.row_masks = []
        self.blocked_rows = []  # blocked components: (rows of the rescaled levels, their codes, values and y)
        for comp, subset in zip(problem.components, self.subsets):
            if comp.blocked:
                mask = subset[problem.blocked.codes] & (problem.blocked.codes >= 0)
                self.row_masks.append(mask)
                rows = np.flatnonzero(mask)
                self.blocked_rows.append(
                    (rows, problem.blocked.codes[rows], problem.blocked.values[rows], problem.y[rows])
                )
            else:
                self.row_masks.append(None)
                self.blocked_rows.append(None)
        fixed = np.ones(problem.D.shape[1], dtype=bool)
        for comp in problem.components:
            if not comp.blocked and comp.source >= 0:
                fixed[comp.index.ravel()] = False
        self.columns = []  # (column, its nonzero rows, values there, y times values, slice width)
        for j in np.flatnonzero(fixed):
            column = problem.D[:, j]
            column = np.asarray(column.todense()).ravel() if sp.issparse(column) else np.asarray(column)
            rows = np.flatnonzero(column)
            if rows.size == 0:  # an all-zero column: its coefficient is drawn from its prior by theta | w alone
                continue
            rows = slice(None) if rows.size == column.size else rows  # (a slice reads the rows without a copy)
            x = np.ascontiguousarray(column[rows])
            self.columns.append((j, rows, x, problem.y[rows] * x, COORDINATE_WIDTH / np.sqrt(float(x @ x))))
        # the same columns as one sparse-column layout for the compiled sweep (compiled_rows.coordinate_sweep)
        all_rows = np.arange(problem.y.size)
        row_lists = [all_rows[rows] for _, rows, _, _, _ in self.columns]
        self.sweep_columns = np.array([j for j, *_ in self.columns], dtype=np.intp)
        self.sweep_ptr = np.concatenate([[0], np.cumsum([r.size for r in row_lists])]).astype(np.intp)
        self.sweep_rows = np.concatenate(row_lists).astype(np.intp) if row_lists else np.zeros(0, dtype=np.intp)
        self.sweep_x = np.concatenate([c[2] for c in self.columns]) if self.columns else np.zeros(0)
        self.sweep_slope = np.concatenate([c[3] for c in self.columns]) if self.columns else np.zeros(0)
        self.sweep_widths = np.array([c[4] for c in self.columns], dtype=float)
        self.directions, direction_x = fixed_directions(problem.D, self.sweep_columns, lines)
        # each line's row values X_F v_k and y X_F v_k as a contiguous row (lines x rows): its passes run in SIMD lanes
        self.direction_x = np.ascontiguousarray(direction_x.T)
        self.direction_slope = self.direction_x * problem.y[None, :]
        # each line's scale, to start its slice's ends' searches near them (compiled_rows.line_start): at first the
        # spread of a line density of |X_F v_k|^2 rows' worth of hinge terms, 1 / |X_F v_k|
        self.direction_scales = 1.0 / np.sqrt(np.maximum(np.sum(self.direction_x**2, axis=1), 1e-300))
        self.ones = np.ones(problem.y.size)  # the global move's a_i (hinge_slice)
        self.free = np.ones(problem.D.shape[1], dtype=bool)  # columns with a fixed normal prior
        for comp in problem.components:
            if not comp.blocked:
                self.free[comp.index.ravel()] = False
        self.free_precision = np.asarray(problem.fixed_precision, dtype=float)[self.free]
        self.calls = 0  # (the learned penalty's move runs on a fixed schedule of calls: PENALTY_EVERY)
        # the global, coordinate and direction moves in one compiled call (_fused_moves) where every component is a
        # single variance (an inverse-Wishart term's prior enters the global move through its matrix inverse)
        self.fused = self.compiled and not any(comp.is_wishart or comp.k != 1 for comp in problem.components)
        self.free_columns = np.flatnonzero(self.free).astype(np.intp)
        self.base_precision = np.asarray(problem.fixed_precision, dtype=float).copy()
        self.penalty_of_column = np.full(problem.D.shape[1], -1, dtype=np.intp)
        for c, comp in enumerate(problem.components):
            if comp.source < 0:
                self.penalty_of_column[comp.index.ravel()] = c
        # single-column components in theta_d (the learned penalty, whose "levels" are its slopes): the rescaled
        # columns as one dense block, so a move's b = block @ theta is one product (:meth:`_column_term_move`)
        self.column_blocks: list = [None] * len(problem.components)
        for c, (comp, subset) in enumerate(zip(problem.components, self.subsets)):
            if not comp.blocked and comp.k == 1 and not comp.is_wishart and np.any(subset):
                moved = comp.index[subset, 0]
                block = problem.D[:, moved]
                block = block.toarray() if sp.issparse(block) else np.asarray(block, dtype=float)
                self.column_blocks[c] = (moved, np.ascontiguousarray(block), comp.index[~subset, 0])

    def _contribution(self, c: int, k: int, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
        """``b_i``: row ``i``'s part of ``f`` from coordinate ``k`` of the rescaled levels of component ``c``."""
        comp, subset, problem = self.problem.components[c], self.subsets[c], self.problem
        if comp.blocked:
            blocked = problem.blocked
            column = int(comp.index[0, k])
            return np.where(self.row_masks[c], blocked.values[:, column] * theta_b[blocked.codes, column], 0.0)
        columns = comp.index[subset, k]
        part = problem.D[:, columns] @ theta_d[columns]
        return np.asarray(part).ravel() if sp.issparse(problem.D) else part

    def __call__(self, theta_d, theta_b, covs, aux, f, rng):
        out = self._moves(theta_d, theta_b, covs, aux, f, rng)
        if self.fused:
            return self._fused_moves(*out[:3], aux, out[3], rng)
        out = self.global_move(*out[:3], aux, out[3], rng)
        out = self.coordinate_moves(*out[:3], aux, out[3], rng)
        return self.direction_moves(*out[:3], aux, out[3], rng)

    def _fused_moves(self, theta_d, theta_b, covs, aux, f, rng):
        """:meth:`global_move`, :meth:`coordinate_moves` and :meth:`direction_moves` in one compiled call
        (:func:`bayesvm.engines.linear.compiled_rows.global_and_fixed_moves`) on the random numbers they draw, in their
        order: the same moves to rounding (tested).  ``_moves`` returned new arrays, which are updated in place."""
        exponent, quadratic = float(self.free.sum()), 0.0
        for comp, cov, a in zip(self.problem.components, covs, aux):
            power, (q2, _, _), _ = _prior_terms(comp, cov, 0, a)
            exponent += 2.0 - power
            quadratic += q2
        global_exponential, global_uniforms = rng.exponential(), rng.random(SLICE_STEPS + 1)
        exponentials, uniforms = slice_numbers(rng, len(self.columns))
        lines = self.directions.shape[1]
        direction_exponentials = rng.exponential(size=lines) if lines else np.zeros(0)
        variances = np.array([float(cov[0, 0]) for cov in covs])
        moves = compiled_rows.FixedMoveArrays(
            self.ones, self.free_columns, self.free_precision, float(self.free.sum()), self.global_width,
            global_uniforms, self.base_precision, self.penalty_of_column, self.sweep_columns, self.sweep_ptr,
            self.sweep_rows, self.sweep_x, self.sweep_slope, self.sweep_widths, exponentials, uniforms,
            self.directions, self.direction_x, self.direction_slope, self.direction_scales, direction_exponentials,
        )  # fmt: skip
        compiled_rows.global_and_fixed_moves(
            theta_d, theta_b, f, self.problem.y, exponent, quadratic, global_exponential, variances, moves, SLICE_STEPS
        )
        return theta_d, theta_b, [np.array([[v]]) for v in variances], f

    def _precision(self, covs) -> np.ndarray:
        """Each ``theta_d`` coefficient's prior precision: fixed, or the learned penalty's ``1 / sigma_u^2``."""
        precision = self.problem.fixed_precision.astype(float).copy()
        for comp, cov in zip(self.problem.components, covs):
            if comp.source < 0:  # the learned penalty: one variance over single-column "levels" (the slopes)
                precision[comp.index.ravel()] += 1.0 / cov[0, 0]
        return precision

    def direction_moves(self, theta_d, theta_b, covs, aux, f, rng):
        """The fixed-effect coefficients along each fixed direction, ``w`` integrated out, by over-relaxed slice
        sampling (module docstring; :func:`bayesvm.engines.linear.compiled_rows.overrelaxed_line`)."""
        if self.directions.shape[1] == 0:
            return theta_d, theta_b, covs, f
        theta_d, f = theta_d.copy(), f.copy()
        columns, lam = self.sweep_columns, self._precision(covs)[self.sweep_columns]
        margin = self.problem.y * f
        exponentials = rng.exponential(size=self.directions.shape[1])
        if self.compiled:  # one compiled loop on the same random numbers, in the same order
            compiled_rows.direction_sweep(
                theta_d, f, margin, columns, self.directions, self.direction_x, self.direction_slope,
                self.direction_scales, lam, exponentials, SLICE_STEPS,
            )  # fmt: skip
            return theta_d, theta_b, covs, f
        for k in range(self.directions.shape[1]):
            v, x, slope = self.directions[:, k], self.direction_x[k], self.direction_slope[k]
            scale, exponential = float(self.direction_scales[k]), float(exponentials[k])
            step, half_width = compiled_rows.overrelaxed_line(
                1.0 - margin, slope, -0.5 * float(v @ (lam * v)), -float(v @ (lam * theta_d[columns])),
                exponential, compiled_rows.line_start(scale, exponential), SLICE_STEPS,
            )  # fmt: skip
            self.direction_scales[k] = compiled_rows.line_scale(scale, half_width, exponential)
            theta_d[columns] += step * v
            f += step * x
            margin += step * slope
        return theta_d, theta_b, covs, f

    def coordinate_moves(self, theta_d, theta_b, covs, aux, f, rng):
        """Each fixed-effect coefficient given the others, ``w`` integrated out, by slice sampling."""
        theta_d, f = theta_d.copy(), f.copy()
        precision = self._precision(covs)
        margin = self.problem.y * f
        exponentials, uniforms = slice_numbers(rng, len(self.columns))
        if self.compiled:  # one compiled loop, on the random numbers the loop below takes, in its order
            compiled_rows.coordinate_sweep(
                theta_d, f, margin, self.sweep_columns, self.sweep_ptr, self.sweep_rows, self.sweep_x,
                self.sweep_slope, self.sweep_widths, precision[self.sweep_columns], exponentials, uniforms,
                SLICE_STEPS,
            )  # fmt: skip
            return theta_d, theta_b, covs, f
        for t, (j, rows, x, slope, width) in enumerate(self.columns):
            old = float(theta_d[j])
            base = 1.0 - margin[rows] + old * slope
            c = (-0.5 * precision[j], 0.0, 0.0, 0.0)
            new = hinge_slice_drawn(base, slope, c, False, old, width, exponentials[t], uniforms[t], self.compiled)
            f[rows] += (new - old) * x
            margin[rows] += (new - old) * slope
            theta_d[j] = new
        return theta_d, theta_b, covs, f

    def global_move(self, theta_d, theta_b, covs, aux, f, rng):
        """Every coefficient times ``d`` and every covariance times ``d^2``, ``w`` integrated out (module docstring)."""
        problem = self.problem
        margin = problem.y * f
        free = theta_d[self.free]
        fixed_sq = float(free @ (self.free_precision * free))
        exponent, quadratic = float(free.size), 0.0
        for comp, cov, a in zip(problem.components, covs, aux):
            k = comp.k
            if comp.is_wishart:
                exponent += k * (k + 1) - (comp.prior_df + k + 1.0) * k
                quadratic += float(np.sum(comp.prior_scale * np.linalg.inv(cov)))
            else:
                power, (q2, _, _), _ = _prior_terms(comp, cov, 0, a)
                exponent += 2.0 - power
                quadratic += q2

        d = float(np.exp(hinge_slice(self.ones, margin, (-0.5 * fixed_sq, 0.0, -0.5 * quadratic, exponent), True, 0.0,
                                     self.global_width, rng, self.compiled)))  # fmt: skip
        return theta_d * d, theta_b * d, [c * d * d for c in covs], f * d

    def _blocked_intercept_move(self, c: int, theta_b, covs, aux, f, rng) -> np.ndarray:
        """:meth:`_moves` for a single-column blocked component (a random intercept: every iteration, so without
        the general path's temporaries over every row).  The rows of the rescaled levels whose ``b_i`` is 0 add a
        constant to the density, so they may stay in the sum.  Updates ``theta_b`` and ``covs`` in place; returns
        the new ``f``."""
        comp, subset = self.problem.components[c], self.subsets[c]
        rows, codes, values, y = self.blocked_rows[c]
        column = int(comp.index[0, 0])
        variance = float(covs[c][0, 0])
        power, prior, _ = _prior_terms(comp, covs[c], 0, aux[c])
        if self.compiled:  # one compiled loop on the numbers hinge_slice draws, in its order
            exponential, uniforms = rng.exponential(), rng.random(SLICE_STEPS + 1)
            f = f.copy()
            d = compiled_rows.intercept_rescale(
                theta_b, column, rows, codes, values[:, column], y, f, subset, variance, power, prior[0], prior[1],
                exponential, uniforms, SLICE_STEPS, SLICE_WIDTH,
            )  # fmt: skip
            covs[c] = covs[c] * (d * d)
            return f
        b = values[:, column] * theta_b[codes, column]
        if not np.any(b):  # the coordinate is zero everywhere: nothing to rescale
            return f
        margin, slope = 1.0 - y * (f[rows] - b), y * b
        kept = theta_b[~subset, column]
        quadratic = float(kept @ kept) / variance + prior[0]
        exponent = 2.0 - kept.size - power  # as _moves with k = 1
        t = hinge_slice(margin, slope, (0.0, -0.5 * prior[1], -0.5 * quadratic, exponent), True, 0.0, SLICE_WIDTH, rng,
                        self.compiled)  # fmt: skip
        d = float(np.exp(t))
        theta_b[subset, column] *= d
        covs[c] = covs[c] * (d * d)
        f = f.copy()
        f[rows] += (d - 1.0) * b
        return f

    def _column_term_move(self, c: int, theta_d, covs, aux, f, rng) -> np.ndarray:
        """:meth:`_moves` for a single-column component in ``theta_d`` (the learned penalty: its slopes rescaled with
        its variance), on the rescaled columns' dense block, over every row: a row with ``b_i = 0`` adds a constant
        to the density.  Updates ``theta_d`` and ``covs`` in place; returns the new ``f``."""
        comp = self.problem.components[c]
        moved, block, kept_columns = self.column_blocks[c]
        b = block @ theta_d[moved]
        if not np.any(b):  # the coordinate is zero everywhere: nothing to rescale
            return f
        y = self.problem.y
        margin, slope = 1.0 - y * (f - b), y * b
        kept = theta_d[kept_columns]
        power, prior, _ = _prior_terms(comp, covs[c], 0, aux[c])
        quadratic = float(kept @ kept) / float(covs[c][0, 0]) + prior[0]
        exponent = 2.0 - kept.size - power  # as the general loop with k = 1
        t = hinge_slice(margin, slope, (0.0, -0.5 * prior[1], -0.5 * quadratic, exponent), True, 0.0, SLICE_WIDTH, rng,
                        self.compiled)  # fmt: skip
        d = float(np.exp(t))
        theta_d[moved] *= d
        covs[c] = covs[c] * (d * d)
        return f + (d - 1.0) * b

    def _moves(self, theta_d, theta_b, covs, aux, f, rng):
        """One move per coordinate of every component; returns ``(theta_d, theta_b, covs, f)`` (new arrays).

        ``f`` is the linear predictor at ``(theta_d, theta_b)``.  The caller must draw the augmentation weights
        given the returned coefficients before using them (module docstring).
        """
        problem = self.problem
        y = problem.y
        theta_d, theta_b, f = theta_d.copy(), theta_b.copy(), f.copy()
        covs = [c.copy() for c in covs]
        penalty_turn = self.calls % PENALTY_EVERY == 0
        self.calls += 1
        for c, comp in enumerate(problem.components):
            subset = self.subsets[c]
            if not self.movable[c] or (comp.source < 0 and not penalty_turn):
                continue
            if comp.blocked and comp.k == 1 and not comp.is_wishart and self.intercept_path:
                f = self._blocked_intercept_move(c, theta_b, covs, aux, f, rng)
                continue
            if self.column_blocks[c] is not None and self.intercept_path:
                f = self._column_term_move(c, theta_d, covs, aux, f, rng)
                continue
            for k in range(comp.k):
                b = self._contribution(c, k, theta_d, theta_b)
                rows = np.flatnonzero(b)
                if rows.size == 0:  # the coordinate is zero everywhere: nothing to rescale
                    continue
                margin, slope = 1.0 - y[rows] * (f[rows] - b[rows]), y[rows] * b[rows]
                values = component_values(comp, theta_d, theta_b)[~subset]
                # the levels that keep their values: p(u_kept | D Sigma D), n_kept log d and a quadratic in 1/d
                n_kept = values.shape[0]
                kept = _inverse_quadratic((values.T @ values) * np.linalg.inv(covs[c]), k)
                power, prior, _ = _prior_terms(comp, covs[c], k, aux[c])
                q2, q1, _ = (kept[0] + prior[0], kept[1] + prior[1], 0.0)
                exponent = comp.k + 1 - n_kept - power  # on log d: p(D Sigma D) d^(k+1) / d, times d of d = e^t

                t = hinge_slice(margin, slope, (0.0, -0.5 * q1, -0.5 * q2, exponent), True, 0.0, SLICE_WIDTH, rng,
                                self.compiled)  # fmt: skip
                d = float(np.exp(t))
                if comp.blocked:
                    level_rows = subset
                    theta_b[level_rows, comp.index[0, k]] *= d
                else:
                    theta_d[comp.index[subset, k]] *= d
                scale = np.ones(comp.k)
                scale[k] = d
                covs[c] = covs[c] * np.outer(scale, scale)
                f = f + (d - 1.0) * b
        return theta_d, theta_b, covs, f
