"""Whole Gibbs iterations in one compiled call, for a random intercept with or without the learned penalty.

Each iteration of :func:`bayesvm.engines.linear.gibbs.chain_draws` makes ``theta | w`` (Luts & Ormerod 2014, App. A,
step 1), then: the predictor; the exact level draws ``u | beta, Sigma, y`` with ``w`` integrated out
(:meth:`bayesvm.engines.linear.collapsed_variance.CollapsedVariance.level_draws`); the rescaling moves of each term
with its variance, the global rescaling and the fixed-effect coordinate and direction moves
(:class:`bayesvm.engines.linear.interweave.ScaleMoves`); the location shift of the random intercept
(:mod:`bayesvm.engines.linear.location_shift`); the row pass, ``w | theta`` with the next draw's row sums
(:func:`bayesvm.engines.linear.compiled_rows.row_pass`; step 2); and the variance draws (step 3:
:func:`bayesvm.engines.components.draw_components`).  Each is a compiled kernel, but the Python between them (about
40 small calls: random numbers, small arrays, the variance draws) cost about a third of toenail's iteration.

Where the problem is a dense design (rows that do not split) with one random intercept (a blocked factor of one
column, whose levels own their rows) and, besides it, at most the learned penalty's variance, :class:`FusedIteration`
makes them in one compiled loop (:func:`_fused_chain`: :func:`_coefficient_draw`, :func:`_fused_steps`,
:func:`_variance_draws`) over the iterations on which nothing else would run (no collapsed variance step or schedule
decision due, on one side of the end of tuning: :meth:`CollapsedVariance.quiet_steps`; at most :data:`BATCH` per call),
drawing its random numbers from the chain's own ``numpy.random.Generator`` (numba's port of its distributions: the
same numbers as numpy's calls) in the order the separate steps draw them: the same chain to rounding
(``tests/engines/linear/test_fused_iteration.py``), so the separate steps, which the samplers' exactness tests check
against quadrature, stay the definition.  On an iteration whose ``theta | w`` Python draws (the first, before any row
pass; the fallback where the compiled draw refuses a Schur complement that is not positive definite, after drawing
its normals, as the separate path's fallback does) the rest of the iteration is the same call from after that draw.
Everything else (other designs, the collapsed variance step's iterations, numba not installed) takes the separate
steps.

One difference by construction: the learned penalty's rescaling draws its random numbers even where every slope is
exactly 0 (the separate move then draws none), an event of probability 0 for slopes drawn from a density.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...linalg.row_sums import RowStatistics
from .. import variance_prior
from ..hinge_levels import compiled_level_draws_in_place
from ..overrelax import compiled_relaxed_gamma
from . import compiled_rows
from .compiled_rows import (
    FixedMoveArrays,
    global_and_fixed_moves,
    hinge_slice,
    intercept_draw,
    intercept_rescale,
    predictor,
    row_pass,
)
from .interweave import PENALTY_EVERY, SLICE_STEPS, SLICE_WIDTH, ScaleMoves


class DesignRows(NamedTuple):
    """The rows the predictor and the row pass read: the design in the row pass's layout (``D``, ``row_ptr``,
    ``row_cols``), the labels, and the random intercept's codes and values (``column``: its column of ``theta_b``)."""

    D: np.ndarray
    row_ptr: np.ndarray
    row_cols: np.ndarray
    y: np.ndarray
    codes: np.ndarray
    values: np.ndarray
    column: int


class LevelDrawArrays(NamedTuple):
    """The exact level draws ``u | beta, Sigma, y`` (``active``: the intercept's levels have few rows): the term's values,
    its padded layout and the draws' random numbers and work arrays."""

    active: bool
    term_values: np.ndarray
    layout_y: np.ndarray
    layout_slope: np.ndarray
    layout_rows: np.ndarray
    exponentials: np.ndarray
    uniforms: np.ndarray
    rest: np.ndarray
    new_effects: np.ndarray


