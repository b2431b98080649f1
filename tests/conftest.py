"""Shared fixtures and the ``slow`` marker (skipped unless ``--runslow``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


#: Test files whose tests take tens of seconds each, run first: pytest-xdist hands tests out in collection order, and
#: a long test started last leaves the other workers idle while it ends.
HEAVY_FIRST = ("tests/test_vignettes.py", "tests/test_properties.py", "tests/engines/linear/test_ep.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not item.nodeid.startswith(HEAVY_FIRST))  # stable: the order within each group kept
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def toenail() -> pd.DataFrame:
    return bayesvm.datasets.load_toenail()


def simulate_grouped(n_groups=12, per_group=8, p=2, seed=0, slope_sd=0.0) -> pd.DataFrame:
    """Logistic data with a random intercept (and optional random slope) per group."""
    rng = np.random.default_rng(seed)
    n = n_groups * per_group
    g = np.repeat(np.arange(n_groups), per_group)
    X = rng.standard_normal((n, p))
    u = rng.normal(0, 1.0, n_groups)[g]
    s = rng.normal(0, slope_sd, n_groups)[g] if slope_sd else 0.0
    eta = 0.3 + X @ np.linspace(1.0, -0.5, p) + u + s * X[:, 0]
    y = rng.random(n) < 1 / (1 + np.exp(-eta))
    frame = pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(p)])
    frame["g"] = [f"g{k}" for k in g]
    frame["h"] = [f"h{k}" for k in rng.integers(0, 5, n)]
    frame["y"] = y.astype(int)
    return frame


def simulate_logistic(n: int, p: int, seed: int = 4) -> tuple[pd.DataFrame, str]:
    """Logistic data without groups (slopes from 1 to -1) and the formula ``y ~ x0 + ... + x{p-1}``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = rng.random(n) < 1 / (1 + np.exp(-(X @ np.linspace(1, -1, p))))
    data = pd.DataFrame(X, columns=[f"x{j}" for j in range(p)]).assign(y=y.astype(int))
    return data, "y ~ " + " + ".join(f"x{j}" for j in range(p))


def simulate_quasi_separated(n: int = 200, seed: int = 0) -> pd.DataFrame:
    """Logistic data in 'x' plus a 0/1 predictor 'b' that is 0 only in class 0 (quasi-complete separation)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-x))).astype(int)
    b = np.where(y == 1, 1, (rng.random(n) < 0.5).astype(int))
    return pd.DataFrame({"x": x, "b": b, "y": y})
