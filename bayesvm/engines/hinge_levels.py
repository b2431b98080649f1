"""A level's hinge pseudo-likelihood integrated over its random effect in closed form, and exact draws of it.

For level ``j`` with rows ``i``, the rest of the linear predictor ``eta_i``, the term's values ``v_i`` and
``u_j ~ N(0, sigma^2)``,

    I_j(sigma^2) = int prod_i exp(-2 max(0, 1 - y_i eta_i - s_i u)) N(u; 0, sigma^2) du,   s_i = y_i v_i.

Each hinge is active on one side of its kink ``b_i = (1 - y_i eta_i) / s_i`` (below it if ``s_i > 0``), where it
contributes ``2 s_i (u - b_i)``.  Between consecutive sorted kinks the exponent is ``a + c u - u^2 / (2 sigma^2)``
(``a = -2 sum s_i b_i``, ``c = 2 sum s_i`` over the active rows), so with ``m = c sigma^2``

    I_j = sum_intervals exp(a + c^2 sigma^2 / 2) [Phi((hi - m) / sigma) - Phi((lo - m) / sigma)],

and given ``sigma^2`` the random effect's exact conditional is the mixture over the intervals, weighted by these
terms, of ``N(m, sigma^2)`` truncated to each interval (:func:`draw_levels`).  Used by the marginal PSIS check
(:mod:`bayesvm.results.marginal_check`), by the accurate fit's node weights
(:mod:`bayesvm.engines.linear.node_evidence`), by the exact quadratures of the tests, and by the Gibbs sampler's
collapsed variance step (:mod:`bayesvm.engines.linear.collapsed_variance`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import erfcx, log_ndtr, logsumexp, ndtri_exp

from ..linalg import compiled


def log_diff_ndtr(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``log(Phi(hi) - Phi(lo))`` for ``lo <= hi`` (``-inf`` for empty intervals), stable in both tails.

    When ``lo > 0`` both ends lie in the upper tail and ``Phi(-lo) - Phi(-hi)`` is used instead.
    Only non-empty intervals are evaluated (two ``log_ndtr`` calls each).
    """
    out = np.full(lo.shape, -np.inf)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    upper = lo > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        big = log_ndtr(np.where(upper, -lo, hi))
        small = log_ndtr(np.where(upper, -hi, lo))
        x = np.minimum(small - big, 0.0)
        out[keep] = big + np.where(x > -0.6931, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
    return out


def anchored_log_terms(a, c, lo, hi, var, alpha, beta) -> np.ndarray:
    """``log`` of the terms of intervals on one side of their vertex ``c var`` (``alpha > 0`` or ``beta <= 0``), written
    at the interval's ends: with ``e(x) = a + c x - x^2 / (2 var)`` (the log of the integrand, less its normaliser)
    ``exp(a + c^2 var / 2) Phi(t) = exp(e(x)) erfcx(-t / sqrt 2) / 2`` at ``t = (x - c var) / sd``, so an interval left
    of the vertex has the term ``[exp(e(hi)) erfcx(-beta / sqrt 2) - exp(e(lo)) erfcx(-alpha / sqrt 2)] / 2`` and one
    right of it ``[exp(e(lo)) erfcx(alpha / sqrt 2) - exp(e(hi)) erfcx(beta / sqrt 2)] / 2``.  Every exponent is the
    size of the integrand's log, where ``a + c^2 var / 2`` and ``log Phi`` apart are of order ``(c sd)^2`` and cancel
    (slopes of 2,000 under ``var = 10^6``: two numbers near 10^13 for a term near 1); ``e(far) - e(near)`` is taken as
    ``(far - near) (c - (far + near) / (2 var))``, whatever the size of each; an infinite far end adds 0."""
    right = alpha > 0
    near, far = np.where(right, lo, hi), np.where(right, hi, lo)
    t_near = np.where(right, alpha, -beta) * _SQRT_HALF
    finite = np.isfinite(far)
    far = np.where(finite, far, 0.0)
    t_far = np.where(finite, np.where(right, beta, -alpha), 0.0) * _SQRT_HALF
    e_near = a + c * near - 0.5 * near * near / var
    log_x_near = np.log(erfcx(t_near))
    log_r = (far - near) * (c - 0.5 * (far + near) / var) + np.log(erfcx(t_far)) - log_x_near  # (e(far) - e(near))
    log_r = np.where(finite, np.minimum(log_r, 0.0), -np.inf)
    with np.errstate(divide="ignore"):
        tail = np.where(log_r > -0.6931, np.log(-np.expm1(log_r)), np.log1p(-np.exp(log_r)))
    return e_near + _LOG_HALF + log_x_near + tail


def size_classes(codes: np.ndarray, n_levels: int):
    """The levels in classes of similar size (1, 2, 3-4, 5-8, ... rows), each ``(levels, its largest level)``: padding
    every level of a class to its largest at most doubles its rows, however unbalanced the groups."""
    counts = np.bincount(codes, minlength=n_levels)
    size_class = np.ceil(np.log2(np.maximum(counts, 1))).astype(int)
    for c in np.unique(size_class[counts > 0]):
        levels = np.flatnonzero((size_class == c) & (counts > 0))
        yield levels, int(counts[levels].max())


class LevelLayout:
    """Rows padded into a ``levels x (largest level)`` array, fixed by the codes: ``slope[j, k] = s_i`` and
    ``rows[j, k] = i`` for the ``k``-th row of level ``j`` (``0`` and ``-1`` in the padding)."""

    def __init__(self, y: np.ndarray, v: np.ndarray, codes: np.ndarray, n_levels: int):
        n = codes.size
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        counts = np.bincount(sorted_codes, minlength=n_levels)
        K = int(counts.max()) if n else 0
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.arange(n) - starts[sorted_codes]  # position within its level
        self.slope = np.zeros((n_levels, K))
        self.slope[sorted_codes, slot] = (y * v)[order]
        self.rows = np.full((n_levels, K), -1)
        self.rows[sorted_codes, slot] = order
        self.active = self.slope != 0
        self.safe_rows = np.where(self.rows >= 0, self.rows, 0)
        self.y = y

    @property
    def shape(self) -> tuple[int, int]:
        return self.slope.shape


@dataclass
class Pieces:
    """Per interval ``(S, J, K + 1)``: the exponent's constant ``a`` and slope ``c`` and the interval's ends."""

    a: np.ndarray
    c: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def log_terms(self, sigma2: np.ndarray) -> np.ndarray:
        """``log`` of each interval's term of ``I_j`` at ``sigma2`` (``(S,)``), shape ``(S, J, K + 1)``."""
        var = np.broadcast_to(np.asarray(sigma2, dtype=float).reshape(-1, 1, 1), self.a.shape)
        sd = np.sqrt(var)
        centre = self.c * var
        with np.errstate(invalid="ignore", over="ignore"):
            alpha, beta = (self.lo - centre) / sd, (self.hi - centre) / sd
            out = self.a + 0.5 * self.c * self.c * var + log_diff_ndtr(alpha, beta)
            side = (self.hi > self.lo) & ((alpha > 0) | (beta <= 0))  # the interval on one side of the vertex
            out[side] = anchored_log_terms(
                self.a[side], self.c[side], self.lo[side], self.hi[side], var[side], alpha[side], beta[side]
            )
        return out

    def log_integrals(self, sigma2: np.ndarray) -> np.ndarray:
        """``log I_j``, shape ``(S, J)``."""
        return logsumexp(self.log_terms(sigma2), axis=2)

    def shifted(self, delta: float) -> Pieces:
        """The intervals for the random effects' prior ``N(delta, sigma2)`` instead of ``N(0, sigma2)``, written in
        ``u = v - delta``: the hinge pseudo-likelihood is ``exp(a + c v)`` on ``lo <= v < hi``, which is
        ``exp((a + c delta) + c u)`` on ``lo - delta <= u < hi - delta``.  Its integrals are ``I_j`` with the rest of
        the predictor moved by ``delta`` times the level's values (a location shared by every level's effect), and
        :func:`draw_levels` on it draws ``u``."""
        return Pieces(a=self.a + self.c * delta, c=self.c, lo=self.lo - delta, hi=self.hi - delta)

    def log_integral_sum(self, sigma2: float) -> float:
        """``sum_j log I_j`` at one ``sigma2`` for one draw (``S = 1``): compiled where numba is installed
        (:func:`_log_integral_sum`), else by numpy; the two agree to rounding (tested)."""
        if compiled.available():
            return float(log_integral_sum(self.a[0], self.c[0], self.lo[0], self.hi[0], float(sigma2)))
        return float(np.sum(self.log_integrals(np.array([sigma2]))))


def pieces(layout: LevelLayout, eta: np.ndarray) -> Pieces:
    """The intervals of every level for the rest of the predictor ``eta`` (``(S, n)``, one row per draw)."""
    S = eta.shape[0]
    J, K = layout.shape
    s = layout.slope
    margin = 1.0 - layout.y[layout.safe_rows][None] * eta[:, layout.safe_rows]  # (S, J, K)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(layout.active[None], margin / np.where(layout.active, s, 1.0)[None], np.inf)
    order = np.argsort(b, axis=2)
    b = np.take_along_axis(b, order, axis=2)
    s_sorted = np.take_along_axis(np.broadcast_to(s, (S, J, K)), order, axis=2)
    sb = np.where(s_sorted != 0, s_sorted * np.where(np.isfinite(b), b, 0.0), 0.0)
    pos, neg = s_sorted > 0, s_sorted < 0
    zeros = np.zeros((S, J, 1))
    # interval m in 0..K lies between b[m-1] and b[m]; positives with index >= m and negatives with index < m act
    suffix_s = np.concatenate([np.cumsum((pos * s_sorted)[..., ::-1], axis=2)[..., ::-1], zeros], axis=2)
    suffix_sb = np.concatenate([np.cumsum((pos * sb)[..., ::-1], axis=2)[..., ::-1], zeros], axis=2)
    prefix_s = np.concatenate([zeros, np.cumsum(neg * s_sorted, axis=2)], axis=2)
    prefix_sb = np.concatenate([zeros, np.cumsum(neg * sb, axis=2)], axis=2)
    lo = np.concatenate([np.full((S, J, 1), -np.inf), b], axis=2)
    hi = np.concatenate([b, np.full((S, J, 1), np.inf)], axis=2)
    return Pieces(a=-2.0 * (suffix_sb + prefix_sb), c=2.0 * (suffix_s + prefix_s), lo=lo, hi=hi)


def level_pieces(layout: LevelLayout, eta: np.ndarray) -> Pieces:
    """:func:`pieces` of one draw's predictor ``eta`` (``(n,)``): each level's intervals built in one compiled pass
    where numba is installed (:func:`_level_intervals`, the same intervals to rounding; an empty slot past a level's
    last interval has ``lo = hi = inf``), else by :func:`pieces`."""
    if not compiled.available():
        return pieces(layout, eta[None, :])
    J, K = layout.shape
    a, c, lo, hi = (np.empty((1, J, K + 1)) for _ in range(4))
    compiled_pieces(layout.y, eta, layout.slope, layout.rows, a[0], c[0], lo[0], hi[0])
    return Pieces(a=a, c=c, lo=lo, hi=hi)


def truncated_normal(mean: np.ndarray, sd: float, lo: np.ndarray, hi: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """``N(mean, sd^2)`` truncated to ``[lo, hi]`` by inversion in log space (exact in either tail): with
    ``alpha, beta`` the standardised ends, the CDF's ``log Phi`` when ``alpha <= 0``, else the survival function's."""
    alpha, beta = (lo - mean) / sd, (hi - mean) / sd
    upper = alpha > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        big = log_ndtr(np.where(upper, -alpha, beta))
        small = log_ndtr(np.where(upper, -beta, alpha))
        log_q = big + np.log(uniforms + (1.0 - uniforms) * np.exp(small - big))
        x = ndtri_exp(log_q)
    x = np.where(upper, -x, x)
    return mean + sd * np.clip(x, alpha, beta)


def draw_levels(part: Pieces, sigma2: float, rng: np.random.Generator) -> np.ndarray:
    """One exact draw of every level's random effect given ``sigma2`` (module docstring; ``part`` for one draw,
    ``S = 1``): an interval by its weight (Gumbel-max), then the truncated normal on it."""
    log_terms = part.log_terms(np.array([sigma2]))[0]  # (J, K + 1)
    J = log_terms.shape[0]
    gumbel = -np.log(rng.exponential(size=log_terms.shape))
    chosen = np.argmax(log_terms + gumbel, axis=1)
    pick = (np.arange(J), chosen)
    sd = float(np.sqrt(sigma2))
    return truncated_normal(part.c[0][pick] * sigma2, sd, part.lo[0][pick], part.hi[0][pick], rng.random(J))


def draw_level_effects(layout: LevelLayout, eta: np.ndarray, sigma2: float, rng: np.random.Generator) -> np.ndarray:
    """One exact draw of every level's effect given ``sigma2`` and the rest of the predictor ``eta`` (``(n,)``), as
    :func:`draw_levels` on ``pieces(layout, eta)`` with the same random numbers (the same draw to rounding), but
    without building the intervals of every level: where numba is installed each level's intervals are built, scored,
    chosen and drawn from in one compiled pass (:func:`_compiled_level_draws`)."""
    if not compiled.available():
        return draw_levels(pieces(layout, eta[None, :]), sigma2, rng)
    J, K = layout.shape
    exponentials = rng.exponential(size=(J, K + 1))  # the Gumbels of draw_levels, -log of these
    uniforms = rng.random(J)
    out = np.empty(J)
    compiled_level_draws(layout.y, eta, layout.slope, layout.rows, float(sigma2), exponentials, uniforms, out)
    return out


def draw_level_effects_in_place(
    layout: LevelLayout, f: np.ndarray, values: np.ndarray, codes: np.ndarray, effects: np.ndarray, sigma2: float,
    rng: np.random.Generator,
) -> np.ndarray:  # fmt: skip
    """:func:`draw_level_effects` for a term of every row: the rest of the predictor is ``f - values * effects[codes]``
    (``effects`` the current draws), and ``f`` is moved to the new effects in place (``rest + values * new[codes]``),
    in the same compiled call where numba is installed (the same arithmetic as the numpy path, which it stays without
    numba).  Returns the new effects."""
    rest = f - values * effects[codes] if not compiled.available() else None
    if rest is not None:
        new = draw_level_effects(layout, rest, sigma2, rng)
        f[:] = rest + values * new[codes]
        return new
    J, K = layout.shape
    exponentials = rng.exponential(size=(J, K + 1))  # (the random numbers of draw_level_effects, in its order)
    uniforms = rng.random(J)
    out = np.empty(J)
    compiled_level_draws_in_place(
        layout.y, f, values, codes, np.ascontiguousarray(effects), layout.slope, layout.rows, float(sigma2),
        exponentials, uniforms, np.empty(f.size), out,
    )  # fmt: skip
    return out


#: Below this ``log Phi(x)`` is the asymptotic series (``erfc`` underflows near ``x = -38``).
_SERIES_BELOW = -30.0
_HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))
_SQRT_HALF = float(np.sqrt(0.5))
_LOG_HALF = float(np.log(0.5))
#: Above this many intervals a level's sum runs from its mode outwards (:func:`_windowed_log_integral`); up to it, every
#: interval is added (a level of a few rows under a wide prior: every term counts).
WINDOWED_FROM = 16
#: :func:`_windowed_log_integral` stops where the rest is below ``e^-NEGLIGIBLE_LOG`` of the sum so far: less than half
#: a unit in the last place of the sum's mantissa.
NEGLIGIBLE_LOG = 37.5
#: :func:`_sort_kinks` sorts a level by insertion up to this many rows (quadratic, but no allocation).
INSERTION_ROWS = 32
#: :func:`_interval_term` takes ``Phi`` directly above this standardised end (``Phi(-30) ~ 5e-198``, a normal double):
#: below it ``log Phi`` is :func:`log_ndtr_scalar`'s series, cheaper than ``erfc`` there.
_DIRECT_ABOVE = _SERIES_BELOW


