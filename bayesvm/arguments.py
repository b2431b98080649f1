"""Validation of the public call's scalar arguments: one clear :class:`BayesvmError` per bad value.

numpy integer types are accepted wherever an ``int`` is (``np.int64(1000)`` draws), booleans never are
(``draws=True`` is refused).  Seeds are taken as scikit-learn users pass them.
"""

from __future__ import annotations

import numbers

import numpy as np

from .errors import BayesvmError

#: Exclusive upper bound of the integer seeds this package hands to ``numpy.random.SeedSequence``.
SEED_BOUND = 2**63


def as_count(value: object, name: str, low: int = 1) -> int:
    """``value`` as a Python ``int >= low`` (numpy integers accepted, booleans refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < low:
        raise BayesvmError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def default_cores(chains: int) -> int:
    """``cores=None``: one process per chain, up to the CPUs this process may run on, where chain workers are
    forked (Linux up to Python 3.13); 1 where they would be spawned (macOS, Windows, a ``forkserver`` default): a
    spawned worker re-imports the user's script, which would then need an ``if __name__ == "__main__":`` guard.
    Also 1 inside a daemonic process (a ``multiprocessing.Pool`` worker, e.g. a parallel cross-validation's),
    which may not start processes of its own.  The draws do not depend on it (the chains' seeds are fixed before they are handed out)."""
    import multiprocessing
    import os

    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if method != "fork" or multiprocessing.current_process().daemon:  # a daemonic worker may not start processes
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(int(chains), cpus))


def as_positive(value: object, name: str) -> float:
    """``value`` as a finite ``float > 0``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not 0 < float(value) < np.inf:
        raise BayesvmError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def as_seed(seed: object) -> int | None:
    """A seed as an ``int`` (or ``None`` for fresh entropy).

    Accepts ``None``, a non-negative integer (numpy integers too), a :class:`numpy.random.SeedSequence`,
    a :class:`numpy.random.Generator` or a legacy :class:`numpy.random.RandomState` (as scikit-learn's
    ``random_state``); the last two are advanced by one draw, as scikit-learn's ``check_random_state``
    users expect.

    Raises
    ------
    BayesvmError
        For anything else (strings, floats, negative numbers, booleans).
    """
    if seed is None:
        return None
    if isinstance(seed, np.random.SeedSequence):
        return int(seed.generate_state(1, dtype=np.uint64)[0]) % SEED_BOUND
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(SEED_BOUND))
    if isinstance(seed, np.random.RandomState):
        return int(seed.randint(np.iinfo(np.int32).max))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or not 0 <= seed < SEED_BOUND:
        raise BayesvmError(
            f"seed must be None, a non-negative integer, a numpy SeedSequence, Generator or RandomState, got {seed!r}"
        )
    return int(seed)


def as_level(level: object) -> float:
    """A credible-interval level strictly between 0 and 1."""
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, numbers.Real) or not 0 < float(level) < 1:
        raise BayesvmError(f"level must be a number strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return float(level)


def decision_threshold(threshold: object, kind: str) -> float:
    """A probability threshold for class decisions: a number strictly between 0 and 1, with ``kind="class"`` only."""
    if kind != "class":
        raise BayesvmError(f"threshold applies to kind='class' (the classes it decides), not kind={kind!r}")
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, numbers.Real) or not 0 < threshold < 1:
        raise BayesvmError(f"threshold must be a probability strictly between 0 and 1 (e.g. 0.3), got {threshold!r}")
    return float(threshold)


def as_flag(value: object, name: str) -> bool:
    """``True`` or ``False`` (numpy booleans too); anything else is refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise BayesvmError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def iteration_defaults(method: str, tol, max_iter, batch_size, vb_max_iter: int) -> tuple[float, int]:
    """``(tol, max_iter)`` of the kernel / SVI / streamed engines (defaults filled in), all validated."""
    if not (isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1):
        raise BayesvmError(f"batch_size must be a positive integer, got {batch_size!r}")
    if max_iter is None:
        max_iter = 100000 if method == "svi" else vb_max_iter
    if tol is None:
        tol = 1e-4 if method == "svi" else 1e-8
    check_iterations(max_iter, tol)
    return tol, max_iter


def check_iterations(max_iter, tol) -> None:
    if not (isinstance(max_iter, int) and not isinstance(max_iter, bool) and max_iter >= 1):
        raise BayesvmError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not (isinstance(tol, (int, float)) and tol > 0):
        raise BayesvmError(f"tol must be a positive number, got {tol!r}")


def data_name(data: object) -> str:
    rows = len(data) if hasattr(data, "__len__") else "?"
    attrs = getattr(data, "attrs", {}) if hasattr(data, "attrs") else {}
    name = attrs.get("name") if isinstance(attrs, dict) else None
    if name and attrs.get("rows", rows) != rows:  # pandas carries attrs to subsets and copies
        return f"a subset of {name} ({rows} rows)"
    return f"{name} ({rows} rows)" if name else f"{rows} rows"
