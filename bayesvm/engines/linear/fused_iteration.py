"""The middle of a Gibbs iteration in one compiled call, for a random intercept with or without the learned penalty.

Between ``theta | w`` and the variance draws, each iteration of :func:`bayesvm.engines.linear.gibbs.chain_draws`
makes: the predictor; the exact level draws ``u | beta, Sigma, y`` with ``w`` integrated out
(:meth:`bayesvm.engines.linear.collapsed_variance.CollapsedVariance.level_draws`); the rescaling moves of each term
with its variance, the global rescaling and the fixed-effect coordinate and direction moves
(:class:`bayesvm.engines.linear.interweave.ScaleMoves`); the location shift of the random intercept
(:mod:`bayesvm.engines.linear.location_shift`); and the row pass, ``w | theta`` with the next draw's row sums
(:func:`bayesvm.engines.linear.compiled_rows.row_pass`).  Each is a compiled kernel, but the Python between them (a
dozen calls, copies and small numpy operations) cost about a seventh of toenail's iteration.

Where the problem is a dense design (rows that do not split) with one random intercept (a blocked factor of one
column, whose levels own their rows) and, besides it, at most the learned penalty's variance, and where no collapsed
variance step falls on the iteration (:meth:`CollapsedVariance.due`), :class:`FusedIteration` makes all of these
steps in one compiled call (:func:`_fused_steps`), on the random numbers the separate steps draw, in their order: the
same chain to rounding (``tests/engines/linear/test_fused_iteration.py``), so the separate steps, which the samplers'
exactness tests check against quadrature, stay the definition.  Everything else (other designs, the collapsed
variance step's iterations, numba not installed) takes the separate steps.

One difference by construction: the learned penalty's rescaling draws its random numbers even where every slope is
exactly 0 (the separate move then draws none), an event of probability 0 for slopes drawn from a density.
"""

from __future__ import annotations

import numpy as np

from ...linalg.dense import RowStatistics
from ..hinge_levels import compiled_level_draws_in_place
from ..variance_prior import conditional_inverse_gamma
from . import compiled_rows
from .compiled_rows import (
    global_and_fixed_moves,
    hinge_slice,
    intercept_draw,
    intercept_rescale,
    predictor,
    row_pass,
)
from .interweave import PENALTY_EVERY, SLICE_STEPS, SLICE_WIDTH, ScaleMoves, slice_numbers


def _column_rescale(theta_d, f, y, block, moved, kept, variance, power, prior_quadratic, exponential, uniforms,
                    steps, width):  # fmt: skip
    """:meth:`bayesvm.engines.linear.interweave.ScaleMoves._column_term_move` (the learned penalty's slopes, columns
    ``moved`` of ``theta_d`` with values ``block``, rescaled with its variance; ``kept`` its other slopes) on its
    random numbers; updates ``theta_d`` and ``f`` in place and returns ``d`` (1 where every ``b_i`` is 0)."""
    n = f.size
    b = np.zeros(n)
    for t in range(moved.size):
        value = theta_d[moved[t]]
        for i in range(n):
            b[i] += block[i, t] * value
    moving = False
    for i in range(n):
        moving = moving or b[i] != 0.0
    if not moving:
        return 1.0
    margin, slope = np.empty(n), np.empty(n)
    for i in range(n):
        margin[i] = 1.0 - y[i] * (f[i] - b[i])
        slope[i] = y[i] * b[i]
    kept_squares = 0.0
    for t in range(kept.size):
        kept_squares += theta_d[kept[t]] * theta_d[kept[t]]
    c = np.zeros(4)
    c[1] = -0.0  # (-prior_linear / 2: none for a single variance)
    c[2] = -0.5 * (kept_squares / variance + prior_quadratic)
    c[3] = 2.0 - kept.size - power
    d = np.exp(hinge_slice(margin, slope, c, True, 0.0, width, exponential, uniforms, steps))
    for t in range(moved.size):
        theta_d[moved[t]] *= d
    for i in range(n):
        f[i] = f[i] + (d - 1.0) * b[i]
    return d


