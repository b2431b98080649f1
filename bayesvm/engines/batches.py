"""Minibatches for the stochastic engines, over in-memory rows or the partitions of out-of-core data.

One scheme serves both, so an in-memory fit is the one-partition case of a partitioned one: each epoch
visits the partitions in a random order; a visited partition is loaded once, its rows are permuted and
cut into consecutive minibatches of ``size`` rows (a remainder smaller than ``size`` waits for the
partition's next visit).  A partition is loaded only when visited, so memory holds one partition at a
time (``O(partition rows x columns)``); the number of rows is bounded by disk, not memory.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class PartitionBatches:
    """``next() -> (X_S, y_S)`` minibatches; ``monitor_rows`` draws the fixed monitor set.

    Parameters
    ----------
    load
        ``load(k) -> (X, y)``: the rows of partition ``k`` (engine-ready inputs and labels in {-1, +1}).
    counts
        Rows per partition.
    size
        Rows per minibatch (at most the largest partition).
    rng
        The fit's generator (partition order, row permutations, monitor rows).
    """

    def __init__(self, load: Callable[[int], tuple[np.ndarray, np.ndarray]], counts, size: int, rng):
        self.load, self.counts, self.rng = load, [int(c) for c in counts], rng
        self.n = sum(self.counts)
        self.size = int(min(size, max(self.counts)))
        self._queue: list[int] = []
        self._rows: tuple[np.ndarray, np.ndarray] | None = None
        self._order = np.zeros(0, dtype=int)
        self._at = 0

    @classmethod
    def in_memory(cls, X: np.ndarray, y: np.ndarray, size: int, rng) -> PartitionBatches:
        return cls(lambda k: (X, y), [y.size], size, rng)

    def _visit(self) -> None:
        while True:
            if not self._queue:
                self._queue = [int(k) for k in self.rng.permutation(len(self.counts))]
            k = self._queue.pop(0)
            if self.counts[k] >= self.size:
                break
        self._rows = self._rows if len(self.counts) == 1 and self._rows is not None else self.load(k)
        self._order, self._at = self.rng.permutation(self._rows[1].size), 0

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        if self._rows is None or self._at + self.size > self._order.size:
            self._visit()
        rows = self._order[self._at : self._at + self.size]
        self._at += self.size
        return self._rows[0][rows], self._rows[1][rows]

    def monitor_rows(self, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``size`` rows of one partition (chosen at random when there are several)."""
        k = 0 if len(self.counts) == 1 else int(rng.integers(len(self.counts)))
        X, y = self.load(k)
        rows = rng.choice(y.size, min(size, y.size), replace=False)
        return X[rows], y[rows]


def engine_batches(X: np.ndarray, y: np.ndarray, weights, size: int, rng, batches=None) -> PartitionBatches:
    """The minibatches an SVI engine draws: ``batches(rng)`` over the partitions of out-of-core data where given, else
    the in-memory rows ``X`` with each response signed by its class and sized by its class weight, ``y_i omega_i``
    (``weights`` None: ``y_i``), so that :func:`row_classes` recovers both from a minibatch."""
    if batches is not None:
        return batches(rng)
    return PartitionBatches.in_memory(X, y if weights is None else y * weights, size, rng)


def row_classes(signed: np.ndarray, weighted: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y, omega)`` of minibatch rows from their signed responses (:func:`engine_batches`; ``omega`` None without
    class weights)."""
    return (np.sign(signed), np.abs(signed)) if weighted else (signed, None)
