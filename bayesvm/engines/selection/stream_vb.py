"""The selection priors' VB (Alg. 3, Polson & Scott's spike-and-slab, the Bayesian lasso) by streaming over data
partitions: out-of-core (dask) data with ``prior=``.

Every factor of a selection VB engine but ``q(a)`` sees the rows only through the message ``(G, r) = (X' W X,
X' Y (1 + w))`` with ``w = E[1/a]`` (:mod:`bayesvm.engines.selection.message`), and ``q(a)`` is optimal in closed
form given the other factors (``chi_i = E (1 - y_i f_i)^2``, floored).  So one pass over the partitions after an
update computes, per partition, the rows' moments under the new factors, their ``chi``, the data term of the bound
and the next message; ``chi`` is never stored.  :class:`StreamedSweep` is the engine's coordinate object with the
message in place of ``chi`` in its state: its sweeps are exactly the in-memory engine's plain sweeps
(``accelerate=False``; SQUAREM would need ``chi`` for every row), one pass each, with memory ``O(q^2)`` on the
driver.  The spike-and-slab's search (two starts, then one slope in or out at a time, kept where the bound rises;
:func:`bayesvm.engines.selection.spike_slab_vb.search`) runs on it unchanged, each of its sweeps one pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ...linalg.dense import blas_threads
from ...linalg.row_sums import weighted_gram
from ...model.problems import SelectionProblem
from ..augmentation import data_lower_bound, inverse_a_mean, update_chi
from .laws import law_of
from .vb import SelectionVBResult, fit_by_ascent


def partition_message(D: np.ndarray, y: np.ndarray, row_moments, factors) -> tuple:
    """``(G, r, data term, rows)`` of one partition under ``factors`` (``None``: the start, ``w = 1``)."""
    if y.size == 0:
        q = D.shape[1]
        return np.zeros((q, q)), np.zeros(q), 0.0, 0
    if factors is None:
        w, data = np.ones(y.size), 0.0
    else:
        f_mean, expected_sq = row_moments(factors, D, y)
        chi = update_chi(expected_sq)
        w = inverse_a_mean(chi)
        data = data_lower_bound(y, f_mean, expected_sq, chi)
    return weighted_gram(D, w), D.T @ (y * (1.0 + w)), data, y.size


class StreamedSweep:
    """A selection VB coordinate object (``update``, ``row_moments``, ``fields``) whose state carries the rows'
    message instead of ``chi``; ``map_partitions(func, *args)`` applies ``func(D, y, *args)`` to every partition and
    returns the list of results."""

    def __init__(self, problem: SelectionProblem, map_partitions: Callable):
        self.p = problem
        self.ascent = law_of(problem.prior).ascent(problem)
        self.map_partitions = map_partitions
        self.passes = 0

    def message(self, factors) -> tuple[tuple[np.ndarray, np.ndarray], float]:
        """One pass: the message under ``factors`` and the data term of the bound."""
        parts = self.map_partitions(partition_message, self.ascent.row_moments, factors)
        self.passes += 1
        gram = sum(part[0] for part in parts)
        r = sum(part[1] for part in parts)
        return (gram, r), float(sum(part[2] for part in parts))

    def initial_state(self) -> tuple:
        """The engine's start with ``E[1/a] = 1``."""
        return (self.message(None)[0], *self.ascent.initial_state()[1:])

    def sweep(self, message: tuple, *rest, **options):
        """Every update but ``q(a)`` from ``message`` (Alg. 3 steps 2-6 or their spike-and-slab and lasso
        counterparts), then one pass for ``q(a)``: the bound of the new factors and the next message."""
        factors = self.ascent.update(*message, *rest, **options)
        message, data = self.message(factors)
        factors.state = (message, *factors.rest)
        factors.bound = data + factors.prior_bound
        return factors

    def joint_state(self, sweeps: int | None = None) -> tuple:
        """:meth:`bayesvm.engines.selection.spike_slab_vb.SpikeSlabAscent.joint_state` with one pass per sweep:
        every slope in its slab, mean-field VB of that model (Alg. 1) until no row's ``chi`` moves by more than
        ``1e-6`` of itself (each pass compares the rows' ``chi`` under the last two ``q``)."""
        from .spike_slab_vb import JOINT_START_SWEEPS

        ascent = self.ascent
        message, previous = self.message(None)[0], None
        for _ in range(JOINT_START_SWEEPS if sweeps is None else sweeps):
            slab = ascent.slab_fit(*message)
            parts = self.map_partitions(_partition_slab, slab, previous)
            self.passes += 1
            message = (sum(part[0] for part in parts), sum(part[1] for part in parts))
            moved = max(part[2] for part in parts)
            previous = slab
            if moved < 1e-6:
                break
        return ascent.joint_start(message, slab)

    def fields(self, factors) -> dict:
        return self.ascent.fields(factors)


def _partition_slab(D: np.ndarray, y: np.ndarray, slab, previous) -> tuple:
    """``(G, r, max relative change of chi, rows)`` of one partition under the all-slab fit ``slab`` (and the one
    before it, ``previous``; ``None`` at the start, where ``chi = 1``)."""
    if y.size == 0:
        q = D.shape[1]
        return np.zeros((q, q)), np.zeros(q), 0.0, 0
    chi = slab.row_chi(D, y)
    before = np.ones(y.size) if previous is None else previous.row_chi(D, y)
    w = inverse_a_mean(chi)
    return weighted_gram(D, w), D.T @ (y * (1.0 + w)), float(np.max(np.abs(chi - before) / before)), y.size


def fit_streamed_selection_vb(
    problem: SelectionProblem, map_partitions: Callable, tol: float = 1e-8, max_iter: int = 500
) -> SelectionVBResult:
    """The selection prior's VB (``problem.prior``) with one pass over the partitions per sweep; ``problem`` gives
    the prior and the columns (its rows are not used)."""
    from .spike_slab_vb import search

    start = time.perf_counter()
    streamed = StreamedSweep(problem, map_partitions)
    with blas_threads(problem.q):
        if law_of(problem.prior).model_search:
            return search(streamed, problem, tol, max_iter, accelerate=False, start=start)
        return fit_by_ascent(streamed, problem, tol, max_iter, accelerate=False, start=start)
