"""A grouping factor's levels: each row's level as text, the levels in order, and each row's position among them.

A level is written as text so that the same level reads alike in training data, new data and a saved file: a
floating-point column's whole numbers as integers (``3.0`` is the level ``3`` of an integer column), a factor of
several columns (``a:b``) as its parts joined by ``:``.  The levels are sorted numerically when every one is a number
(``"2"`` before ``"10"``), else as text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def group_labels(data: pd.DataFrame, factors: tuple[str, ...]) -> pd.Index:
    """Each row's level of the grouping factor ``factors`` (``a:b`` joins its parts with ``:``), as text; a
    floating-point column's whole numbers are written as integers, so that a factor read as ``3.0`` (a column of
    integers with a missing value becomes float) names the level ``3`` of an integer column."""
    parts = [_level_text(data[name]) for name in factors]
    labels = parts[0]
    for part in parts[1:]:
        labels = labels + ":" + part
    return pd.Index(labels.astype(str))


def group_levels(data: pd.DataFrame, factors: tuple[str, ...]) -> tuple[pd.Index, np.ndarray]:
    """The sorted levels of the grouping factor ``factors`` (:func:`sorted_group_levels` of :func:`group_labels`) and
    each row's position among them; a factor of one column writes each distinct value as text once (not each row)."""
    if len(factors) != 1:
        labels = group_labels(data, factors)
        levels = sorted_group_levels(labels)
        return levels, levels.get_indexer(labels)
    column = data[factors[0]]
    raw_codes, uniques = pd.factorize(column, use_na_sentinel=False)
    text = pd.Index(_level_text(pd.Series(uniques, dtype=column.dtype)).astype(str))
    levels = sorted_group_levels(text)  # (values written alike, 3 and "3" of an object column, are one level)
    return levels, levels.get_indexer(text)[raw_codes]


def _level_text(column: pd.Series) -> np.ndarray:
    """A grouping column's values as text (:func:`group_labels`)."""
    text = column.astype(str).to_numpy(dtype=object)
    if pd.api.types.is_float_dtype(column.dtype):
        numbers = column.to_numpy(dtype=float, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(numbers) & (numbers == np.round(numbers)) & (np.abs(numbers) < 2.0**53)
        text[whole] = numbers[whole].astype(np.int64).astype(str)
    return text


def level_codes(levels: pd.Index, labels: pd.Index) -> np.ndarray:
    """Each label's position among a fit's ``levels`` (-1: a level the fit never saw); levels written as floats
    (``"3.0"``, as saved files may hold them) match the integers they are (:func:`group_labels`)."""
    codes = levels.get_indexer(labels)
    if (codes < 0).any() and levels.size and all(isinstance(level, str) for level in levels):
        as_numbers = pd.to_numeric(pd.Series(levels, dtype=object), errors="coerce")
        if as_numbers.notna().all() and any("." in level for level in levels):
            rewritten = pd.Index(_level_text(as_numbers.astype(float)))
            if rewritten.is_unique:
                codes = rewritten.get_indexer(labels)
    return codes


def sorted_group_levels(labels: pd.Index) -> pd.Index:
    """Unique labels, in numeric order when every label is a number (``"2"`` before ``"10"``)."""
    unique = pd.Index(labels.unique())
    numeric = pd.to_numeric(pd.Series(unique), errors="coerce")
    if numeric.notna().all():
        return unique[np.argsort(numeric.to_numpy(), kind="stable")]
    return unique.sort_values()