def log_ndtr_scalar(x: float) -> float:
    """``log Phi(x)`` (as :func:`scipy.special.log_ndtr`): ``log1p(-Phi(-x))`` in the upper tail, ``log(erfc / 2)``
    in between, and below :data:`_SERIES_BELOW` the asymptotic series ``-x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2
    + 3/x^4 - 15/x^6 + 105/x^8)`` (relative error below ``945 / x^10``, 2e-12 at ``x = -30``)."""
    if x > 0.0:
        return np.log1p(-0.5 * math.erfc(x / math.sqrt(2.0)))
    if x > _SERIES_BELOW:
        return np.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    if x == -np.inf:
        return -np.inf
    r = 1.0 / (x * x)
    return -0.5 * x * x - np.log(-x) - _HALF_LOG_2PI + np.log1p(r * (-1.0 + r * (3.0 + r * (-15.0 + r * 105.0))))


def _log_interval_in_logs(a, c, lo, hi, sigma2, sd):
    """``log`` of one interval's term of ``I_j`` (module docstring; :func:`log_diff_ndtr` of the standardised ends):
    exact in every tail, for :func:`_log_interval` where taking ``Phi`` directly would lose digits."""
    if hi <= lo:
        return -np.inf
    centre = c * sigma2
    alpha, beta = (lo - centre) / sd, (hi - centre) / sd
    if alpha > 0.0:
        big, small = log_ndtr_compiled(-alpha), log_ndtr_compiled(-beta)
    else:
        big, small = log_ndtr_compiled(beta), log_ndtr_compiled(alpha)
    x = min(small - big, 0.0)
    diff = np.log(-np.expm1(x)) if x > -0.6931 else np.log1p(-np.exp(x))
    return a + 0.5 * c * c * sigma2 + big + diff


