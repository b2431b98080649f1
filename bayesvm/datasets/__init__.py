"""Data sets shipped with bayesvm (provenance and licences in ``data/PROVENANCE.md``).

* :func:`load_toenail`: onychomycosis trial (De Backer et al. 1998), from R package HSAUR3, GPL-2.
* :func:`load_spam`: UCI Spambase (Hopkins et al. 1999), from R package kernlab, GPL-2.
* :func:`load_acath`: Duke cardiac catheterisation data (Harrell), cholesterol 1/3 missing.
"""

from __future__ import annotations

from importlib.resources import files

import pandas as pd

__all__ = ["load_toenail", "load_spam", "load_acath"]


def _read(name: str, **kwargs) -> pd.DataFrame:
    with files(__package__).joinpath("data", name).open("rb") as handle:
        frame = pd.read_csv(handle, **kwargs)
    frame.attrs["name"] = name.removesuffix(".csv")
    return frame


def load_toenail() -> pd.DataFrame:
    """Toenail infection trial: 1908 visits of 294 patients (HSAUR3 ``toenail``).

    Columns: ``outcome`` (categorical, levels ``"none or mild"`` < ``"moderate or severe"``,
    as the R factor, so ``"moderate or severe"`` is the +1 class by default), ``treatment``
    (``"itraconazole"`` / ``"terbinafine"``), ``patientID`` (string), ``time`` (months), ``visit`` (1-7).
    """
    frame = _read("toenail.csv", dtype={"patientID": str})
    frame["outcome"] = pd.Categorical(frame["outcome"], categories=["none or mild", "moderate or severe"])
    frame["treatment"] = pd.Categorical(frame["treatment"], categories=["itraconazole", "terbinafine"])
    return frame


def load_spam() -> pd.DataFrame:
    """Spambase: 4601 e-mails, 57 numeric predictors, ``type`` in ``{"nonspam", "spam"}``."""
    frame = _read("spam.csv")
    frame["type"] = pd.Categorical(frame["type"], categories=["nonspam", "spam"])
    return frame


def load_acath() -> pd.DataFrame:
    """Duke cardiac catheterisation: 3504 patients; ``choleste`` missing for 1246.

    Columns ``sex`` (0 male, 1 female), ``age``, ``cad.dur`` (months of symptoms, 0 in 123
    rows), ``choleste`` (mg/dl), ``sigdz`` and ``tvdlm`` (0/1; ``tvdlm`` has 3 missing).
    """
    return _read("acath.csv")
