"""The linear family's routes (bayesvm.engines.linear.routes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm import fitting
from bayesvm.control import Control
from bayesvm.engines import hinge_sites
from bayesvm.engines.linear import compiled_rows, routes
from bayesvm.engines.runs import FitRequest
from bayesvm.errors import BayesvmError
from bayesvm.linalg import compiled
from bayesvm.priors import PriorSet


def _frame(n: int = 240, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.standard_normal(n), rng.standard_normal(n)
    g, h = rng.integers(0, 12, n), rng.integers(0, 5, n)
    f = x1 - 0.5 * x2 + rng.standard_normal(12)[g]
    y = np.where(f + rng.standard_normal(n) > 0, "yes", "no")
    return pd.DataFrame({"y": y, "x1": x1, "x2": x2, "g": [f"g{k}" for k in g], "h": [f"h{k}" for k in h]})


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_a_fit_that_compiles_its_row_loops_says_so_once(monkeypatch, capsys):
    """The first fit after install compiles for seconds: it says so once per process on standard error, and says
    nothing where numba's disk cache holds the code."""
    monkeypatch.setattr(compiled, "_said", set())
    monkeypatch.setattr(compiled, "on_disk", lambda function: True)
    routes.say_if_compiling(accurate=True)
    assert capsys.readouterr().err == ""
    missing = {id(hinge_sites.tilted_rows)}
    monkeypatch.setattr(compiled, "on_disk", lambda function: id(function) not in missing)
    routes.say_if_compiling(accurate=False)  # (mean-field: EP's tilted moments are not compiled by this fit)
    assert capsys.readouterr().err == ""
    routes.say_if_compiling(accurate=True)
    routes.say_if_compiling(accurate=True)
    assert capsys.readouterr().err.count("compiling the fit's row loops for this machine; this happens once") == 1


def _model(formula, data, **options):
    from bayesvm.formula.bars import parse_formula
    from bayesvm.formula.design import build_design
    from bayesvm.model import build_model

    design = build_design(parse_formula(formula), data)
    return build_model(design, options.pop("penalty", "learn"), options.pop("priors", PriorSet()), True, **options)


@pytest.mark.parametrize(
    "formula, penalty",
    [
        ("y ~ x1 + x2 + (1 | g)", "learn"),
        ("y ~ x1 + x2 + (1 + x1 | g) + (1 | h)", "learn"),
        ("y ~ x1 + x2 + (1 | g) + (x1 || h)", 0.5),
        ("y ~ x1 + gp(x2, k=8) + (1 | g)", None),
        ("y ~ x1 + x2", "learn"),
    ],
)
def test_the_variance_components_are_the_problems(formula, penalty):
    """``variance_components()`` (what supports() asks, no design matrix formed) gives the engine problem's components:
    the same names, indices, layout and priors."""
    data = _frame()
    model = _model(formula, data, penalty=penalty)
    alone, problem = model.variance_components(), model.problem().components
    assert len(alone) == len(problem) > 0 or (len(alone) == len(problem) == 0 and penalty != "learn")
    for a, b in zip(alone, problem):
        assert (a.name, a.blocked, a.n_levels, a.k, a.source, a.prior) == (b.name, b.blocked, b.n_levels, b.k, b.source,
                                                                          b.prior)  # fmt: skip
        assert np.array_equal(a.index, b.index)


def test_em_is_refused_by_its_route_before_any_engine_runs(monkeypatch):
    """A half-t prior has positive density at sigma = 0, so the joint mode is degenerate: the route's supports() names
    the components, and the engine never starts."""
    from bayesvm.engines.linear import em

    data = _frame()
    model = _model("y ~ x1 + x2 + (1 | g)", data)
    request = FitRequest("em", None, 0, Control())
    reason = routes.supports_em(model, request)
    assert "method='em' cannot use the prior of ['(1 | g)']: a half-t prior" in reason
    assert routes.supports_em(_model("y ~ x1 + x2 + (1 | g)", data, priors=PriorSet.paper()), request) is None
    with pytest.raises(BayesvmError, match="cannot use the prior"):  # (a direct call of the engine refuses too)
        em.fit_em(model.problem())
    monkeypatch.setattr(em, "fit_em", lambda *a, **k: pytest.fail("the engine ran"))
    with pytest.raises(BayesvmError, match=r"cannot use the prior of \['\(1 \| g\)'\]"):
        bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", data, method="em", priors=PriorSet())


def test_the_accurate_fit_past_its_scope_is_refused_by_its_route(monkeypatch):
    """Seven variance hyperparameters (a correlated 3 x 3 term and the learned penalty): refused with the reason before
    EP starts, in memory and out of core; ``vb=None`` chooses mean-field VB there instead."""
    from bayesvm.engines.linear import ep

    data = _frame()
    formula = "y ~ x1 + x2 + (1 + x1 + x2 | g)"
    monkeypatch.setattr(ep, "fit_accurate", lambda *a, **k: pytest.fail("the engine ran"))
    with monkeypatch.context() as before_checks:  # (refused before the identifiability checks' passes over the rows)
        before_checks.setattr(fitting, "check_identifiability", lambda *a, **k: pytest.fail("the checks ran"))
        with pytest.raises(BayesvmError, match="at most 6 variance hyperparameters .* this model has 7"):
            bayesvm.bsvm(formula, data, vb="accurate")
    assert routes.supports_vb(_model(formula, data), FitRequest("vb", None, 0, Control())) is None
    dd = pytest.importorskip("dask.dataframe")
    from bayesvm.engines.linear import stream_ep

    monkeypatch.setattr(stream_ep, "fit_streamed_accurate", lambda *a, **k: pytest.fail("the engine ran"))
    with pytest.raises(BayesvmError, match="at most 6 variance hyperparameters .* this model has 7"):
        bayesvm.bsvm(formula, dd.from_pandas(data, npartitions=2).categorize(columns=["y", "g", "h"]), vb="accurate")