def _interval_term(a, c, lo, hi, sigma2, sd):
    """One interval's term of ``I_j`` (module docstring) as ``(log_scale, factor)``, the term being
    ``exp(log_scale) * factor``: ``exp(a + c^2 sigma2 / 2) (Phi(beta) - Phi(alpha))`` by two ``erfc`` where that is as
    exact (the interval mirrored into the lower half, ``Phi(beta) - Phi(alpha)`` above ``Phi(-30)`` and at least a
    quarter of ``Phi(beta)``: at most two bits lost to the difference), else ``(log term, 1)``: written at the
    interval's ends where it lies on one side of its vertex ``c sigma2`` (:func:`_log_interval_anchored`, exact however
    far the vertex), in logs where it holds it (:func:`_log_interval_in_logs`); ``(-inf, 1)`` for an empty interval.
    Kept apart so that a level's sum takes no ``log`` per term (:func:`_level_log_integral`)."""
    if hi <= lo:
        return -np.inf, 1.0
    centre = c * sigma2
    alpha, beta = (lo - centre) / sd, (hi - centre) / sd
    low, high = (-beta, -alpha) if alpha > 0.0 else (alpha, beta)  # Phi(beta) - Phi(alpha) = Phi(-alpha) - Phi(-beta)
    if high > _DIRECT_ABOVE:
        upper = 0.5 * math.erfc(-high * _SQRT_HALF)
        difference = upper - 0.5 * math.erfc(-low * _SQRT_HALF)
        if difference >= 0.25 * upper:
            return a + 0.5 * c * c * sigma2, difference
    if alpha < 0.0 < beta:  # the interval holds the vertex: its logs are of order one
        return _log_interval_in_logs(a, c, lo, hi, sigma2, sd), 1.0
    return _log_interval_anchored(a, c, lo, hi, sigma2, alpha, beta), 1.0


