"""Line moves of the fixed effects with the augmentation integrated out.

The selection samplers' single-slope updates (:mod:`bayesvm.engines.selection.marginal_pairs`) move one
coefficient at a time.  Where predictors carry overlapping signal (spam's ``hp``, ``hpl``, ``george``, ``lab``,
``num85``) the posterior of the coefficients is a long, narrow ridge: an indicator can only switch once the
slopes it shares the signal with have moved along that ridge, one small step per iteration, so the chains
disagree on those indicators for thousands of draws.

A **line move** (hit-and-run; Smith 1984, Chen & Schmeiser 1993) draws ``t`` from the exact conditional of the
coefficients on the line ``c + t d`` and moves to ``c + t d``, on the posterior with ``omega`` (and Laplace-zero's
``b``) integrated out, given the indicators, ``sigma^2`` and the random effects:

* the hinge pseudo-likelihood along the line is ``-2 sum_i max(0, a_i - b_i t)`` with ``a_i = 1 - y_i f_i`` and
  ``b_i = y_i x_i' d``: piecewise linear, as for one slope;
* the Gaussian priors (the unpenalised coefficients' ``N(0, 1/lambda_j)``; the spike-and-slab's slab) add
  ``-t^2 sum lambda_j d_j^2 / 2 - t sum lambda_j c_j d_j``;
* each included Laplace-zero slope adds ``-|v_k + t d_k| / S_k = -2 max(0, v_k / S_k + t d_k / S_k) + (v_k +
  t d_k) / S_k``: one more hinge row (``a = v_k / S_k``, ``b = -d_k / S_k``) and a linear term.

So the conditional of ``t`` is the segments' density of :func:`bayesvm.engines.selection.marginal_pairs.segments`
(``linear`` carrying the Gaussian cross terms and the Laplace rows' linear parts), drawn exactly.

The direction ``d`` is drawn from ``N(0, C)`` restricted to the unpenalised coefficients with a proper prior (a
flat one could leave the line's density improper) and the included slopes: the draw
does not depend on the coefficients, so the move leaves their conditional invariant (hit-and-run with a
state-independent direction distribution), and the sampler redraws ``omega`` and ``b`` from their full
conditionals right after it (a partially collapsed Gibbs step, van Dyk & Park 2008).  ``C`` is the covariance of
the coefficients over the chain's own tuning iterations (estimated at half way and again at the end of tuning,
then fixed), so the lines follow the ridges; before the first estimate, and with fewer than
:data:`MIN_TUNE` tuning iterations, there are no line moves.  ``tests/engines/selection/test_directions.py``
checks a sampler with only these moves against the exact posterior of the model probabilities.

With Laplace-zero the lines, together with the exchanges' learned partners
(:meth:`bayesvm.engines.selection.marginal_pairs.MarginalPairs.observe`), let the inclusion indicators mix
(``python -m benchmarks.gibbs_mixing``).  Spike-and-slab redraws its coefficients from their collapsed conditional
every iteration, where the lines add cost and no mixing, so they run by default with Laplace-zero only.
"""

from __future__ import annotations

import numpy as np

from .marginal_pairs import WINDOW_SDS, WINDOW_SHRINK, SlopePrior, draw_value, window
from .moves import weighted_lines

#: Line moves per iteration.
LINES = 2

#: The fewest tuning iterations that estimate the directions' covariance (fewer: no line moves).
MIN_TUNE = 40

#: A Gaussian prior whose curvature along the line, times the squared first window, is below this is "vague" (the
#: intercept's ``N(0, 1e8)``): its segments' Gaussian masses would cancel catastrophically (``kappa^2 / lambda`` of
#: 1e16), so ``t`` is drawn by rejection from the rest of the density instead (:func:`_draw_weak`).
WEAK_PRIOR = 1e-2

#: Proposals before a rejection draw gives way to the segments' Gaussian draw (both are exact).
WEAK_TRIES = 20

#: Added to the estimated covariance, relative to its mean diagonal (keeps every direction possible).
RIDGE = 1e-3


