"""Coordinate ascent grouped in SQUAREM cycles with a monotone safeguard, shared by the VB engines.

Varadhan & Roland (2008), scheme S3: two sweeps from ``x0`` give ``x1, x2``; the encoded state is
extrapolated to ``x0 - 2 s r + s^2 v`` (``r = x1 - x0``, ``v = x2 - 2 x1 + x0``, ``s = -||r|| / ||v||``,
at most -1) and one sweep from there is kept only if its lower bound beats that of ``x2``.  Every
recorded bound is that of a complete q produced by a sweep, so the recorded sequence never
decreases; ``accelerate=False`` is the plain iteration.  ``n_sweeps`` counts every sweep computed,
kept or not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Ascent:
    """The last kept sweep and the bound after every kept sweep."""

    last: Any
    bounds: list[float] = field(default_factory=list)
    decreases: list[int] = field(default_factory=list)
    n_sweeps: int = 0
    converged: bool = False


def squarem_ascent(
    sweep: Callable[[tuple], Any],
    encode: Callable[[tuple], np.ndarray],
    decode: Callable[[np.ndarray, tuple], tuple],
    state: tuple,
    tol: float,
    max_iter: int,
    accelerate: bool = True,
    absolute_tol: float | None = None,
) -> Ascent:
    """Run ``sweep(state) -> result`` (``result.state``, ``result.bound``) until the relative change of the
    bound is below ``tol`` (and, with ``absolute_tol``, its change below that many nats) or ``max_iter`` sweeps.
    ``encode(state)`` maps a state to an unconstrained vector and ``decode(x, like)`` back (``like``: a state of
    the right shapes)."""
    out = Ascent(last=None)

    def record(result) -> bool:
        out.bounds.append(result.bound)
        if len(out.bounds) < 2:
            return False
        change = out.bounds[-1] - out.bounds[-2]
        if change < -1e-8 * abs(out.bounds[-1]):
            out.decreases.append(len(out.bounds))
        limit = tol * abs(out.bounds[-1])
        return abs(change) < (limit if absolute_tol is None else min(limit, absolute_tol))

    x0_known: np.ndarray | None = None  # encoding of `state`, when known
    while out.n_sweeps < max_iter and not out.converged:
        before, x0, x0_known = state, x0_known, None
        first = sweep(state)
        out.n_sweeps += 1
        out.last, state = first, first.state
        out.converged = record(first)
        if out.converged or not accelerate or out.n_sweeps + 2 > max_iter:
            continue
        second = sweep(state)
        out.n_sweeps += 1
        out.last, state = second, second.state
        out.converged = record(second)
        if out.converged:
            continue
        x0 = encode(before) if x0 is None else x0
        x1, x2 = encode(first.state), encode(state)
        r, v = x1 - x0, x2 - 2.0 * x1 + x0
        norm_v = np.linalg.norm(v)
        if norm_v == 0.0 or not np.isfinite(norm_v):
            x0_known = x2
            continue
        step = min(-1.0, -np.linalg.norm(r) / norm_v)
        try:
            with np.errstate(over="raise"):  # a step so long that the decoded state overflows is rejected
                extrapolated = decode(x0 - 2.0 * step * r + step**2 * v, state)
            trial = sweep(extrapolated)
        except (np.linalg.LinAlgError, FloatingPointError, ValueError, ZeroDivisionError):
            trial = None
        out.n_sweeps += 1
        if trial is not None and np.isfinite(trial.bound) and trial.bound >= second.bound:
            out.last, state = trial, trial.state
            out.converged = record(trial)
        else:
            x0_known = x2  # the next cycle starts from the second sweep's state
    return out


def ascend(coordinates, state: tuple, tol: float, max_iter: int, accelerate: bool = True) -> Ascent:
    """:func:`squarem_ascent` of a coordinate-ascent object with ``sweep(*state)``, ``encode(*state)`` and
    ``decode(x, like)`` methods (the selection VB engines)."""
    return squarem_ascent(
        lambda s: coordinates.sweep(*s),
        lambda s: coordinates.encode(*s),
        lambda x, like: coordinates.decode(x, like),
        state,
        tol,
        max_iter,
        accelerate,
    )


def plain_ascent(sweep: Callable[[tuple], Any], state: tuple, tol: float, max_iter: int) -> Ascent:
    """:func:`squarem_ascent` without the SQUAREM cycles, for an engine whose state has no unconstrained encoding:
    the same stopping rule, bound trace and record of decreases."""
    return squarem_ascent(sweep, None, None, state, tol, max_iter, accelerate=False)
