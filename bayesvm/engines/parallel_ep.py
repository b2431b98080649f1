"""Parallel EP's sweeps to a fixed point, shared by the accurate fit's engines (:mod:`bayesvm.engines.linear.ep` for
the hinge rows, :mod:`bayesvm.engines.selection.ep` for the hinge rows and the slope sites).

Each sweep updates every site at once from the marginals of the current ``q`` (Minka 2001; the parallel schedule of
van Gerven et al. 2010): the engine's ``sweep(tau, nu)`` forms ``q`` from the sites, their cavities, the tilted moments
and the damped moment-matching update.  The sweeps stop when no predictor mean ``E f_i`` moved by more than ``tol``
times ``1 + max |E f|`` in the last sweep (a relative rule: the means' scale differs between designs), or when a sweep
diverges.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def parallel_sweeps(
    sweep: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray] | None],
    tau: np.ndarray,
    nu: np.ndarray,
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """At most ``max_iter`` sweeps ``sweep(tau, nu) -> (mean_f, tau, nu)`` (the predictor means it formed ``q`` from,
    and the new sites; None where they were not finite: the run stops there with the sites it had) from the sites
    ``(tau, nu)``; returns ``(tau, nu, sweeps, converged)`` by the rule of the module docstring."""
    previous = None
    for count in range(1, max_iter + 1):
        step = sweep(tau, nu)
        if step is None:
            return tau, nu, count, False  # diverged: not converged, and no more sweeps can bring it back
        mean_f, tau, nu = step
        if previous is not None and np.max(np.abs(mean_f - previous)) < tol * (1.0 + np.max(np.abs(mean_f))):
            return tau, nu, count, True
        previous = mean_f
    return tau, nu, max_iter, False
