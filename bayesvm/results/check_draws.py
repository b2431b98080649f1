"""The PSIS check's draws from q, made in fixed increments so that a check may look at them a few at a time.

The check (:mod:`bayesvm.results.vb_check`) evaluates the exact posterior at draws from q; its cost is that
evaluation, so it looks at the first draws before it makes the rest (:func:`bayesvm.results.vb_check.check_vb`).  A
:class:`DrawStream` makes a sampler's draws in increments that end at fixed points (the looks, and every
:data:`BATCH_DRAWS`), whatever sizes are asked of it: the draws a check makes look by look are then exactly the draws
it makes at once for the same total, and no more than :data:`BATCH_DRAWS` draws' predictors are in memory at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Draws from q whose predictors are held in memory at once
BATCH_DRAWS = 1000


def increments(made: int, size: int, points: tuple[int, ...]) -> list[int]:
    """``size`` draws after ``made`` split at ``points`` and at every multiple of :data:`BATCH_DRAWS`."""
    stop = made + int(size)
    batch_ends = range((made // BATCH_DRAWS + 1) * BATCH_DRAWS, stop, BATCH_DRAWS)
    ends = sorted({point for point in points if made < point < stop} | set(batch_ends) | {stop})
    return [end - start for start, end in zip([made, *ends], ends) if end > start]


@dataclass
class DrawStream:
    """Draws of ``sampler(fit, rng, size)`` (a tuple of arrays, or lists of arrays, by draw along their first axis)
    made in :func:`increments` ending at ``points``."""

    sampler: Callable
    fit: object
    rng: np.random.Generator
    points: tuple[int, ...] = ()
    made: int = 0

    def take(self, size: int) -> list[tuple]:
        """The next ``size`` draws, as the increments they were made in."""
        parts = []
        for step in increments(self.made, size, self.points):
            parts.append(self.sampler(self.fit, self.rng, step))
            self.made += step
        return parts
