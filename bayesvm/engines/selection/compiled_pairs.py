"""The sweep of :mod:`bayesvm.engines.selection.marginal_pairs`, compiled with numba when it is installed.

:func:`pair_sweep` runs the whole sweep over the penalised slopes in one compiled loop: per slope, the pass over
its rows (:func:`pair_window`: the hinge state at the window's left end, the kinks inside it and ``log Z_0``), the
sort of the kinks, the segments' log masses and the tail check, then the inclusion draw, the segment and the value.
It takes the same uniforms as the numpy path (:meth:`marginal_pairs.MarginalPairs.run` without numba) and makes the
same draws up to rounding (a test checks that).  ``log Phi`` is ``log(erfc(-x / sqrt 2) / 2)``, with the asymptotic
series below ``x = -30`` (where its first omitted term is below ``1e-16``); its inverse is Newton's method on
``log Phi``, which is concave, so the iterates approach the root from below after the first step.
"""

from __future__ import annotations

import math

import numpy as np

from ...linalg import compiled

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_ndtr(x: float) -> float:
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    inv = 1.0 / (x * x)
    series = 1.0 - inv * (1.0 - 3.0 * inv * (1.0 - 5.0 * inv * (1.0 - 7.0 * inv)))
    return -0.5 * x * x - math.log(-x) - _HALF_LOG_2PI + math.log(series)


def _log_ndtr_difference(low: float, high: float) -> float:
    if high <= low:
        return -math.inf
    if low > 0.0:
        low, high = -high, -low
    log_high, log_low = _log_ndtr(high), _log_ndtr(low)
    gap = log_low - log_high
    if gap >= 0.0:
        return -math.inf
    return log_high + math.log(-math.expm1(gap))


def _segment_log_mass(lower, upper, alpha, kappa, precision):
    if not upper > lower:
        return -math.inf
    if precision > 0.0:
        mean = kappa / precision
        root = math.sqrt(precision)
        return (
            alpha
            + 0.5 * kappa * mean
            + 0.5 * (math.log(2.0 * math.pi) - math.log(precision))
            + _log_ndtr_difference((lower - mean) * root, (upper - mean) * root)
        )
    width = upper - lower
    if kappa > 0.0:
        return alpha + kappa * upper - math.log(kappa) + math.log(-math.expm1(-kappa * width))
    if kappa < 0.0:
        return alpha + kappa * lower - math.log(-kappa) + math.log(-math.expm1(kappa * width))
    return alpha + math.log(width)


