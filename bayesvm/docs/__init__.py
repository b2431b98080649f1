"""The vignettes, shipped with the package: ``python -m bayesvm docs`` lists them, ``python -m bayesvm docs NAME``
prints one, and :func:`path` gives the file (Markdown; the figures sit beside it)."""

from __future__ import annotations

from pathlib import Path

from ..errors import BayesvmError

HERE = Path(__file__).resolve().parent


def topics() -> dict[str, str]:
    """``{name: first heading}`` of every vignette."""
    out = {}
    for file in sorted(HERE.glob("*.md")):
        first = next((line for line in file.read_text(encoding="utf-8").splitlines() if line.startswith("#")), "")
        out[file.stem] = first.lstrip("# ").strip()
    return out


def path(name: str) -> Path:
    """The Markdown file of vignette ``name`` (e.g. ``"toenail"``)."""
    if not isinstance(name, str) or name not in topics():  # a vignette's name, never a path
        raise BayesvmError(f"no vignette {name!r}; the vignettes are {sorted(topics())}")
    return HERE / f"{name}.md"


def text(name: str) -> str:
    """The Markdown text of vignette ``name``."""
    return path(name).read_text(encoding="utf-8")
