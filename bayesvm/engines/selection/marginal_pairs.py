"""Exact updates of ``(gamma_k, beta_k)`` with the augmentation integrated out.

The single-site updates of :mod:`bayesvm.engines.selection.gibbs` draw each indicator given ``omega``.  On
thousands of rows that is sticky: ``omega_i = 1 / |1 - y_i f_i|`` is drawn from the current fit's margins,
so the rows near the margin pin ``f`` where it is and the indicator's conditional odds are extreme both ways.
On spam, four chains of spike-and-slab flipped the indicator of ``pm`` 0-2 times in 1,000 draws, and the
chains disagreed (R-hat 3.2 with the swap moves).

This module draws the pair from its conditional on the posterior with ``omega`` integrated out, the hinge
pseudo-likelihood ``L(f) = exp(-2 sum_i max(0, 1 - y_i f_i))`` itself, given the other coefficients.  With
``a_i = 1 - y_i f_{-k,i}`` and ``b_i = y_i x_ik``, the log-likelihood as a function of ``beta = beta_k`` is
``-2 sum_i max(0, a_i - b_i beta)``: piecewise linear with a kink at each ``t_i = a_i / b_i``.  Rows with
``x_ik = 0`` do not depend on ``beta`` and cancel.  Going right from ``-inf``, where the rows with ``b_i > 0``
are in the hinge and those with ``b_i < 0`` are not, crossing ``t_i`` adds ``2 a_i sign(b_i)`` to the
segment's intercept and ``-2 |b_i|`` to its slope.

The slopes' priors are a Gaussian ``N(0, 1/lambda)`` (the spike-and-slab's slab) or a Laplace
``Laplace(0, s)`` (Laplace-zero with ``b_k`` integrated out; one more kink at 0, slope ``-2/s``).  On every
segment ``[l, u]`` the log density is ``alpha + kappa beta - lambda beta^2 / 2``, whose integral is a Gaussian
(``lambda > 0``) or exponential (``lambda = 0``) mass in closed form.  Hence

* ``log Z_1 = log prior constant + logsumexp(segment masses)`` (included) and ``log Z_0 = -2 sum_i max(0, a_i)``
  (excluded; the value 0);
* ``gamma_k = 1`` with probability ``expit(logit(prior inclusion) + log Z_1 - log Z_0)``;
* if included, ``beta_k`` is a segment drawn by its mass, then a truncated Gaussian or exponential on it by the
  inverse CDF (in log space for the Gaussian tails).  If excluded, the spike-and-slab's coefficient is 0 and
  Laplace-zero's value ``v_k`` is a draw from its Laplace prior (it does not touch the likelihood).

This is the exact conditional of the marginal posterior of ``(gamma, coefficients, sigma^2)``: a partially
collapsed Gibbs step (van Dyk & Park 2008), valid because the sampler draws everything that was integrated out
(``omega``, and Laplace-zero's ``b``) afresh from its full conditional right after these updates.

**Exchanges.**  Two near-substitutes (spam's ``font`` and ``charHash``) defeat single-slope updates: a chain
that keeps one of them must pass through "both in" or "both out" to switch, and both are improbable.  An
exchange takes a pair of slopes ``(j, k)``, chosen in a way that does not depend on the state (each slope in
random order as ``j``, with a partner ``k`` drawn with probability proportional to ``|corr(x_j, x_k)| + 0.01``,
the swaps' weights of :mod:`bayesvm.engines.selection.moves`, plus ``max(0, -corr(gamma_j, gamma_k))`` over the
chain's own tuning draws, learned half way through tuning and at its end and then fixed: spam's ``font`` and
``charHash`` replace each other (indicator correlation -0.95) although their columns correlate 0.18, so by the
columns alone the pair was proposed 0.2 times per iteration and switched 20-40 times in 1,000 draws), and, when exactly one of them is included,
draws the block ``(gamma_j, beta_j, gamma_k, beta_k)`` from its conditional given the rest *and* given that
exactly one is included.  The event is a function of the block that
the draw keeps, so the step leaves the posterior invariant (it is a Gibbs step on the posterior restricted to
the event).  With both slopes at 0 (margins ``a``), the two models' probabilities are
``pi_j (1 - pi_k) Z_1j exp(-2 sum_i max(0, a_i))`` and the same with ``j, k`` exchanged, so
``P(j in | one in) = expit((logit pi_j + log Z_1j - log Z_0j) - (logit pi_k + log Z_1k - log Z_0k))``, each
term as in the single-slope update (``Z_0`` over that slope's rows; the other rows cancel).  The included
slope's value is then drawn as above.

Each pair of strong substitutes (indicator correlation below ``-STRONG_AFFINITY`` in the tuning draws, the pairs
fixed with the weights) gets :data:`STRONG_EXCHANGES` more exchanges after the sweep.  Their choice does not depend
on the state either, so each is the same Gibbs step on the restricted posterior.  An exchange switches such a pair
only now and then, because the other slopes' values suit the one that is in; more attempts buy more switches at a
small cost each (``benchmarks/gibbs_mixing.py`` measures the inclusion indicators' mixing).

**Rao-Blackwellised inclusion probabilities.**  Each update draws ``gamma_k`` with probability
``p_k = P(gamma_k = 1 | the rest, y)``, computed at the state the sweep has reached.  Every step of the chain
leaves the posterior invariant, so that state is a posterior draw, and ``E[p_k] = P(gamma_k = 1 | y)``.  The
average of ``p_k`` over the kept iterations (:attr:`MarginalPairs.conditional`, kept per draw by the sampler) is
therefore an estimate of the inclusion probability, like the share of draws with ``gamma_k = 1``.  From independent
draws it could never have the higher variance (Rao-Blackwell; Gelfand & Smith 1990, and Guan & Stephens 2011 for
variable selection); along a Markov chain that is not guaranteed, and the tests measure it (lower batch variance for
every slope of the enumeration case).  A slope
that a chain includes once in a thousand draws still adds its conditional probability at every draw, so chains
agree sooner on rarely included slopes.

``tests/engines/selection/test_marginal_pairs.py`` checks the segment integral against quadrature, the draws
against the density, and the sampler against exact enumeration of the models (with and without exchanges).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_ndtr, ndtri_exp

from ...linalg import compiled
from . import compiled_pairs
from .moves import swap_weights, weighted_lines

LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass(frozen=True)
class SlopePrior:
    """The included slope's prior: ``N(0, 1 / precision)`` when ``precision > 0``, else ``Laplace(0, scale)``."""

    precision: float = 0.0
    scale: float = np.inf

    def log_constant(self) -> float:
        if self.precision > 0.0:
            return 0.5 * (np.log(self.precision) - LOG_2PI)
        return -float(np.log(2.0 * self.scale))


