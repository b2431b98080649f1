import numpy as np
import pandas as pd
import pytest

from bayesvm.errors import BayesvmError
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model, validate_penalty
from bayesvm.priors import PriorSet
from tests.conftest import simulate_grouped


def test_fixed_transform_maps_standardized_coefficients_to_original_scale():
    data = simulate_grouped(p=3, seed=5)
    data["x2"] = 100 + 20 * data["x2"]
    design = build_design(parse_formula("y ~ x1 * x2 + x3"), data)
    model = build_model(design, None, PriorSet(), True)
    beta_std = np.random.default_rng(0).standard_normal(design.p)
    np.testing.assert_allclose(
        model.standardized_X(design.X) @ beta_std, design.X @ (model.fixed_transform() @ beta_std)
    )
    assert model.center[design.x_names.index("(Intercept)")] == 0


def test_no_centering_without_intercept():
    data = simulate_grouped(p=2, seed=5)
    design = build_design(parse_formula("y ~ 0 + x1 + x2"), data)
    model = build_model(design, "learn", PriorSet(), True)
    assert np.all(model.center == 0) and np.all(model.scale != 1)
    beta_std = np.array([0.3, -1.2])
    np.testing.assert_allclose(
        model.standardized_X(design.X) @ beta_std, design.X @ (model.fixed_transform() @ beta_std)
    )


def test_layout_blocks_the_largest_factor():
    data = simulate_grouped(n_groups=20, seed=1)
    design = build_design(parse_formula("y ~ x1 + (1 + x1 | g) + (1 | h)"), data)
    model = build_model(design, None, PriorSet(), True)
    assert [design.re_terms[t].group for t in model.blocked_terms] == ["g"]
    problem = model.problem()
    assert problem.D.shape[1] == design.p + 5 and problem.blocked.K == 2
    names = [c.name for c in problem.components]
    assert names == ["(1 + x1 | g)", "(1 | h)"]
    assert build_model(design, None, PriorSet(), True, max_dense_columns=0).problem().is_sparse


def test_several_factors_go_sparse_when_the_dense_products_dominate(monkeypatch):
    """Crossed factors whose dense part is wide (``q >= SPARSE_FROM_COLUMNS``) and costly (``n q^2 > MAX_DENSE_WORK``)
    take the sparse path; a narrower dense part, or one grouping factor, keeps the dense Schur path."""
    import bayesvm.model as model_module

    rng = np.random.default_rng(0)
    n = 1200
    data = pd.DataFrame({"x": rng.standard_normal(n), "a": rng.integers(0, 400, n).astype(str)})
    data["b"] = rng.integers(0, 300, n).astype(str)
    data["y"] = rng.integers(0, 2, n)
    crossed = build_design(parse_formula("y ~ x + (1 | a) + (1 | b)"), data)
    q = crossed.p + crossed.re_terms[1].n_levels  # the dense part: fixed effects and b's levels
    assert q >= model_module.SPARSE_FROM_COLUMNS
    monkeypatch.setattr(model_module, "MAX_DENSE_WORK", n * q**2 - 1.0)
    assert build_model(crossed, None, PriorSet(), True).problem().is_sparse
    monkeypatch.setattr(model_module, "MAX_DENSE_WORK", n * q**2 + 1.0)
    assert not build_model(crossed, None, PriorSet(), True).problem().is_sparse
    monkeypatch.setattr(model_module, "MAX_DENSE_WORK", 0.0)
    holes = data.assign(x=data["x"].where(np.arange(n) % 7 > 0))  # the joint imputation model keeps the dense layout
    imputed = build_design(parse_formula("y ~ x + (1 | a) + (1 | b)"), holes, missing="impute")
    assert not build_model(imputed, None, PriorSet(), True).sparse
    monkeypatch.setattr(model_module, "MAX_DENSE_WORK", 0.0)
    narrow = build_design(parse_formula("y ~ x + (1 | a) + (1 | g)"), data.assign(g=rng.integers(0, 9, n).astype(str)))
    assert not build_model(narrow, None, PriorSet(), True).problem().is_sparse  # q = 11 < SPARSE_FROM_COLUMNS
    wide_one = build_design(parse_formula("y ~ x + (1 | a)"), data)
    assert not build_model(wide_one, None, PriorSet(), True).problem().is_sparse


def test_penalty_priors():
    data = simulate_grouped(seed=1)
    design = build_design(parse_formula("y ~ x1 + x2"), data)
    fixed = build_model(design, 0.25, PriorSet(), True).problem()
    np.testing.assert_allclose(fixed.fixed_precision, [1e-8, 1.0, 1.0])  # 4 alpha on slopes
    learned = build_model(design, "learn", PriorSet(), True).problem()
    assert learned.components[0].name == "penalty" and learned.fixed_precision[1:].sum() == 0


@pytest.mark.parametrize("bad", [0, -2.0, np.inf, np.nan, "auto", True, [1.0]])
def test_bad_penalty(bad):
    with pytest.raises(BayesvmError):
        validate_penalty(bad)


def test_fits_that_would_not_fit_in_memory_are_refused_up_front(monkeypatch):
    import bayesvm
    import bayesvm.memory

    data = simulate_grouped(n_groups=10, seed=1)
    monkeypatch.setattr(bayesvm.memory, "available_memory", lambda: 1000)
    with pytest.raises(BayesvmError, match=r"GiB.*fewer"):
        bayesvm.bsvm("y ~ x1 + x2", data)
    monkeypatch.setattr(bayesvm.memory, "available_memory", lambda: 10**7)
    with pytest.raises(BayesvmError, match=r"draws.*thin"):
        bayesvm.bsvm("y ~ x1 + x2", data, method="gibbs", draws=10**6, chains=4)


def test_every_engine_returns_an_engine_output():
    """One output type.  Every engine's result class (each ``*Result`` of ``bayesvm.engines`` and the
    PCVM's) derives from :class:`bayesvm.model.output.EngineOutput` and declares a posterior form; an optional part
    an engine does not compute reads as the contract's default, and any other missing attribute still raises."""
    import importlib
    import inspect
    import pkgutil

    import bayesvm.engines
    from bayesvm.engines.kernel.pcvm import PCVMResult
    from bayesvm.engines.linear.em import EMResult
    from bayesvm.model.output import EMPTY_TRACE, OPTIONAL_PARTS, EngineOutput

    classes = {PCVMResult}
    for info in pkgutil.walk_packages(bayesvm.engines.__path__, "bayesvm.engines."):
        module = importlib.import_module(info.name)
        classes |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                    if c.__name__.endswith("Result") and c.__module__ == module.__name__}  # fmt: skip
    assert len(classes) >= 15
    for klass in classes:
        assert issubclass(klass, EngineOutput), klass
    result = EMResult.__new__(EMResult)  # an EM mode has no lower bound, indicators or imputations
    assert result.lower_bound is EMPTY_TRACE and result.include is None and result.fits is None
    assert set(OPTIONAL_PARTS) >= {"lower_bound", "objective", "include", "fits", "imputation", "stopping"}
    with pytest.raises(AttributeError, match="no attribute 'scale'"):
        _ = result.scale
