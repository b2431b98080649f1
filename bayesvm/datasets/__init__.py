"""Data sets shipped with bayesvm (provenance and licences in ``data/PROVENANCE.md``).

* :func:`load_toenail`: onychomycosis trial (De Backer et al. 1998), from R package HSAUR3, GPL-2.
* :func:`load_spam`: UCI Spambase (Hopkins et al. 1999), from R package kernlab, GPL-2.
* :func:`load_acath`: Duke cardiac catheterisation data (Harrell), cholesterol 1/3 missing.
* :func:`load_ratsch`: Raetsch's IDA benchmark sets (banana, breast_cancer, german, image, titanic,
  waveform with splits 1-10; diabetis, heart, thyroid pooled).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

import numpy as np
import pandas as pd

__all__ = ["load_toenail", "load_spam", "load_acath", "load_ratsch", "RATSCH_SETS", "RatschData"]

#: Raetsch benchmark sets shipped (``*_pooled``: no standard splits).
RATSCH_SETS = (
    "banana", "breast_cancer", "german", "image", "titanic", "waveform",
    "diabetis_pooled", "heart_pooled", "thyroid_pooled",
)  # fmt: skip


def _read(name: str, **kwargs) -> pd.DataFrame:
    with files(__package__).joinpath("data", name).open("rb") as handle:
        frame = pd.read_csv(handle, **kwargs)
    frame.attrs["name"] = name.removesuffix(".csv")
    frame.attrs["rows"] = len(frame)  # a subset keeps the attributes: data_name() tells it by its rows
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


@dataclass(frozen=True, eq=False)
class RatschData:
    """One Raetsch benchmark set.

    Attributes
    ----------
    frame
        Inputs ``x1 ... xp`` (Raetsch's normalisation) and ``y`` in ``{-1, +1}``.
    train, test
        ``(10, n_train)`` and ``(10, n_test)`` row positions of the standard splits 1-10 (``None`` for
        the pooled sets).
    """

    name: str
    frame: pd.DataFrame
    train: np.ndarray | None
    test: np.ndarray | None

    @property
    def formula(self) -> str:
        return "y ~ " + " + ".join(c for c in self.frame.columns if c != "y")

    def split(self, k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Training and test frames of split ``k`` (0-based)."""
        if self.train is None:
            raise ValueError(f"{self.name} has no standard splits (pooled data only)")
        return self.frame.iloc[self.train[k]], self.frame.iloc[self.test[k]]


def load_ratsch(name: str) -> RatschData:
    """A Raetsch benchmark set (provenance in ``data/PROVENANCE.md``); see :data:`RATSCH_SETS`."""
    if name not in RATSCH_SETS:
        raise ValueError(f"unknown Raetsch set {name!r}; choose one of {RATSCH_SETS}")
    with files(__package__).joinpath("data", f"{name}.npz").open("rb") as handle:
        arrays = np.load(handle)
        X, y = arrays["X"], arrays["y"]
        train = arrays["train"] if "train" in arrays.files else None
        test = arrays["test"] if "test" in arrays.files else None
    frame = pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(X.shape[1])])
    frame["y"] = y.astype(int)
    frame.attrs["name"] = name
    frame.attrs["rows"] = len(frame)
    return RatschData(name=name, frame=frame, train=train, test=test)
