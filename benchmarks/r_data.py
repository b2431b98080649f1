"""Data sets of R packages for the benchmarks: one ``Rscript`` call, and whether it ran."""

from __future__ import annotations

import subprocess


def run_rscript(script: str) -> bool:
    """Run ``Rscript -e script``; False where Rscript or a package it loads is unavailable (the benchmark then says
    it skipped that data set)."""
    try:
        subprocess.run(["Rscript", "-e", script], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True
