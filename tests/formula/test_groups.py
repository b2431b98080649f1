"""A grouping factor's levels as text, in order, and each row's position among them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesvm.formula.groups import group_labels, group_levels, sorted_group_levels


def test_group_levels_equal_the_levels_and_codes_of_the_rows_labels_for_every_kind_of_column():
    """:func:`group_levels` writes each distinct value as text once; its levels (values, order, dtype) and codes equal
    those of the rows' labels (:func:`group_labels`, :func:`sorted_group_levels`), values written alike (``1`` and
    ``"1"`` of an object column) are one level, and a factor of several columns joins its parts."""
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({
        "int": rng.integers(-5, 40, n), "float": rng.integers(0, 40, n).astype(float), "quarter": rng.integers(0, 9, n) / 4,
        "text": rng.choice(["a", "b", "c10", "c2"], n),
        "cat": pd.Categorical(rng.choice(["x", "y", "z"], n), categories=["z", "y", "x", "w"]),
        "flag": rng.random(n) < 0.5, "mixed": pd.Series(rng.choice([1, "1", 1.0, "b", 3], n), dtype=object),
        "string": pd.Series(rng.choice(["10", "9", "100"], n), dtype="string"),
        "nullable": pd.Series(rng.integers(0, 5, n), dtype="Int64"), "big": rng.integers(0, 2**60, n),
        "unicode": rng.choice(["é", "ß", "日本"], n),
    })  # fmt: skip
    for factors in [(name,) for name in frame.columns] + [("int", "text"), ("cat", "float")]:
        labels = group_labels(frame, factors)
        expected = sorted_group_levels(labels)
        levels, codes = group_levels(frame, factors)
        assert levels.equals(expected) and levels.dtype == expected.dtype, factors
        np.testing.assert_array_equal(codes, expected.get_indexer(labels))
    assert list(group_levels(frame, ("mixed",))[0]) == ["1", "1.0", "3", "b"]  # (1 and "1" write alike)