def _pair_window(a, b, precision, inv_scale, center, half_width, cutoff, linear):
    """``(lower, upper, alpha, kappa, log_masses, half_width, log_z0)`` of the segments on the first window around
    ``center`` whose tangent tail bounds are below ``exp(-cutoff)`` of its mass (``marginal_pairs.window``);
    ``inv_scale`` is ``1 / s`` of a Laplace prior (0 with a Gaussian one); ``linear`` adds ``linear * beta`` to the
    log density (0 for one slope; the sheared updates' prior cross terms)."""
    n = a.size
    log_z0 = 0.0
    for i in range(n):
        if a[i] > 0.0:
            log_z0 -= 2.0 * a[i]
    kinks = np.empty(n + 1)
    step_alpha = np.empty(n + 1)
    step_kappa = np.empty(n + 1)
    laplace = precision <= 0.0
    while True:
        lower = center - half_width
        upper = center + half_width
        alpha0 = 0.0
        kappa0 = linear
        count = 0
        for i in range(n):
            if lower == -math.inf:
                active = b[i] > 0.0
            else:
                active = a[i] - b[i] * lower > 0.0
            if upper == math.inf:
                after = b[i] < 0.0
            else:
                after = a[i] - b[i] * upper > 0.0
            if active:
                alpha0 -= 2.0 * a[i]
                kappa0 += 2.0 * b[i]
            if active != after:
                kinks[count] = a[i] / b[i]
                step_alpha[count] = 2.0 * a[i] if b[i] > 0.0 else -2.0 * a[i]
                step_kappa[count] = -2.0 * abs(b[i])
                count += 1
        if laplace:
            kappa0 += inv_scale if lower < 0.0 else -inv_scale
            if lower < 0.0 < upper:
                kinks[count] = 0.0
                step_alpha[count] = 0.0
                step_kappa[count] = -2.0 * inv_scale
                count += 1
        order = np.argsort(kinks[:count], kind="mergesort")
        seg_lower = np.empty(count + 1)
        seg_upper = np.empty(count + 1)
        alpha = np.empty(count + 1)
        kappa = np.empty(count + 1)
        log_masses = np.empty(count + 1)
        seg_lower[0] = lower
        alpha[0] = alpha0
        kappa[0] = kappa0
        for s in range(count):
            k = order[s]
            seg_upper[s] = kinks[k]
            seg_lower[s + 1] = kinks[k]
            alpha[s + 1] = alpha[s] + step_alpha[k]
            kappa[s + 1] = kappa[s] + step_kappa[k]
        seg_upper[count] = upper
        lam = precision if precision > 0.0 else 0.0
        top = -math.inf
        for s in range(count + 1):
            log_masses[s] = _segment_log_mass(seg_lower[s], seg_upper[s], alpha[s], kappa[s], lam)
            if log_masses[s] > top:
                top = log_masses[s]
        total = 0.0
        for s in range(count + 1):
            total += math.exp(log_masses[s] - top)
        total = top + math.log(total)
        left_slope = kappa[0] - lam * lower
        right_slope = kappa[count] - lam * upper
        left_tail = math.inf
        right_tail = math.inf
        if left_slope > 0.0:
            left_tail = alpha[0] + kappa[0] * lower - 0.5 * lam * lower * lower - math.log(left_slope)
        if right_slope < 0.0:
            right_tail = alpha[count] + kappa[count] * upper - 0.5 * lam * upper * upper - math.log(-right_slope)
        if max(left_tail, right_tail) < total - cutoff or half_width == math.inf:
            return seg_lower, seg_upper, alpha, kappa, log_masses, half_width, log_z0
        half_width *= 2.0
        if half_width > 1e12:
            half_width = math.inf


def _lower_inverse_log_ndtr(log_p):
    """``z <= 0`` with ``log Phi(z) = log_p <= log(1/2)`` (Newton's method on ``log Phi``; module docstring)."""
    z = 0.0 if log_p > -2.0 else -math.sqrt(-2.0 * log_p)
    for _ in range(100):
        log_phi = _log_ndtr(z)
        step = (log_phi - log_p) / math.exp(-0.5 * z * z - _HALF_LOG_2PI - log_phi)
        z -= step
        if abs(step) < 1e-13 * (1.0 + abs(z)):
            break
    return z


def _inverse_log_ndtr(log_p):
    """``z`` with ``log Phi(z) = log_p``; the upper half through ``Phi(-z) = 1 - p``."""
    if log_p >= 0.0:
        return math.inf
    if log_p > -0.6931471805599453:
        return -_lower_inverse_log_ndtr(math.log(-math.expm1(log_p)))
    return _lower_inverse_log_ndtr(log_p)


def _segment_draw(lower, upper, kappa, precision, uniform):
    """Inverse-CDF draw on one segment (``marginal_pairs.Segments.draw``)."""
    if precision > 0.0:
        mean = kappa / precision
        sd = 1.0 / math.sqrt(precision)
        low = (lower - mean) / sd
        high = (upper - mean) / sd
        sign = 1.0
        if low > 0.0:
            low, high, sign = -high, -low, -1.0
        mass = _log_ndtr_difference(low, high)
        log_low = _log_ndtr(low)
        term = math.log(uniform) + mass
        top = max(log_low, term)
        log_p = top + math.log(math.exp(log_low - top) + math.exp(term - top))
        z = _inverse_log_ndtr(min(log_p, 0.0))
        return mean + sd * sign * min(max(z, low), high)
    width = upper - lower
    if kappa < 0.0:
        return lower + math.log1p(uniform * math.expm1(kappa * width)) / kappa
    if kappa > 0.0:
        return upper + math.log1p(uniform * math.expm1(-kappa * width)) / kappa
    return lower + uniform * width


