"""The formula terms' interpreter (bayesvm.formula.interpreter): R's functions are named with what says the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import FormulaError


@pytest.mark.parametrize(
    "formula, said",
    [
        ("y ~ x * factor(g)", r"R's factor\(x\) is C\(x\) here"),
        ("y ~ x + relevel(g, 'b')", r"C\(x, Treatment\('b'\)\)"),
        ("y ~ x + offset(w)", "an offset, a fixed part of the decision value, is not supported"),
        ("y ~ s(x)", r"mgcv's s\(x\) is a gp\(x\) term here"),
        ("factor(y) ~ x", "its classes are read from the column as it is"),
    ],
)
def test_r_formula_functions_are_refused_naming_what_says_the_same(formula, said):
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"y": rng.integers(0, 2, 40), "x": rng.normal(size=40), "w": rng.random(40),
                         "g": rng.choice(list("abc"), 40)})  # fmt: skip
    with pytest.raises(FormulaError, match=said):
        bayesvm.bsvm(formula, data, vb="meanfield")
