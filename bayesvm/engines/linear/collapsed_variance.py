"""Moves of a random intercept (or of one uncorrelated random slope) with the augmentation weights integrated out:
its variance drawn with its random effects integrated out too, and a shift between it and its fixed effect.

Why: where most levels have one class and a few rows the pseudo-posterior of ``sigma`` can have a mode near 0 and a
smaller one away from it.  The paper's step ``sigma^2 | u`` (Luts & Ormerod 2014, Appendix A, step 3) cannot leave
either (at ``sigma ~ 0`` every ``u_j`` is tied to ``sigma`` and ``sigma`` to the ``u_j``), the rescaling moves of
:mod:`bayesvm.engines.linear.interweave` move them together only along a ray, and given the augmentation weights
``w`` the ``u_j`` are nearly fixed (a row on the margin has a large weight).  Integrating out ``w`` and ``u`` frees
``sigma``.

**Collapsed variance** (every :data:`COLLAPSED_EVERY` iterations).  With ``w`` integrated out, each level's hinge
pseudo-likelihood integrates over ``u_j ~ N(0, s)`` (``s = sigma^2``) in closed form, ``I_j(s)``, given the rest of
the predictor (:mod:`bayesvm.engines.hinge_levels`):

    log p(s | rest, y) = log p(s) + sum_j log I_j(s) + const.

``t = log s`` is updated from this density (its Jacobian ``+ t``) by slice sampling (Neal 2003), then by
:data:`JUMPS` random-walk Metropolis proposals ``t' = t + JUMP_SD * N(0, 1)`` (symmetric, accepted with probability
``min(1, p(t') / p(t))``), which cross a valley between two modes that the slice's bracket stops at; then each
``u_j`` is drawn from its exact conditional given ``s`` (:func:`bayesvm.engines.hinge_levels.draw_levels`).  The
updates of ``t`` leave ``p(s | rest, y)`` invariant and ``u`` is then drawn from ``p(u | s, rest, y)``, so the pair is
an exact update of the block ``(s, u)`` of the pseudo-posterior ``pi(theta, Sigma | y)``; as for the rescaling moves,
the sampler draws ``w | theta`` afresh before anything uses it (a partially collapsed step: van Dyk & Park 2008).
For the half-t prior ``p(s)`` is its marginal density, the auxiliary variable ``a`` of ``s | a ~ IG(nu / 2, nu / a)``
integrated out too (:func:`bayesvm.engines.variance_prior.log_density_of_log_variance`), and ``a`` is drawn afresh
given the new ``s`` (:func:`bayesvm.engines.variance_prior.draw_auxiliary`): given ``a``, the factor
``exp(-nu / (a s))`` of one mode's ``a`` weighs heavily against the other mode's ``s``.

Where the term has a location column (below), its coefficient ``beta`` joins the block: the level's effects then
have prior mean ``delta = beta' - beta`` in the integrals (:meth:`bayesvm.engines.hinge_levels.Pieces.shifted`), and
``delta | t`` (a normal prior times the ``I_j``) gets one slice update before the jumps on ``t`` and one after (moved
only given ``u``, ``beta`` is pinned by the hinge's kinks when ``sigma`` is small).  A composition of kernels that
each keep the target keeps it, so running the step on a fixed schedule is exact: for terms with few rows per level
every eighth iteration of the first quarter of tuning, and after it every fourth iteration for those whose variance
the tuning draws show weakly identified; for terms with many rows per level, from half-way through tuning only where
the draws of the variance stick (its random effects pinned by rows on the margin) (:class:`CollapsedVariance`).

**Exact level draws** (every iteration, :meth:`CollapsedVariance.level_draws`; the samplers make them right after the
draw of ``theta | w``, before every other move), for every eligible term with few rows per level (:data:`FEW_ROWS`):
``u | beta, Sigma, y`` with ``w`` integrated out, each level's effect from its exact conditional given ``s`` and the
rest of the predictor (the mixture of truncated normals above;
:func:`bayesvm.engines.hinge_levels.draw_level_effects`).  Given ``w`` an informative level's ``u_j`` is held near its
last value by the weights of its rows at the margin, and the fixed effects and ``sigma`` that move with it; drawn
without ``w`` it moves as far as the data allow.  It is a Gibbs step of the block ``u`` of ``pi(theta, Sigma | y)``,
so it keeps the target.  A level of many rows is pinned by its data, not by ``w``, so such terms keep the joint draw
alone.

**Location shift** (every iteration), for every random-effect term, correlated ones too: the fixed effects that
carry a term's mean move against its effects, ``f`` unchanged (:mod:`bayesvm.engines.linear.location_shift`); and
for a random intercept nested in another, both variances with the outer effects integrated out given the totals,
then the outer effects (:mod:`bayesvm.engines.linear.nested_intercepts`).

The collapsed step applies to a single-column term whose levels each own their rows: each row has at most one nonzero
among the term's columns, so the levels integrate out one at a time.  Correlated terms (inverse Wishart) and the
learned penalty keep the conditional draw ``Sigma | u``.  Checked against quadrature, step by step and as part of the
whole sampler (``tests/engines/linear/test_collapsed_variance.py``); the mixing it buys is measured by
``benchmarks/gibbs_mixing.py``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import variance_prior
from ..hinge_levels import LevelLayout, draw_level_effects, draw_level_effects_in_place, draw_levels, level_pieces
from .interweave import LOG_VARIANCE_RANGE, LOG_VARIANCE_WIDTH, SLICE_STEPS, slice_sample_valued
from .location_shift import shift, term_shifts
from .nested_intercepts import nested_intercepts

#: Random-walk Metropolis proposals on ``log sigma^2`` after the slice update, and their standard deviation.
JUMPS = 2
JUMP_SD = 3.0
#: The collapsed variance step runs on every ``COLLAPSED_EVERY``-th iteration (:class:`CollapsedVariance`).
COLLAPSED_EVERY = 4
#: ... and, for a term with few rows per level, on every ``TUNING_EVERY``-th iteration of the first quarter of tuning,
#: before its schedule is settled: the step costs about ten iterations, and these iterations only decide whether the
#: term needs it (the same decisions as every 4th, in ``tests/engines/linear/test_collapsed_variance.py``)
TUNING_EVERY = 8
#: The location's slice width is ``2 sqrt(sigma^2 / J + LOCATION_WIDTH_FLOOR^2)``: the spread of the mean of ``J``
#: effects, and at least the scale on which a hinge's kinks pin it when ``sigma`` is tiny
LOCATION_WIDTH_FLOOR = 0.05
#: The collapsed step is for terms whose levels have few rows (median at most this): there each ``u_j`` is barely
#: informed by its own rows, and ``sigma^2 | u`` sits in a funnel; with many rows per level the ``u_j`` are pinned by
#: their data and the step costs more than it gives
FEW_ROWS = 10
#: A term is weakly identified when its ``log sigma^2`` has a standard deviation above this over the second eighth
#: of tuning (a well identified variance stays well below it; a funnel or two modes far above)
WEAK_LOG_VARIANCE_SD = 0.3
#: A term with many rows per level gets the step all the same where the conditional draws of its ``log sigma^2``
#: stick: their lag-1 autocorrelation from the eighth to the half of tuning at least this (an AR(1) with it has one
#: effective draw in 16).  There the ``u_j`` are pinned by rows on the margin and ``sigma^2 | u`` crawls (a variance
#: near 0 on levels of many rows; ``benchmarks/gibbs_mixing.py --cbpp``)
STICKY_LAG1 = 0.88


class TermRows:
    """One eligible term: its rows (``rows``, or every row when None), their level codes and values, where its
    random effects sit (``column``: of ``theta_b`` when blocked, else the ``(J,)`` columns of ``theta_d``) and the
    fixed-effect column that shifts with it (``location``, or None)."""

    def __init__(self, c: int, rows, codes: np.ndarray, values: np.ndarray, column, n_levels: int, blocked: bool):
        self.c, self.rows, self.codes, self.values = c, rows, codes, values
        self.column, self.n_levels, self.blocked = column, n_levels, blocked
        self.location: int | None = None


def eligible_terms(problem, varying_columns: np.ndarray | None = None) -> list[TermRows]:
    """The single-column random-effect terms whose levels own their rows (module docstring), each with its location
    column (:func:`bayesvm.engines.linear.location_shift.term_shifts`; never one of ``varying_columns``)."""
    terms = []
    for c, comp in enumerate(problem.components):
        if comp.source < 0 or comp.k != 1 or comp.is_wishart:
            continue
        if comp.blocked:
            column = int(comp.index[0, 0])
            codes, values = problem.blocked.codes, problem.blocked.values[:, column]
            rows = None if np.all(codes >= 0) else np.flatnonzero(codes >= 0)
            if rows is not None:
                codes, values = codes[rows], values[rows]
            terms.append(TermRows(c, rows, codes.astype(np.intp), np.array(values, dtype=float), column,
                                  comp.n_levels, True))  # fmt: skip
            continue
        columns = comp.index[:, 0]
        block = sp.csr_matrix(problem.D[:, columns])
        block.eliminate_zeros()
        per_row = np.diff(block.indptr)
        if np.any(per_row > 1):  # a row in two levels: the levels do not integrate out one by one
            continue
        rows = np.flatnonzero(per_row == 1)
        terms.append(TermRows(c, rows, block.indices.astype(np.intp), block.data.astype(float), columns,
                              comp.n_levels, False))  # fmt: skip
    locations = {
        moved.c: int(moved.locations[0])
        for moved in term_shifts(problem, varying_columns)
        if not moved.penalised[0]  # the block's location needs a fixed normal prior (_CollapsedTarget)
    }
    for term in terms:
        term.location = locations.get(term.c)
    return terms


class CollapsedVariance:
    """The collapsed variance step, the location shift and the exact level draws of each eligible term of a problem
    (module docstring).

    The collapsed step is for terms whose levels have few rows (:data:`FEW_ROWS`).  It runs every
    :data:`TUNING_EVERY` iterations in the first quarter of tuning (``tune`` iterations); a quarter of the way
    through tuning each term's schedule is settled from the chain's own draws and fixed from then on (so the kept
    draws come from one fixed kernel): the step goes on, every :data:`COLLAPSED_EVERY` iterations, for the terms
    whose ``log sigma^2`` varied by more than
    :data:`WEAK_LOG_VARIANCE_SD` over the second eighth of tuning, where a funnel or a second mode is (a
    well-identified variance mixes well without it, and on toenail the step would cost about as much as the rest of
    an iteration).  A term with many rows per level starts without the step; half-way through tuning it is switched
    on, from then on, where the conditional draws of ``log sigma^2`` since the eighth of tuning stick
    (:data:`STICKY_LAG1`).  Without tuning every eligible term with few rows per level gets it, and no other.
    ``varying_columns`` are design columns that change between iterations (imputed ones): none of them is used as a
    location.
    """

    def __init__(self, problem, tune: int = 0, varying_columns: np.ndarray | None = None):
        self.problem = problem
        self.terms = eligible_terms(problem, varying_columns)
        self.shifts = term_shifts(problem, varying_columns)
        self.nested = nested_intercepts(problem, self.terms)
        y = problem.y
        self.layouts = [
            LevelLayout(y if term.rows is None else y[term.rows], term.values, term.codes, term.n_levels)
            for term in self.terms
        ]
        self.tune = tune
        self.few_rows = [
            float(np.median(np.bincount(term.codes, minlength=term.n_levels))) <= FEW_ROWS for term in self.terms
        ]
        self.active = [few and tune == 0 for few in self.few_rows]
        self.tuning_draws: list[list[float]] = [[] for _ in self.terms]

    def __call__(self, theta_d, theta_b, covs, aux, f, rng, step: int = 0, due: list[int] | None = None):
        """Iteration ``step``'s moves; updates ``theta_d``, ``theta_b``, ``covs``, ``aux`` and ``f`` in place (``f`` is
        the linear predictor at the current coefficients) and returns them.  ``due``: :meth:`due` of this step, where
        the caller asked it already."""
        due = self.due(step) if due is None else due
        self.record(step, covs)
        for i in due:
            self.collapsed_draw(self.terms[i], self.layouts[i], theta_d, theta_b, covs, aux, f, rng)
        for term_shift in self.shifts:
            shift(self.problem, term_shift, theta_d, theta_b, covs, rng)
        for nested in self.nested:
            nested(self.problem, theta_d, theta_b, covs, aux, rng)
        return theta_d, theta_b, covs, f

    def _decision_step(self, i: int) -> int:
        """The iteration at which term ``i``'s schedule is settled (class docstring)."""
        return self.tune // 4 if self.few_rows[i] else self.tune // 2

    def due(self, step: int) -> list[int]:
        """The terms whose collapsed step falls on iteration ``step`` (settling each term's schedule at its decision
        step, from the tuning draws recorded before it); asked before the iteration's other moves, whose result the
        schedule does not depend on."""
        terms = []
        for i in range(len(self.terms)):
            few, decide = self.few_rows[i], self._decision_step(i)
            if step == decide and self.tune > 0:
                self.active[i] = _weak(self.tuning_draws[i]) if few else _sticky(self.tuning_draws[i])
            tuning = few and step < decide
            if (tuning and step % TUNING_EVERY == 0) or (not tuning and self.active[i] and step % COLLAPSED_EVERY == 0):
                terms.append(i)
        return terms

    def quiet_steps(self, step: int, limit: int) -> int:
        """How many iterations from ``step`` on (at most ``limit``) have no collapsed step due and settle no term's
        schedule (what :meth:`due` would return empty for, without its decision): the iterations a compiled run of
        whole iterations may take (:meth:`bayesvm.engines.linear.fused_iteration.FusedIteration.run`)."""
        for offset in range(limit):
            at = step + offset
            for i in range(len(self.terms)):
                few, decide = self.few_rows[i], self._decision_step(i)
                if at == decide and self.tune > 0:
                    return offset
                tuning = few and at < decide
                if (tuning and at % TUNING_EVERY == 0) or (not tuning and self.active[i] and at % COLLAPSED_EVERY == 0):
                    return offset
        return limit

    def record(self, step: int, covs) -> None:
        """Iteration ``step``'s tuning draw of each term's ``log sigma^2`` (after the iteration's moves, before its
        collapsed step), where ``step`` is in the term's window (class docstring)."""
        for i, term in enumerate(self.terms):
            if self.tune // 8 <= step < self._decision_step(i):
                self.tuning_draws[i].append(float(np.log(covs[term.c][0, 0])))

    def level_draws(self, theta_d, theta_b, covs, f, rng) -> None:
        """:meth:`level_draw` of every term with few rows per level (module docstring, "Exact level draws"); updates
        ``theta_d``, ``theta_b`` and ``f`` in place."""
        for term, layout, few in zip(self.terms, self.layouts, self.few_rows):
            if few:
                self.level_draw(term, layout, theta_d, theta_b, covs, f, rng)

    @property
    def has_moves(self) -> bool:
        """Whether any term gets the collapsed step, the level draws (:meth:`level_draws`, which the caller makes), a
        location shift or the nested-intercept moves."""
        return bool(self.terms or self.shifts or self.nested)

    def _effects(self, term, theta_d, theta_b) -> np.ndarray:
        return theta_b[:, term.column] if term.blocked else theta_d[term.column]

    def _set_effects(self, term, theta_d, theta_b, values) -> None:
        if term.blocked:
            theta_b[:, term.column] = values
        else:
            theta_d[term.column] = values

    def level_draw(self, term, layout, theta_d, theta_b, covs, f, rng) -> None:
        """``u | beta, Sigma, y`` with ``w`` integrated out: every level's effect from its exact conditional given
        ``sigma^2`` and the rest of the predictor (module docstring, "Exact level draws"); updates ``f`` in place."""
        z, codes = term.values, term.codes
        if term.rows is None:  # a term of every row: the rest of f and its update in one call
            new = draw_level_effects_in_place(layout, f, z, codes, self._effects(term, theta_d, theta_b),
                                              float(covs[term.c][0, 0]), rng)  # fmt: skip
        else:
            rest = f[term.rows] - z * self._effects(term, theta_d, theta_b)[codes]
            new = draw_level_effects(layout, rest, float(covs[term.c][0, 0]), rng)
            f[term.rows] = rest + z * new[codes]
        self._set_effects(term, theta_d, theta_b, new)

    def collapsed_draw(self, term, layout, theta_d, theta_b, covs, aux, f, rng) -> None:
        """``(sigma^2, u) | rest`` with ``w`` integrated out, and the location's coefficient with them where the term
        has one: ``(beta, sigma^2, u) | rest`` (module docstring)."""
        comp = self.problem.components[term.c]
        rows = slice(None) if term.rows is None else term.rows
        z, codes = term.values, term.codes
        rest = f[rows] - z * self._effects(term, theta_d, theta_b)[codes]
        location = term.location
        target = _CollapsedTarget(
            level_pieces(layout, rest), variance_prior.log_density_of_log_variance(comp), term.n_levels,
            0.0 if location is None else float(theta_d[location]),
            0.0 if location is None else float(self.problem.fixed_precision[location]),
        )  # fmt: skip
        t, delta = float(np.log(covs[term.c][0, 0])), 0.0
        # (each update hands the density at its new point to the next, which would evaluate it first)
        t, density = slice_sample_valued(
            lambda x: target.log_density(x, delta),
            t,
            LOG_VARIANCE_WIDTH,
            rng.exponential(),
            rng.random(SLICE_STEPS + 1),
        )
        if location is not None:
            delta, density = target.location_slice(t, delta, rng, density)
        t, density = target.variance_jumps(t, delta, rng, density)
        if location is not None:
            delta, density = target.location_slice(t, delta, rng, density)
            theta_d[location] = target.beta + delta
        s = float(np.exp(t))
        new = draw_levels(target.part.shifted(delta), s, rng)
        f[rows] = rest + z * (delta + new[codes])
        self._set_effects(term, theta_d, theta_b, new)
        covs[term.c] = np.array([[s]])
        aux[term.c] = variance_prior.draw_auxiliary(comp, s, rng)


