"""A progress counter for an engine's long runs: a tqdm bar that appears only once a run has lasted a while."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Seconds a run lasts before its bar appears: quick fits print nothing.
SHOW_AFTER_SECONDS = 2.0


@contextmanager
def counter(show: bool, description: str, unit: str, total: int | None = None) -> Iterator[Callable[[], None] | None]:
    """A callable that counts one ``unit`` of work (of ``total``, if known) on a tqdm bar (``tqdm.auto``: a widget in
    notebooks, a line on stderr elsewhere) described by ``description``, shown after :data:`SHOW_AFTER_SECONDS` and
    removed at the end; None where ``show`` is False."""
    if not show:
        yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(desc=description, unit=f" {unit}", total=total, delay=SHOW_AFTER_SECONDS, leave=False)
    try:
        yield lambda: bar.update(1)
    finally:
        bar.close()