def _fused_steps(
    theta_d, theta_b, variances, shapes, rates, f,
    D, row_ptr, row_cols, y, codes, values, column,
    level_draws, term_values, layout_y, layout_slope, layout_rows, level_exponentials, level_uniforms, rest,
    new_effects,
    kinds, turns, rescale_rows, rescale_codes, rescale_values, rescale_y, subset, block, moved, kept,
    move_exponentials, move_uniforms,
    ones, free, free_precision, n_free, global_width, global_exponential, global_uniforms, base_precision,
    penalty_of_column, columns, col_ptr, row_idx, x_values, slope_values, widths, coordinate_exponentials,
    coordinate_uniforms, directions, direction_x, direction_slope, scales, direction_exponentials,
    location, location_penalty, fixed_location_precision, shift_normal,
    normals, uniforms, floor, omega, gram, product, blocks, cross, rhs_b,
    steps, width,
):  # fmt: skip
    """The steps of the module docstring, in their order, in place: the predictor ``f``; the level draws
    (``level_draws``: the intercept's levels have few rows); per component ``c`` (``kinds[c]``: 1 the random
    intercept, 2 the learned penalty, 0 none) its rescaling where ``turns[c]``; the global, coordinate and direction
    moves; the location shift (``location >= 0``); the row pass.  ``variances``, ``shapes`` and ``rates``: each
    component's variance and the inverse gamma of its prior (given the half-t's auxiliary variable).  Returns the
    row pass's hinge sum."""
    predictor(D, row_ptr, row_cols, codes, values, theta_d, theta_b, f)
    J = theta_b.shape[0]
    if level_draws:
        effects = np.empty(J)
        for j in range(J):
            effects[j] = theta_b[j, column]
        compiled_level_draws_in_place(layout_y, f, term_values, codes, effects, layout_slope, layout_rows,
                                       variances[_intercept(kinds)],
                                       level_exponentials, level_uniforms, rest, new_effects)  # fmt: skip
        for j in range(J):
            theta_b[j, column] = new_effects[j]
    for c in range(kinds.size):
        if not turns[c]:
            continue
        power = 2.0 * (shapes[c] + 1.0)
        prior_quadratic = 2.0 * rates[c] / variances[c]
        if kinds[c] == 1:
            d = intercept_rescale(theta_b, column, rescale_rows, rescale_codes, rescale_values, rescale_y, f, subset,
                                  variances[c], power, prior_quadratic, 0.0, move_exponentials[c], move_uniforms[c],
                                  steps, width)  # fmt: skip
        else:
            d = _column_rescale(theta_d, f, y, block, moved, kept, variances[c], power, prior_quadratic,
                                move_exponentials[c], move_uniforms[c], steps, width)  # fmt: skip
        variances[c] = variances[c] * (d * d)
    exponent, quadratic = n_free, 0.0
    for c in range(kinds.size):
        exponent += 2.0 - 2.0 * (shapes[c] + 1.0)
        quadratic += 2.0 * rates[c] / variances[c]
    global_and_fixed_moves(
        theta_d, theta_b, f, y, ones, free, free_precision, exponent, quadratic, global_width, global_exponential,
        global_uniforms, variances, base_precision, penalty_of_column, columns, col_ptr, row_idx, x_values,
        slope_values, widths, coordinate_exponentials, coordinate_uniforms, directions, direction_x, direction_slope,
        scales, direction_exponentials, steps,
    )  # fmt: skip
    if location >= 0:  # location_shift._shift_blocked_intercept
        c = _intercept(kinds)
        lam = 1.0 / variances[location_penalty] if location_penalty >= 0 else fixed_location_precision
        inverse_variance = 1.0 / variances[c]
        total = 0.0
        for j in range(J):
            total += theta_b[j, column]
        precision = lam + J * inverse_variance
        rhs = inverse_variance * total - lam * theta_d[location]
        delta = (rhs + np.sqrt(precision) * shift_normal) / precision
        theta_d[location] += delta
        for j in range(J):
            theta_b[j, column] = theta_b[j, column] - delta
    return row_pass(D, row_ptr, row_cols, y, codes, values, theta_d, theta_b, normals, uniforms, floor, 0, omega, gram,
                    product, blocks, cross, rhs_b)  # fmt: skip


def _coefficient_draw(gram, product, base_precision, penalty_of_column, variances, intercept, blocks, cross, rhs_b,
                      eps_d, eps_b, theta_d, theta_b):  # fmt: skip
    """``theta | w`` (:func:`bayesvm.engines.linear.compiled_rows.intercept_draw`) with the prior precisions built
    here as ``vb._prior_precisions`` builds them: ``base_precision`` on the diagonal plus ``1 / variances[c]`` on the
    columns of the learned penalty ``c``, and ``1 / variances[intercept]`` for each level; returns False (nothing
    filled) where the Schur complement is not positive definite."""
    q = gram.shape[0]
    prior_dd = np.zeros((q, q))
    for j in range(q):
        prior_dd[j, j] = base_precision[j]
        if penalty_of_column[j] >= 0:
            prior_dd[j, j] += 1.0 / variances[penalty_of_column[j]]
    return intercept_draw(gram, product, prior_dd, blocks, cross, rhs_b, 1.0 / variances[intercept], eps_d, eps_b,
                          theta_d, theta_b)  # fmt: skip


