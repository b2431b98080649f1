"""Sheared pair updates: an indicator redrawn together with the slopes that share its signal.

An indicator that keeps the chains apart may have no substitute to exchange with (on spam, ``hpl``: no other indicator is anti-correlated with it
beyond -0.13.  It switches slowly because the *coefficients* of its neighbours (``hp``, ``george``, ``num85``) sit
at values that only suit its current state: the pair update of :mod:`bayesvm.engines.selection.marginal_pairs`
redraws ``(gamma_k, c_k)`` with the neighbours held, so dropping ``hpl`` costs likelihood until they have moved
along the ridge, one small step per iteration.

A **sheared pair update** redraws ``(gamma_k, c_k)`` while the neighbours slide with ``c_k``.  The shift ``s_k``
is what the chain's own tuning iterations say the other coefficients do when slope ``k`` enters, per unit of it:
``s_k = -(mean(c | gamma_k = 1) - mean(c | gamma_k = 0)) / mean(c_k | gamma_k = 1)``, for the slopes seen in both
states at least :data:`MIN_VISITS` times (entries below :data:`MIN_SHIFT` tuning SDs of their column are 0, so
fewer columns move; the other slopes keep the plain pair update).  The state is re-expressed as
``(base, gamma_k, t)``:

* ``base_j = c_j + c_k s_jk`` for the unpenalised columns and the included slopes ``j != k`` (``c_k = 0`` when
  slope ``k`` is out), ``t = c_k``;
* so ``c = base + t d`` with ``d = e_k - s_k`` restricted to those columns.

The map has unit Jacobian for every model, and the set of columns it touches does not depend on ``gamma_k``.  The
update keeps ``base``, the other indicators, ``sigma^2`` and the random effects, and draws ``(gamma_k, t)`` from
their exact conditional on the posterior with ``omega`` (and Laplace-zero's ``b``) integrated out, as the pair
update does (that is the special case ``s_k = 0``):

* along the line, the hinge pseudo-likelihood is ``-2 sum_i max(0, a_i - b_i t)`` with ``a_i = 1 - y_i f_i(base)``
  and ``b_i = y_i x_i' d``; each moving Laplace slope (the included neighbours, and slope ``k`` itself with
  ``base_k = 0, d_k = 1``) adds a hinge row ``(base_j / S_j, -d_j / S_j)`` and ``d_j / S_j`` to the linear term,
  and the Gaussian priors (unpenalised columns, slabs) add ``-t^2 sum lambda_j d_j^2 / 2 - t sum lambda_j base_j
  d_j``, as for the line moves of :mod:`bayesvm.engines.selection.directions`;
* ``log Z_1 - log Z_0 = log prior constant_k + logsumexp(segment masses) + 2 sum max(0, a)`` over those rows
  (``Z_0``: the same density at ``t = 0`` without slope ``k``'s factor), and ``gamma_k = 1`` with probability
  ``expit(logit(rho_k) + log Z_1 - log Z_0)``; ``t`` then comes from the segments, exactly.

When the unpenalised columns' prior is vague along the line (the intercept's ``N(0, 1e8)``: ``quad h^2 <``
:data:`bayesvm.engines.selection.directions.WEAK_PRIOR` for the first window ``h``), its Gaussian factor
``G(t) = exp(linear t - quad t^2 / 2)`` would make the segments' Gaussian masses cancel catastrophically.  Then
``(gamma_k, t)`` is drawn from the conditional without ``G`` and accepted with probability ``min(1, G(t') / G(t))``
(independence Metropolis-Hastings within Gibbs; ``t = 0`` when out).  ``G`` is flat where the segments' density
lives, so almost every proposal is accepted.

``s`` is estimated at half way and at the end of tuning and fixed thereafter, so the kept draws come from a fixed
kernel.

*Probes.*  A chain that never includes a slope during tuning has no in-state mean to estimate its shift from, so
it never gets the sheared update that would include it.  On spam with spike-and-slab (seed 2) three of four
chains never included ``hpl`` in the first half of tuning; the fourth did, and ``hpl``'s inclusion R-hat was 1.09.
So from half way, each slope seen fewer than :data:`MIN_VISITS` times in one state is *probed*: for
:data:`PROBE_LENGTH` iterations the sampler's usual steps run and then a pair update (``s = 0``) sets the slope to
the unvisited state and draws its value from the conditional there; the last :data:`PROBE_RECORDED` of those
iterations give that state's mean (the first let the neighbours follow the slope through ``omega``).  Probe
iterations stay out of the regular means, and the probes end by :data:`PROBE_END` of tuning so that the chain
settles before the final estimate.  A probe counts only where the sampler's own steps had left the slope in the
forced state at least :data:`PROBE_STAYED` times (else that state has no posterior mass worth a sheared update),
and only if the chain has not visited the state by itself by the end of tuning.  Probes are adaptation during
burn-in only: nothing forced is kept, and the kernel after tuning is the fixed one above.

The sampler redraws ``omega`` and ``b`` from their full conditionals after the moves (partially collapsed Gibbs,
van Dyk & Park 2008, as for the other moves).  ``tests/engines/selection/test_sheared_pairs.py`` checks chains
whose only model moves are these updates against exact enumeration of the model probabilities.

The shift ``s_k`` describes how the neighbours' coefficients change *between* the two states of the indicator, which
the regression of one coefficient on another within a state does not; at the chain's own states a sheared update
switches a rarely included slope far more often than the one-slope pair update (``python -m benchmarks.gibbs_mixing``
measures the inclusion indicators' mixing with and without these updates).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ...linalg import compiled
from . import compiled_pairs
from .directions import MIN_TUNE, WEAK_PRIOR
from .marginal_pairs import (
    LOG_2PI,
    TAIL_CUTOFF,
    WINDOW_SDS,
    WINDOW_SHRINK,
    SlopePrior,
    draw_value,
    fast_logsumexp,
    window,
)
from .moves import weighted_lines

#: Tuning iterations a slope must spend in each state before it gets a sheared update.
MIN_VISITS = 5

#: A column whose mean moves by less than this many of its tuning SDs between a slope's two states is held.
MIN_SHIFT = 0.1

#: Probes (tuning only): iterations a slope is held in the state its chain has not visited, how many of the last of
#: them are recorded (the first let the neighbouring coefficients follow it), and the share of tuning by which the
#: probes end
PROBE_LENGTH = 8
PROBE_RECORDED = 4
PROBE_END = 0.9
#: Probe iterations at which the sampler's own steps must have left the slope in the forced state for the probe to
#: count
PROBE_STAYED = 2


class ShearedPairs:
    """The sheared pair updates of the module docstring for one chain.

    The sampler's step object supplies ``gamma``, ``pair_priors() -> (precision, inv_scale, log_odds)`` (as for
    :class:`bayesvm.engines.selection.marginal_pairs.MarginalPairs`), ``apply_pairs(include, value)`` and
    ``apply_line(coef)``.  ``free`` are the unpenalised columns (prior precisions ``free_precision``), ``selected``
    the penalised ones; random-effect columns are never moved.
    """

    def __init__(self, y: np.ndarray, X: np.ndarray, free: np.ndarray, free_precision: np.ndarray,
                 selected: np.ndarray, tune: int, weights: np.ndarray | None = None):  # fmt: skip
        self.unit, self.signed = weighted_lines(y, weights)  # each line's margins and slopes times omega_i
        self.free, self.selected = np.asarray(free, dtype=int), np.asarray(selected, dtype=int)
        self.free_precision = np.asarray(free_precision, dtype=float)
        self.columns = np.concatenate([self.free, self.selected])
        self.X = X
        self.start, self.checkpoints = tune // 4, (tune // 2, tune) if tune >= MIN_TUNE else ()
        size, m = self.columns.size, self.selected.size
        self.count, self.total, self.total_sq = 0, np.zeros(size), np.zeros(size)
        self.count_in, self.sum_in = np.zeros(m), np.zeros((size, m))
        self.shift: np.ndarray | None = None  # s_jk: rows ``columns``, one column per penalised slope
        self.sheared = np.zeros(0, dtype=int)  # the slopes with a nonzero shift
        self.widths = np.full(m, np.inf)
        self.switches = np.zeros(m, dtype=np.int64)  # indicator changes made by these updates (diagnostics)
        self.tune = tune
        self._probe_at: dict[int, tuple[int, bool, bool]] = {}  # iteration -> (slope, forced state, recorded)
        self.probed = np.full(m, -1, dtype=np.int8)  # -1 none, else the state a probe forced (1 in, 0 out)
        self.probe_count, self.probe_sum = np.zeros(m), np.zeros((size, m))
        self.probe_stayed = np.zeros(m, dtype=np.int64)

    @property
    def X(self) -> np.ndarray:
        return self._X

    @X.setter
    def X(self, X: np.ndarray) -> None:  # a new completed design (imputation)
        self._X = X
        self._moved_columns = np.ascontiguousarray(X[:, self.columns])

    def observe(self, step: int, coef: np.ndarray, gamma: np.ndarray, precisions: np.ndarray) -> None:
        """Accumulate the tuning iterations' coefficients by the indicators' states; set ``s`` at the checkpoints
        (``step`` counts from 0).  ``precisions`` (the diagonal of ``X' W X`` at the penalised slopes) sets the
        first windows there."""
        probe = self._probe_at.get(step)
        if probe is not None:  # a probe's iteration: its own mean, never the regular sums (module docstring)
            j, target, recorded = probe
            if recorded and bool(gamma[j]) == target:
                self.probe_count[j] += 1
                self.probe_sum[:, j] += coef[self.columns]
        elif self.start <= step < max(self.checkpoints, default=0):
            c = coef[self.columns]
            on = np.asarray(gamma, dtype=float)
            self.count += 1
            self.total += c
            self.total_sq += c * c
            self.count_in += on
            self.sum_in += np.outer(c, on)
        if step + 1 in self.checkpoints and self.count > 1:
            self._set()
            self.widths = WINDOW_SDS / np.sqrt(np.maximum(np.asarray(precisions, dtype=float), 1e-12))
            if step + 1 == self.checkpoints[0]:
                self._plan_probes(step + 1)

    def _plan_probes(self, begin: int) -> None:
        """Probes for the slopes seen fewer than :data:`MIN_VISITS` times in one state so far: from ``begin``, one
        slope at a time for :data:`PROBE_LENGTH` iterations, ending by :data:`PROBE_END` of tuning (the chain then
        settles before the last checkpoint).  Slopes never in come first (a chain that never includes a slope has
        no sheared update to include it with), then slopes never out."""
        n_in, n_out = self.count_in, self.count - self.count_in
        never_in = np.flatnonzero(n_in < MIN_VISITS)
        never_out = np.flatnonzero((n_out < MIN_VISITS) & (n_in >= MIN_VISITS))
        slots = max(0, int(PROBE_END * self.tune) - begin) // PROBE_LENGTH
        plan = [(int(j), True) for j in never_in] + [(int(j), False) for j in never_out]
        self.probed[:] = -1
        for k, (j, target) in enumerate(plan[:slots]):
            self.probed[j] = int(target)
            first = begin + k * PROBE_LENGTH
            for offset in range(PROBE_LENGTH):
                self._probe_at[first + offset] = (j, target, offset >= PROBE_LENGTH - PROBE_RECORDED)

    def _set(self) -> None:
        """``s_k = -(mean(c | gamma_k = 1) - mean(c | gamma_k = 0)) / mean(c_k | gamma_k = 1)`` over the tuning
        iterations, for the slopes seen in both states at least :data:`MIN_VISITS` times; entries below
        :data:`MIN_SHIFT` tuning SDs of their column are 0."""
        m = self.selected.size
        slopes = self.free.size + np.arange(m)  # the slopes' rows in ``columns``
        n_in, n_out = self.count_in.copy(), self.count - self.count_in
        mean_in = self.sum_in / np.maximum(n_in, 1.0)
        mean_out = (self.total[:, None] - self.sum_in) / np.maximum(n_out, 1.0)
        # a probe's mean stands in for the unvisited state's where the chain's own steps kept the forced state at least
        # PROBE_STAYED times (else the state has no posterior mass to move to, and a sheared update would only cost)
        probed = (self.probe_count >= PROBE_RECORDED // 2) & (self.probe_stayed >= PROBE_STAYED)
        probe_mean = self.probe_sum / np.maximum(self.probe_count, 1.0)
        into = probed & (self.probed == 1) & (n_in < MIN_VISITS)  # (unless the chain has since visited it itself)
        out_of = probed & (self.probed == 0) & (n_out < MIN_VISITS)
        mean_in[:, into], n_in[into] = probe_mean[:, into], MIN_VISITS
        mean_out[:, out_of], n_out[out_of] = probe_mean[:, out_of], MIN_VISITS
        seen = (n_in >= MIN_VISITS) & (n_out >= MIN_VISITS)
        value_in = mean_in[slopes, np.arange(m)]
        sd = np.sqrt(np.maximum(self.total_sq / self.count - (self.total / self.count) ** 2, 0.0))
        seen &= np.abs(value_in) > 1e-3 * np.maximum(sd[slopes], 1e-300)
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(seen, -(mean_in - mean_out) / value_in, 0.0)
            small = np.abs(mean_in - mean_out) < MIN_SHIFT * sd[:, None]
        shift[small] = 0.0
        shift[slopes, np.arange(m)] = 0.0
        self.shift = np.nan_to_num(shift, nan=0.0, posinf=0.0, neginf=0.0)
        self.sheared = np.flatnonzero(seen & np.any(self.shift != 0.0, axis=0))

    def run(self, step, coef: np.ndarray, rng: np.random.Generator, iteration: int = -1) -> np.ndarray:
        """One sheared update per slope with a nonzero shift, in random order, then (at a tuning ``iteration`` that
        :meth:`observe` planned a probe for) the probe's forced update; returns the new coefficients (``coef`` is
        updated in place)."""
        probe = self._probe_at.get(iteration)
        if (self.shift is None or self.sheared.size == 0) and probe is None:
            return coef
        priors = tuple(np.asarray(v, dtype=float) for v in step.pair_priors())
        m = self.selected.size
        gamma = np.asarray(step.gamma, dtype=bool).copy()
        c = coef[self.columns].copy()
        margin = self.unit - self.signed * (self._X @ coef)
        order = rng.permutation(self.sheared) if self.shift is not None else np.zeros(0, dtype=int)
        uniforms = rng.random((order.size, 4))
        include, value = np.full(m, -1, dtype=np.int64), np.zeros(m)
        for i, j in enumerate(order):
            c, margin = self._update(j, self.shift[:, j], gamma, c, margin, priors, uniforms[i], include, value)
        if probe is not None:  # (tuning only) slope j forced into the state this chain has not visited, s_j = 0
            j, target, _ = probe
            self.probe_stayed[j] += bool(gamma[j]) == target  # the chain's own steps kept the forced state
            forced = rng.random(4)
            forced[0] = -1.0 if target else 2.0  # below / above every inclusion probability
            c, margin = self._update(j, np.zeros(c.size), gamma, c, margin, priors, forced, include, value, forced=True)
        coef[self.columns] = c
        step.apply_pairs(include, value)
        step.apply_line(coef)
        return coef

    def _update(self, j: int, shift: np.ndarray, gamma, c, margin, priors, uniforms, include, value, forced=False):
        """The update of slope ``j`` along ``d = e_j - shift`` (module docstring); ``gamma``, ``include`` and
        ``value`` are updated in place, the new ``(c, margin)`` returned.  ``forced`` (a tuning probe) skips the
        Metropolis-Hastings correction for a vague intercept: the state is set, not drawn."""
        precision, inv_scale, log_odds = priors
        n_free = self.free.size
        slope = n_free + j
        in_model = np.concatenate([np.ones(n_free, dtype=bool), gamma])
        in_model[slope] = False
        d = np.where(in_model, -shift, 0.0)
        d[slope] = 1.0
        moved = np.flatnonzero(d)
        t_now = c[slope] if gamma[j] else 0.0
        base = c - t_now * d
        b_rows = self.signed * (self._moved_columns[:, moved] @ d[moved])
        base_margin = margin + t_now * b_rows
        rows = b_rows != 0.0
        # priors of the moving columns along the line (module docstring); slope j's own Laplace row has a = 0
        lap_cols = moved[moved >= n_free]
        lap_cols = lap_cols[inv_scale[lap_cols - n_free] > 0.0]
        lap_scale = inv_scale[lap_cols - n_free]
        a_all = np.concatenate([base_margin[rows], base[lap_cols] * lap_scale])
        b_all = np.concatenate([b_rows[rows], -d[lap_cols] * lap_scale])
        laplace_linear = float(np.sum(d[lap_cols] * lap_scale))
        slab = np.concatenate([np.zeros(n_free), np.where(gamma, precision, 0.0)])
        slab[slope] = precision[j]
        free_quad = float(np.sum(self.free_precision * d[:n_free] ** 2))
        free_linear = float(-np.sum(self.free_precision * base[:n_free] * d[:n_free]))
        quad = float(np.sum(slab * d * d))
        gauss_linear = float(-np.sum(slab * base * d))
        half_width = self.widths[j]
        weak = free_quad * min(half_width, 1e150) ** 2 < WEAK_PRIOR
        if not weak:
            quad, gauss_linear = quad + free_quad, gauss_linear + free_linear
        own = 0.5 * (np.log(precision[j]) - LOG_2PI) if precision[j] > 0.0 else float(np.log(0.5 * inv_scale[j]))
        if compiled.available():
            new_in, t_new, used = compiled_pairs.line_pair(
                a_all, b_all, quad, own, log_odds[j], t_now, half_width, TAIL_CUTOFF, gauss_linear + laplace_linear,
                uniforms[:3],
            )  # fmt: skip
        else:
            prior = SlopePrior(precision=quad) if quad > 0.0 else SlopePrior()
            pieces, log_masses, used = window(a_all, b_all, prior, t_now, half_width, gauss_linear + laplace_linear)
            log_bf = own + fast_logsumexp(log_masses) + 2.0 * float(np.sum(np.maximum(0.0, a_all)))
            new_in = bool(uniforms[0] < expit(log_odds[j] + log_bf))
            t_new = draw_value(pieces, log_masses, uniforms[1], uniforms[2]) if new_in else 0.0
        self.widths[j] = WINDOW_SHRINK * used
        if weak and free_quad > 0.0 and not forced:  # the vague Gaussian factor by Metropolis-Hastings (docstring)
            log_g = free_linear * (t_new - t_now) - 0.5 * free_quad * (t_new**2 - t_now**2)
            if np.log(uniforms[3]) >= log_g:
                return c, margin
        if new_in != gamma[j] and not forced:
            self.switches[j] += 1
        gamma[j] = new_in
        include[j], value[j] = int(new_in), t_new
        return base + t_new * d, base_margin - t_new * b_rows