def _log_interval_anchored(a, c, lo, hi, sigma2, alpha, beta):
    """:func:`anchored_log_terms` of one interval on one side of its vertex, ``alpha`` and ``beta`` its standardised
    ends (scipy's ``erfcx``)."""
    if alpha > 0.0:
        near, far, t_near, t_far = lo, hi, alpha * _SQRT_HALF, beta * _SQRT_HALF
    else:
        near, far, t_near, t_far = hi, lo, -beta * _SQRT_HALF, -alpha * _SQRT_HALF
    e_near = a + c * near - 0.5 * near * near / sigma2
    log_x_near = np.log(_special_erfcx(t_near, 0))
    if not (-np.inf < far < np.inf):
        return e_near + _LOG_HALF + log_x_near
    drop = (far - near) * (c - 0.5 * (far + near) / sigma2)  # e(far) - e(near), without their cancellation
    log_r = min(drop + np.log(_special_erfcx(t_far, 0)) - log_x_near, 0.0)
    tail = np.log(-np.expm1(log_r)) if log_r > -0.6931 else np.log1p(-np.exp(log_r))
    return e_near + _LOG_HALF + log_x_near + tail


def _log_interval(a, c, lo, hi, sigma2, sd):
    """``log`` of one interval's term of ``I_j`` (:func:`_interval_term`)."""
    log_scale, factor = _interval_term(a, c, lo, hi, sigma2, sd)
    return log_scale + np.log(factor)


def _interval_bound(a, c, lo, hi, sigma2, sd):
    """An upper bound on :func:`_log_interval` without ``erfc``: with ``e(u) = a + c u - u^2 / (2 sigma2)`` the term is
    ``log int_lo^hi exp(e(u)) du / sqrt(2 pi sigma2)``, at most ``max e = a + c^2 sigma2 / 2`` (``Phi <= 1``), at most
    ``max over the interval of e`` plus ``log((hi - lo) / sqrt(2 pi sigma2))``, and, for an interval ``x > 1``
    standard deviations from the vertex ``c sigma2``, at most ``max e + log(phi(x) / x)`` (Mills' ratio)."""
    if hi <= lo:
        return -np.inf
    vertex = c * sigma2
    peak = a + 0.5 * c * vertex
    bound = peak
    if hi - lo < np.inf:
        u = min(max(vertex, lo), hi)  # e's maximum over the interval
        bound = min(bound, a + c * u - 0.5 * u * u / sigma2 + np.log((hi - lo) / sd) - _HALF_LOG_2PI)
    distance = max(vertex - hi, lo - vertex) / sd
    if distance > 1.0:
        bound = min(bound, peak - 0.5 * distance * distance - np.log(distance) - _HALF_LOG_2PI)
    return bound


def _log_integral_sum(a, c, lo, hi, sigma2):
    """``sum_j log I_j`` from one draw's intervals ``(J, K + 1)``: :func:`_level_log_integral` per level."""
    sd = np.sqrt(sigma2)
    J, M = a.shape
    total = 0.0
    for j in range(J):
        total += _level_log_integral(a[j], c[j], lo[j], hi[j], M, sigma2, sd)
    return total