class LineMoves:
    """The line moves of the module docstring for one chain.

    The sampler's step object supplies ``gamma``, ``pair_priors() -> (precision, inv_scale, log_odds)`` (as for
    :class:`bayesvm.engines.selection.marginal_pairs.MarginalPairs`) and ``apply_line(coef)`` (the moved
    coefficients).  ``free`` are the unpenalised columns (prior precisions ``free_precision``), ``selected`` the
    penalised ones; random-effect columns are never moved.
    """

    def __init__(self, y: np.ndarray, X: np.ndarray, free: np.ndarray, free_precision: np.ndarray,
                 selected: np.ndarray, tune: int, lines: int = LINES, weights: np.ndarray | None = None):  # fmt: skip
        self.unit, self.signed = weighted_lines(y, weights)  # each line's margins and slopes times omega_i
        self.free, self.free_precision, self.selected = free, np.asarray(free_precision, dtype=float), selected
        self.columns = np.concatenate([free, selected]).astype(int)
        self.X = X
        self.lines = lines
        self.stretch = 1.0  # the last window over its first guess (as MarginalPairs' widths: saves doublings)
        self.factor: np.ndarray | None = None  # Cholesky factor of C over ``columns``
        self.start, self.checkpoints = tune // 4, (tune // 2, tune) if tune >= MIN_TUNE else ()
        self.count, self.total, self.outer = 0, np.zeros(self.columns.size), np.zeros((self.columns.size,) * 2)

    @property
    def X(self) -> np.ndarray:
        return self._X

    @X.setter
    def X(self, X: np.ndarray) -> None:  # a new completed design (imputation)
        self._X = X
        self._moved_columns = np.ascontiguousarray(X[:, self.columns])

    def observe(self, step: int, coef: np.ndarray) -> None:
        """Accumulate the tuning iterations' coefficients; set ``C`` at the checkpoints (``step`` counts from 0)."""
        if step >= self.start and step < max(self.checkpoints, default=0):
            c = coef[self.columns]
            self.count += 1
            self.total += c
            self.outer += np.outer(c, c)
        if step + 1 in self.checkpoints and self.count > 1:
            mean = self.total / self.count
            cov = (self.outer - self.count * np.outer(mean, mean)) / (self.count - 1)
            cov[np.diag_indices_from(cov)] += RIDGE * max(float(np.mean(np.diag(cov))), 1e-12)
            self.factor = np.linalg.cholesky(cov)

    def run(self, step, coef: np.ndarray, rng: np.random.Generator, gram: np.ndarray) -> np.ndarray:
        """``LINES`` line moves; returns the new coefficients (``coef`` is updated in place).  ``gram`` (``X' W X``
        at the current ``omega``) only sets the first window (as in :class:`MarginalPairs`), never the draw."""
        if self.factor is None:
            return coef
        precision, inv_scale, _ = (np.asarray(v, dtype=float) for v in step.pair_priors())
        on = np.asarray(step.gamma, dtype=bool)
        gauss = np.concatenate([self.free_precision, np.where(on, precision, 0.0)])
        laplace = np.concatenate([np.zeros(self.free.size), np.where(on, inv_scale, 0.0)])
        # (a flat prior, precision 0, could leave the line's density improper: such a coefficient is not moved)
        movable = np.concatenate([self.free_precision > 0.0, on])
        if not movable.any():  # nothing included to move (and no unpenalised column)
            return coef
        margin = self.unit - self.signed * (self.X @ coef)
        normals = rng.standard_normal((self.lines, self.columns.size))
        uniforms = rng.random((self.lines, 2))
        sub_gram = gram[np.ix_(self.columns, self.columns)]
        for line in range(self.lines):
            d = np.where(movable, self.factor @ normals[line], 0.0)
            c = coef[self.columns]
            b = self.signed * (self._moved_columns @ d)
            rows = b != 0.0
            lap = (laplace > 0.0) & (d != 0.0)
            a_all = np.concatenate([margin[rows], c[lap] * laplace[lap]])
            b_all = np.concatenate([b[rows], -d[lap] * laplace[lap]])
            quad = float(np.sum(gauss * d * d))
            gauss_linear = float(-np.sum(gauss * c * d))
            laplace_linear = float(np.sum(d[lap] * laplace[lap]))
            guess = WINDOW_SDS / np.sqrt(max(float(d @ sub_gram @ d) + quad, 1e-300))
            half_width = WINDOW_SHRINK * self.stretch * guess
            t = None
            if quad * guess**2 < WEAK_PRIOR:  # a vague prior (the intercept's): rejection, module docstring
                t, used = _draw_weak(a_all, b_all, half_width, laplace_linear, quad, gauss_linear, rng)
            if t is None:
                prior = SlopePrior(precision=quad) if quad > 0.0 else SlopePrior()
                pieces, log_masses, used = window(a_all, b_all, prior, 0.0, half_width, gauss_linear + laplace_linear)
                t = draw_value(pieces, log_masses, uniforms[line, 0], uniforms[line, 1])
            if np.isfinite(used):
                self.stretch = used / guess
            coef[self.columns] = c + t * d
            margin -= t * b
        step.apply_line(coef)
        return coef


def _draw_weak(a, b, half_width, laplace_linear, quad, gauss_linear, rng) -> tuple[float | None, float]:
    """``t`` by rejection: proposals from the hinge and Laplace part alone (piecewise exponential, exact segments),
    accepted with probability ``exp(-quad (t - t*)^2 / 2) <= 1``, ``t* = gauss_linear / quad``: the Gaussian factor
    over its maximum.  Its exponent at ``t`` is at most the priors' ``sum_j lambda_j (c_j + t d_j)^2 / 2``, small
    for a vague prior, so almost every proposal is accepted.  ``None`` when the rest is improper along the line or
    :data:`WEAK_TRIES` proposals were rejected (the caller then draws from the segments with the Gaussian: each
    route returns an exact draw, so the mixture of them is exact too); and the window's half width."""
    pieces, log_masses, width = window(a, b, SlopePrior(), 0.0, half_width, laplace_linear)
    if not np.isfinite(width) or not np.all(np.isfinite(log_masses[log_masses > -np.inf])):
        return None, width
    peak = gauss_linear / quad if quad > 0.0 else 0.0
    for _ in range(WEAK_TRIES):
        u = rng.random(3)
        t = draw_value(pieces, log_masses, u[0], u[1])
        if quad == 0.0 or np.log(u[2]) < -0.5 * quad * (t - peak) ** 2:
            return t, width
    return None, width
