"""Coding of a two-class response as y in {-1, +1}."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DataError


@dataclass(frozen=True)
class ResponseCoding:
    """How the user's response values map to ``-1`` / ``+1``.

    ``negative`` and ``positive`` are the original values (e.g. ``"none or mild"``,
    ``"moderate or severe"``; ``0``, ``1``; ``False``, ``True``).
    """

    name: str
    negative: object
    positive: object

    def encode(self, values: pd.Series) -> np.ndarray:
        """Map the original values to a float array of -1.0 / +1.0."""
        return np.where(values.to_numpy() == self.positive, 1.0, -1.0)

    def encode_new(self, frame: pd.DataFrame) -> np.ndarray:
        """-1.0 / +1.0 for the response column of new rows (held-out data for calibration).

        Raises
        ------
        DataError
            When the column is absent, missing in some rows or holds a value that is neither class.
        """
        if self.name not in frame.columns:
            raise DataError(f"newdata has no response column {self.name!r}: it is needed to score probabilities")
        values = frame[self.name]
        known = values.isin([self.negative, self.positive]).to_numpy()
        if not known.all():
            rows = frame.index[~known][:3].tolist()
            raise DataError(
                f"response column {self.name!r} of newdata has values other than {self.negative!r} and "
                f"{self.positive!r} (or missing values) in {int((~known).sum())} row(s), e.g. rows {rows}"
            )
        return self.encode(values)

    def decode(self, signs: np.ndarray) -> np.ndarray:
        """Map +1 / -1 (or booleans "is positive") back to the original values."""
        positive = np.asarray(signs) > 0
        labels = np.array([self.negative, self.positive], dtype=object)
        out = labels[positive.astype(int)]
        try:
            return out.astype(np.asarray([self.negative, self.positive]).dtype)
        except (TypeError, ValueError):
            return out


def sorted_levels(values: pd.Series) -> list:
    if isinstance(values.dtype, pd.CategoricalDtype):  # the categories present, in their order (codes -1: missing)
        present, categories = np.unique(values.cat.codes.to_numpy()), values.cat.categories.tolist()
        return [categories[int(code)] for code in present[present >= 0]]
    uniques = pd.unique(values.dropna())
    try:
        return sorted(uniques.tolist())
    except TypeError:
        return sorted(uniques.tolist(), key=str)


def check_not_continuous(values: pd.Series, name: str) -> None:
    """Refuse a response that measures rather than labels: more than two distinct numbers of which some are not whole
    (scikit-learn's ``type_of_target`` calls it "continuous"), where one fit per class would fit one per value.

    Raises
    ------
    DataError
        Naming the response, its number of distinct values and a few of them.
    """
    if not pd.api.types.is_float_dtype(values.dtype):
        return
    observed = values.dropna().to_numpy(dtype=float)
    distinct = np.unique(observed[np.isfinite(observed)])
    if distinct.size > 2 and np.any(distinct != np.round(distinct)):
        shown = ", ".join(f"{v:g}" for v in distinct[:4])
        raise DataError(
            f"response {name!r} is continuous ({distinct.size} distinct values: {shown}, ...): bayesvm fits classes; "
            f"give it a response of two or more classes, e.g. data[{name!r}] > threshold"
        )


def _near_duplicates(levels: list, name: str) -> str:
    """A hint naming text labels that differ only in surrounding spaces or case (``'yes'`` and ``'yes '``), or ``''``."""
    groups: dict[str, list] = {}
    for level in levels:
        if isinstance(level, str):
            groups.setdefault(level.strip().casefold(), []).append(level)
    clashes = [found for found in groups.values() if len(found) > 1]
    if not clashes:
        return ""
    shown = "; ".join(" and ".join(repr(level) for level in found) for found in clashes[:3])
    return (f" ({shown} differ only in spaces or case: clean them first, e.g. "
            f"data[{name!r}].str.strip().str.lower())")  # fmt: skip


def code_response(values: pd.Series, name: str, positive: object | None = None) -> ResponseCoding:
    """Decide which of the two classes is +1.

    The positive class is ``positive=`` when given, else the second level in categorical or
    sorted order (so 1 for 0/1, True for bool, +1 for -1/+1).

    Raises
    ------
    DataError
        If the response has missing values, or not exactly two distinct values, or
        ``positive`` is not one of them.
    """
    n_missing = int(values.isna().sum())
    if n_missing:
        rows = values.index[values.isna()].tolist()[:5]
        raise DataError(
            f"response {name!r} has {n_missing} missing value(s) (rows {rows}{'...' if n_missing > 5 else ''})"
        )
    levels = sorted_levels(values)
    kinds = {"text" if isinstance(level, str) else "number" for level in levels}
    if len(kinds) > 1:
        raise DataError(
            f"response {name!r} mixes numbers and text ({levels[:6]}): {'/'.join(map(repr, levels[:2]))} would be "
            f"different classes; make the column one type, e.g. data[{name!r}].astype(str)"
        )
    if len(levels) != 2:
        shown = levels[:6]
        raise DataError(
            f"response {name!r} must have exactly two classes for a binary SVM, found {len(levels)}: {shown}"
            f"{'...' if len(levels) > 6 else ''}{_near_duplicates(levels, name)}"
        )
    if positive is None:
        negative, positive = levels
    else:
        matches = [level for level in levels if level == positive or str(level) == str(positive)]
        if not matches:
            raise DataError(f"positive={positive!r} is not a class of response {name!r}; classes are {levels}")
        positive = matches[0]
        negative = levels[0] if levels[1] == positive else levels[1]
    return ResponseCoding(name=name, negative=negative, positive=positive)