class RescaleArrays(NamedTuple):
    """Each component's rescaling move with its variance (``kinds[c]``: 1 the random intercept, on its rows ``rows``,
    ``codes``, ``values``, ``y`` and level ``subset``; 2 the learned penalty, its slopes ``moved`` with values ``block``,
    ``kept`` the others) and the moves' random numbers."""

    kinds: np.ndarray
    rows: np.ndarray
    codes: np.ndarray
    values: np.ndarray
    y: np.ndarray
    subset: np.ndarray
    block: np.ndarray
    moved: np.ndarray
    kept: np.ndarray
    exponentials: np.ndarray
    uniforms: np.ndarray


class LocationShift(NamedTuple):
    """The random intercept's location shift (:mod:`bayesvm.engines.linear.location_shift`): the fixed column it moves
    against (``location``, -1: none), the learned penalty's component on it (``penalty``, -1: none) or its fixed prior
    precision."""

    location: int
    penalty: int
    fixed_precision: float


class RowPassArrays(NamedTuple):
    """The row pass ``w | theta`` with the next draw's row sums (:func:`bayesvm.engines.linear.compiled_rows.row_pass`):
    its random numbers, floor on ``|1 - y f|``, class weights ``omega`` and the sums it writes."""

    normals: np.ndarray
    uniforms: np.ndarray
    floor: float
    omega: np.ndarray
    gram: np.ndarray
    product: np.ndarray
    blocks: np.ndarray
    cross: np.ndarray
    rhs_b: np.ndarray


class RowSums(NamedTuple):
    """Row sums a ``theta | w`` draw takes: ``D'WD`` and ``D'r`` and the random intercept's per-level sums."""

    gram: np.ndarray
    product: np.ndarray
    blocks: np.ndarray
    cross: np.ndarray
    rhs: np.ndarray


class VariancePriors(NamedTuple):
    """Step 3 of every component (:func:`_variance_draws`): the half-t's auxiliary values (``aux``, drawn once
    ``has_aux``), each prior's constants, the number of values each variance governs, whether its step is over-relaxed,
    the learned penalty's slopes (``slope_cols[slope_ptr[c]:slope_ptr[c + 1]]``) and the random intercept's component."""

    aux: np.ndarray
    has_aux: np.ndarray
    half_t: np.ndarray
    nu: np.ndarray
    t_scale2: np.ndarray
    inverse_t_scale2: np.ndarray
    prior_a: np.ndarray
    prior_b: np.ndarray
    n_levels: np.ndarray
    relaxed: np.ndarray
    slope_ptr: np.ndarray
    slope_cols: np.ndarray
    intercept: int


class Schedule(NamedTuple):
    """What a call of :func:`_fused_chain` makes: ``count`` iterations after ``calls`` calls of the moves (the learned
    penalty rescaled on every ``penalty_every``-th: ``turns_penalty`` then, ``turns_other`` else), step 3 over-relaxed
    by ``relaxation``; with ``drawn_first`` the first ``theta | w`` is the caller's; the slice moves' ``steps`` and
    ``width``."""

    count: int
    calls: int
    penalty_every: int
    relaxation: float
    drawn_first: bool
    turns_penalty: np.ndarray
    turns_other: np.ndarray
    steps: int
    width: float


class ChainWork(NamedTuple):
    """Work arrays of :func:`_fused_chain`: the predictor ``f``, the symmetrised Gram matrix and the standard normals
    of ``theta | w``."""

    f: np.ndarray
    symmetric_gram: np.ndarray
    eps_d: np.ndarray
    eps_b: np.ndarray


class ChainOutput(NamedTuple):
    """Per iteration (row ``i``): the coefficients, the variances after the moves and after step 3, and the log
    pseudo-likelihood."""

    theta_d: np.ndarray
    theta_b: np.ndarray
    moved: np.ndarray
    variances: np.ndarray
    loglik: np.ndarray


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