def _level_log_integral(a, c, lo, hi, count, sigma2, sd):
    """``log I_j`` of one level from its first ``count`` intervals: the sum of the terms of :func:`_interval_term` kept
    as ``exp(largest) * acc`` (:func:`_scaled_sum_step`: one ``exp`` per term and one ``log`` per level); 0 where every
    term is 0.  Above :data:`WINDOWED_FROM` intervals, only those around the integrand's mode
    (:func:`_windowed_log_integral`)."""
    if count > WINDOWED_FROM:
        return _windowed_log_integral(a, c, lo, hi, count, sigma2, sd)
    largest, acc = -np.inf, 0.0
    for q in range(count):
        log_scale, factor = _interval_term(a[q], c[q], lo[q], hi[q], sigma2, sd)
        largest, acc = _scaled_sum_step(largest, acc, log_scale, factor)
    return largest + np.log(acc) if largest > -np.inf else 0.0


def _scaled_sum_step(largest, acc, log_scale, factor):
    """One term ``exp(log_scale) * factor`` (``0 < factor <= 1``) of a streaming sum ``exp(largest) * acc``; a term of
    ``log_scale = -inf`` adds nothing.  ``largest`` is the largest ``log_scale`` so far, so nothing overflows; a term
    whose ``exp(log_scale - largest)`` underflows is below ``e^-700`` of the largest scale's term, whose factor is at
    least ``Phi(-30) / 4`` (about ``e^-455``)."""
    if log_scale == -np.inf:
        return largest, acc
    if log_scale > largest:
        return log_scale, acc * np.exp(largest - log_scale) + factor
    return largest, acc + np.exp(log_scale - largest) * factor


def _windowed_log_integral(a, c, lo, hi, count, sigma2, sd):
    """:func:`_level_log_integral` from the intervals around the integrand's mode: the same sum to rounding.

    The exponent ``g(u) = a_q + c_q u - u^2 / (2 sigma2)`` on interval ``q`` is concave in ``u`` (``c_q`` never
    grows with ``q``: each hinge is concave), so its mode lies in the first interval whose right end has
    ``g' <= 0``, and the mass beyond any point ``x`` on the far side of the mode is at most ``exp(g(x)) / |g'(x)|``
    (the tangent's integral).  The terms are added from the mode's interval outwards, on each side until that bound
    for the rest falls :data:`NEGLIGIBLE_LOG` below the sum so far (below half a unit in its last place)."""
    inverse = 1.0 / sigma2
    normaliser = _HALF_LOG_2PI + np.log(sd)
    top = count - 1
    for q in range(count):
        if c[q] - hi[q] * inverse <= 0.0:
            top = q
            break
    largest, acc = _log_sum_step(-np.inf, 0.0, _log_interval(a[top], c[top], lo[top], hi[top], sigma2, sd))
    for q in range(top + 1, count):  # rightwards: the rest lies beyond lo[q], where g' < 0
        x = lo[q]
        if x == np.inf:
            break
        slope = c[q] - x * inverse
        if (
            slope < 0.0
            and a[q] + c[q] * x - 0.5 * x * x * inverse - np.log(-slope) - normaliser < largest - NEGLIGIBLE_LOG
        ):
            break
        largest, acc = _log_sum_step(largest, acc, _log_interval(a[q], c[q], lo[q], hi[q], sigma2, sd))
    for q in range(top - 1, -1, -1):  # leftwards: the rest lies below hi[q], where g' > 0
        x = hi[q]
        slope = c[q] - x * inverse
        if (
            slope > 0.0
            and a[q] + c[q] * x - 0.5 * x * x * inverse - np.log(slope) - normaliser < largest - NEGLIGIBLE_LOG
        ):
            break
        largest, acc = _log_sum_step(largest, acc, _log_interval(a[q], c[q], lo[q], hi[q], sigma2, sd))
    return largest + np.log(acc) if largest > -np.inf else 0.0


def _log_sum_step(largest, acc, value):
    """One term of a streaming log-sum-exp: the running sum is ``largest + log(acc)``; ``-inf`` terms add nothing."""
    if value == -np.inf:
        return largest, acc
    if value > largest:
        return value, acc * np.exp(largest - value) + 1.0
    return largest, acc + np.exp(value - largest)


def _active_kinks(y, eta, slope, rows, kinks, slopes):
    """One level's active rows' kinks ``b_i = (1 - y_i eta_i) / s_i`` and slopes ``s_i`` (rows with ``s_i != 0``) in
    row order into ``kinks`` and ``slopes``; returns how many."""
    m = 0
    for k in range(slope.size):
        if slope[k] != 0.0:
            i = rows[k]
            kinks[m] = (1.0 - y[i] * eta[i]) / slope[k]
            slopes[m] = slope[k]
            m += 1
    return m


def _sort_kinks(kinks, slopes, m):
    """``kinks[:m]`` sorted in place (``slopes`` alongside); returns ``m``.  By insertion up to :data:`INSERTION_ROWS`
    kinks, else by ``argsort``."""
    if m > INSERTION_ROWS:
        order = np.argsort(kinks[:m])
        kinks[:m] = kinks[:m][order]
        slopes[:m] = slopes[:m][order]
        return m
    for k in range(1, m):
        bk, sk = kinks[k], slopes[k]
        pos = k
        while pos > 0 and kinks[pos - 1] > bk:
            kinks[pos] = kinks[pos - 1]
            slopes[pos] = slopes[pos - 1]
            pos -= 1
        kinks[pos] = bk
        slopes[pos] = sk
    return m