def fast_logsumexp(values: np.ndarray) -> float:
    """``log sum exp(values)`` (scipy's general version costs more than the sums here)."""
    top = float(values.max())
    if not np.isfinite(top):
        return top
    return top + float(np.log(np.sum(np.exp(values - top))))


def _log_ndtr_difference(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``log(Phi(upper) - Phi(lower))`` for ``lower <= upper``, accurate in both tails."""
    flip = lower > 0.0
    low = np.where(flip, -upper, lower)
    high = np.where(flip, -lower, upper)
    log_high, log_low = log_ndtr(high), log_ndtr(low)
    with np.errstate(divide="ignore", invalid="ignore"):
        return log_high + np.log(-np.expm1(log_low - log_high))


@dataclass
class Segments:
    """The piecewise log density ``alpha_j + kappa_j beta - precision beta^2 / 2`` on ``[lower_j, upper_j]``."""

    lower: np.ndarray
    upper: np.ndarray
    alpha: np.ndarray
    kappa: np.ndarray
    precision: float

    def log_masses(self) -> np.ndarray:
        """``log int_l^u exp(alpha + kappa beta - precision beta^2 / 2) d beta`` per segment."""
        lower, upper, alpha, kappa = self.lower, self.upper, self.alpha, self.kappa
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.precision > 0.0:
                lam = self.precision
                mean, root = kappa / lam, np.sqrt(lam)
                out = (
                    alpha
                    + 0.5 * kappa * mean
                    + 0.5 * (LOG_2PI - np.log(lam))
                    + _log_ndtr_difference((lower - mean) * root, (upper - mean) * root)
                )
            else:  # exponential pieces: kappa > 0 on the left end, < 0 on the right end
                width = upper - lower
                rising = alpha + kappa * upper - np.log(kappa) + np.log(-np.expm1(-kappa * width))
                falling = alpha + kappa * lower - np.log(-kappa) + np.log(-np.expm1(kappa * width))
                out = np.where(kappa > 0.0, rising, np.where(kappa < 0.0, falling, alpha + np.log(width)))
        return np.where(upper > lower, out, -np.inf)

    def draw(self, j: int, uniform: float) -> float:
        """Inverse-CDF draw on segment ``j`` from ``uniform``."""
        lower, upper, kappa = float(self.lower[j]), float(self.upper[j]), float(self.kappa[j])
        if self.precision > 0.0:
            lam = self.precision
            mean, sd = kappa / lam, 1.0 / np.sqrt(lam)
            low, high = (lower - mean) / sd, (upper - mean) / sd
            sign = 1.0
            if low > 0.0:  # work in the lower tail, where log Phi is accurate
                low, high, sign = -high, -low, -1.0
            mass = float(_log_ndtr_difference(np.array(low), np.array(high)))
            log_p = np.logaddexp(log_ndtr(low), np.log(uniform) + mass)
            z = float(ndtri_exp(min(log_p, 0.0)))
            return mean + sd * sign * min(max(z, low), high)
        width = upper - lower
        if kappa < 0.0:
            return lower + float(np.log1p(uniform * np.expm1(kappa * width))) / kappa
        if kappa > 0.0:
            return upper + float(np.log1p(uniform * np.expm1(-kappa * width))) / kappa
        return lower + uniform * width


#: The draws ignore what lies beyond a window around the mode once a tangent bound puts it below
#: ``exp(-TAIL_CUTOFF)`` of the window's mass (2e-16: the resolution of a double), so only the kinks inside the
#: window are sorted.  The log density is concave, so beyond ``u`` it lies below its tangent at ``u``.
TAIL_CUTOFF = 36.0

#: The fewest tuning iterations that learn the exchanges' partner weights (:meth:`MarginalPairs.observe`).
MIN_TUNE = 40
#: Pairs whose indicators replace each other this strongly in the tuning draws (``-corr(gamma_j, gamma_k)``) get
#: :data:`STRONG_EXCHANGES` more exchanges per iteration after the sweep ("Exchanges" in the module docstring)
STRONG_AFFINITY = 0.5
STRONG_EXCHANGES = 5

#: The first window's half width in conditional SDs of the slope given ``omega`` (:meth:`MarginalPairs.run`).
WINDOW_SDS = 8.0

#: Each sweep starts a slope's window at this fraction of its last one (it doubles from there as needed).
WINDOW_SHRINK = 0.75


def segments(
    a: np.ndarray,
    b: np.ndarray,
    prior: SlopePrior,
    lower: float = -np.inf,
    upper: float = np.inf,
    linear: float = 0.0,
) -> Segments:
    """The segments on ``[lower, upper]`` of ``-2 sum_i max(0, a_i - b_i beta) + log prior(beta) + linear beta``
    (prior constant left out), for rows with ``b_i != 0`` (module docstring); only the kinks inside the interval
    are sorted.  ``linear`` is 0 for one slope; the line moves of :mod:`bayesvm.engines.selection.directions`
    carry the Gaussian priors' cross terms in it."""
    if lower == -np.inf:
        active = b > 0.0
    else:  # in the hinge just right of ``lower``
        active = a - b * lower > 0.0
    alpha0 = -2.0 * float(np.sum(a, where=active))
    kappa0 = 2.0 * float(np.sum(b, where=active)) + linear
    if lower == -np.inf and upper == np.inf:
        a_in, b_in = a, b
    else:  # the rows whose hinge changes state inside the interval
        if upper == np.inf:
            after = b < 0.0
        else:
            after = a - b * upper > 0.0
        inside = active != after
        a_in, b_in = a[inside], b[inside]
    kinks = a_in / b_in
    step_alpha = 2.0 * a_in * np.sign(b_in)
    step_kappa = -2.0 * np.abs(b_in)
    if prior.precision <= 0.0:  # Laplace: -|beta| / s, slope +1/s left of 0 and -1/s right of it
        kappa0 += 1.0 / prior.scale if lower < 0.0 else -1.0 / prior.scale
        if lower < 0.0 < upper:
            kinks = np.append(kinks, 0.0)
            step_alpha = np.append(step_alpha, 0.0)
            step_kappa = np.append(step_kappa, -2.0 / prior.scale)
    order = np.argsort(kinks, kind="stable")
    kinks = kinks[order]
    alpha = np.concatenate(([alpha0], alpha0 + np.cumsum(step_alpha[order])))
    kappa = np.concatenate(([kappa0], kappa0 + np.cumsum(step_kappa[order])))
    return Segments(
        lower=np.concatenate(([lower], kinks)),
        upper=np.concatenate((kinks, [upper])),
        alpha=alpha,
        kappa=kappa,
        precision=max(prior.precision, 0.0),
    )


def window(a, b, prior, center: float, half_width: float, linear: float = 0.0) -> tuple[Segments, np.ndarray, float]:
    """Segments on a window around ``center`` wide enough that the tangent bounds of both tails are below
    ``exp(-TAIL_CUTOFF)`` of the window's mass (the window doubles until they are), their log masses and the
    window's half width."""
    while True:
        lower, upper = center - half_width, center + half_width
        pieces = segments(a, b, prior, lower, upper, linear)
        log_masses = pieces.log_masses()
        total = fast_logsumexp(log_masses)
        lam = pieces.precision
        with np.errstate(invalid="ignore", over="ignore"):  # (an infinite window: returned below)
            left_slope = pieces.kappa[0] - lam * lower
            right_slope = pieces.kappa[-1] - lam * upper
            left_height = pieces.alpha[0] + pieces.kappa[0] * lower - 0.5 * lam * lower * lower
            right_height = pieces.alpha[-1] + pieces.kappa[-1] * upper - 0.5 * lam * upper * upper
        with np.errstate(divide="ignore", invalid="ignore"):
            left_tail = left_height - np.log(left_slope) if left_slope > 0.0 else np.inf
            right_tail = right_height - np.log(-right_slope) if right_slope < 0.0 else np.inf
        if max(left_tail, right_tail) < total - TAIL_CUTOFF or not np.isfinite(half_width):
            return pieces, log_masses, half_width
        half_width *= 2.0
        if half_width > 1e12:
            half_width = np.inf


def slope_evidence(
    a: np.ndarray, b: np.ndarray, prior: SlopePrior, center: float = 0.0, half_width: float = np.inf
) -> tuple[float, Segments, np.ndarray, float]:
    """``log Z_1 - log Z_0`` of one slope (module docstring), with the segments on its window, their log masses
    and the window's half width (``center`` and ``half_width`` give the first window, as in :func:`draw_pair`)."""
    pieces, log_masses, half_width = window(a, b, prior, center, half_width)
    log_z0 = -2.0 * float(np.sum(np.maximum(0.0, a)))
    log_z1 = prior.log_constant() + fast_logsumexp(log_masses)
    return log_z1 - log_z0, pieces, log_masses, half_width


def draw_value(pieces: Segments, log_masses: np.ndarray, u_segment: float, u_value: float) -> float:
    """The included slope's value: a segment by its mass, then the inverse-CDF draw on it."""
    cumulative = np.cumsum(np.exp(log_masses - log_masses.max()))
    j = min(int(np.searchsorted(cumulative, u_segment * cumulative[-1], side="right")), cumulative.size - 1)
    return pieces.draw(j, u_value)


def draw_pair(
    a: np.ndarray,
    b: np.ndarray,
    prior: SlopePrior,
    log_prior_odds: float,
    uniforms: np.ndarray,
    center: float = 0.0,
    half_width: float = np.inf,
) -> tuple[bool, float, float, float]:
    """``(gamma_k, beta_k)`` from the conditional of the module docstring; ``uniforms`` holds three U(0, 1).

    ``center`` and ``half_width`` give the first window of :data:`TAIL_CUTOFF` (any values are correct; good ones
    save sorting).  Returns whether the slope is included, its value (0 when excluded; the caller draws
    Laplace-zero's excluded value from its prior), the half width of the window used and the inclusion
    probability the draw was made with, ``P(gamma_k = 1 | the rest)`` (the Rao-Blackwellised estimate's term).
    """
    log_bf, pieces, log_masses, half_width = slope_evidence(a, b, prior, center, half_width)
    probability = float(expit(log_prior_odds + log_bf))
    if uniforms[0] >= probability:
        return False, 0.0, half_width, probability
    return True, draw_value(pieces, log_masses, uniforms[1], uniforms[2]), half_width, probability


def exchange_probability(log_odds_j: float, log_bf_j: float, log_odds_k: float, log_bf_k: float) -> float:
    """``P(j in, k out | exactly one of j, k in, the rest)`` with both slopes integrated out: the two models'
    evidence ratio, ``expit((logit pi_j + log Z_1j - log Z_0j) - (logit pi_k + log Z_1k - log Z_0k))``, both
    evidences computed with both slopes at 0 (module docstring, "Exchanges")."""
    return float(expit((log_odds_j + log_bf_j) - (log_odds_k + log_bf_k)))


class MarginalPairs:
    """The updates of the module docstring, one sweep over the penalised slopes in random order.

    The sampler's step object supplies ``pair_priors() -> (precision, inv_scale, log_odds)`` (one entry per
    penalised slope: the slab's precision, or 0 and ``1 / s`` for a Laplace prior; the prior log odds of
    inclusion) and ``apply_pairs(include, value)`` (the slopes' new indicators and values; ``include`` is -1
    where a slope has no rows and was left as it was).  With numba the sweep runs compiled
    (:func:`bayesvm.engines.selection.compiled_pairs.pair_sweep`) on the same uniforms.
    """

    def __init__(
        self, y: np.ndarray, X: np.ndarray, selected: np.ndarray, tune: int = 0, weights: np.ndarray | None = None
    ) -> None:
        self.unit, self.signed = weighted_lines(y, weights)  # each line's margins and slopes times omega_i
        self.selected = selected
        m = selected.size
        self.affinity = np.zeros((m, m))  # the exchanges' learned partner weights (:meth:`observe`)
        self.start, self.checkpoints = tune // 4, (tune // 2, tune) if tune >= MIN_TUNE else ()
        self.count, self.total, self.outer = 0, np.zeros(m), np.zeros((m, m))
        self.strong = np.zeros((0, 2), dtype=np.int64)  # the substitutes' pairs (:meth:`observe`)
        #: ``P(gamma_k = 1 | the rest)`` at each slope's update in the last sweep (module docstring,
        #: "Rao-Blackwellised inclusion probabilities"); None before the first sweep
        self.conditional: np.ndarray | None = None
        self.X = X

    @property
    def X(self) -> np.ndarray:
        return self._X

    @X.setter
    def X(self, X: np.ndarray) -> None:  # a new completed design (imputation) re-reads the columns' rows
        self._X = X
        self.widths = None
        self.partners = None
        columns = np.asarray(X[:, self.selected])
        counts = np.count_nonzero(columns, axis=0)
        self.col_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        rows, cols = np.nonzero(columns.T)  # column-major order: rows of slope 0, then slope 1, ...
        self.row_idx = cols.astype(np.int64)
        self.yx = self.signed[self.row_idx] * columns.T[rows, cols]

    def observe(self, step: int, gamma: np.ndarray) -> None:
        """Accumulate the tuning iterations' indicators; at the checkpoints (half way, end of tuning) set the
        exchanges' affinity ``max(0, -corr(gamma_j, gamma_k))``: slopes that replace each other in the chain's own
        tuning draws (module docstring, "Exchanges").  Fixed after tuning."""
        if step >= self.start and step < max(self.checkpoints, default=0):
            g = np.asarray(gamma, dtype=float)
            self.count += 1
            self.total += g
            self.outer += np.outer(g, g)
        if step + 1 in self.checkpoints and self.count > 1:
            mean = self.total / self.count
            cov = self.outer / self.count - np.outer(mean, mean)
            sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                corr = np.where(np.outer(sd, sd) > 1e-12, cov / np.outer(sd, sd), 0.0)
            self.affinity = np.maximum(0.0, -corr)
            np.fill_diagonal(self.affinity, 0.0)
            self.partners = None
            self.strong = np.argwhere(np.triu(self.affinity) > STRONG_AFFINITY).astype(np.int64)

    def run(self, step, coef: np.ndarray, rng: np.random.Generator, precisions: np.ndarray | None = None) -> np.ndarray:
        """One sweep; returns the new effective coefficients (``coef`` is updated in place).

        ``precisions`` (the diagonal of ``X' W X`` at the penalised slopes, optional) sets the first windows:
        ``WINDOW_SDS`` conditional SDs given ``omega`` either side of the current value; later sweeps start
        from :data:`WINDOW_SHRINK` times the slope's last window.  The window only decides how many kinks are
        sorted, never the draw (beyond the :data:`TAIL_CUTOFF` precision).
        """
        sel, m = self.selected, self.selected.size
        if self.widths is None:
            first = np.inf if precisions is None else WINDOW_SDS / np.sqrt(np.asarray(precisions) + 1e-12)
            self.widths = np.array(np.broadcast_to(first, (m,)), dtype=float)
        margin = self.unit - self.signed * (self._X @ coef)  # a_i with every slope in
        order = rng.permutation(m)
        uniforms = rng.random((m, 3))
        precision, inv_scale, log_odds = (np.asarray(v, dtype=float) for v in step.pair_priors())
        with np.errstate(divide="ignore"):
            log_constant = np.where(
                precision > 0.0, 0.5 * (np.log(np.maximum(precision, 1e-300)) - LOG_2PI), np.log(0.5 * inv_scale)
            )
        include = np.zeros(m, dtype=np.int64)
        value = np.zeros(m)
        probability = np.zeros(m)
        if compiled.available():
            compiled_pairs.pair_sweep(
                margin, self.col_ptr, self.row_idx, self.yx, sel.astype(np.int64), coef, order, precision, inv_scale,
                log_constant, log_odds, self.widths, uniforms, include, value, probability, TAIL_CUTOFF,
                WINDOW_SHRINK,
            )  # fmt: skip
        else:
            for j in order:
                start, stop = self.col_ptr[j], self.col_ptr[j + 1]
                if stop == start:
                    include[j] = -1
                    probability[j] = expit(log_odds[j])
                    continue
                k, rows, b = sel[j], self.row_idx[start:stop], self.yx[start:stop]
                a = margin[rows] + b * coef[k]  # 1 - y f_{-k}
                prior = SlopePrior(precision=precision[j], scale=1.0 / inv_scale[j] if inv_scale[j] > 0 else np.inf)
                included, new, width, probability[j] = draw_pair(
                    a, b, prior, log_odds[j], uniforms[j], coef[k], self.widths[j]
                )
                self.widths[j] = WINDOW_SHRINK * width
                include[j], value[j] = included, new
                margin[rows] = a - b * new
                coef[k] = new
        step.apply_pairs(include, value)
        self.conditional = probability
        return coef

    def _slope_prior(self, precision: np.ndarray, inv_scale: np.ndarray, j: int) -> SlopePrior:
        return SlopePrior(precision=precision[j], scale=1.0 / inv_scale[j] if inv_scale[j] > 0 else np.inf)

    def exchange(self, step, coef: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One sweep of exchanges (module docstring, "Exchanges"); returns the new effective coefficients
        (``coef`` is updated in place).  Every slope in random order is paired with a partner drawn by the
        correlation weights, which do not depend on the state, and then each pair of strong substitutes
        (:data:`STRONG_AFFINITY`, fixed after tuning) :data:`STRONG_EXCHANGES` times more; each pair with exactly one
        slope included is redrawn from its conditional given that (random disjoint pairs would propose the strongly
        substituting pairs too rarely)."""
        sel, m = self.selected, self.selected.size
        if m < 2:
            return coef
        if self.widths is None:
            self.widths = np.full(m, np.inf)
        margin = self.unit - self.signed * (self._X @ coef)
        if self.partners is None:
            weights = swap_weights(self._X, sel)[0] + self.affinity
            self.partners = np.cumsum(weights, axis=1) / weights.sum(axis=1, keepdims=True)
        first = rng.permutation(m)
        picks = rng.random(m)
        second = np.minimum(np.sum(self.partners[first] < picks[:, None], axis=1), m - 1)
        pairs = np.column_stack([first, second]).astype(np.int64)
        pairs = np.vstack([pairs, np.tile(self.strong, (STRONG_EXCHANGES, 1))])  # the substitutes again
        uniforms = rng.random((pairs.shape[0], 3))
        precision, inv_scale, log_odds = (np.asarray(v, dtype=float) for v in step.pair_priors())
        with np.errstate(divide="ignore"):
            log_constant = np.where(
                precision > 0.0, 0.5 * (np.log(np.maximum(precision, 1e-300)) - LOG_2PI), np.log(0.5 * inv_scale)
            )
        gamma = np.asarray(step.gamma, dtype=np.int64).copy()
        include = np.full(m, -1, dtype=np.int64)
        value = np.zeros(m)
        if compiled.available():
            compiled_pairs.exchange_sweep(
                margin, self.col_ptr, self.row_idx, self.yx, sel.astype(np.int64), coef, gamma, pairs, precision,
                inv_scale, log_constant, log_odds, self.widths, uniforms, include, value, TAIL_CUTOFF, WINDOW_SHRINK,
            )  # fmt: skip
        else:
            ptr, rows_of, yx = self.col_ptr, self.row_idx, self.yx
            for t, (j, k) in enumerate(pairs):
                if gamma[j] == gamma[k] or ptr[j + 1] == ptr[j] or ptr[k + 1] == ptr[k]:
                    continue
                if gamma[k] == 1:  # j is the included one
                    j, k = k, j
                rows_j, b_j = rows_of[ptr[j] : ptr[j + 1]], yx[ptr[j] : ptr[j + 1]]
                rows_k, b_k = rows_of[ptr[k] : ptr[k + 1]], yx[ptr[k] : ptr[k + 1]]
                a_j = margin[rows_j] + b_j * coef[sel[j]]  # slope j out: both slopes at 0
                margin[rows_j] = a_j
                a_k = margin[rows_k]
                bf_j, pieces_j, masses_j, width_j = slope_evidence(
                    a_j, b_j, self._slope_prior(precision, inv_scale, j), coef[sel[j]], self.widths[j]
                )
                bf_k, pieces_k, masses_k, width_k = slope_evidence(
                    a_k, b_k, self._slope_prior(precision, inv_scale, k), 0.0, self.widths[k]
                )
                self.widths[j], self.widths[k] = WINDOW_SHRINK * width_j, WINDOW_SHRINK * width_k
                keep = uniforms[t, 0] < exchange_probability(log_odds[j], bf_j, log_odds[k], bf_k)
                chosen, other, pieces, masses, a, b, rows = (
                    (j, k, pieces_j, masses_j, a_j, b_j, rows_j)
                    if keep
                    else (k, j, pieces_k, masses_k, a_k, b_k, rows_k)
                )
                new = draw_value(pieces, masses, uniforms[t, 1], uniforms[t, 2])
                margin[rows] = a - b * new
                coef[sel[other]], coef[sel[chosen]] = 0.0, new
                gamma[other], gamma[chosen] = 0, 1
                include[other], value[other], include[chosen], value[chosen] = 0, 0.0, 1, new
        step.apply_pairs(include, value)
        return coef
