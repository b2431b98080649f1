"""The two row threads: compiled loops (which release the GIL) split into two parts, one per CPU.

A fit in the main process runs its sweeps on one core; its compiled loops over rows or levels can use the second.
:func:`in_two_parts` hands the two parts of a loop to a pool of two threads (:func:`row_pool`) where the loop is
long enough to pay for the hand-over (some 50 microseconds), and runs it in one call otherwise, inside a daemonic
worker process (the cross-fitting fold fits and the Gibbs chains already keep every CPU busy) and inside a row
thread (which would wait on the pool it occupies).  Every row or level is computed the same way in either part, so
results do not depend on the split.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Names of the row threads (:func:`in_two_parts` inside one of them runs inline: the two threads may both wait)
ROW_THREAD_PREFIX = "bayesvm-rows"

#: From this many rows a compiled row loop runs as two halves on the row threads (:func:`in_row_halves`): EP's
#: tilted moments and the dense predictor cost about 100 and 150 ns a row, against some 50 microseconds to hand a
#: half to a thread.
COMPILED_SPLIT_ROWS = 4096

#: A loop over items of unequal cost runs as two parts of equal work (:func:`balanced_cut`) where the smaller part
#: holds at least half this many cost units (the callers' estimates: about 1-2 ns each in the row pattern's loops),
#: some 50-100 microseconds, against some 20 to hand a part to a thread
COMPILED_SPLIT_WORK = 300_000

#: Below this many dense columns the engines run BLAS single-threaded: the per-sweep products
#: are too small for threads to pay off, and on small machines the thread hand-offs dominate.
SINGLE_THREAD_BELOW = 512

#: ... unless a sweep's row products are large: with ``n q^2`` above this many multiply-adds the
#: threads pay off.
THREADS_ABOVE_WORK = 1e9

_ROW_POOL: dict = {}


def row_pool() -> ThreadPoolExecutor:
    """Two worker threads for row halves (one pool per process: a forked child gets its own)."""
    pid = os.getpid()
    if _ROW_POOL.get("pid") != pid:
        _ROW_POOL.update(pid=pid, pool=ThreadPoolExecutor(max_workers=2, thread_name_prefix=ROW_THREAD_PREFIX))
    return _ROW_POOL["pool"]


def _inline() -> bool:
    """Whether this thread must not wait on the row threads: a daemonic worker process, or a row thread itself."""
    return multiprocessing.current_process().daemon or threading.current_thread().name.startswith(ROW_THREAD_PREFIX)


def in_two_parts(work: Callable[[int, slice], None], n: int, cut: int, split: bool) -> None:
    """``work(part, items)`` over items ``0..n``: ``work(0, 0..cut)`` in this thread while a row thread runs ``work(1,
    cut..n)`` where ``split`` (and not :func:`_inline`), else ``work(0, 0..n)`` in this thread.  ``part`` lets a loop that sums
    into shared arrays use its own for part 1 and add them afterwards."""
    if not split or not 0 < cut < n or _inline():
        work(0, slice(0, n))
        return
    second = row_pool().submit(work, 1, slice(cut, n))  # (one hand-over: part 0 runs in this thread meanwhile)
    try:
        work(0, slice(0, cut))
    finally:
        second.result()


def in_row_halves(n: int, work: Callable[[slice], None]) -> None:
    """``work(rows)`` over rows ``0..n`` of equal cost: two halves on the row threads from
    :data:`COMPILED_SPLIT_ROWS` rows (:func:`in_two_parts`); ``work`` writes disjoint rows."""
    in_two_parts(lambda _, rows: work(rows), n, n // 2, n >= COMPILED_SPLIT_ROWS)


def balanced_cut(cost: np.ndarray) -> tuple[int, bool]:
    """Where to cut items of these costs (multiply-adds each) into two parts of the most equal work, and whether
    that is worth two threads: the smaller part (the time saved) holds at least half of :data:`COMPILED_SPLIT_WORK`."""
    total = np.cumsum(cost, dtype=float)
    if not total.size:
        return 0, False
    after = int(np.searchsorted(total, 0.5 * total[-1]))  # the first item that reaches half the work
    cut = min((after, after + 1), key=lambda c: abs(2.0 * (total[c - 1] if c else 0.0) - total[-1]))
    smaller = min(total[cut - 1] if cut else 0.0, total[-1] - (total[cut - 1] if cut else 0.0))
    return cut, bool(smaller >= 0.5 * COMPILED_SPLIT_WORK)
