"""Refuse, up front and with a clear message, a fit that would not fit in memory."""

from __future__ import annotations

import os

from .errors import BayesvmError


def available_memory() -> int:
    """Bytes of physical memory currently available (total memory where that is unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 62


def check_memory(needed: float, what: str, advice: str) -> None:
    """Raise :class:`BayesvmError` when ``needed`` bytes exceed the available memory."""
    have = available_memory()
    if needed > have:
        raise BayesvmError(
            f"{what} needs about {needed / 2**30:.1f} GiB but only {have / 2**30:.1f} GiB is available; {advice}"
        )
