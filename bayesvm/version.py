"""The package's version (one place: the face re-exports it; saved fits record it)."""

__version__ = "0.1.0"
