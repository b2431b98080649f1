"""The routing table of in-memory linear models (:mod:`bayesvm.engines.registry`): every fit of ``bsvm()`` goes
through it, each family reaches its routes, and a refused cell says why."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines import registry
from bayesvm.engines.linear.routes import engine_run


def _frame(seed: int = 0, n: int = 120, missing: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x, z = rng.standard_normal(n), rng.standard_normal(n)
    g = rng.integers(0, 8, n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(x - 0.5 * z + rng.normal(0, 1, 8)[g]))), "yes", "no")
    frame = pd.DataFrame({"y": y, "x": x, "z": z, "g": [f"g{k}" for k in g]})
    if missing:
        frame.loc[rng.choice(n, 12, replace=False), "z"] = np.nan
    return frame


@pytest.mark.parametrize(
    "options,family",
    [
        ({}, "linear"),
        ({"prior": bayesvm.priors.Lasso()}, "selection"),
        ({"missing": "impute", "imputation": "mi"}, "multiple imputation"),
        ({"missing": "impute", "imputation": "joint"}, "joint imputation"),
        ({"missing": "impute", "prior": bayesvm.priors.Lasso()}, "imputed selection"),
    ],
)
def test_every_fit_goes_through_the_table(options, family, monkeypatch):
    """Replacing the ``(family, "vb")`` cell replaces what ``bsvm()`` runs: no route bypasses the table."""
    seen = []
    original = registry.ROUTES[(family, "vb")]

    def run(model, request):
        seen.append((registry.family_of(model, request.control.imputation), request.method))
        return original.run(model, request)

    monkeypatch.setitem(registry.ROUTES, (family, "vb"), registry.Route(run, original.supports))
    missing = options.get("missing") == "impute"
    fit = bayesvm.bsvm("y ~ x + z + (1 | g)", _frame(missing=missing), vb="meanfield", **options)
    assert seen == [(family, "vb")]
    assert fit.method == "vb"


def test_a_route_says_its_warnings_once_and_the_fit_keeps_its_note(monkeypatch):
    """The driver says each warning a run returns once, at the user's call, and builds the fit with the run's note."""
    original = registry.ROUTES[("linear", "em")]

    def run(model, request):
        done = original.run(model, request)
        return engine_run(done.result, done.problem, "a note", [("a route's warning", UserWarning)])

    monkeypatch.setitem(registry.ROUTES, ("linear", "em"), registry.Route(run))
    with pytest.warns(UserWarning, match="a route's warning") as record:
        fit = bayesvm.bsvm("y ~ x + z", _frame(), method="em", penalty=1.0)
    assert sum("a route's warning" in str(w.message) for w in record) == 1
    assert record[0].filename == __file__
    assert fit.vb_note == "a note"


@pytest.mark.parametrize(
    "options,match",
    [
        ({"missing": "impute", "method": "em"}, "a posterior mode carries no uncertainty"),
        ({"missing": "impute", "imputation": "joint", "vb": "accurate"}, "fits each completed data set"),
        ({"method": "svi", "vb": "accurate"}, "two different fits"),
        ({"missing": "impute", "imputation": "joint", "method": "svi"}, "minibatches do not visit together"),
        ({"prior": bayesvm.priors.Lasso(), "unpenalized": ["x", "z"]}, "no slope to act on"),
    ],
)
def test_a_refused_cell_says_why(options, match):
    missing = options.get("missing") == "impute"
    with pytest.raises(bayesvm.BayesvmError, match=match):
        bayesvm.bsvm("y ~ x + z", _frame(missing=missing), **options)


def test_every_cell_of_the_table_is_a_route_of_a_known_family_and_method():
    families = {"linear", "selection", "multiple imputation", "joint imputation", "imputed selection"}
    for (family, method), route in registry.ROUTES.items():
        assert family in families and method in ("vb", "em", "gibbs", "svi")
        assert callable(route.run) and callable(route.supports)
