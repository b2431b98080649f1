"""The records and warnings every route shares (bayesvm.engines.runs): an engine that stops early says so, in one
wording whichever family ran it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines import runs
from bayesvm.errors import ConvergenceWarning
from bayesvm.priors import Lasso, PriorSet, SpikeSlab


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 300
    x = rng.standard_normal((n, 3))
    g = rng.integers(0, 15, n)
    f = x @ np.array([1.0, -0.8, 0.0]) + rng.standard_normal(15)[g]
    frame = pd.DataFrame({"y": np.where(f + rng.standard_normal(n) > 0, "a", "b"), "g": [f"g{k}" for k in g]})
    for j in range(3):
        frame[f"x{j}"] = x[:, j]
    frame.loc[rng.choice(n, 30, replace=False), "x2"] = np.nan
    return frame


def test_the_words():
    assert runs.sweeps_stopped("VB", 7, 1e-8) == (
        "VB stopped after max_iter=7 sweeps without meeting tol=1e-08; increase max_iter",
        ConvergenceWarning,
    )
    assert (
        runs.iterations_stopped("EM", 12)[0] == "EM stopped after 12 iterations without converging; increase max_iter"
    )
    message, category = runs.bound_decreased([3, 5], "iteration")
    assert category is RuntimeWarning and message.startswith("the lower bound decreased at iteration(s) [3, 5]: ")


@pytest.mark.parametrize(
    "formula, options, words",
    [
        ("y ~ x0 + x1 + (1 | g)", {"vb": "meanfield", "max_iter": 2}, "VB stopped after max_iter=2 sweeps"),
        ("y ~ x0 + x1 + (1 | g)", {"method": "em", "max_iter": 3, "priors": PriorSet.paper()},
         "EM stopped after 3 iterations"),
        ("y ~ x0 + x1 + x2", {"prior": SpikeSlab(), "vb": "meanfield", "max_iter": 2},
         "VB stopped after max_iter=2 sweeps"),
        ("y ~ x0 + x1 + x2", {"prior": Lasso(), "method": "em", "max_iter": 3}, "EM stopped after 3 iterations"),
        ("y ~ x0 + x1 + x2 + (1 | g)", {"missing": "impute", "imputation": "joint", "vb": "meanfield", "max_iter": 2},
         "VB stopped after max_iter=2 sweeps"),
        ("y ~ x0 + x1 + x2 + (1 | g)", {"missing": "impute", "imputation": "mi", "imputations": 2, "vb": "meanfield",
                                         "max_iter": 2},
         "VB stopped after max_iter=2 sweeps without meeting tol=1e-08 on at least one completed data set"),
    ],
)  # fmt: skip
def test_an_engine_stopped_early_says_so_once(data, formula, options, words):
    """Each family's iterative engine, cut short by ``max_iter``, warns once with the shared words, naming the user's
    call; the fit is still made."""
    frame = data if options.get("missing") == "impute" or "x2" not in formula else data.dropna()
    with pytest.warns(ConvergenceWarning) as record:
        fit = bayesvm.bsvm(formula, frame, **options)
    said = [str(w.message) for w in record if issubclass(w.category, ConvergenceWarning)]
    assert sum(words in m for m in said) == 1, said
    assert all(w.filename == __file__ for w in record if words in str(w.message))
    assert fit.predict(frame.head(3), kind="link").notna().all()