def _weak(log_variances: list[float]) -> bool:
    """Whether a term's ``log sigma^2`` draws spread more than :data:`WEAK_LOG_VARIANCE_SD` (or are too few to
    tell)."""
    return len(log_variances) < 2 or float(np.std(log_variances)) > WEAK_LOG_VARIANCE_SD


def _sticky(log_variances: list[float]) -> bool:
    """Whether successive ``log sigma^2`` draws correlate by at least :data:`STICKY_LAG1`; draws that never move
    stick, and fewer than 8 draws say nothing (no step)."""
    draws = np.asarray(log_variances)
    if draws.size < 8:
        return False
    centred = draws - draws.mean()
    spread = float(centred @ centred)
    if spread <= 1e-12 * max(1.0, float(draws @ draws)):
        return True
    return float(centred[:-1] @ centred[1:]) / spread >= STICKY_LAG1


class _CollapsedTarget:
    """``log p(beta + delta, t | rest)`` of one term at one iteration, ``t = log sigma^2``, with ``w`` and ``u``
    integrated out (module docstring), and the updates of the collapsed step that keep it.

    ``part`` holds the intervals of the rest of the predictor (the location's coefficient at ``beta`` included), so
    ``delta`` moves the effects' prior mean (:meth:`bayesvm.engines.hinge_levels.Pieces.shifted`); ``lam`` is the
    location's prior precision (0 and ``delta = 0`` throughout when the term has no location column)."""

    def __init__(self, part, log_prior, n_levels: int, beta: float, lam: float):
        self.part, self.log_prior, self.n_levels = part, log_prior, n_levels
        self.beta, self.lam = beta, lam

    def log_density(self, t: float, delta: float) -> float:
        if not LOG_VARIANCE_RANGE[0] < t < LOG_VARIANCE_RANGE[1]:
            return -np.inf
        moved = self.part if delta == 0.0 else self.part.shifted(delta)
        return self.log_prior(t) - 0.5 * self.lam * (self.beta + delta) ** 2 + moved.log_integral_sum(float(np.exp(t)))

    def location_scale(self, t: float) -> float:
        """The spread of ``delta`` given ``t``: of the mean of ``J`` effects, and at least the floor."""
        return float(np.sqrt(np.exp(t) / self.n_levels + LOCATION_WIDTH_FLOOR**2))

    def variance_jumps(self, t: float, delta: float, rng: np.random.Generator, current: float) -> tuple[float, float]:
        """:data:`JUMPS` random-walk Metropolis updates of ``t | delta`` from the density ``current`` at ``(t, delta)``;
        returns the new ``t`` and the density there."""
        for _ in range(JUMPS):
            proposal = t + JUMP_SD * rng.standard_normal()
            value = self.log_density(proposal, delta)
            if np.log(rng.random()) < value - current:
                t, current = proposal, value
        return t, current

    def location_slice(self, t: float, delta: float, rng: np.random.Generator, current: float) -> tuple[float, float]:
        """One slice update of ``delta | t`` from the density ``current`` at ``(t, delta)``; returns the new ``delta``
        and the density there."""
        return slice_sample_valued(
            lambda d: self.log_density(t, d), delta, 2.0 * self.location_scale(t), rng.exponential(),
            rng.random(SLICE_STEPS + 1), current,
        )  # fmt: skip
