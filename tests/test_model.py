import numpy as np
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
    """Issue 23: one output type.  Every engine's result class (each ``*Result`` of ``bayesvm.engines`` and the
    PCVM's) derives from :class:`bayesvm.model.output.EngineOutput` and declares a posterior form; an optional part
    an engine does not compute reads as the contract's default, and any other missing attribute still raises."""
    import importlib
    import inspect
    import pkgutil

    import bayesvm.engines
    from bayesvm.engines.linear.em import EMResult
    from bayesvm.model.output import EMPTY_TRACE, OPTIONAL_PARTS, EngineOutput
    from bayesvm.pcvm_fit import PCVMResult

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
