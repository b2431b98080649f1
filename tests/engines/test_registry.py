"""The engines' table (:mod:`bayesvm.engines.registry`): every fit of ``bsvm()`` (in memory and out of core, linear
and kernel) and of ``pcvm()`` goes through it, each family reaches its routes, and a refused cell says why."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines import registry
from bayesvm.engines.linear.routes import engine_run
from bayesvm.kernels import RBF


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
        seen.append((registry.family_of(model, request), request.method))
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
        ({"missing": "impute", "prior": bayesvm.priors.Lasso(), "unpenalized": ["x", "z"]}, "no slope to act on"),
    ],
)
def test_a_refused_cell_says_why(options, match):
    missing = options.get("missing") == "impute"
    with pytest.raises(bayesvm.BayesvmError, match=match):
        bayesvm.bsvm("y ~ x + z", _frame(missing=missing), **options)


def _fit(face: str, options: dict):
    frame = _frame()
    if face == "pcvm":
        return bayesvm.pcvm("y ~ x + z", frame, **options)
    if face == "dask":
        dd = pytest.importorskip("dask.dataframe")
        data = dd.from_pandas(frame, npartitions=2).categorize(columns=["y", "g"])
        return bayesvm.bsvm("y ~ x + z + (1 | g)", data, **options)
    return bayesvm.bsvm("y ~ x + z", frame, **options)


@pytest.mark.parametrize(
    "face,options,cell",
    [
        ("bsvm", {"kernel": RBF(), "seed": 1}, ("kernel", "vb")),
        ("bsvm", {"kernel": RBF(), "method": "em", "inducing": 10, "seed": 1}, ("kernel", "em")),
        ("pcvm", {"method": "laplace"}, ("pcvm", "laplace")),
        ("dask", {}, ("out-of-core linear", "vb")),
        ("dask", {"prior": bayesvm.priors.LaplaceZero(), "max_iter": 20}, ("out-of-core selection", "vb")),
    ],
)
def test_kernel_pcvm_and_out_of_core_fits_go_through_the_table(face, options, cell, monkeypatch):
    seen = []
    original = registry.ROUTES[cell]

    def run(model, request):
        seen.append((registry.family_of(model, request), request.method))
        return original.run(model, request)

    monkeypatch.setitem(registry.ROUTES, cell, registry.Route(run, original.supports))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (short fits: what they warn of is not the subject here)
        _fit(face, options)
    assert seen == [cell]


@pytest.mark.parametrize(
    "face,options,match",
    [
        ("bsvm", {"kernel": RBF(), "method": "gibbs", "vb": "accurate"}, "goes with method='vb'"),
        ("bsvm", {"kernel": RBF(), "method": "gibbs", "draws": "auto"}, "takes a number of draws"),
        ("bsvm", {"kernel": RBF(), "method": "svi", "learn_inducing": True}, "learn_inducing=True needs"),
        ("pcvm", {"method": "vb"}, "method must be one of"),
        ("pcvm", {"method": ["ep"]}, "method must be one of"),
        ("dask", {"method": "gibbs"}, r"out-of-core \(dask\) data are fitted by method in \('vb', 'svi'\)"),
        ("dask", {"vb": "accurate", "method": "svi"}, "stochastic mean-field VB"),
        ("dask", {"kernel": RBF()}, r"method in \('svi',\), not 'vb'"),
    ],
)
def test_kernel_pcvm_and_out_of_core_refusals_come_from_the_table(face, options, match):
    with pytest.raises(bayesvm.BayesvmError, match=match):
        _fit(face, options)


def test_a_method_no_out_of_core_engine_has_is_refused_before_the_pass_over_the_data(monkeypatch):
    """The table's cell is asked before the streamed design is built (a full pass over the partitions)."""
    import bayesvm.outofcore

    def no_pass(*args, **kwargs):
        raise AssertionError("the data were read")

    monkeypatch.setattr(bayesvm.outofcore, "build_streamed", no_pass)
    with pytest.raises(bayesvm.BayesvmError, match="not 'em'"):
        _fit("dask", {"method": "em"})


def test_every_cell_of_the_table_is_a_route_of_a_known_family_and_method():
    families = {"linear", "selection", "multiple imputation", "joint imputation", "imputed selection", "kernel", "pcvm"}
    families |= {f"out-of-core {family}" for family in ("linear", "selection", "kernel", "multiple imputation")}
    for (family, method), route in registry.ROUTES.items():
        assert family in families and method in ("vb", "em", "gibbs", "svi", "laplace", "ep")
        assert callable(route.run) and callable(route.supports)
    assert {family for family, _ in registry.ROUTES} == families
    # the families with no cell out of core are refused with their own reason
    for family in ("out-of-core joint imputation", "out-of-core imputed selection"):
        with pytest.raises(bayesvm.BayesvmError, match="in-memory data"):
            registry.cell(family, "vb")


def _documented_engine() -> dict:
    """The example engine of the engines' reference page (docs/reference/engines.md), executed as written."""
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "reference" / "engines.md"
    module = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)[0]
    namespace: dict = {}
    exec(compile(module, str(page), "exec"), namespace)
    return namespace


def test_a_new_engine_is_one_module_and_one_cell_of_the_table(monkeypatch, tmp_path):
    """The documented example: one function and one line in the table make a method that fits, summarises, predicts
    and saves like the built-in ones (its plain iteration reaches the accelerated VB's optimum)."""
    monkeypatch.setitem(registry.ROUTES, ("linear", "paper-vb"), registry.Route(_documented_engine()["run_paper_vb"]))
    frame = _frame()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ApproximationWarning)
        fit = bayesvm.bsvm("y ~ x + z + (1 | g)", frame, method="paper-vb", tol=1e-12, max_iter=5000)
        usual = bayesvm.bsvm("y ~ x + z + (1 | g)", frame, vb="meanfield", tol=1e-12, max_iter=5000)
    assert fit.method == "paper-vb" and fit.converged
    np.testing.assert_allclose(fit.fixef, usual.fixef, atol=1e-5)
    assert np.all(np.diff(fit.lower_bound) >= -1e-9 * np.abs(fit.lower_bound[1:]))  # every plain sweep raises it
    assert fit.n_iter > usual.n_iter  # (no extrapolation: more sweeps to the same optimum)
    text = str(fit.summary())
    assert "the 'paper-vb' engine (a Gaussian q)" in text and "Fit criterion: lower bound" in text
    np.testing.assert_allclose(fit.predict(frame, kind="pseudo"), usual.predict(frame, kind="pseudo"), atol=1e-5)
    assert fit.check_vb(warn=False).khat is not None  # the PSIS check reads the output's form
    assert "posterior" in fit.to_inference_data(draws=50).groups()
    fit.save(tmp_path / "fit")
    np.testing.assert_allclose(bayesvm.load(tmp_path / "fit").fixef, fit.fixef)
    with pytest.raises(bayesvm.BayesvmError, match="unknown method 'paper-vb'"):
        monkeypatch.delitem(registry.ROUTES, ("linear", "paper-vb"))
        bayesvm.bsvm("y ~ x + z", frame, method="paper-vb")