def _fused_steps(theta_d, theta_b, variances, shapes, rates, f, turns, global_exponential, shift_normal,
                 rows, levels, rescale, moves, location, latent, steps, width):  # fmt: skip
    """The steps of the module docstring, in their order, in place: the predictor ``f``; the level draws
    (``levels.active``: the intercept's levels have few rows); per component ``c`` (``rescale.kinds[c]``: 1 the random
    intercept, 2 the learned penalty, 0 none) its rescaling where ``turns[c]``; the global, coordinate and direction
    moves; the location shift (``location.location >= 0``); the row pass (``latent``).  ``variances``, ``shapes`` and ``rates``:
    each component's variance and the inverse gamma of its prior (given the half-t's auxiliary variable).  Returns the
    row pass's hinge sum."""
    kinds, column = rescale.kinds, rows.column
    predictor(rows.D, rows.row_ptr, rows.row_cols, rows.codes, rows.values, theta_d, theta_b, f)
    J = theta_b.shape[0]
    if levels.active:
        effects = np.empty(J)
        for j in range(J):
            effects[j] = theta_b[j, column]
        compiled_level_draws_in_place(levels.layout_y, f, levels.term_values, rows.codes, effects, levels.layout_slope,
                                       levels.layout_rows, variances[_intercept(kinds)], levels.exponentials,
                                       levels.uniforms, levels.rest, levels.new_effects)  # fmt: skip
        for j in range(J):
            theta_b[j, column] = levels.new_effects[j]
    for c in range(kinds.size):
        if not turns[c]:
            continue
        power = 2.0 * (shapes[c] + 1.0)
        prior_quadratic = 2.0 * rates[c] / variances[c]
        if kinds[c] == 1:
            d = intercept_rescale(theta_b, column, rescale.rows, rescale.codes, rescale.values, rescale.y, f,
                                  rescale.subset, variances[c], power, prior_quadratic, 0.0, rescale.exponentials[c],
                                  rescale.uniforms[c], steps, width)  # fmt: skip
        else:
            d = _column_rescale(theta_d, f, rows.y, rescale.block, rescale.moved, rescale.kept, variances[c], power,
                                prior_quadratic, rescale.exponentials[c], rescale.uniforms[c], steps, width)  # fmt: skip
        variances[c] = variances[c] * (d * d)
    exponent, quadratic = moves.n_free, 0.0
    for c in range(kinds.size):
        exponent += 2.0 - 2.0 * (shapes[c] + 1.0)
        quadratic += 2.0 * rates[c] / variances[c]
    global_and_fixed_moves(
        theta_d, theta_b, f, rows.y, exponent, quadratic, global_exponential, variances, moves, steps
    )
    if location.location >= 0:  # location_shift._shift_blocked_intercept
        c = _intercept(kinds)
        lam = 1.0 / variances[location.penalty] if location.penalty >= 0 else location.fixed_precision
        inverse_variance = 1.0 / variances[c]
        total = 0.0
        for j in range(J):
            total += theta_b[j, column]
        precision = lam + J * inverse_variance
        rhs = inverse_variance * total - lam * theta_d[location.location]
        delta = (rhs + np.sqrt(precision) * shift_normal) / precision
        theta_d[location.location] += delta
        for j in range(J):
            theta_b[j, column] = theta_b[j, column] - delta
    return row_pass(rows.D, rows.row_ptr, rows.row_cols, rows.y, rows.codes, rows.values, theta_d, theta_b,
                    latent.normals, latent.uniforms, latent.floor, 0, latent.omega, latent.gram, latent.product,
                    latent.blocks, latent.cross, latent.rhs_b)  # fmt: skip


