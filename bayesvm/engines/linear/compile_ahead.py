"""Compile the Gibbs sampler's whole iterations (:mod:`bayesvm.engines.linear.fused_iteration`) into numba's disk
cache, ahead of the fits that use them: ``python -m bayesvm.engines.linear.compile_ahead``.

A process whose first Gibbs fit finds them missing samples with the separately compiled steps (about half the
compiling; the same chain to rounding) and starts this module detached, at low priority, so that every later process
loads them.  It fits nothing of the user's: two throwaway iterations of a chain on a small simulated problem with a
random intercept and a learned penalty, whose arrays have the layout and types of every such problem, so numba
compiles exactly the variants the chains call.  A lock file in the temporary directory keeps a second one from
starting while one runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

#: A lock older than this many seconds belongs to a process that died: it is taken over.
STALE_SECONDS = 600


def simulated_problem():
    """A small dense problem of the whole iterations' structure: fixed effects with a learned penalty and one random
    intercept."""
    from ...formula.bars import parse_formula
    from ...formula.design import build_design
    from ...model import build_model
    from ...priors import PriorSet

    rng = np.random.default_rng(0)
    groups, size = 12, 5
    g = np.repeat(np.arange(groups), size)
    x, w = rng.standard_normal(g.size), rng.standard_normal(g.size)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(0.3 + x - 0.5 * w + rng.normal(0, 1.0, groups)[g]))), 1, 0)
    data = pd.DataFrame({"y": y, "x": x, "w": w, "g": [f"g{k}" for k in g]})
    design = build_design(parse_formula("y ~ x + w + (1 | g)"), data)
    return build_model(design, "learn", PriorSet(), True).problem()


def main() -> None:
    from . import compiled_rows, gibbs

    if not compiled_rows.available():
        return
    lock = Path(tempfile.gettempdir()) / "bayesvm-compile-ahead.lock"
    try:
        if lock.exists() and time.time() - lock.stat().st_mtime < STALE_SECONDS:
            return
        lock.write_text(str(os.getpid()))
    except OSError:
        return
    try:
        os.nice(10)
    except (OSError, AttributeError):
        pass
    try:
        gibbs.load_whole_iterations(simulated_problem())
    finally:
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
