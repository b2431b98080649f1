"""The Gibbs sampler's row pass, compiled with numba (a dependency; ``BAYESVM_NUMBA=0`` switches it off).

On a dense design with a blocked factor, every Gibbs iteration visits each row once to compute
``f_i = d_i' theta_d + z_i' theta_b[j(i)]``, draw ``omega_i | theta ~ InverseGaussian(1 / |1 - y_i f_i|, 1)``
(Luts & Ormerod 2014, Appendix A) and add the row to the sums of the next ``theta`` draw:
``D' W D``, ``D' r``, and per level ``sum w z z'``, ``sum w z_k d'``, ``sum z r`` with ``r = y (1 + omega)``.
With numpy these are a dozen passes over memory and per-level sums through sparse products that hold
the GIL; :func:`row_pass` does them in one pass over a half of the rows without the GIL, so the two
halves run in parallel.  It takes the same standard normals and uniforms as the numpy path
(:func:`gibbs_rows.inverse_gaussian`), so a seed gives the same chain with and without numba (up to the
order of floating-point sums).

numba is optional: without it (or with ``BAYESVM_NUMBA=0`` in the environment) the numpy path runs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...linalg.compiled import (  # noqa: F401  (the compiled plumbing, re-exported for the engines)
    ENVIRONMENT_SWITCH,
    SPARSE_ROWS_DENSITY,
    SPARSE_ROWS_FROM_COLUMNS,
    available,
    compile_nogil,
    numba,
    scipy_special,
    sparse_rows,
)
from ...linalg.row_pattern import add_level_row, add_row_pairs, mirror_lower

#: Rows per block of the pass: a block's weights and responses are drawn first, then its sums are taken column by
#: column while the block is in cache (faster than a rank-one update per row; the pass is insensitive to the block's
#: size over a wide range around this).
BLOCK_ROWS = 256
#: Up to this many columns a block's ``D' W D`` and ``D' r`` are summed pair by pair in registers
#: (:func:`_block_gram`); above, by one BLAS product per block.
REGISTER_SUM_COLUMNS = 16


def inverse_gaussian_scalar(mean: float, normal: float, uniform: float) -> float:
    """One ``InverseGaussian(mean, 1)`` draw from a standard normal and a uniform, as
    :func:`gibbs_rows.inverse_gaussian` (the same operations in the same order)."""
    y = normal * normal
    y *= mean
    t = (y + 4.0) * y
    t = np.sqrt(t) + y
    t = t * t
    x = y * 4.0 * mean / t
    other = mean / x * mean  # (both roots, then a select: a branch on a fair coin mispredicts half the rows)
    return other if (mean + x) * uniform > mean else x


def _row_product(D, i, row_ptr, row_cols, sparse, theta_d):
    """``d_i' theta_d``: over row ``i``'s listed nonzero columns where ``sparse`` (:func:`sparse_rows`), else over
    every column."""
    total = 0.0
    if sparse:
        for t in range(row_ptr[i], row_ptr[i + 1]):
            total += D[i, row_cols[t]] * theta_d[row_cols[t]]
    else:
        for a in range(D.shape[1]):
            total += D[i, a] * theta_d[a]
    return total


def _block_gram(block, size, weights, rhs, gram, product):
    """A block's terms of ``D' W D`` (the lower triangle) and ``D' r``: ``block`` holds its rows' columns as
    contiguous rows (``(q, BLOCK_ROWS)``, the first ``size`` filled), ``weights`` and ``rhs`` its ``omega_i`` and ``r_i``;
    each entry is summed in a register over the block (in SIMD lanes: :data:`REASSOCIATE`), then added.  Updating the
    accumulators in memory row by row would serialise on their stores."""
    q = block.shape[0]
    for a in range(q):
        s = 0.0
        for t in range(size):
            s += rhs[t] * block[a, t]
        product[a] += s
        for b in range(a + 1):
            s = 0.0
            for t in range(size):
                s += weights[t] * block[a, t] * block[b, t]
            gram[a, b] += s


def _block_level_sums(D, start, stop, codes, values, omega, rhs, level0, blocks, cross, rhs_b):
    """Rows ``start..stop``'s terms of the per-level sums ``sum w z z'``, ``sum w z_k d'`` and ``sum z r``
    (``rhs[i - start] = r_i``), one run of equal level codes at a time (rows sorted by level, as the Gibbs chains keep
    them, make each level one run; unsorted codes give shorter runs and the same sums), each entry summed in a
    register over the run (:func:`_block_gram`'s reason)."""
    q, K = D.shape[1], values.shape[1]
    first = start
    while first < stop:
        level = codes[first]
        last = first + 1
        while last < stop and codes[last] == level:
            last += 1
        local = level - level0
        for k in range(K):
            s = 0.0
            for i in range(first, last):
                s += values[i, k] * rhs[i - start]
            rhs_b[local, k] += s
            for k2 in range(K):
                s = 0.0
                for i in range(first, last):
                    s += omega[i] * values[i, k] * values[i, k2]
                blocks[local, k, k2] += s
            for a in range(q):
                s = 0.0
                for i in range(first, last):
                    s += omega[i] * values[i, k] * D[i, a]
                cross[local, k, a] += s
        first = last


def _dense_row_pass(D, y, codes, values, theta_d, theta_b, normals, uniforms, floor, level0, omega, gram, product,
                    blocks, cross, rhs_b):  # fmt: skip
    """:func:`_row_pass` over every column, a block of :data:`BLOCK_ROWS` rows at a time: the block's ``f_i``, hinge
    terms and ``omega_i`` first (its columns copied as contiguous rows on the way), then its sums (:func:`_block_gram`,
    or one BLAS product per block above :data:`REGISTER_SUM_COLUMNS` columns, and :func:`_block_level_sums`)."""
    n, q = D.shape
    K = values.shape[1] if codes.size == n else 0  # (no blocked factor: no level terms)
    wide = q > REGISTER_SUM_COLUMNS
    block = np.empty((0 if wide else q, BLOCK_ROWS))
    weighted = np.empty((BLOCK_ROWS if wide else 0, q))
    weights, rhs = np.empty(BLOCK_ROWS), np.empty(BLOCK_ROWS)
    hinge = 0.0
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        for i in range(start, stop):
            f = 0.0
            for a in range(q):
                f += D[i, a] * theta_d[a]
            for k in range(K):
                f += values[i, k] * theta_b[codes[i], k]
            margin = 1.0 - y[i] * f
            hinge += margin if margin > 0.0 else 0.0
            w = inverse_gaussian_scalar(1.0 / max(abs(margin), floor), normals[i], uniforms[i])
            omega[i] = w
            weights[i - start] = w
            rhs[i - start] = y[i] * (1.0 + w)
            if wide:
                for a in range(q):
                    weighted[i - start, a] = D[i, a] * w
            else:
                for a in range(q):
                    block[a, i - start] = D[i, a]
        size = stop - start
        if wide:
            rows = D[start:stop]
            gram += np.dot(rows.T, weighted[:size])
            product += np.dot(rhs[:size], rows)
        else:
            _block_gram(block, size, weights, rhs, gram, product)
        if K > 0:
            _block_level_sums(D, start, stop, codes, values, omega, rhs, level0, blocks, cross, rhs_b)
    if not wide:
        mirror_lower(gram)
    return hinge


def _sparse_row_pass(D, row_ptr, row_cols, y, codes, values, theta_d, theta_b, normals, uniforms, floor, level0,
                     omega, gram, product, blocks, cross, rhs_b):  # fmt: skip
    """:func:`_row_pass` over each row's listed nonzero columns (``row_ptr``, ``row_cols``), one row at a time."""
    n = D.shape[0]
    has_levels = codes.size == n and n > 0
    hinge = 0.0
    for i in range(n):
        f = _row_product(D, i, row_ptr, row_cols, True, theta_d)
        level = 0
        if has_levels:
            level = codes[i]
            for k in range(values.shape[1]):
                f += values[i, k] * theta_b[level, k]
        margin = 1.0 - y[i] * f
        if margin > 0.0:
            hinge += margin
        w = inverse_gaussian_scalar(1.0 / max(abs(margin), floor), normals[i], uniforms[i])
        omega[i] = w
        r = y[i] * (1.0 + w)
        add_row_pairs(D, i, row_ptr, row_cols, w, r, gram, product)
        if has_levels:
            add_level_row(D, i, row_ptr, row_cols, True, values, level - level0, w, r, blocks, cross, rhs_b)
    mirror_lower(gram)  # the pairs b <= a were summed
    return hinge


def _row_pass(
    D, row_ptr, row_cols, y, codes, values, theta_d, theta_b, normals, uniforms, floor, level0, omega, gram, product,
    blocks, cross, rhs_b,
):  # fmt: skip
    """One pass over rows ``D`` (a half): fills ``omega`` (``omega_i | theta ~ InverseGaussian(1 / |1 - y_i f_i|, 1)``,
    Luts & Ormerod 2014, App. A, step 2), ``gram`` (``D' W D``), ``product`` (``D' r``) and the per-level sums
    ``blocks`` (``sum w z z'``), ``cross`` (``sum w z_k d'``) and ``rhs_b`` (``sum z r``) for levels ``level0, level0 +
    1, ...`` (index ``codes[i] - level0``); returns ``sum_i max(0, 1 - y_i f_i)``.

    ``codes`` of size 0 means no blocked factor.  ``row_ptr`` of size ``n + 1`` with ``row_cols`` lists each row's
    nonzero columns (:func:`sparse_rows`): then only those are visited, and ``D' W D`` is summed over each row's
    pairs of them instead of over every column (a crossed factor's indicators in the dense part: guImmun's 177
    columns, about 15 nonzero per row; :func:`_sparse_row_pass`); of size 0, every column (:func:`_dense_row_pass`).
    The accumulators are zeroed here.  Written so that the same function also runs uncompiled (the tests run both).
    """
    gram[:] = 0.0
    product[:] = 0.0
    blocks[:] = 0.0
    cross[:] = 0.0
    rhs_b[:] = 0.0
    if row_ptr.size == D.shape[0] + 1:
        return _sparse_row_pass(D, row_ptr, row_cols, y, codes, values, theta_d, theta_b, normals, uniforms, floor,
                                level0, omega, gram, product, blocks, cross, rhs_b)  # fmt: skip
    return _dense_row_pass(D, y, codes, values, theta_d, theta_b, normals, uniforms, floor, level0, omega, gram,
                           product, blocks, cross, rhs_b)  # fmt: skip


if numba is not None:
    inverse_gaussian_scalar = compile_nogil(inverse_gaussian_scalar)
    _row_product = compile_nogil(_row_product, inline=True)
    _block_gram = compile_nogil(_block_gram, reassociate=True)
    _block_level_sums = compile_nogil(_block_level_sums, reassociate=True)
    _dense_row_pass = compile_nogil(_dense_row_pass, reassociate=True)
    _sparse_row_pass = compile_nogil(_sparse_row_pass)
    row_pass = compile_nogil(_row_pass)
else:  # never called: callers check available()
    row_pass = None


def _hinge_sum(a, b, d):
    """``sum_i max(0, a_i - d b_i)``, one pass over the rows (compiled with :data:`REASSOCIATE`: in SIMD lanes)."""
    total = 0.0
    for i in range(a.size):
        r = a[i] - d * b[i]
        total += r if r > 0.0 else 0.0
    return total


def _hinge_sums3(a, b, d0, d1, d2):
    """:func:`_hinge_sum` at three values of ``d`` in one pass over the rows."""
    s0, s1, s2 = 0.0, 0.0, 0.0
    for i in range(a.size):
        r0, r1, r2 = a[i] - d0 * b[i], a[i] - d1 * b[i], a[i] - d2 * b[i]
        s0 += r0 if r0 > 0.0 else 0.0
        s1 += r1 if r1 > 0.0 else 0.0
        s2 += r2 if r2 > 0.0 else 0.0
    return s0, s1, s2


def _hinge_slice(a, b, c, log_scale, x0, width, exponential, uniforms, steps):
    """One slice-sampling update (stepping out, then shrinkage; Neal 2003) of the densities of the Gibbs sampler's
    moves with the augmentation integrated out (:mod:`bayesvm.engines.linear.interweave`):

        log p(t) = -2 sum_i max(0, a_i - d b_i) + c_0 d^2 + c_1 / d + c_2 / d^2 + c_3 t,

    ``d = e^t`` (``log_scale``: the rescaling moves) or ``d = t`` (a coefficient's update; ``c_1 = c_2 = 0``).
    The random numbers are given: ``exponential`` sets the slice's level, ``uniforms[0]`` places the bracket and
    ``uniforms[1:]`` are the shrinkage proposals, so this compiled loop and the numpy path
    (:func:`bayesvm.engines.linear.interweave.hinge_slice` without numba) make the same draw.

    The densities at ``x0`` and at both ends of the first bracket are summed in one pass over the rows (a pass is
    bound by memory, so three sums cost about as much as one); every later
    evaluation is a pass of its own.
    """

    def smooth(t):
        d = np.exp(t) if log_scale else t
        out = c[0] * d * d + c[3] * t
        if c[1] != 0.0 or c[2] != 0.0:
            out += c[1] / d + c[2] / (d * d)
        return out

    def log_density(t):
        d = np.exp(t) if log_scale else t
        return -2.0 * _hinge_sum(a, b, d) + smooth(t)

    left = x0 - width * uniforms[0]
    right = left + width
    d0, d_left, d_right = (np.exp(x0), np.exp(left), np.exp(right)) if log_scale else (x0, left, right)
    at_x0, at_left, at_right = _hinge_sums3(a, b, d0, d_left, d_right)
    level = -2.0 * at_x0 + smooth(x0) - exponential
    value = -2.0 * at_left + smooth(left)
    for _ in range(steps):
        if value <= level:
            break
        left -= width
        value = log_density(left)
    value = -2.0 * at_right + smooth(right)
    for _ in range(steps):
        if value <= level:
            break
        right += width
        value = log_density(right)
    for s in range(1, uniforms.size):
        x = left + (right - left) * uniforms[s]
        if log_density(x) > level:
            return x
        if x < x0:
            left = x
        else:
            right = x
    return x0


def _coordinate_sweep(
    theta, f, margin, columns, col_ptr, row_idx, x_values, slope_values, widths, precision, exponentials, uniforms,
    steps,
):  # fmt: skip
    """The coordinate moves of :meth:`bayesvm.engines.linear.interweave.ScaleMoves.coordinate_moves` in one compiled
    loop: column ``columns[t]`` (its rows ``row_idx[col_ptr[t]:col_ptr[t + 1]]``, values ``x`` and ``y x`` there) by
    :func:`_hinge_slice` (compiled) with ``c = (-precision[t] / 2, 0, 0, 0)``, on the random numbers the numpy path draws
    for it (``exponentials[t]``, ``uniforms[t]``); ``theta``, ``f`` and ``margin = y f`` are updated in place."""
    c = np.zeros(4)
    for t in range(columns.size):
        j = columns[t]
        start, stop = col_ptr[t], col_ptr[t + 1]
        old = theta[j]
        slope, x = slope_values[start:stop], x_values[start:stop]
        c[0] = -0.5 * precision[t]
        if stop - start == f.size:  # every row (the rows are sorted and distinct): no indirection, so it vectorises
            base = np.empty(f.size)
            for i in range(f.size):
                base[i] = 1.0 - margin[i] + old * slope[i]
            new = hinge_slice(base, slope, c, False, old, widths[t], exponentials[t], uniforms[t], steps)
            step = new - old
            for i in range(f.size):
                f[i] += step * x[i]
                margin[i] += step * slope[i]
        else:
            base = np.empty(stop - start)
            for i in range(start, stop):
                base[i - start] = 1.0 - margin[row_idx[i]] + old * slope_values[i]
            new = hinge_slice(base, slope, c, False, old, widths[t], exponentials[t], uniforms[t], steps)
            for i in range(start, stop):
                f[row_idx[i]] += (new - old) * x_values[i]
                margin[row_idx[i]] += (new - old) * slope_values[i]
        theta[j] = new


def _line_sums(a, b, t):
    """``(A, B)``: the sums of ``a_i`` and of ``b_i`` over the rows with ``a_i - t b_i > 0``, so that on the piece of
    the line density containing ``t``, ``g(s) = -2 (A - s B) + c0 s^2 + c3 s`` (one pass over the rows)."""
    total, slope = 0.0, 0.0
    for i in range(a.size):
        active = 1.0 if a[i] - t * b[i] > 0.0 else 0.0  # (a select, not a branch: the loop runs in SIMD lanes)
        total += active * a[i]
        slope += active * b[i]
    return total, slope


def _line_start_sums(a, b, width):
    """In one pass over the rows: ``sum_i max(a_i, 0)`` (``g(0)``'s) and :func:`_line_sums` at ``width`` and at
    ``-width`` (the first points of the two ends' searches)."""
    zero, right, right_slope, left, left_slope = 0.0, 0.0, 0.0, 0.0, 0.0
    for i in range(a.size):
        zero += a[i] if a[i] > 0.0 else 0.0
        shift = width * b[i]
        on_right = 1.0 if a[i] - shift > 0.0 else 0.0
        on_left = 1.0 if a[i] + shift > 0.0 else 0.0
        right += on_right * a[i]
        right_slope += on_right * b[i]
        left += on_left * a[i]
        left_slope += on_left * b[i]
    return zero, right, right_slope, left, left_slope


def _line_sums_numpy(a, b, t):
    """:func:`_line_sums` by numpy (where numba is not installed)."""
    active = a - t * b > 0.0
    return float(np.sum(a[active])), float(np.sum(b[active]))


def _line_start_sums_numpy(a, b, width):
    """:func:`_line_start_sums` by numpy (where numba is not installed)."""
    return (float(np.sum(np.maximum(a, 0.0))),) + _line_sums_numpy(a, b, width) + _line_sums_numpy(a, b, -width)


def _piece_root(c0, beta, gamma, sign):
    """The root on side ``sign`` of 0 of ``c0 s^2 + beta s + gamma`` with ``gamma > 0 >= c0`` (one root on each side
    of 0 where ``c0 < 0``), without cancellation; NaN where there is none on that side."""
    if c0 == 0.0:
        if beta * sign >= 0.0:
            return np.nan
        return -gamma / beta
    root = np.sqrt(max(beta * beta - 4.0 * c0 * gamma, 0.0))
    q = -0.5 * (beta + root) if beta >= 0.0 else 0.5 * (root - beta)
    first, second = q / c0, gamma / q  # (the two roots: of opposite signs)
    return first if first * sign > 0.0 else second


def _slice_end(a, b, c0, c3, level, t, total, slope, steps):
    """The end on the side of ``t`` of 0 of the slice ``{s: g(s) > level}`` of the concave
    ``g(s) = -2 sum_i max(0, a_i - s b_i) + c0 s^2 + c3 s`` (``g(0) > level``, ``c0 <= 0``), from the first point
    ``t`` with its :func:`_line_sums` ``total`` and ``slope``: stepping out by doubling ``t``, then from outside the
    slice the root of ``level`` on the quadratic piece of ``g`` at the current point, repeated until a root lies on its
    own piece (then it is the end, exactly).  Each piece's quadratic lies on or above ``g`` (``g`` is the minimum of
    them), so each root is outside the slice or on its end, nearer to it than the last point.  Returns NaN where
    ``steps`` doublings stay inside (an unbounded slice: an improper line)."""
    sign = 1.0 if t > 0.0 else -1.0
    outside = False
    for _ in range(steps):
        if -2.0 * (total - t * slope) + c0 * t * t + c3 * t <= level:
            outside = True
            break
        t *= 2.0
        total, slope = _line_sums(a, b, t)
    if not outside:
        return np.nan
    for _ in range(a.size + 2):  # (each repeat crosses at least one kink)
        new = _piece_root(c0, 2.0 * slope + c3, -2.0 * total - level, sign)
        if not np.isfinite(new) or new * sign >= t * sign:  # (rounding at the end: stay)
            return t
        new_total, new_slope = _line_sums(a, b, new)
        if new_total == total and new_slope == slope:  # the root is on its own piece: the end
            return new
        if -2.0 * (new_total - new * new_slope) + c0 * new * new + c3 * new >= level:  # on the end, to rounding
            return new
        t, total, slope = new, new_total, new_slope
    return t


def overrelaxed_line(a, b, c0, c3, exponential, width, steps):
    """One over-relaxed slice update from ``t = 0`` of the concave line density
    ``g(t) = -2 sum_i max(0, a_i - t b_i) + c0 t^2 + c3 t`` (Neal 2003, section 6): the slice at the level
    ``g(0) - exponential`` is an interval ``[L, R]`` around 0 (``g`` is concave), and ``L + R``, the reflection of 0
    through its middle, keeps the uniform distribution on it (an involution that preserves length), so the update
    keeps ``g``'s density.  The ends are exact roots of ``g``'s quadratic pieces (:func:`_slice_end`), so ``L + R``
    lies inside the slice; 0 is kept where a slice is unbounded (an improper line).  Returns the step and the slice's
    half-width (NaN where unbounded).  ``width``: the first point of the ends' searches (:func:`line_start`)."""
    zero, right, right_slope, left, left_slope = _line_start_sums(a, b, width)
    level = -2.0 * zero - exponential
    upper = _slice_end(a, b, c0, c3, level, width, right, right_slope, steps)
    lower = _slice_end(a, b, c0, c3, level, -width, left, left_slope, steps)
    if not (np.isfinite(upper) and np.isfinite(lower)):
        return 0.0, np.nan
    return lower + upper, 0.5 * (upper - lower)


#: The direction moves' memory of each line's scale (:func:`line_start`): the share of the newest slice in it, and the
#: first point of the ends' searches in units of the slice's expected half-width.
SCALE_MEMORY, START_FACTOR = 0.3, 1.25


def line_start(scale, exponential):
    """The first point of the ends' searches for a level ``exponential`` below the current point's: where a line's
    density is near a normal of SD ``scale``, its slice's half-width is ``scale sqrt(2 exponential)``; this a little
    beyond it, so one pass usually lands outside and the pieces' roots start near the ends.  The ends found do not
    depend on it (:func:`_slice_end` solves for them exactly), only the passes it takes."""
    return START_FACTOR * scale * np.sqrt(2.0 * exponential) + 1e-12 * scale


def line_scale(scale, half_width, exponential):
    """The line's scale after a slice of ``half_width`` at the level ``exponential``: a running average
    (:data:`SCALE_MEMORY`) of ``half_width / sqrt(2 exponential)``; unchanged where the slice was unbounded."""
    if not np.isfinite(half_width) or exponential <= 0.0:
        return scale
    return (1.0 - SCALE_MEMORY) * scale + SCALE_MEMORY * half_width / np.sqrt(2.0 * exponential)


def _direction_sweep(
    theta, f, margin, columns, directions, direction_x, direction_slope, scales, precision, exponentials, steps
):  # fmt: skip
    """The direction moves of :meth:`bayesvm.engines.linear.interweave.ScaleMoves.direction_moves` in one compiled
    loop: along direction ``k`` (``directions[:, k]`` over the coefficients ``columns``; ``direction_x[k]`` its
    row values and ``direction_slope[k]`` those times ``y``, contiguous rows) the over-relaxed step ``t`` of :func:`overrelaxed_line`
    with ``c0 = -a / 2``, ``c3 = -b``, ``a = v' Lambda v`` and ``b = v' Lambda theta`` (the normal prior along the line),
    on the level's exponential ``exponentials[k]``, its ends' searches started by :func:`line_start` from the line's
    ``scales[k]``; ``theta``, ``f``, ``margin = y f`` and ``scales`` (:func:`line_scale`) are updated in place."""
    n = f.size
    base = np.empty(n)
    for k in range(directions.shape[1]):
        a = 0.0
        b = 0.0
        for j in range(columns.size):
            a += directions[j, k] * precision[j] * directions[j, k]
            b += directions[j, k] * precision[j] * theta[columns[j]]
        for i in range(n):
            base[i] = 1.0 - margin[i]
        start = line_start(scales[k], exponentials[k])
        step, half_width = overrelaxed_line(base, direction_slope[k], -0.5 * a, -b, exponentials[k], start, steps)
        scales[k] = line_scale(scales[k], half_width, exponentials[k])
        for j in range(columns.size):
            theta[columns[j]] += step * directions[j, k]
        for i in range(n):
            f[i] += step * direction_x[k, i]
            margin[i] += step * direction_slope[k, i]


class FixedMoveArrays(NamedTuple):
    """The global rescaling and the fixed effects' coordinate and direction moves (:func:`_global_and_fixed_moves`):
    the rows' ``ones``; the free columns and their prior precisions (``n_free`` of them); the global move's slice width
    and uniforms; each coefficient's prior precision (``base_precision``, plus ``1 / variances[c]`` where
    ``penalty_of_column`` names the learned penalty ``c``); the swept columns in compressed-column form (``columns``,
    ``col_ptr``, ``row_idx``, ``x_values``, ``slope_values``) with their slice widths and random numbers; the fixed
    directions, their predictor and margin changes, scales and random numbers."""

    ones: np.ndarray
    free: np.ndarray
    free_precision: np.ndarray
    n_free: float
    global_width: float
    global_uniforms: np.ndarray
    base_precision: np.ndarray
    penalty_of_column: np.ndarray
    columns: np.ndarray
    col_ptr: np.ndarray
    row_idx: np.ndarray
    x_values: np.ndarray
    slope_values: np.ndarray
    widths: np.ndarray
    coordinate_exponentials: np.ndarray
    coordinate_uniforms: np.ndarray
    directions: np.ndarray
    direction_x: np.ndarray
    direction_slope: np.ndarray
    scales: np.ndarray
    direction_exponentials: np.ndarray


def _global_and_fixed_moves(theta_d, theta_b, f, y, exponent, quadratic, global_exponential, variances, moves, steps):
    """:meth:`bayesvm.engines.linear.interweave.ScaleMoves.global_move`, then ``coordinate_moves`` and
    ``direction_moves``, in one compiled call on the random numbers they draw, in their order (the Python glue between
    the three kernels cost about as much as the global move's own pass on toenail).  The global move's prior terms
    (``exponent``, ``quadratic``: no inverse-Wishart term) come from the caller; ``variances`` (each component's) are
    rescaled by ``d^2`` in place, the coefficients' prior precisions are ``base_precision`` plus ``1 / variances[c]``
    on the columns of the learned penalty ``c`` (``penalty_of_column``, -1 elsewhere); the moves' arrays are ``moves``
    (a :class:`FixedMoveArrays`).  ``theta_d``, ``theta_b`` and ``f`` are updated in place; returns ``d``."""
    free, free_precision, columns = moves.free, moves.free_precision, moves.columns
    n = f.size
    margin = np.empty(n)
    for i in range(n):
        margin[i] = y[i] * f[i]
    fixed_sq = 0.0
    for t in range(free.size):
        fixed_sq += theta_d[free[t]] * (free_precision[t] * theta_d[free[t]])
    c = np.zeros(4)
    c[0], c[2], c[3] = -0.5 * fixed_sq, -0.5 * quadratic, exponent
    d = np.exp(hinge_slice(moves.ones, margin, c, True, 0.0, moves.global_width, global_exponential,
                           moves.global_uniforms, steps))  # fmt: skip
    for j in range(theta_d.size):
        theta_d[j] = theta_d[j] * d
    for j in range(theta_b.shape[0]):
        for k in range(theta_b.shape[1]):
            theta_b[j, k] = theta_b[j, k] * d
    for i in range(n):
        f[i] = f[i] * d
    for v in range(variances.size):
        variances[v] = variances[v] * d * d
    precision = moves.base_precision.copy()
    for j in range(precision.size):
        if moves.penalty_of_column[j] >= 0:
            precision[j] += 1.0 / variances[moves.penalty_of_column[j]]
    swept = np.empty(columns.size)
    for t in range(columns.size):
        swept[t] = precision[columns[t]]
    for i in range(n):
        margin[i] = y[i] * f[i]
    coordinate_sweep(theta_d, f, margin, columns, moves.col_ptr, moves.row_idx, moves.x_values, moves.slope_values,
                     moves.widths, swept, moves.coordinate_exponentials, moves.coordinate_uniforms, steps)  # fmt: skip
    if moves.directions.shape[1] > 0:
        for i in range(n):
            margin[i] = y[i] * f[i]
        direction_sweep(theta_d, f, margin, columns, moves.directions, moves.direction_x, moves.direction_slope,
                        moves.scales, swept, moves.direction_exponentials, steps)  # fmt: skip
    return d


if numba is not None:
    hinge_slice = compile_nogil(_hinge_slice)
    _hinge_sum = compile_nogil(_hinge_sum, reassociate=True)
    _hinge_sums3 = compile_nogil(_hinge_sums3, reassociate=True)
    _line_sums = compile_nogil(_line_sums, reassociate=True)
    _line_start_sums = compile_nogil(_line_start_sums, reassociate=True)
    line_start = compile_nogil(line_start, inline=True)
    line_scale = compile_nogil(line_scale, inline=True)
    _piece_root = compile_nogil(_piece_root, inline=True)
    _slice_end = compile_nogil(_slice_end)
    overrelaxed_line = compile_nogil(overrelaxed_line)
    direction_sweep = compile_nogil(_direction_sweep)
    coordinate_sweep = compile_nogil(_coordinate_sweep)
    global_and_fixed_moves = compile_nogil(_global_and_fixed_moves)
else:  # never called: callers check available()
    hinge_slice = coordinate_sweep = direction_sweep = global_and_fixed_moves = None
    _line_sums = _line_sums_numpy  # (the direction moves' numpy path runs overrelaxed_line: its passes by numpy)
    _line_start_sums = _line_start_sums_numpy


def _intercept_draw(gram, product, prior_dd, blocks, cross, rhs_b, prior_b, eps_d, eps_b, theta_d, theta_b):
    """``theta | w ~ N(P^-1 C' r, P^-1)`` for a blocked factor of one column per level (a random intercept), from the
    row sums of :func:`_row_pass`, as :func:`bayesvm.linalg.dense.gaussian_draw` does it (Luts & Ormerod 2014, App. A,
    step 1; the Schur complement of DESIGN section 5) on the same standard normals: with ``p_j = blocks_j + prior_b``
    and ``g_j = cross_j / p_j``, ``S = gram + prior_dd - sum_j cross_j' g_j = L L'``, ``theta_d = S^-1 (product -
    sum_j g_j rhs_j) + L^-T eps_d`` and ``theta_j = (rhs_j - cross_j theta_d) / p_j + eps_j / sqrt(p_j)``.  Fills
    ``theta_d`` (``q``) and ``theta_b`` (``J x 1``); returns False, filling nothing, where ``S`` is not positive
    definite in floating point (the caller then takes ``gaussian_draw``'s path, which has a square-root fallback)."""
    q, J = gram.shape[0], blocks.shape[0]
    schur = gram + prior_dd
    rhs = product.copy()
    nonzero = np.empty(q, dtype=np.int64)
    for j in range(J):
        inverse = 1.0 / (blocks[j, 0, 0] + prior_b)
        count = 0  # the columns a level's rows touch (its fixed effects, and a crossed factor's level or two)
        for a in range(q):
            if cross[j, 0, a] != 0.0:
                nonzero[count] = a
                count += 1
        for t in range(count):
            a = nonzero[t]
            gain = cross[j, 0, a] * inverse
            rhs[a] -= gain * rhs_b[j, 0]
            for t2 in range(t + 1):  # (a zero entry subtracts nothing: the same sums as over every column)
                b = nonzero[t2]
                schur[a, b] -= gain * cross[j, 0, b]
    chol = np.zeros((q, q))
    for a in range(q):
        for b in range(a + 1):
            s = schur[a, b]
            for k in range(b):
                s -= chol[a, k] * chol[b, k]
            if a == b:
                if not s > 0.0 or not np.isfinite(s):
                    return False
                chol[a, a] = np.sqrt(s)
            else:
                chol[a, b] = s / chol[b, b]
    half = np.empty(q)  # L half = rhs
    for a in range(q):
        s = rhs[a]
        for k in range(a):
            s -= chol[a, k] * half[k]
        half[a] = s / chol[a, a]
    both = half + eps_d  # L' theta_d = half + eps: the mean plus L^-T eps in one back substitution
    for a in range(q - 1, -1, -1):
        s = both[a]
        for k in range(a + 1, q):
            s -= chol[k, a] * theta_d[k]
        theta_d[a] = s / chol[a, a]
    for j in range(J):
        inverse = 1.0 / (blocks[j, 0, 0] + prior_b)
        s = rhs_b[j, 0]
        for a in range(q):
            s -= cross[j, 0, a] * theta_d[a]
        theta_b[j, 0] = s * inverse + np.sqrt(inverse) * eps_b[j, 0]
    return True


if numba is not None:
    intercept_draw = compile_nogil(_intercept_draw)
else:  # never called: callers check available()
    intercept_draw = None


def _intercept_rescale(
    theta_b, column, rows, codes, values, y, f, subset, variance, power, prior_quadratic, prior_linear, exponential,
    uniforms, steps, width,
):  # fmt: skip
    """The rescaling move of a random intercept's uninformative levels (``subset``) with its variance, ``w``
    integrated out (:meth:`bayesvm.engines.linear.interweave.ScaleMoves._blocked_intercept_move`, whose numpy twin is
    the general loop of ``ScaleMoves._moves`` with ``k = 1``): over the rescaled levels' rows ``rows`` (their
    ``codes``, term ``values`` and ``y``), ``b_i = z_i u_j(i)``; ``log d`` by :func:`_hinge_slice` with
    ``c = (0, -prior_linear / 2, -(sum_kept u^2 / variance + prior_quadratic) / 2, 2 - n_kept - power)``.  Updates
    ``theta_b[subset, column]`` and ``f`` in place and returns ``d`` (1 where every ``b_i`` is 0)."""
    m = rows.size
    b, margin, slope = np.empty(m), np.empty(m), np.empty(m)
    moved = False
    for t in range(m):
        value = values[t] * theta_b[codes[t], column]
        b[t] = value
        margin[t] = 1.0 - y[t] * (f[rows[t]] - value)
        slope[t] = y[t] * value
        moved = moved or value != 0.0
    if not moved:
        return 1.0
    kept_squares, kept = 0.0, 0
    for j in range(subset.size):
        if not subset[j]:
            kept_squares += theta_b[j, column] * theta_b[j, column]
            kept += 1
    c = np.zeros(4)
    c[1] = -0.5 * prior_linear
    c[2] = -0.5 * (kept_squares / variance + prior_quadratic)
    c[3] = 2.0 - kept - power
    d = np.exp(hinge_slice(margin, slope, c, True, 0.0, width, exponential, uniforms, steps))
    for j in range(subset.size):
        if subset[j]:
            theta_b[j, column] *= d
    for t in range(m):
        f[rows[t]] += (d - 1.0) * b[t]
    return d


if numba is not None:
    intercept_rescale = compile_nogil(_intercept_rescale)
else:  # never called: callers check available()
    intercept_rescale = None


def _predictor(D, row_ptr, row_cols, codes, values, theta_d, theta_b, f):
    """``f_i = d_i' theta_d + z_i' theta_b[code_i]`` for every row into ``f`` (``codes`` of size 0: no blocked factor),
    as :meth:`bayesvm.engines.linear.gibbs_rows.DenseRows.predictor` computes it with numpy; over each row's nonzero
    columns where ``row_ptr`` has ``n + 1`` entries (:func:`sparse_rows`)."""
    n, q = D.shape
    K = values.shape[1]
    has_levels = codes.size == n and n > 0
    sparse = row_ptr.size == n + 1
    for i in range(n):
        total = _row_product(D, i, row_ptr, row_cols, sparse, theta_d)
        if has_levels:
            for k in range(K):
                total += values[i, k] * theta_b[codes[i], k]
        f[i] = total


if numba is not None:
    predictor = compile_nogil(_predictor)
else:  # never called: callers check available()
    predictor = None
