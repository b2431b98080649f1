"""The results read an engine's output by what its posterior view can give (draws, a point, a density q, Gaussians
over nodes), never by the view's name; the approximation caveat names the remedy that runs on the data."""

import dataclasses
import warnings

import numpy as np
import pytest

import bayesvm
from bayesvm.results import posterior, summary
from bayesvm.results.summary import report_kind

from ..conftest import simulate_grouped

FORMULA = "y ~ x1 + x2 + (1 | g)"


@pytest.fixture(scope="module")
def grouped():
    return simulate_grouped(n_groups=15, per_group=8, seed=3)


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bayesvm.bsvm(FORMULA, data, **kwargs)


@pytest.mark.parametrize(
    "kwargs, report, capabilities",
    [
        ({"vb": "meanfield"}, "variational", (False, False, True, False)),
        ({}, "mixture", (False, False, True, True)),
        ({"method": "gibbs", "draws": 200, "tune": 200, "chains": 2, "seed": 1, "progress": False}, "sampled",
         (True, False, False, False)),
        ({"method": "em"}, "mode", (False, True, False, False)),
    ],
)  # fmt: skip
def test_each_engine_is_reported_by_its_views_capabilities(grouped, kwargs, report, capabilities):
    fit = _fit(grouped, **kwargs)
    view = fit.posterior
    assert (view.holds_draws, view.point, view.approximate, view.over_nodes) == capabilities
    assert report_kind(fit.result, view) == report
    assert (fit.support is not None) == view.point  # support vectors: a mode's
    if view.holds_draws:
        assert fit.n_iter == fit.result.tune + fit.result.draws * fit.result.thin
    else:
        assert fit.n_iter == fit.result.n_iter
    text = str(fit.summary())
    assert ("k-hat" in text) == view.approximate


def test_a_new_output_form_is_read_by_its_capabilities(grouped, monkeypatch):
    """An output of a form the results have never seen, whose view declares a Gaussian q, gets the PSIS check, the
    summary and the ArviZ export of a Gaussian q with no other change; declared as a point, a mode's table and no check."""
    fit = _fit(grouped, vb="meanfield", checks=bayesvm.Checks(vb_check="ignore"))
    shape = dict(fit.to_inference_data(draws=48, log_likelihood=False).posterior.sizes)

    @dataclasses.dataclass(eq=False)
    class LaplaceOutput(type(fit.result)):
        posterior_form = "laplace"

    class LaplaceView(posterior.VariationalPosterior):
        kind = "laplace"

    monkeypatch.setitem(posterior.VIEWS, "laplace", LaplaceView)
    fit.result = LaplaceOutput(**{f.name: getattr(fit.result, f.name) for f in dataclasses.fields(fit.result)})
    fit.posterior = posterior.posterior_view(fit.result)
    check = fit.check_vb(warn=False)
    assert np.isfinite(check.governing_khat)
    assert "k-hat" in str(fit.summary())
    assert dict(fit.to_inference_data(draws=48, log_likelihood=False).posterior.sizes) == shape  # (q's draws as chains)

    LaplaceView.approximate, LaplaceView.point = False, True  # (a point: no PSIS check, no interval)
    fit.posterior = posterior.posterior_view(fit.result)
    with pytest.raises(bayesvm.BayesvmError):
        fit.check_vb()
    assert list(summary.fixed_table(fit, 0.95)[0].columns) == ["mean"]


def test_the_mean_field_caveat_names_the_pooled_fits(grouped):
    holed = grouped.copy()
    holed.loc[holed.index[::7], "x2"] = np.nan
    fit = _fit(holed, missing="impute", imputation="mi", vb="meanfield", control=bayesvm.Control(imputations=3))
    text = " ".join(str(fit.summary()).split())
    assert "mean-field VB with q(beta, u) per data set q(a)" in text
    assert "compare with method='gibbs' before relying" in text
    assert "Approximation:" not in text and "{" not in text


def test_the_marginal_check_says_which_random_effects_it_integrates_exactly():
    """With two crossed factors the marginal check integrates the blocked factor's effects exactly and draws the other
    factor's from q with the fixed effects: the check's line names both (its k-hat is then partly a joint one), where
    with one factor it says that factor's effects are integrated out exactly."""
    import pandas as pd

    from bayesvm.results.marginal_check import integration_note

    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 40, 400), rng.integers(0, 12, 400)
    x = rng.standard_normal(400)
    f = x + rng.normal(0, 1.0, 40)[a] + rng.normal(0, 0.7, 12)[b]
    data = pd.DataFrame({"y": np.where(f + rng.standard_normal(400) > 0, "p", "n"), "x": x, "a": a, "b": b})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        crossed = bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data, penalty=None)
        single = bayesvm.bsvm("y ~ x + (1 | a)", data, penalty=None)
    note = integration_note(crossed.problem)
    assert note.startswith("random effects of (1 | a) integrated out exactly; the 12 of (1 | b) drawn with the fixed")
    line = next(s for s in str(crossed.summary()).splitlines() if "fixed effects and variance components" in s)
    assert "the 12 of (1 | b) drawn with the fixed effects" in line
    assert integration_note(single.problem) == "random effects of (1 | a) integrated out exactly"
    line = next(s for s in str(single.summary()).splitlines() if "fixed effects and variance components" in s)
    assert "random effects of (1 | a) integrated out exactly)" in line