def _evidence(a, b, precision, inv_scale, log_constant, center, half_width, cutoff, linear):
    """The segments of one slope on its window, their log masses (with the largest, ``top``, and
    ``sum exp(log_masses - top)``), the window's half width and ``log Z_1 - log Z_0``."""
    lower, upper, alpha, kappa, log_masses, half_width, log_z0 = _pair_window(
        a, b, precision, inv_scale, center, half_width, cutoff, linear
    )
    top = -math.inf
    for s in range(log_masses.size):
        top = max(top, log_masses[s])
    total = 0.0
    for s in range(log_masses.size):
        total += math.exp(log_masses[s] - top)
    log_bf = log_constant + top + math.log(total) - log_z0
    return lower, upper, kappa, log_masses, top, total, half_width, log_bf


def _draw_value(lower, upper, kappa, log_masses, top, total, precision, u_segment, u_value):
    """A segment by its mass, then the value on it (``marginal_pairs.draw_value``)."""
    target = u_segment * total
    running = 0.0
    chosen = log_masses.size - 1
    for s in range(log_masses.size):
        running += math.exp(log_masses[s] - top)
        if running > target:
            chosen = s
            break
    return _segment_draw(lower[chosen], upper[chosen], kappa[chosen], precision, u_value)


def _pair_sweep(
    margin, col_ptr, row_idx, yx, selected, coef, order, precision, inv_scale, log_constant, log_odds, widths,
    uniforms, include, value, probability, cutoff, shrink,
):  # fmt: skip
    """The sweep of :meth:`marginal_pairs.MarginalPairs.run` (``include`` is -1 for a slope with no rows;
    ``probability[j]`` receives ``P(gamma_j = 1 | the rest)``, the prior's where the slope has no rows)."""
    for t in range(order.size):
        j = order[t]
        k = selected[j]
        start = col_ptr[j]
        stop = col_ptr[j + 1]
        if stop == start:
            include[j] = -1
            probability[j] = 1.0 / (1.0 + math.exp(-log_odds[j]))
            continue
        b = yx[start:stop]
        a = np.empty(stop - start)
        current = coef[k]
        for i in range(stop - start):
            a[i] = margin[row_idx[start + i]] + b[i] * current
        lower, upper, kappa, log_masses, top, total, half_width, log_bf = _evidence(
            a, b, precision[j], inv_scale[j], log_constant[j], current, widths[j], cutoff, 0.0
        )
        widths[j] = shrink * half_width
        odds = log_odds[j] + log_bf
        probability[j] = 1.0 / (1.0 + math.exp(-odds))
        new = 0.0
        if uniforms[j, 0] < probability[j]:
            new = _draw_value(lower, upper, kappa, log_masses, top, total, precision[j], uniforms[j, 1], uniforms[j, 2])
            include[j] = 1
        else:
            include[j] = 0
        value[j] = new
        for i in range(stop - start):
            margin[row_idx[start + i]] = a[i] - b[i] * new
        coef[k] = new