def _intercept(kinds):
    """The random intercept's component."""
    for c in range(kinds.size):
        if kinds[c] == 1:
            return c
    return -1


if compiled_rows.numba is not None:
    _column_rescale = compiled_rows.compile_nogil(_column_rescale)
    _intercept = compiled_rows.compile_nogil(_intercept, inline=True)
    fused_steps = compiled_rows.compile_nogil(_fused_steps)
    coefficient_draw = compiled_rows.compile_nogil(_coefficient_draw)
else:  # never called: FusedIteration.ready is False without numba
    fused_steps = coefficient_draw = None


class FusedIteration:
    """The fused steps of one chain (module docstring), set up from the chain's own row pass (``rows``: a
    :class:`bayesvm.engines.linear.gibbs.DenseRows`), moves (``mover``) and level moves (``collapsed``), whose arrays
    it uses.  ``ready`` says whether the problem has the structure the compiled call makes; :meth:`__call__` then
    replaces the steps for an iteration on which no collapsed variance step falls; ``floor`` is the row pass's floor
    on ``|1 - y f|``."""

    def __init__(self, problem, rows, mover, collapsed, floor: float):
        self.ready = _structure_fits(problem, rows, mover, collapsed)
        if not self.ready:
            return
        self.problem, self.rows, self.mover, self.collapsed, self.floor = problem, rows, mover, collapsed, floor
        components = problem.components
        self.kinds = np.array([1 if comp.blocked else 2 for comp in components], dtype=np.int64)
        self.intercept = int(np.flatnonzero(self.kinds == 1)[0])
        self.column = int(components[self.intercept].index[0, 0])
        rescale_rows, rescale_codes, rescale_values, rescale_y = mover.blocked_rows[self.intercept]
        self.rescale = (rescale_rows, rescale_codes, np.ascontiguousarray(rescale_values[:, self.column]), rescale_y)
        self.subset = mover.subsets[self.intercept]
        penalty = [c for c, kind in enumerate(self.kinds) if kind == 2]
        if penalty and mover.column_blocks[penalty[0]] is not None:
            moved, block, kept = mover.column_blocks[penalty[0]]
            self.penalty_block = (block, moved.astype(np.intp), kept.astype(np.intp))
        else:
            self.penalty_block = (np.zeros((problem.y.size, 0)), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp))
        self.level_draws = bool(collapsed.few_rows[0])
        layout = collapsed.layouts[0]
        self.layout = (layout.y, layout.slope, layout.rows)
        self.level_shape = layout.shape
        self.term = collapsed.terms[0]
        self.location, self.location_penalty, self.location_precision = -1, -1, 0.0
        if collapsed.shifts:
            shift = collapsed.shifts[0]
            self.location = int(shift.locations[0])
            self.location_precision = float(problem.fixed_precision[self.location])
            if shift.penalty is not None and shift.penalised[0]:
                self.location_penalty = int(shift.penalty)
        J = problem.blocked.n_levels
        self.rest, self.new_effects, self.f = np.empty(problem.y.size), np.empty(J), np.empty(problem.y.size)
        # the components rescaled on the learned penalty's turn (True) and on the other calls (ScaleMoves._moves)
        self.turns = {
            turn: np.array([mover.movable[c] and (comp.source >= 0 or turn) for c, comp in enumerate(components)])
            for turn in (True, False)
        }
        self.turned = {turn: np.flatnonzero(self.turns[turn]) for turn in (True, False)}

    def coefficient_draw(self, covs, stats, rng):
        """``theta | w, Sigma`` from the compiled row pass's sums ``stats`` as
        :func:`bayesvm.engines.linear.gibbs.dense_coefficient_draw` makes it (the same standard normals), with the prior
        precisions built in the compiled call; None (the normals drawn) where the compiled draw refuses (the caller
        then takes ``dense_coefficient_draw``'s fallback)."""
        q, J = self.problem.D.shape[1], self.problem.blocked.n_levels
        eps_d, eps_b = rng.standard_normal(q), rng.standard_normal((J, 1))
        theta_d, theta_b = np.empty(q), np.empty((J, 1))
        variances = np.array([float(cov[0, 0]) for cov in covs])
        levels = stats.levels
        drawn = coefficient_draw(
            stats.gram, stats.product, self.mover.base_precision, self.mover.penalty_of_column, variances,
            self.intercept, levels.blocks, levels.cross, levels.rhs, eps_d, eps_b, theta_d, theta_b,
        )  # fmt: skip
        return (theta_d, theta_b) if drawn else None

    def __call__(self, theta_d, theta_b, covs, aux, rng):
        """The fused steps from ``theta | w``'s draw ``(theta_d, theta_b)``: returns ``(theta_d, theta_b, covs,
        log pseudo-likelihood, omega, row sums)`` as the separate steps leave them (``theta_d`` and ``theta_b`` are
        updated in place)."""
        mover, rows = self.mover, self.rows
        components = self.problem.components
        J, K = self.level_shape
        if self.level_draws:  # collapsed_variance.level_draws (hinge_levels.draw_level_effects_in_place)
            level_exponentials, level_uniforms = rng.exponential(size=(J, K + 1)), rng.random(J)
        else:
            level_exponentials, level_uniforms = np.zeros((0, 0)), np.zeros(0)
        turn = mover.calls % PENALTY_EVERY == 0  # ScaleMoves._moves: the learned penalty's turn
        mover.calls += 1
        turns = self.turns[turn]
        move_exponentials, move_uniforms = np.zeros(turns.size), np.zeros((turns.size, SLICE_STEPS + 1))
        for c in self.turned[turn]:
            move_exponentials[c], move_uniforms[c] = rng.exponential(), rng.random(SLICE_STEPS + 1)
        global_exponential, global_uniforms = rng.exponential(), rng.random(SLICE_STEPS + 1)  # ScaleMoves._fused_moves
        coordinate_exponentials, coordinate_uniforms = slice_numbers(rng, len(mover.columns))
        lines = mover.directions.shape[1]
        direction_exponentials = rng.exponential(size=lines) if lines else np.zeros(0)
        shift_normal = float(rng.standard_normal(1)[0]) if self.location >= 0 else 0.0
        normals, uniforms = rows.latent.whole_numbers()  # DenseRows._compiled_whole
        shapes_rates = [conditional_inverse_gamma(comp, a) for comp, a in zip(components, aux)]
        shapes = np.array([shape for shape, _ in shapes_rates])
        rates = np.array([rate for _, rate in shapes_rates])
        variances = np.array([float(cov[0, 0]) for cov in covs])
        gram, product = rows.parts[0]
        levels = rows.levels
        block, moved, kept = self.penalty_block
        hinge = fused_steps(
            theta_d, theta_b, variances, shapes, rates, self.f,
            rows.D, rows.row_ptr, rows.row_cols, rows.y, rows.codes, rows.values, self.column,
            self.level_draws, self.term.values, *self.layout, level_exponentials, level_uniforms, self.rest, self.new_effects,
            self.kinds, turns, *self.rescale, self.subset, block, moved, kept, move_exponentials, move_uniforms,
            mover.ones, mover.free_columns, mover.free_precision, float(mover.free.sum()), mover.global_width,
            global_exponential, global_uniforms, mover.base_precision, mover.penalty_of_column, mover.sweep_columns,
            mover.sweep_ptr, mover.sweep_rows, mover.sweep_x, mover.sweep_slope, mover.sweep_widths,
            coordinate_exponentials, coordinate_uniforms, mover.directions, mover.direction_x,
            mover.direction_slope, mover.direction_scales, direction_exponentials,
            self.location, self.location_penalty, self.location_precision, shift_normal,
            normals, uniforms, self.floor, rows.omega, gram, product, levels.blocks, levels.cross, levels.rhs,
            SLICE_STEPS, SLICE_WIDTH,
        )  # fmt: skip
        stats = RowStatistics(0.5 * (gram + gram.T), product, levels=levels)
        return theta_d, theta_b, [np.array([[v]]) for v in variances], -2.0 * float(hinge), rows.omega, stats