def _mode_split(kinks, slopes, m, inverse):
    """Reorders a level's unsorted kinks (``kinks[:m]``, ``slopes`` alongside) so that the first ``top`` lie below the
    integrand's mode ``u*`` and the rest at or above it; returns ``top``, the mode's interval's index in sorted order.

    The exponent's derivative right of a point ``p``, ``g'(p+) = c(p+) - p / sigma2`` with ``c(p+) = 2 (sum of the
    positive slopes of kinks above p + sum of the negative slopes of kinks at or below p)``, decreases in ``p`` (each
    hinge is concave), so ``u* > p`` exactly where ``g'(p+) > 0``.  Quickselect on that test: each round splits the
    undecided kinks three ways around a median-of-three pivot, gathering the slope sums as it goes, and keeps the side
    holding ``u*``; expected ``O(m)`` where sorting costs ``O(m log m)``.  Ties of the pivot go to the side they lie
    on (above ``u*`` when ``u* <= p``), so every round removes at least the pivot."""
    first, last = 0, m
    negative_left, positive_right = 0.0, 0.0  # slope sums of the kinks decided to lie below / above u*
    while first < last:
        x0, x1, x2 = kinks[first], kinks[(first + last) // 2], kinks[last - 1]
        pivot = max(min(x0, x1), min(max(x0, x1), x2))
        below, i, above = first, first, last  # [first, below) < pivot, [below, i) == pivot, [above, last) > pivot
        negative_below, negative_at, positive_at, positive_above = 0.0, 0.0, 0.0, 0.0
        while i < above:
            b, s = kinks[i], slopes[i]
            if b < pivot:
                if s < 0.0:
                    negative_below += s
                kinks[i], slopes[i] = kinks[below], slopes[below]
                kinks[below], slopes[below] = b, s
                below += 1
                i += 1
            elif b > pivot:
                if s > 0.0:
                    positive_above += s
                above -= 1
                kinks[i], slopes[i] = kinks[above], slopes[above]
                kinks[above], slopes[above] = b, s
            else:
                if s < 0.0:
                    negative_at += s
                else:
                    positive_at += s
                i += 1
        right_slope = 2.0 * (negative_left + negative_below + negative_at + positive_above + positive_right)
        if right_slope - pivot * inverse > 0.0:  # u* > pivot
            negative_left += negative_below + negative_at
            first = above
        else:  # u* <= pivot: the pivot and its ties lie at or above u*
            positive_right += positive_at + positive_above
            last = below
    return first


def _sift_down(keys, values, start, size, i, sign):
    """Restores the heap ``keys[start:start + size]`` (``values`` alongside) below position ``i``: the smallest of
    ``sign * key`` at the root (``sign = 1``: a min-heap, ``-1``: a max-heap)."""
    while True:
        child = 2 * i + 1
        if child >= size:
            return
        if child + 1 < size and sign * keys[start + child + 1] < sign * keys[start + child]:
            child += 1
        if sign * keys[start + child] >= sign * keys[start + i]:
            return
        a, b = start + i, start + child
        keys[a], keys[b] = keys[b], keys[a]
        values[a], values[b] = values[b], values[a]
        i = child


def _heapify(keys, values, start, size, sign):
    """``keys[start:start + size]`` made a heap (:func:`_sift_down`) in ``O(size)``."""
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(keys, values, start, size, i, sign)


def _heap_pop(keys, values, start, size, sign):
    """The root of a heap of ``size`` (:func:`_sift_down`) as ``(key, value)``; the first ``size - 1`` places are the
    heap without it."""
    key, value = keys[start], values[start]
    last = start + size - 1
    keys[start], values[start] = keys[last], values[last]
    _sift_down(keys, values, start, size - 1, 0, sign)
    return key, value


def _log_integral_from_mode(kinks, slopes, m, sigma2, sd):
    """``log I_j`` of a level from its unsorted active kinks (``kinks[:m]``, ``slopes``; reordered): the sum of
    :func:`_windowed_log_integral` without sorting every kink.

    The kinks are split at the mode (:func:`_mode_split`); the mode's interval's ``a`` and ``c`` are the sums of the
    module docstring over the active rows (positive slopes above, negative below); the kinks below are then taken in
    decreasing order from a max-heap and those above in increasing order from a min-heap, each crossing updating
    ``a`` and ``c`` by the crossed hinge (``+-2 s b`` and ``-+2 s``), and each side stops by
    :func:`_windowed_log_integral`'s tangent bound.  Only the crossed kinks are ordered: ``O(m + w log m)`` for a
    window of ``w`` kinks where sorting costs ``O(m log m)``."""
    inverse = 1.0 / sigma2
    normaliser = _HALF_LOG_2PI + np.log(sd)
    top = _mode_split(kinks, slopes, m, inverse)
    a, c = 0.0, 0.0
    for k in range(m):
        s = slopes[k]
        if (s < 0.0) == (k < top):  # active on the mode's interval: a negative slope below it, a positive one above
            a -= 2.0 * s * kinks[k]
            c += 2.0 * s
    n_below, n_above = top, m - top
    _heapify(kinks, slopes, 0, n_below, -1.0)
    _heapify(kinks, slopes, top, n_above, 1.0)
    lo = kinks[0] if n_below > 0 else -np.inf
    hi = kinks[top] if n_above > 0 else np.inf
    largest, acc = _log_sum_step(-np.inf, 0.0, _log_interval(a, c, lo, hi, sigma2, sd))
    a_mode, c_mode = a, c
    while n_above > 0:  # rightwards: the rest lies beyond the crossed kink x, where g' < 0
        x, s = _heap_pop(kinks, slopes, top, n_above, 1.0)
        n_above -= 1
        a, c = (a + 2.0 * s * x, c - 2.0 * s) if s > 0.0 else (a - 2.0 * s * x, c + 2.0 * s)
        slope = c - x * inverse
        if slope < 0.0 and a + c * x - 0.5 * x * x * inverse - np.log(-slope) - normaliser < largest - NEGLIGIBLE_LOG:
            break
        hi = kinks[top] if n_above > 0 else np.inf
        largest, acc = _log_sum_step(largest, acc, _log_interval(a, c, x, hi, sigma2, sd))
    a, c = a_mode, c_mode
    while n_below > 0:  # leftwards: the rest lies below the crossed kink x, where g' > 0
        x, s = _heap_pop(kinks, slopes, 0, n_below, -1.0)
        n_below -= 1
        a, c = (a - 2.0 * s * x, c + 2.0 * s) if s > 0.0 else (a + 2.0 * s * x, c - 2.0 * s)
        slope = c - x * inverse
        if slope > 0.0 and a + c * x - 0.5 * x * x * inverse - np.log(slope) - normaliser < largest - NEGLIGIBLE_LOG:
            break
        lo = kinks[0] if n_below > 0 else -np.inf
        largest, acc = _log_sum_step(largest, acc, _log_interval(a, c, lo, x, sigma2, sd))
    return largest + np.log(acc) if largest > -np.inf else 0.0


def _level_intervals(y, eta, slope, rows, kinks, slopes, suffix_s, suffix_sb, a, c, lo, hi):
    """One level's intervals as :func:`pieces` builds them, from its rows of a :class:`LevelLayout` (``slope``,
    ``rows``: the level's row of each) and the rest of the predictor ``eta``: :func:`_kink_intervals` of its active
    rows' kinks (:func:`_active_kinks`); returns how many (kinks + 1)."""
    m = _active_kinks(y, eta, slope, rows, kinks, slopes)
    return _kink_intervals(kinks, slopes, m, suffix_s, suffix_sb, a, c, lo, hi)


def _kink_intervals(kinks, slopes, m, suffix_s, suffix_sb, a, c, lo, hi):
    """The intervals of a level's ``m`` active kinks (``kinks``, ``slopes``; sorted here, :func:`_sort_kinks`):
    interval ``q`` between the ``q``-th and ``(q + 1)``-th (positive slopes at or after ``q`` and negative ones before
    it act), written to ``a``, ``c``, ``lo``, ``hi``; returns how many (``m + 1``)."""
    _sort_kinks(kinks, slopes, m)
    suffix_s[m] = 0.0
    suffix_sb[m] = 0.0
    for k in range(m - 1, -1, -1):
        positive = slopes[k] > 0.0
        suffix_s[k] = suffix_s[k + 1] + (slopes[k] if positive else 0.0)
        suffix_sb[k] = suffix_sb[k + 1] + (slopes[k] * kinks[k] if positive else 0.0)
    prefix_s, prefix_sb = 0.0, 0.0
    for q in range(m + 1):
        lo[q] = -np.inf if q == 0 else kinks[q - 1]
        hi[q] = np.inf if q == m else kinks[q]
        a[q], c[q] = -2.0 * (suffix_sb[q] + prefix_sb), 2.0 * (suffix_s[q] + prefix_s)
        if q < m and slopes[q] < 0.0:
            prefix_s += slopes[q]
            prefix_sb += slopes[q] * kinks[q]
    return m + 1


def _draws_log_integral_sums(y, eta, slope, rows, sigma2):
    """``sum_j log I_j`` for every draw ``s`` of ``eta (S, n)`` and ``sigma2 (S,)`` straight from a
    :class:`LevelLayout`'s ``slope`` and ``rows`` (``(J, K)``): per level its intervals (:func:`_level_intervals`) and
    their log-sum-exp (:func:`_level_log_integral`), or, for a level of more than :data:`INSERTION_ROWS` active rows,
    the intervals around its mode without sorting the rest (:func:`_log_integral_from_mode`).  Rows with ``s_i = 0``
    are left to the caller (as in the numpy path)."""
    S = eta.shape[0]
    J, K = slope.shape
    out = np.zeros(S)
    kinks, slopes, suffix_s, suffix_sb, a, c, lo, hi, _ = _interval_buffers(K)
    for t in range(S):
        var = sigma2[t]
        sd = np.sqrt(var)
        total = 0.0
        for j in range(J):
            m = _active_kinks(y, eta[t], slope[j], rows[j], kinks, slopes)
            if m > INSERTION_ROWS:
                total += _log_integral_from_mode(kinks, slopes, m, var, sd)
            else:
                count = _kink_intervals(kinks, slopes, m, suffix_s, suffix_sb, a, c, lo, hi)
                total += _level_log_integral(a, c, lo, hi, count, var, sd)
        out[t] = total
    return out


def _interval_buffers(K):
    """Work arrays of :func:`_level_intervals` (and one more of its size) for levels of up to ``K`` rows."""
    return (
        np.empty(K), np.empty(K), np.zeros(K + 1), np.zeros(K + 1),
        np.empty(K + 1), np.empty(K + 1), np.empty(K + 1), np.empty(K + 1), np.empty(K + 1),
    )  # fmt: skip


def _truncated_normal_scalar(mean, sd, lo, hi, uniform):
    """:func:`truncated_normal` of one value, by the same operations (``log_ndtr`` and ``ndtri_exp`` are scipy's own C
    functions here: :func:`bayesvm.linalg.compiled.scipy_special`)."""
    alpha, beta = (lo - mean) / sd, (hi - mean) / sd
    upper = alpha > 0.0
    big = _special_log_ndtr(-alpha if upper else beta, 0)
    small = _special_log_ndtr(-beta if upper else alpha, 0)
    x = _special_ndtri_exp(big + np.log(uniform + (1.0 - uniform) * np.exp(small - big)), 0)
    if upper:
        x = -x
    return mean + sd * min(max(x, alpha), beta)


def _compiled_level_draws(y, eta, slope, rows, sigma2, exponentials, uniforms, out):
    """Each level's draw for :func:`draw_level_effects`: its intervals (:func:`_level_intervals`, the order of
    :func:`pieces`), the one with the largest ``log`` term plus its Gumbel ``-log(exponentials[j, q])`` (Gumbel-max,
    as :func:`draw_levels`), and the truncated normal on it from ``uniforms[j]`` (:func:`_truncated_normal_scalar`),
    written to ``out[j]``.

    The exact terms (two ``erfc`` each) are computed best bound (:func:`_interval_bound`) first and only while a bound
    can still win: once the best term plus its Gumbel exceeds every other interval's bound plus its Gumbel, that
    interval is the maximum (the same choice as evaluating every term)."""
    J, K = slope.shape
    sd = np.sqrt(sigma2)
    kinks, slopes, suffix_s, suffix_sb, a, c, lo, hi, key = _interval_buffers(K)
    gumbel = np.empty(K + 1)
    for j in range(J):
        count = _level_intervals(y, eta, slope[j], rows[j], kinks, slopes, suffix_s, suffix_sb, a, c, lo, hi)
        for q in range(count):
            gumbel[q] = -np.log(exponentials[j, q])
            key[q] = _interval_bound(a[q], c[q], lo[q], hi[q], sigma2, sd) + gumbel[q]
        best = -np.inf
        centre, lo_j, hi_j = 0.0, -np.inf, np.inf  # (every term -inf: numpy's argmax takes the first)
        while True:
            q, top = -1, best
            for r in range(count):
                if key[r] > top:
                    q, top = r, key[r]
            if q < 0:  # no bound left above the best term plus its Gumbel
                break
            key[q] = -np.inf
            value = _log_interval(a[q], c[q], lo[q], hi[q], sigma2, sd)
            if value > -np.inf and value + gumbel[q] > best:
                best = value + gumbel[q]
                centre, lo_j, hi_j = c[q] * sigma2, lo[q], hi[q]
        out[j] = _truncated_normal_scalar(centre, sd, lo_j, hi_j, uniforms[j])


def _compiled_pieces(y, eta, slope, rows, a_out, c_out, lo_out, hi_out):
    """Every level's intervals (:func:`_level_intervals`) into ``(J, K + 1)`` arrays, the empty slots ``a = c = 0``,
    ``lo = hi = inf`` (:func:`level_pieces`)."""
    J, K = slope.shape
    kinks, slopes, suffix_s, suffix_sb, a, c, lo, hi, _ = _interval_buffers(K)
    for j in range(J):
        count = _level_intervals(y, eta, slope[j], rows[j], kinks, slopes, suffix_s, suffix_sb, a, c, lo, hi)
        for q in range(K + 1):
            if q < count:
                a_out[j, q], c_out[j, q], lo_out[j, q], hi_out[j, q] = a[q], c[q], lo[q], hi[q]
            else:
                a_out[j, q], c_out[j, q], lo_out[j, q], hi_out[j, q] = 0.0, 0.0, np.inf, np.inf


def _compiled_level_draws_in_place(y, f, values, codes, effects, slope, rows, sigma2, exponentials, uniforms, rest,
                                   out):  # fmt: skip
    """:func:`_compiled_level_draws` on ``rest = f - values * effects[codes]`` (into the buffer ``rest``), then ``f =
    rest + values * out[codes]`` (:func:`draw_level_effects_in_place`)."""
    for i in range(f.size):
        rest[i] = f[i] - values[i] * effects[codes[i]]
    _compiled_level_draws(y, rest, slope, rows, sigma2, exponentials, uniforms, out)
    for i in range(f.size):
        f[i] = rest[i] + values[i] * out[codes[i]]


if compiled.numba is not None:
    log_ndtr_compiled = compiled.compile_nogil(log_ndtr_scalar)
    _log_interval_in_logs = compiled.compile_nogil(_log_interval_in_logs)
    _special_erfcx = compiled.scipy_special("erfcx")
    _log_interval_anchored = compiled.compile_nogil(_log_interval_anchored)
    _interval_term = compiled.compile_nogil(_interval_term)
    _log_interval = compiled.compile_nogil(_log_interval)
    _scaled_sum_step = compiled.compile_nogil(_scaled_sum_step)
    _log_sum_step = compiled.compile_nogil(_log_sum_step)
    _active_kinks = compiled.compile_nogil(_active_kinks, inline=True)
    _sort_kinks = compiled.compile_nogil(_sort_kinks, inline=True)
    _mode_split = compiled.compile_nogil(_mode_split, inline=True)
    _sift_down = compiled.compile_nogil(_sift_down, inline=True)
    _heapify = compiled.compile_nogil(_heapify, inline=True)
    _heap_pop = compiled.compile_nogil(_heap_pop, inline=True)
    _log_integral_from_mode = compiled.compile_nogil(_log_integral_from_mode, inline=True)
    _interval_bound = compiled.compile_nogil(_interval_bound, inline=True)
    _windowed_log_integral = compiled.compile_nogil(_windowed_log_integral, inline=True)
    _level_log_integral = compiled.compile_nogil(_level_log_integral, inline=True)
    _kink_intervals = compiled.compile_nogil(_kink_intervals, inline=True)
    _level_intervals = compiled.compile_nogil(_level_intervals, inline=True)
    _interval_buffers = compiled.compile_nogil(_interval_buffers, inline=True)
    log_integral_sum = compiled.compile_nogil(_log_integral_sum)
    draws_log_integral_sums = compiled.compile_nogil(_draws_log_integral_sums)
    _special_log_ndtr = compiled.scipy_special("log_ndtr")
    _special_ndtri_exp = compiled.scipy_special("ndtri_exp")
    _truncated_normal_scalar = compiled.compile_nogil(_truncated_normal_scalar, inline=True)
    compiled_level_draws = compiled.compile_nogil(_compiled_level_draws)
    _compiled_level_draws = compiled.compile_nogil(_compiled_level_draws, inline=True)
    compiled_level_draws_in_place = compiled.compile_nogil(_compiled_level_draws_in_place)
    compiled_pieces = compiled.compile_nogil(_compiled_pieces)
else:  # never called: callers check compiled.available()
    log_ndtr_compiled = log_integral_sum = draws_log_integral_sums = compiled_level_draws = None
    compiled_level_draws_in_place = compiled_pieces = None