def _coefficient_draw(gram, product, base_precision, penalty_of_column, variances, intercept, blocks, cross, rhs_b,
                      eps_d, eps_b, theta_d, theta_b):  # fmt: skip
    """``theta | w`` (:func:`bayesvm.engines.linear.compiled_rows.intercept_draw`) with the prior precisions built
    here as ``components.prior_precisions`` builds them: ``base_precision`` on the diagonal plus ``1 / variances[c]`` on the
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


#: :meth:`FusedIteration.run`: at most this many iterations per compiled call (the iterations it runs ahead of the
#: caller are kept, not wasted, except after the chain's last draw).
BATCH = 64


def _variance_draws(rng, theta_d, theta_b, column, variances, priors, kinds, relaxation):
    """Step 3 of every component ``c`` (``kinds[c]``: 1 the random intercept, whose values are ``theta_b[:, column]``;
    2 the learned penalty, whose slopes are ``theta_d[slope_cols[slope_ptr[c]:slope_ptr[c + 1]]]``; the rest of
    ``priors``, a :class:`VariancePriors`), in place, as
    :func:`bayesvm.engines.variance_prior.draw` makes it: ``sigma^2 | u ~ IG(A + J / 2, B + sum u^2 / 2)``, with the
    half-t's ``IG(nu / 2, nu / a)`` for its prior given ``a`` (``s^2`` before ``a``'s first draw, ``has_aux`` False);
    with ``relaxation > 0`` and ``relaxed[c]`` (a random-effect term) the over-relaxed step of that inverse gamma
    (:func:`bayesvm.engines.overrelax.relaxed_inverse_gamma`, with its fallback to the ordinary draw); then the half-t's
    ``a | sigma^2 ~ IG((nu + 1) / 2, nu / sigma^2 + 1 / s^2)``."""
    aux, has_aux, half_t, nu = priors.aux, priors.has_aux, priors.half_t, priors.nu
    slope_ptr, slope_cols, n_levels = priors.slope_ptr, priors.slope_cols, priors.n_levels
    for c in range(kinds.size):
        sum_squares = 0.0
        if kinds[c] == 1:
            for j in range(theta_b.shape[0]):
                sum_squares += theta_b[j, column] * theta_b[j, column]
        else:
            for t in range(slope_ptr[c], slope_ptr[c + 1]):
                sum_squares += theta_d[slope_cols[t]] * theta_d[slope_cols[t]]
        if half_t[c]:
            a = aux[c] if has_aux[c] else priors.t_scale2[c]
            shape, rate = 0.5 * nu[c], nu[c] / a
        else:
            shape, rate = priors.prior_a[c], priors.prior_b[c]
        shape, scale = shape + 0.5 * n_levels[c], rate + 0.5 * sum_squares
        if relaxation > 0.0 and priors.relaxed[c]:
            normal = rng.standard_normal()
            gamma = compiled_relaxed_gamma(shape, scale / variances[c], relaxation, normal)
            if not (gamma > 0.0 and math.isfinite(gamma)):
                gamma = rng.gamma(shape)
            variances[c] = scale / gamma
        else:
            variances[c] = scale / rng.gamma(shape)
        if half_t[c]:
            aux[c] = (nu[c] / variances[c] + priors.inverse_t_scale2[c]) / rng.gamma(0.5 * (nu[c] + 1.0))
            has_aux[c] = True


def _fill_normals(rng, out):
    for i in range(out.size):
        out[i] = rng.standard_normal()


def _fill_uniforms(rng, out):
    for i in range(out.size):
        out[i] = rng.random()


def _fill_exponentials(rng, out):
    for i in range(out.size):
        out[i] = rng.exponential()


def _fused_chain(rng, schedule, first, theta_d, theta_b, variances, priors, work, rows, levels, rescale, moves,
                 location, latent, out):  # fmt: skip
    """``schedule.count`` whole iterations (module docstring) from ``theta | w``, in place, on ``rng``'s numbers in the
    order of the separate steps (``theta | w``, the level draws, the moves, the row pass, the variance draws):
    iteration ``i``'s coefficients, variances after the moves (for the collapsed step's tuning record), variances after
    step 3 and log pseudo-likelihood go to row ``i`` of ``out`` (a :class:`ChainOutput`).  The first ``theta | w`` takes
    the caller's row sums (``first``, a :class:`RowSums`), later ones the row pass's (its Gram matrix symmetrised);
    with ``schedule.drawn_first`` the first iteration starts after its ``theta | w``, which the caller drew into
    ``theta_d`` and ``theta_b``.  The other bundles are the steps' arrays (:func:`_fused_steps`, :func:`_variance_draws`).
    Returns ``(iterations completed, refused)``: ``refused`` where iteration ``completed``'s compiled ``theta | w``
    refused after drawing its normals."""
    J = theta_b.shape[0]
    eps_d, eps_b, f = work.eps_d, work.eps_b, work.f
    kinds = rescale.kinds
    for it in range(schedule.count):
        if (
            it == 0 and schedule.drawn_first
        ):  # theta | w drawn by the caller (its fallback, or a first draw without row sums)
            drawn = True
        elif it == 0:
            _fill_normals(rng, eps_d)
            for j in range(J):
                eps_b[j, 0] = rng.standard_normal()
            drawn = coefficient_draw(first.gram, first.product, moves.base_precision, moves.penalty_of_column,
                                      variances, priors.intercept, first.blocks, first.cross, first.rhs, eps_d, eps_b,
                                      theta_d, theta_b)  # fmt: skip
        else:
            _fill_normals(rng, eps_d)
            for j in range(J):
                eps_b[j, 0] = rng.standard_normal()
            gram, symmetric_gram = latent.gram, work.symmetric_gram
            q = gram.shape[0]
            for a in range(q):
                for b in range(q):
                    symmetric_gram[a, b] = 0.5 * (gram[a, b] + gram[b, a])
            drawn = coefficient_draw(symmetric_gram, latent.product, moves.base_precision, moves.penalty_of_column,
                                      variances, priors.intercept, latent.blocks, latent.cross, latent.rhs_b, eps_d,
                                      eps_b, theta_d, theta_b)  # fmt: skip
        if not drawn:
            return it, True
        # the separate steps' random numbers, in their order: the level draws (hinge_levels), the rescaling moves of
        # the components on this turn, the global, coordinate and direction moves (ScaleMoves), the location shift, the
        # row pass (LatentDraws.whole_numbers)
        if levels.active:
            for j in range(levels.exponentials.shape[0]):
                _fill_exponentials(rng, levels.exponentials[j])
            _fill_uniforms(rng, levels.uniforms)
        on_penalty_turn = (schedule.calls + it) % schedule.penalty_every == 0
        turns = schedule.turns_penalty if on_penalty_turn else schedule.turns_other
        rescale.exponentials[:] = 0.0
        rescale.uniforms[:] = 0.0
        for c in range(turns.size):
            if turns[c]:
                rescale.exponentials[c] = rng.exponential()
                _fill_uniforms(rng, rescale.uniforms[c])
        global_exponential = rng.exponential()
        _fill_uniforms(rng, moves.global_uniforms)
        _fill_exponentials(rng, moves.coordinate_exponentials)
        for t in range(moves.coordinate_uniforms.shape[0]):
            _fill_uniforms(rng, moves.coordinate_uniforms[t])
        _fill_exponentials(rng, moves.direction_exponentials)
        shift_normal = rng.standard_normal() if location.location >= 0 else 0.0
        _fill_normals(rng, latent.normals)
        _fill_uniforms(rng, latent.uniforms)
        shapes, rates = np.empty(kinds.size), np.empty(kinds.size)
        for c in range(kinds.size):  # variance_prior.conditional_inverse_gamma
            if priors.half_t[c]:
                shapes[c] = 0.5 * priors.nu[c]
                rates[c] = priors.nu[c] / (priors.aux[c] if priors.has_aux[c] else priors.t_scale2[c])
            else:
                shapes[c], rates[c] = priors.prior_a[c], priors.prior_b[c]
        hinge = fused_steps(theta_d, theta_b, variances, shapes, rates, f, turns, global_exponential, shift_normal,
                            rows, levels, rescale, moves, location, latent, schedule.steps, schedule.width)  # fmt: skip
        out.moved[it, :] = variances
        out.loglik[it] = -2.0 * hinge
        _variance_draws(rng, theta_d, theta_b, rows.column, variances, priors, kinds, schedule.relaxation)
        out.theta_d[it, :] = theta_d
        for j in range(J):
            out.theta_b[it, j] = theta_b[j, 0]
        out.variances[it, :] = variances
    return schedule.count, False


if compiled_rows.numba is not None:
    _column_rescale = compiled_rows.compile_nogil(_column_rescale)
    _intercept = compiled_rows.compile_nogil(_intercept, inline=True)
    fused_steps = compiled_rows.compile_nogil(_fused_steps)
    coefficient_draw = compiled_rows.compile_nogil(_coefficient_draw)
    _fill_normals = compiled_rows.compile_nogil(_fill_normals, inline=True)
    _fill_uniforms = compiled_rows.compile_nogil(_fill_uniforms, inline=True)
    _fill_exponentials = compiled_rows.compile_nogil(_fill_exponentials, inline=True)
    _variance_draws = compiled_rows.compile_nogil(_variance_draws)
    fused_chain = compiled_rows.compile_nogil(_fused_chain)
else:  # never called: FusedIteration.ready is False without numba
    fused_steps = coefficient_draw = fused_chain = None


@dataclass
class Batch:
    """:meth:`FusedIteration.run`'s iterations: ``completed`` of them, row ``i`` of each array iteration ``i``'s
    (coefficients ``draws_d`` and ``draws_b``, variances after the moves and after step 3, log pseudo-likelihood); ``refused``: the next
    iteration's compiled ``theta | w`` refused after drawing its normals (the caller takes the fallback).  The
    chain's state after the last completed iteration: ``theta_d``, ``theta_b``, ``covs``, ``aux``, ``stats``,
    ``omega``."""

    completed: int
    refused: bool
    draws_d: np.ndarray
    draws_b: np.ndarray
    moved: np.ndarray
    variances: np.ndarray
    loglik: np.ndarray
    theta_d: np.ndarray
    theta_b: np.ndarray
    covs: list
    aux: list
    stats: RowStatistics
    omega: np.ndarray


class FusedIteration:
    """The fused steps of one chain (module docstring), set up from the chain's own row pass (``rows``: a
    :class:`bayesvm.engines.linear.gibbs_rows.DenseRows`), moves (``mover``) and level moves (``collapsed``), whose arrays
    it uses.  ``ready`` says whether the problem has the structure the compiled call makes; :meth:`run` then makes
    the iterations on which no collapsed variance step falls, and :meth:`coefficient_draw` the ``theta | w`` of those
    on which one does; ``floor`` is the row pass's floor on ``|1 - y f|``."""

    def __init__(self, problem, rows, mover, collapsed, floor: float, enabled: bool = True):
        self.ready = enabled and _structure_fits(problem, rows, mover, collapsed)
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
        # run(): each component's prior and values, as _variance_draws takes them
        forms = [variance_prior.compiled(comp) for comp in components]  # (every one set: _structure_fits)
        self.half_t = np.array([form.half_t for form in forms])
        self.nu = np.array([form.nu for form in forms])
        self.t_scale2 = np.array([form.t_scale**2 for form in forms])
        self.inverse_t_scale2 = np.array([form.t_scale**-2 for form in forms])
        self.prior_a = np.array([form.shape for form in forms])
        self.prior_b = np.array([form.rate for form in forms])
        self.n_levels = np.array([float(comp.n_levels) for comp in components])
        self.relaxed = np.array([comp.source >= 0 for comp in components])
        slopes = [np.zeros(0, dtype=np.intp) if comp.blocked else np.asarray(comp.index, dtype=np.intp).ravel()
                  for comp in components]  # fmt: skip
        self.slope_ptr = np.concatenate([[0], np.cumsum([part.size for part in slopes])]).astype(np.intp)
        self.slope_cols = np.concatenate(slopes).astype(np.intp)

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

    def run(
        self, count: int, theta_d, theta_b, covs, aux, stats, rng, relaxation: float, drawn_first: bool = False
    ) -> Batch:
        """``count`` whole iterations from ``theta | w`` in one compiled call (module docstring): the chain's state
        ``(theta_d, theta_b, covs, aux, stats)`` before them (not changed; ``stats`` the row sums of the first
        ``theta | w``) and its generator ``rng``; ``relaxation`` the over-relaxation of step 3 (0 in tuning).  With
        ``drawn_first``, ``(theta_d, theta_b)`` is the first iteration's ``theta | w``, drawn by the caller (the
        fallback of a refused compiled draw, or the first iteration's, before any row pass), and that iteration
        starts after it."""
        mover, rows = self.mover, self.rows
        q, J = self.problem.D.shape[1], self.problem.blocked.n_levels
        nc = self.kinds.size
        K = self.level_shape[1]
        level_exponentials = np.empty((J, K + 1) if self.level_draws else (0, 0))
        level_uniforms = np.empty(J if self.level_draws else 0)
        move_exponentials, move_uniforms = np.zeros(nc), np.zeros((nc, SLICE_STEPS + 1))
        n_columns, lines, n = len(mover.columns), mover.directions.shape[1], self.problem.y.size
        theta_d, theta_b = np.array(theta_d, dtype=float), np.ascontiguousarray(theta_b, dtype=float)
        variances = np.array([float(cov[0, 0]) for cov in covs])
        has_aux = np.array([a is not None for a in aux])
        aux_values = np.array([float(a) if a is not None else 0.0 for a in aux])
        out_theta_d, out_theta_b = np.empty((count, q)), np.empty((count, J))
        out_moved, out_variances, out_loglik = np.empty((count, nc)), np.empty((count, nc)), np.empty(count)
        gram, product = rows.parts[0]
        levels = rows.levels
        if drawn_first:  # (no first theta | w to draw: the row pass's arrays stand in for its row sums)
            first = (gram, product, levels.blocks, levels.cross, levels.rhs)
        else:
            first = tuple(np.ascontiguousarray(part) for part in
                          (stats.gram, stats.product, stats.levels.blocks, stats.levels.cross, stats.levels.rhs))  # fmt: skip
        block, moved, kept = self.penalty_block
        rescale_rows, rescale_codes, rescale_values, rescale_y = self.rescale
        schedule = Schedule(count, mover.calls, PENALTY_EVERY, relaxation, drawn_first, self.turns[True],
                            self.turns[False], SLICE_STEPS, SLICE_WIDTH)  # fmt: skip
        priors = VariancePriors(aux_values, has_aux, self.half_t, self.nu, self.t_scale2, self.inverse_t_scale2,
                                self.prior_a, self.prior_b, self.n_levels, self.relaxed, self.slope_ptr,
                                self.slope_cols, self.intercept)  # fmt: skip
        work = ChainWork(self.f, np.empty((q, q)), np.empty(q), np.empty((J, 1)))
        design = DesignRows(rows.D, rows.row_ptr, rows.row_cols, rows.y, rows.codes, rows.values, self.column)
        level_arrays = LevelDrawArrays(self.level_draws, self.term.values, *self.layout, level_exponentials,
                                       level_uniforms, self.rest, self.new_effects)  # fmt: skip
        rescale = RescaleArrays(self.kinds, rescale_rows, rescale_codes, rescale_values, rescale_y, self.subset, block,
                                moved, kept, move_exponentials, move_uniforms)  # fmt: skip
        moves = FixedMoveArrays(
            mover.ones, mover.free_columns, mover.free_precision, float(mover.free.sum()), mover.global_width,
            np.empty(SLICE_STEPS + 1), mover.base_precision, mover.penalty_of_column, mover.sweep_columns,
            mover.sweep_ptr, mover.sweep_rows, mover.sweep_x, mover.sweep_slope, mover.sweep_widths,
            np.empty(n_columns), np.empty((n_columns, SLICE_STEPS + 1)), mover.directions, mover.direction_x,
            mover.direction_slope, mover.direction_scales, np.empty(lines),
        )  # fmt: skip
        location = LocationShift(self.location, self.location_penalty, self.location_precision)
        latent = RowPassArrays(np.empty(n), np.empty(n), self.floor, rows.omega, gram, product, levels.blocks,
                               levels.cross, levels.rhs)  # fmt: skip
        out = ChainOutput(out_theta_d, out_theta_b, out_moved, out_variances, out_loglik)
        completed, refused = fused_chain(rng, schedule, RowSums(*first), theta_d, theta_b, variances, priors, work,
                                         design, level_arrays, rescale, moves, location, latent, out)  # fmt: skip
        mover.calls += completed
        if completed:
            covs = [np.array([[v]]) for v in out_variances[completed - 1]]
            aux = [float(a) if has else None for a, has in zip(aux_values, has_aux)]
            stats = RowStatistics(0.5 * (gram + gram.T), product, levels=levels)
        return Batch(completed, bool(refused), out_theta_d, out_theta_b, out_moved, out_variances, out_loglik,
                     theta_d, theta_b, covs, aux, stats, rows.omega)  # fmt: skip


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
    if any(variance_prior.compiled(comp) is None for comp in components):  # (a law without a compiled form)
        return False
    if len(collapsed.terms) != 1 or collapsed.terms[0].c != intercepts[0] or collapsed.terms[0].rows is not None:
        return False
    if collapsed.nested or len(collapsed.shifts) > 1:
        return False
    if collapsed.shifts and (collapsed.shifts[0].c != intercepts[0] or collapsed.shifts[0].locations.size != 1):
        return False
    return True
