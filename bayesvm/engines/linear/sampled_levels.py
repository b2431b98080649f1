"""A level's hinge pseudo-likelihood integrated over its random-effect vector by importance sampling.

For a blocked grouping factor whose levels carry ``K`` coefficients ``u_j ~ N(0, Sigma_b)`` (a correlated term
``(1 + x | g)``, or several terms of one factor) no closed form exists (:mod:`bayesvm.engines.hinge_levels` integrates
one coefficient per level).  Given the other coefficients ``theta_d`` (linear predictor ``eta``),

    I_j(theta_d) = int prod_{i in j} exp(-2 w_i max(0, 1 - y_i (eta_i + z_i' u))) N(u; 0, Sigma_b) du

is estimated by importance sampling from ``r_j(u | theta_d) = N(c_j, B_j)``, EP's own conditional of ``u_j`` given
``theta_d`` at the node (``c_j = mu_j - G_j (theta_d - mu_d)``, ``B_j = P_jj^{-1}``, ``G_j = P_jj^{-1} P_jd`` from
the Schur elimination: :class:`bayesvm.linalg.dense.GaussianPosterior`), with ``M`` draws per level (half of them
antithetic):

    I_j ~= (1 / M) sum_m prod_i t_i(eta_i + z_i' u_m) N(u_m; 0, Sigma_b) / r_j(u_m | theta_d),   u_m ~ r_j.

Each ``I_j`` estimate is unbiased and the draws are independent across levels and outer draws, so the product over
levels is unbiased for ``prod_j I_j`` (what the node's evidence needs, :mod:`bayesvm.engines.linear.node_evidence`).
The standard normals come from a fixed seed, so the estimate is a smooth function of the variance parameters (common
random numbers across the nodes).  Rows outside the factor (``codes == -1``) contribute their hinge as a constant.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from ...linalg.row_threads import in_two_parts
from ..hinge_levels import LevelLayout, size_classes
from . import compiled_rows

#: Inner draws per level and outer draw.  On the correlated-slope schizophrenia design (44 levels, 2 coefficients
#: each) the variance components and fixed-effect SDs agree to 1-2% between 16 and 256 inner draws.
INNER_DRAWS = 32
#: Outer draws x rows x inner draws computed at a time by the numpy path (a handful of arrays of this many doubles
#: are alive at once).
CHUNK_VALUES = 4e6
#: Inner normals per chunk of outer draws on the compiled path: chunks of about this size fill
#: :data:`CACHED_NORMALS` closely where a fit's normals do not all fit.
NORMALS_PER_CHUNK = 1e6
#: Standard normals per chunk from which the compiled path splits its outer draws over the two row threads (a chunk
#: of more than one outer draw holds an even number of them, so the halves are equal).
SPLIT_FROM = 100_000
#: Inner standard normals kept between the nodes of a fit, which all use the same ones: at most this many doubles
#: (128 MB) in all, released when the fit's nodes are weighted (:func:`forget_normals`).  A fit's evidence estimates
#: cycle through the same chunks at every node, so a chunk that does not fit is drawn afresh each time while the
#: chunks kept stay (evicting the least recently used would evict each chunk just before it is needed again); the
#: chunks of other fits (another seed or shape) go first.
CACHED_NORMALS = 16_000_000

_NORMALS: OrderedDict[tuple, np.ndarray] = OrderedDict()
_NORMALS_LOCK = threading.Lock()  # (fits in several threads of one process share the cache)


def inner_normals(seed: int, first: int, stop: int, shape: tuple[int, int, int]) -> np.ndarray:
    """The inner standard normals of outer draws ``first..stop``, ``(stop - first, J, M / 2, K)``: outer draw ``s``'s
    come from its own stream (``seed``, ``s``), so they do not depend on how the draws are chunked, and every node of
    the fit gets the same ones (common random numbers).  Kept between calls up to :data:`CACHED_NORMALS` in all."""
    key = (seed, first, stop, shape)
    with _NORMALS_LOCK:
        normals = _NORMALS.get(key)
        if normals is not None:
            _NORMALS.move_to_end(key)
            return normals
    normals = np.empty((stop - first, *shape))
    for s in range(first, stop):  # (written in place: no second copy of the chunk)
        np.random.default_rng((seed, s)).standard_normal(shape, out=normals[s - first])
    normals.flags.writeable = False  # (a cached chunk is shared: one compiled variant of the loop serves every chunk)
    with _NORMALS_LOCK:
        _keep(key, normals)
    return normals


def forget_normals() -> None:
    """Release the cached inner normals (a fit's node weighting is done with them)."""
    with _NORMALS_LOCK:
        _NORMALS.clear()


def _keep(key: tuple, normals: np.ndarray) -> None:
    """Cache ``normals`` under ``key`` (:data:`CACHED_NORMALS`; the caller holds the lock): the chunks of other fits
    make room first, least recently used first; a chunk of this fit that finds no room is not kept."""
    family = (key[0], key[3])
    kept = sum(chunk.size for chunk in _NORMALS.values())
    for other in [k for k in _NORMALS if (k[0], k[3]) != family]:
        if kept + normals.size <= CACHED_NORMALS:
            break
        kept -= _NORMALS.pop(other).size
    if kept + normals.size <= CACHED_NORMALS:
        _NORMALS[key] = normals


@dataclass
class SampledIntegrals:
    """``sum_j log I_j`` per outer draw (``(S,)``) and the variance of that estimate (``(S,)``, delta method)."""

    log_integrals: np.ndarray
    noise: np.ndarray


def sampled_log_integrals(
    y: np.ndarray,
    eta: np.ndarray,
    values: np.ndarray,
    codes: np.ndarray,
    conditional_mean: np.ndarray,
    conditional_chol: np.ndarray,
    prior_precision: np.ndarray,
    weights: np.ndarray | None = None,
    inner: int = INNER_DRAWS,
    seed: int = 0,
) -> SampledIntegrals:
    """``sum_j log I_j`` (module docstring) for outer draws ``eta (S, n)``, and the estimate's noise.

    Parameters
    ----------
    y, values, codes
        Labels (+-1), the factor's ``(n, K)`` values and each row's level (-1: none).
    conditional_mean
        ``(S, J, K)``: the proposal's mean ``c_j`` for each outer draw.
    conditional_chol
        ``(J, K, K)``: lower Cholesky factors ``L_j`` of the proposal's covariances ``B_j``.
    prior_precision
        ``Sigma_b^{-1}``: ``(K, K)``, or ``(S, K, K)`` for a covariance of each outer draw.
    weights
        Class weights of the rows (None: every row 1; :mod:`bayesvm.model.class_weights`).

    With ``u = c_j + L_j e`` a row's predictor is ``eta_i + z_i' c_j + (L_j' z_i)' e``; the levels are taken in
    classes of similar size (:func:`bayesvm.engines.hinge_levels.size_classes`), each padded to its largest level,
    so every array broadcasts over ``(draw, level, row of the level, inner draw)`` without gathers.  A level without
    rows has ``I_j = 1``.  The noise of ``log I_j`` is its delta-method variance ``sum_m p_m^2 - 1 / M`` (``p`` the
    inner weights normalised to sum 1), summed over the levels.
    """
    S, n = eta.shape
    J, K = conditional_mean.shape[1:]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    inside = codes >= 0
    total = -2.0 * np.sum(w[~inside] * np.maximum(0.0, 1.0 - y[~inside] * eta[:, ~inside]), axis=1)
    noise = np.zeros(S)
    if J == 0 or not np.any(inside):
        return SampledIntegrals(total, noise)
    half = (inner + 1) // 2
    prior_precision = np.ascontiguousarray(np.broadcast_to(prior_precision, (S, K, K)), dtype=float)
    logdet_prior = np.linalg.slogdet(prior_precision)[1]  # (S,)
    if compiled_rows.available():
        step = max(1, int(NORMALS_PER_CHUNK // max(1, J * half * K)))
        step = step - step % 2 if step > 1 else 1  # (equal halves for the two row threads)
        order = np.flatnonzero(inside)[np.argsort(codes[inside], kind="stable")]
        level_ptr = np.concatenate([[0], np.cumsum(np.bincount(codes[inside], minlength=J))])
        args = (y, w, np.ascontiguousarray(values, dtype=float), order, level_ptr)
        for first in range(0, S, step):
            part = slice(first, min(S, first + step))
            eps = inner_normals(seed, part.start, part.stop, (J, half, K))
            log_sums, level_noise = np.empty(part.stop - first), np.empty(part.stop - first)

            def run(rows: slice, eps=eps, part=part, log_sums=log_sums, level_noise=level_noise) -> None:
                compiled_level_sums(
                    *args, np.ascontiguousarray(eta[part][rows]), np.ascontiguousarray(conditional_mean[part][rows]),
                    conditional_chol, prior_precision[part][rows], logdet_prior[part][rows], eps[rows], log_sums[rows],
                    level_noise[rows],
                )  # fmt: skip

            in_two_parts(lambda _, rows: run(rows), part.stop - first, (part.stop - first) // 2, eps.size >= SPLIT_FROM)
            total[part] += log_sums
            noise[part] += level_noise
        return SampledIntegrals(total, noise)
    M = 2 * half
    step = max(1, int(CHUNK_VALUES // max(1, int(np.sum(inside)) * 2 * half)))
    log_chol = np.sum(np.log(np.diagonal(conditional_chol, axis1=1, axis2=2)), axis=1)  # log |B_j|^(1/2)
    classes = [_padded_class(levels, J, codes, inside, y, w, values, conditional_chol) for levels, _ in
               size_classes(codes[inside], J)]  # fmt: skip
    for first in range(0, S, step):
        part = slice(first, min(S, first + step))
        eps_all = inner_normals(seed, part.start, part.stop, (J, half, K))  # (s, J, h, K)
        for levels, padded, y_pad, w_pad, z_pad, chol, spread in classes:
            eps = np.moveaxis(eps_all[:, levels], 3, 0)
            eps = np.concatenate([eps, -eps], axis=3)  # (K, s, J_c, M): antithetic pairs
            centre = np.moveaxis(conditional_mean[part][:, levels], 2, 0)  # (K, s, J_c)
            # u = c_j + L_j e, coefficient by coefficient (K is the handful of terms per level)
            u = [centre[k, ..., None] + sum(chol[k, l, None, :, None] * eps[l] for l in range(k + 1)) for k in range(K)]
            precision = prior_precision[part][:, :, :, None, None]  # (s, K, K, 1, 1)
            log_ratio = 0.5 * logdet_prior[part][:, None, None] + log_chol[levels][None, :, None]
            for k in range(K):
                log_ratio = log_ratio + 0.5 * eps[k] ** 2 - 0.5 * precision[:, k, k] * u[k] ** 2
                for l in range(k):
                    log_ratio = log_ratio - precision[:, k, l] * u[k] * u[l]
            # log N(u; 0, Sigma_b) - log r_j(u)  (the 2 pi terms cancel); then each row's hinge
            base = eta[part][:, padded] + np.einsum("kjr,ksj->sjr", z_pad, centre)  # (s, J_c, R)
            f = base[..., None] + sum(spread[k][None] * eps[k][:, :, None, :] for k in range(K))  # (s, J_c, R, M)
            hinge = np.maximum(0.0, 1.0 - y_pad[None, :, :, None] * f)
            log_ratio = log_ratio - 2.0 * np.einsum("jr,sjrm->sjm", w_pad, hinge)
            log_sums = logsumexp(log_ratio, axis=2)
            total[part] += np.sum(log_sums - np.log(M), axis=1)
            noise[part] += np.sum(np.sum(np.exp(2.0 * (log_ratio - log_sums[..., None])), axis=2) - 1.0 / M, axis=1)
    return SampledIntegrals(total, noise)


def _padded_class(levels, J, codes, inside, y, w, values, conditional_chol) -> tuple:
    """One size class's rows padded to its largest level (-1 rows weigh 0): ``(levels, global row numbers, y, w,
    z (K, J_c, R), L_j (K, K, J_c), L_j' z_i (K, J_c, R, 1))``, formed once for every chunk of outer draws."""
    chosen = np.zeros(J, dtype=bool)
    chosen[levels] = True
    members = np.flatnonzero(inside)[chosen[codes[inside]]]
    local = (np.cumsum(chosen) - 1)[codes[members]]
    rows = LevelLayout(y[members], np.ones(members.size), local, levels.size).rows  # (J_c, R), -1 padding
    padded = np.where(rows >= 0, members[np.maximum(rows, 0)], 0)  # global row numbers
    y_pad = np.where(rows >= 0, y[padded], 0.0)
    w_pad = np.where(rows >= 0, w[padded], 0.0)
    z_pad = np.moveaxis(values[padded] * (rows >= 0)[..., None], 2, 0)  # (K, J_c, R)
    chol = np.moveaxis(conditional_chol[levels], (1, 2), (0, 1))  # chol[k, l] = (L_j)_kl, (K, K, J_c)
    spread = np.einsum("ljr,lkj->kjr", z_pad, chol)[..., None]  # L_j' z_i, (K, J_c, R, 1)
    return levels, padded, y_pad, w_pad, z_pad, chol, spread


def _compiled_level_sums(
    y, w, values, order, level_ptr, eta, conditional_mean, chol, prior_precision, logdet_prior, eps, log_sums, noise
):
    """:func:`sampled_log_integrals`'s levels for outer draws ``eta (S, n)``, level by level (``order`` lists the rows
    level by level, ``level_ptr`` where each level's start).  Writes ``sum_j log I_j`` and its noise per outer draw
    into ``log_sums`` and ``noise``.

    An antithetic pair ``u = c_j +- v`` (``v = L_j e``) shares all but the sign of its odd terms: with the prior
    precision ``Lambda``, ``u' Lambda u = c' Lambda c +- 2 v' Lambda c + v' Lambda v`` and a row's predictor is
    ``(eta_i + z_i' c_j) +- z_i' v``, so the pair costs one ``v``, one quadratic form and one ``z_i' v`` per row; the
    parts fixed by the outer draw and level (``c' Lambda c``, ``Lambda c``, ``eta_i + z_i' c_j``) are formed once per
    level.  The same sums as the numpy path's term by term, to rounding."""
    S, J, half, K = eps.shape
    M = 2 * half
    ratio = np.empty(M)
    v = np.empty(K)
    precision_c = np.empty(K)
    width = 0
    for j in range(J):
        width = max(width, level_ptr[j + 1] - level_ptr[j])
    base, level_y, level_w, level_z = np.empty(width), np.empty(width), np.empty(width), np.empty((width, K))
    for s in range(S):
        total, spread = 0.0, 0.0
        for j in range(J):
            first_row, rows = level_ptr[j], level_ptr[j + 1] - level_ptr[j]
            if rows == 0:
                continue
            log_chol = 0.0
            for k in range(K):
                log_chol += np.log(chol[j, k, k])
            centre_quadratic = 0.0
            for k in range(K):
                precision_c[k] = 0.0
                for l in range(K):
                    precision_c[k] += prior_precision[s, k, l] * conditional_mean[s, j, l]
                centre_quadratic += conditional_mean[s, j, k] * precision_c[k]
            constant = 0.5 * logdet_prior[s] + log_chol - 0.5 * centre_quadratic
            for r in range(rows):  # the level's rows gathered once: contiguous for every inner draw
                i = order[first_row + r]
                f = eta[s, i]
                for k in range(K):
                    f += values[i, k] * conditional_mean[s, j, k]
                    level_z[r, k] = values[i, k]
                base[r], level_y[r], level_w[r] = f, y[i], 2.0 * w[i]
            for m in range(half):
                even = constant
                for k in range(K):
                    acc = 0.0
                    for l in range(k + 1):
                        acc += chol[j, k, l] * eps[s, j, m, l]
                    v[k] = acc
                    even += 0.5 * eps[s, j, m, k] * eps[s, j, m, k]
                odd = 0.0
                for k in range(K):
                    odd -= v[k] * precision_c[k]
                    even -= 0.5 * prior_precision[s, k, k] * v[k] * v[k]
                    for l in range(k):
                        even -= prior_precision[s, k, l] * v[k] * v[l]
                plus, minus = even + odd, even - odd
                for r in range(rows):  # (the hinge by max, not a branch: its side is random from draw to draw)
                    shift = 0.0
                    for k in range(K):
                        shift += level_z[r, k] * v[k]
                    plus -= level_w[r] * max(1.0 - level_y[r] * (base[r] + shift), 0.0)
                    minus -= level_w[r] * max(1.0 - level_y[r] * (base[r] - shift), 0.0)
                ratio[m] = plus
                ratio[m + half] = minus
            top = ratio.max()
            first, second = 0.0, 0.0
            for m in range(M):
                p = np.exp(ratio[m] - top)
                first += p
                second += p * p
            total += top + np.log(first) - np.log(M)
            spread += second / (first * first) - 1.0 / M
        log_sums[s] = total
        noise[s] = spread


if compiled_rows.numba is not None:
    compiled_level_sums = compiled_rows.compile_nogil(_compiled_level_sums)
else:  # never called: callers check compiled_rows.available()
    compiled_level_sums = None
