"""Sheared pair updates: an indicator redrawn together with the slopes that share its signal (issue 24, item 2).

On spam the indicator that kept the Laplace-zero chains apart at the default length (``hpl``: R-hat 1.07, bulk
ESS 48 over 4 x 1,000 draws) has no substitute to exchange with: no other indicator is anti-correlated with it
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
kernel.  The sampler redraws ``omega`` and ``b`` from their full conditionals after the moves (partially collapsed
Gibbs, van Dyk & Park 2008, as for the other moves).  ``tests/engines/selection/test_sheared_pairs.py`` checks
chains whose only model moves are these updates against exact enumeration of the model probabilities.

Measured on spam (Laplace-zero, default settings; ``python -m benchmarks.gibbs_mixing`` prints
seed 1 with and without these updates): over 2 x 1,000 draws, ``s_hpl`` is +0.87 for ``hp`` and -0.40 for
``george`` (``hp``'s coefficient drops by 0.87 per unit of ``hpl`` entering), whereas the regression of ``hp`` on
``hpl`` over all draws has the opposite sign (-0.84: it describes the ridge within one state, not the change
between states).  At the chain's own states the probability that one update switches ``hpl`` is 31-37%, against
0.2-2% for the one-slope pair update.  With 4 x (1,000 + 1,000) the largest inclusion R-hat over seeds 1-4 went
from 1.04-1.11 to 1.010-1.034, at about 20% more time per iteration.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ..linear import compiled_rows
from . import compiled_pairs
from .directions import MIN_TUNE, WEAK_PRIOR
from .marginal_pairs import (
    LOG_2PI,
    TAIL_CUTOFF,
    WINDOW_SDS,
    WINDOW_SHRINK,
    SlopePrior,
    _logsumexp,
    draw_value,
    window,
)

#: Tuning iterations a slope must spend in each state before it gets a sheared update.
MIN_VISITS = 5

#: A column whose mean moves by less than this many of its tuning SDs between a slope's two states is held.
MIN_SHIFT = 0.1


class ShearedPairs:
    """The sheared pair updates of the module docstring for one chain.

    The sampler's step object supplies ``gamma``, ``pair_priors() -> (precision, inv_scale, log_odds)`` (as for
    :class:`bayesvm.engines.selection.marginal_pairs.MarginalPairs`), ``apply_pairs(include, value)`` and
    ``apply_line(coef)``.  ``free`` are the unpenalised columns (prior precisions ``free_precision``), ``selected``
    the penalised ones; random-effect columns are never moved.
    """

    def __init__(self, y: np.ndarray, X: np.ndarray, free: np.ndarray, free_precision: np.ndarray,
                 selected: np.ndarray, tune: int):  # fmt: skip
        self.y = y
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
        if self.start <= step < max(self.checkpoints, default=0):
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

    def _set(self) -> None:
        """``s_k = -(mean(c | gamma_k = 1) - mean(c | gamma_k = 0)) / mean(c_k | gamma_k = 1)`` over the tuning
        iterations, for the slopes seen in both states at least :data:`MIN_VISITS` times; entries below
        :data:`MIN_SHIFT` tuning SDs of their column are 0."""
        m = self.selected.size
        slopes = self.free.size + np.arange(m)  # the slopes' rows in ``columns``
        n_in, n_out = self.count_in, self.count - self.count_in
        seen = (n_in >= MIN_VISITS) & (n_out >= MIN_VISITS)
        mean_in = self.sum_in / np.maximum(n_in, 1.0)
        mean_out = (self.total[:, None] - self.sum_in) / np.maximum(n_out, 1.0)
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

    def run(self, step, coef: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One sheared update per slope with a nonzero shift, in random order; returns the new coefficients
        (``coef`` is updated in place)."""
        if self.shift is None or self.sheared.size == 0:
            return coef
        precision, inv_scale, log_odds = (np.asarray(v, dtype=float) for v in step.pair_priors())
        n_free, m = self.free.size, self.selected.size
        gamma = np.asarray(step.gamma, dtype=bool).copy()
        c = coef[self.columns].copy()
        margin = 1.0 - self.y * (self._X @ coef)
        order = rng.permutation(self.sheared)
        uniforms = rng.random((order.size, 4))
        include, value = np.full(m, -1, dtype=np.int64), np.zeros(m)
        for i, j in enumerate(order):
            slope = n_free + j
            in_model = np.concatenate([np.ones(n_free, dtype=bool), gamma])
            in_model[slope] = False
            d = np.where(in_model, -self.shift[:, j], 0.0)
            d[slope] = 1.0
            moved = np.flatnonzero(d)
            t_now = c[slope] if gamma[j] else 0.0
            base = c - t_now * d
            b_rows = self.y * (self._moved_columns[:, moved] @ d[moved])
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
            if compiled_rows.available():
                new_in, t_new, used = compiled_pairs.line_pair(
                    a_all, b_all, quad, own, log_odds[j], t_now, half_width, TAIL_CUTOFF, gauss_linear + laplace_linear,
                    uniforms[i, :3],
                )  # fmt: skip
            else:
                prior = SlopePrior(precision=quad) if quad > 0.0 else SlopePrior()
                pieces, log_masses, used = window(a_all, b_all, prior, t_now, half_width, gauss_linear + laplace_linear)
                log_bf = own + _logsumexp(log_masses) + 2.0 * float(np.sum(np.maximum(0.0, a_all)))
                new_in = bool(uniforms[i, 0] < expit(log_odds[j] + log_bf))
                t_new = draw_value(pieces, log_masses, uniforms[i, 1], uniforms[i, 2]) if new_in else 0.0
            self.widths[j] = WINDOW_SHRINK * used
            if weak and free_quad > 0.0:  # the vague Gaussian factor by Metropolis-Hastings (module docstring)
                log_g = free_linear * (t_new - t_now) - 0.5 * free_quad * (t_new**2 - t_now**2)
                if np.log(uniforms[i, 3]) >= log_g:
                    continue
            c = base + t_new * d
            margin = base_margin - t_new * b_rows
            if new_in != gamma[j]:
                self.switches[j] += 1
            gamma[j] = new_in
            include[j], value[j] = int(new_in), t_new
        coef[self.columns] = c
        step.apply_pairs(include, value)
        step.apply_line(coef)
        return coef