def _structure_fits(problem, rows, mover, collapsed) -> bool:
    """Whether a chain's problem has the structure of the module docstring: numba; the compiled row pass over every
    row; one random intercept (a blocked factor of one column whose levels own their rows), with its level moves
    and at most its location shift; at most the learned penalty's variance besides; the moves fused."""
    if not compiled_rows.available() or rows is None or not rows.compiled or rows.fused:
        return False
    if mover is None or not mover.fused or collapsed is None or not ScaleMoves.intercept_path:
        return False
    blocked = problem.blocked
    if blocked is None or blocked.K != 1 or not np.all(blocked.codes >= 0):
        return False
    components = problem.components
    intercepts = [c for c, comp in enumerate(components) if comp.blocked]
    others = [comp for comp in components if not comp.blocked]
    if len(intercepts) != 1 or any(comp.source >= 0 or comp.k != 1 or comp.is_wishart for comp in others):
        return False
    if len(others) > 1 or components[intercepts[0]].k != 1:
        return False
    if len(collapsed.terms) != 1 or collapsed.terms[0].c != intercepts[0] or collapsed.terms[0].rows is not None:
        return False
    if collapsed.nested or len(collapsed.shifts) > 1:
        return False
    if collapsed.shifts and (collapsed.shifts[0].c != intercepts[0] or collapsed.shifts[0].locations.size != 1):
        return False
    return True