def _exchange_sweep(
    margin, col_ptr, row_idx, yx, selected, coef, gamma, pairs, precision, inv_scale, log_constant, log_odds,
    widths, uniforms, include, value, cutoff, shrink,
):  # fmt: skip
    """The exchanges of :meth:`marginal_pairs.MarginalPairs.exchange` (same arguments as :func:`_pair_sweep`, with
    ``gamma`` the current indicators, updated in place, and ``pairs`` the ``(n, 2)`` pairs of slopes)."""
    for t in range(pairs.shape[0]):
        j = pairs[t, 0]
        k = pairs[t, 1]
        if gamma[j] == gamma[k] or col_ptr[j + 1] == col_ptr[j] or col_ptr[k + 1] == col_ptr[k]:
            continue
        if gamma[k] == 1:  # j is the included one
            j, k = k, j
        cj = selected[j]
        ck = selected[k]
        start_j, stop_j = col_ptr[j], col_ptr[j + 1]
        start_k, stop_k = col_ptr[k], col_ptr[k + 1]
        b_j = yx[start_j:stop_j]
        b_k = yx[start_k:stop_k]
        a_j = np.empty(stop_j - start_j)
        for i in range(stop_j - start_j):  # slope j out: both slopes at 0
            a_j[i] = margin[row_idx[start_j + i]] + b_j[i] * coef[cj]
            margin[row_idx[start_j + i]] = a_j[i]
        a_k = np.empty(stop_k - start_k)
        for i in range(stop_k - start_k):
            a_k[i] = margin[row_idx[start_k + i]]
        low_j, up_j, kap_j, mass_j, top_j, tot_j, width_j, bf_j = _evidence(
            a_j, b_j, precision[j], inv_scale[j], log_constant[j], coef[cj], widths[j], cutoff, 0.0
        )
        low_k, up_k, kap_k, mass_k, top_k, tot_k, width_k, bf_k = _evidence(
            a_k, b_k, precision[k], inv_scale[k], log_constant[k], 0.0, widths[k], cutoff, 0.0
        )
        widths[j] = shrink * width_j
        widths[k] = shrink * width_k
        logit = (log_odds[j] + bf_j) - (log_odds[k] + bf_k)
        if uniforms[t, 0] < 1.0 / (1.0 + math.exp(-logit)):  # j stays in, with a new value
            new = _draw_value(low_j, up_j, kap_j, mass_j, top_j, tot_j, precision[j], uniforms[t, 1], uniforms[t, 2])
            for i in range(stop_j - start_j):
                margin[row_idx[start_j + i]] = a_j[i] - b_j[i] * new
            coef[cj] = new
            include[j], value[j], include[k], value[k] = 1, new, 0, 0.0
        else:  # k in, j out
            new = _draw_value(low_k, up_k, kap_k, mass_k, top_k, tot_k, precision[k], uniforms[t, 1], uniforms[t, 2])
            for i in range(stop_k - start_k):
                margin[row_idx[start_k + i]] = a_k[i] - b_k[i] * new
            coef[cj] = 0.0
            coef[ck] = new
            gamma[j], gamma[k] = 0, 1
            include[j], value[j], include[k], value[k] = 0, 0.0, 1, new


def _line_pair(a, b, precision, log_constant, log_odds, center, half_width, cutoff, linear, uniforms):
    """``(included, t, half_width)`` of one sheared pair update (``sheared_pairs.ShearedPairs.run``): the Laplace
    priors are rows of ``a, b`` there, the Gaussian ones ``precision`` and ``linear``."""
    lower, upper, kappa, log_masses, top, total, half_width, log_bf = _evidence(
        a, b, precision, 0.0, log_constant, center, half_width, cutoff, linear
    )
    if uniforms[0] >= 1.0 / (1.0 + math.exp(-(log_odds + log_bf))):
        return False, 0.0, half_width
    t = _draw_value(lower, upper, kappa, log_masses, top, total, precision, uniforms[1], uniforms[2])
    return True, t, half_width


if compiled.numba is not None:
    _log_ndtr = compiled.compile_nogil(_log_ndtr)
    _log_ndtr_difference = compiled.compile_nogil(_log_ndtr_difference)
    _segment_log_mass = compiled.compile_nogil(_segment_log_mass)
    pair_window = compiled.compile_nogil(_pair_window)
    _lower_inverse_log_ndtr = compiled.compile_nogil(_lower_inverse_log_ndtr)
    _inverse_log_ndtr = compiled.compile_nogil(_inverse_log_ndtr)
    _segment_draw = compiled.compile_nogil(_segment_draw)
    _pair_window = pair_window
    _evidence = compiled.compile_nogil(_evidence)
    _draw_value = compiled.compile_nogil(_draw_value)
    pair_sweep = compiled.compile_nogil(_pair_sweep)
    exchange_sweep = compiled.compile_nogil(_exchange_sweep)
    line_pair = compiled.compile_nogil(_line_pair)
else:  # never called: callers check compiled.available()
    pair_window = pair_sweep = exchange_sweep = line_pair = None
