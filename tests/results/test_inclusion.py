"""Selection priors through ``bsvm``: inclusion table, summary, predictions, plots, exports and errors."""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError, ConvergenceWarning, FormulaError
from bayesvm.priors import LaplaceZero, Lasso, SpikeSlab

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, str]:
    rng = np.random.default_rng(0)
    n, p = 300, 10
    X = rng.standard_normal((n, p)) * np.linspace(0.5, 3.0, p)  # unequal scales: original-scale reporting
    beta = np.zeros(p)
    beta[:3] = np.array([1.5, -1.0, 1.0]) / np.linspace(0.5, 3.0, p)[:3]
    y = rng.random(n) < 1 / (1 + np.exp(-(X @ beta)))
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(p)]).assign(y=np.where(y, "yes", "no"))
    return frame, "y ~ " + " + ".join(f"x{j}" for j in range(p))


def _fit(data, **kwargs):
    frame, formula = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return bayesvm.bsvm(formula, frame, **kwargs)


@pytest.fixture(scope="module")
def vb_fit(data):
    return _fit(data, prior=LaplaceZero(0.05), vb="meanfield")  # (the default with 10 slopes is EP)


@pytest.fixture(scope="module")
def gibbs_fit(data):
    return _fit(data, prior=SpikeSlab(0.1), method="gibbs", draws=500, tune=300, chains=2, seed=2)


@pytest.mark.parametrize("which", ["vb_fit", "gibbs_fit"])
def test_inclusion_table(which, request):
    fit = request.getfixturevalue(which)
    table = fit.inclusion
    assert list(table.columns) == ["p_include", "p_positive", "mean_if_included"]
    assert list(table.index) == [f"x{j}" for j in range(10)]
    assert table["p_include"].between(0, 1).all()
    assert (table["p_positive"] <= table["p_include"] + 1e-12).all()
    assert table.loc[["x0", "x1", "x2"], "p_include"].min() > 0.9
    assert table.loc["x0", "p_positive"] > 0.9 and table.loc["x1", "p_positive"] < 0.1
    assert set(fit.selected) >= {"x0", "x1", "x2"}
    # model averaging: fixef = p_include x mean_if_included on the original scale (Gibbs: p_include is the
    # Rao-Blackwellised estimate and fixef the draws' average, so the two agree to Monte Carlo error)
    mean_if = table["mean_if_included"].fillna(0.0)
    gap = np.abs(fit.fixef[table.index] - table["p_include"] * mean_if)
    assert np.all(gap <= (1e-10 if which == "vb_fit" else 0.05 * np.abs(mean_if) + 1e-10)), gap
    if which == "gibbs_fit":  # the Rao-Blackwellised estimate: each draw's P(gamma_k = 1 | the rest), averaged
        conditional = fit.result.include_probability
        assert conditional.shape == fit.result.include.shape
        np.testing.assert_allclose(table["p_include"], conditional.mean(axis=(0, 1)))
        share = fit.result.include.mean(axis=(0, 1))
        assert np.all(np.abs(table["p_include"] - share) < 0.1), (table["p_include"], share)


def test_summary_shows_inclusion_and_selection(vb_fit, gibbs_fit):
    for fit in (vb_fit, gibbs_fit):
        summary = fit.summary()
        assert "p_include" in summary.fixed.columns
        assert np.isnan(summary.fixed.loc["(Intercept)", "p_include"])
        text = str(summary)
        assert "Selected (p_include > 0.5)" in text
        assert "x0" in text.split("Selected")[1].splitlines()[0]
    assert "Alg. 3" in str(vb_fit.summary()) and "Laplace-zero, rho = 0.05" in str(vb_fit.summary())
    assert "section 4.2" in str(gibbs_fit.summary())


def test_predictions_are_model_averages(vb_fit, data):
    frame, _ = data
    link = vb_fit.predict(frame, kind="link")
    np.testing.assert_allclose(
        link, vb_fit.fixef.iloc[0] + frame[vb_fit.fixef.index[1:]].to_numpy() @ vb_fit.fixef.iloc[1:].to_numpy()
    )
    vb_fit.calibrate(newdata=frame)  # a map from the rows themselves: the test is about model averaging
    prob = vb_fit.predict(frame, kind="prob")
    assert np.array_equal(vb_fit.predict(frame), np.where(prob > 0.5, "yes", "no"))
    assert (vb_fit.predict(frame) == frame["y"]).mean() > 0.75


def test_accurate_fit_reports_inclusion_saves_and_exports(data, tmp_path):
    """vb="accurate" with a selection prior (EP with a site per slope): the inclusion table from the slopes'
    tilted distributions, model averages within EP's tolerance of p_include x mean_if_included, the summary's
    caveat, and the fit survives save / load and exports its mixture draws to ArviZ."""
    fit = _fit(data, prior=SpikeSlab(0.1), vb="accurate")
    table = fit.inclusion
    assert table["p_include"].between(0, 1).all() and (table["p_positive"] <= table["p_include"] + 1e-12).all()
    assert set(fit.selected) == {"x0", "x1", "x2"}
    np.testing.assert_allclose(
        fit.fixef[table.index], table["p_include"] * table["mean_if_included"].fillna(0.0), atol=1e-3
    )
    text = str(fit.summary())
    assert "EP with a site per slope" in text and "confirm with method='gibbs'" in text
    with pytest.raises(BayesvmError, match="method='gibbs'"):
        fit.check_vb()
    path = tmp_path / "accurate.bsvm"
    fit.save(path)
    again = bayesvm.load(path)
    pd.testing.assert_frame_equal(again.inclusion, table)
    idata = fit.to_inference_data(draws=200)
    beta = idata.posterior["beta"] if hasattr(idata, "posterior") else idata["posterior"]["beta"]
    assert beta.shape == (4, 50, 11)  # (independent draws from q as VB_CHAINS = 4 chains)
    # the draws carry each slope to its tilted distribution (a Gaussian copula): exact zeros as often as the slope
    # is excluded, the same means as q
    theta_d, _, _ = fit.result.sample(np.random.default_rng(1), 20000)
    selected = fit.result.slopes.selected
    zero = (theta_d[:, selected] == 0).mean(axis=0)
    np.testing.assert_allclose(zero, 1.0 - fit.result.slopes.p_include, atol=0.01)
    np.testing.assert_allclose(theta_d.mean(axis=0), fit.posterior.means()[0], atol=0.02)


def test_lasso_mode_inclusion_marks_exact_zeros(data):
    fit = _fit(data, prior=Lasso(nu=0.02), method="em")
    table = fit.inclusion
    zero = fit.fixef[table.index] == 0
    assert zero.any() and (~zero).any()
    assert np.array_equal(table["p_include"].to_numpy() == 0, zero.to_numpy())
    assert fit.support is not None


def test_lasso_gibbs_has_no_inclusion_probabilities(data):
    fit = _fit(data, prior=Lasso(), method="gibbs", draws=200, tune=100, chains=2, seed=1)
    assert fit.inclusion["p_include"].isna().all()
    assert "p_include" not in fit.summary().fixed.columns
    with pytest.raises(BayesvmError, match="no inclusion probabilities"):
        fit.plot_inclusion()


def test_unpenalized_terms_keep_the_vague_prior(data):
    fit = _fit(data, prior=LaplaceZero(0.05), unpenalized=["x9"])
    assert "x9" not in fit.inclusion.index
    assert abs(fit.fixef["x9"]) > 0  # never switched off
    assert "unpenalized: x9" in str(fit.summary())


def test_plot_inclusion_draws_one_bar_per_slope(vb_fit, tmp_path):
    ax = vb_fit.plot_inclusion()
    assert len(ax.patches) == 10
    heights = [patch.get_height() for patch in ax.patches]
    np.testing.assert_allclose(heights, vb_fit.inclusion["p_include"])
    ax.figure.savefig(tmp_path / "inclusion.png")


def test_arviz_export_and_save_load(gibbs_fit, tmp_path):
    idata = gibbs_fit.to_inference_data()
    beta = idata.posterior["beta"] if hasattr(idata, "posterior") else idata["posterior"]["beta"]
    assert beta.shape[:2] == (2, 500)
    posterior = idata.posterior if hasattr(idata, "posterior") else idata["posterior"]
    np.testing.assert_allclose(
        posterior["include_probability"].mean(("chain", "draw")), gibbs_fit.inclusion["p_include"]
    )
    np.testing.assert_array_equal(posterior["include"].values, gibbs_fit.result.include)
    path = tmp_path / "fit.pkl"
    gibbs_fit.save(path)
    again = bayesvm.load(path)
    pd.testing.assert_frame_equal(again.inclusion, gibbs_fit.inclusion)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prior": SpikeSlab(), "method": "em"}, "SpikeSlab is fitted by method in"),
        ({"prior": LaplaceZero(), "method": "em"}, "LaplaceZero is fitted by method in"),
        ({"prior": LaplaceZero(), "penalty": 0.5}, "replaces the penalty"),
        ({"prior": "lasso"}, "prior must be"),
    ],
)
def test_bad_prior_combinations_are_refused(data, kwargs, match):
    with pytest.raises(BayesvmError, match=match):
        _fit(data, **kwargs)


def test_unknown_unpenalized_term_is_named(data):
    with pytest.raises(FormulaError, match="'age'"):
        _fit(data, prior=LaplaceZero(), unpenalized=["age"])


def test_a_selection_prior_with_too_many_random_effects_says_why():
    """Random effects join the selection engines' dense precision: more than its column limit is refused with
    the reason (the indicator updates condition on every coefficient) and what to do instead."""
    from bayesvm.formula.bars import parse_formula
    from bayesvm.formula.design import build_design
    from bayesvm.model import build_model
    from bayesvm.priors import PriorSet

    frame = pd.DataFrame({"y": [0, 1] * 20, "x": np.arange(40.0), "g": [f"l{i}" for i in range(40)]})
    design = build_design(parse_formula("y ~ x + (1|g)"), frame)
    with pytest.raises(BayesvmError, match="dense precision of all 42 coefficients.*penalty='learn'"):
        build_model(design, "learn", PriorSet(), True, max_dense_columns=30, prior=LaplaceZero())


def test_prior_without_slopes_is_refused():
    frame = pd.DataFrame({"y": [0, 1] * 10, "x": np.arange(20.0)})
    with pytest.raises(BayesvmError, match="no slope"):
        bayesvm.bsvm("y ~ x", frame, prior=LaplaceZero(), unpenalized=["x"])


def test_priors_validate_their_hyperparameters():
    with pytest.raises(BayesvmError, match="rho"):
        LaplaceZero(rho=0.0)
    with pytest.raises(BayesvmError, match="pi"):
        SpikeSlab(pi=1.0)
    with pytest.raises(BayesvmError, match="nu"):
        Lasso(nu=-1.0)


def test_floored_ep_sites_are_named_in_a_warning_and_the_summary(monkeypatch):
    """Where the slope sites' negative precisions make q improper (spam's spike-and-slab fit), EP holds them at 0
    and their moments are not matched: one warning and the summary name those columns.  Simulated by a solver that
    refuses any negative slope precision, as an indefinite Cholesky would."""
    from bayesvm.engines.selection import ep as selection_ep

    rng = np.random.default_rng(3)
    x = rng.normal(size=40)
    frame = pd.DataFrame({"x": x, "y": np.where(rng.random(40) < 1 / (1 + np.exp(-(0.3 + 0.25 * x))), "b", "a")})
    real = selection_ep.gaussian_posterior

    def indefinite(C, tau, nu, *rest):
        if np.any(tau[C.shape[0] - 1 :] < 0):  # the last site is the slope's
            raise np.linalg.LinAlgError("the posterior precision is not positive definite")
        return real(C, tau, nu, *rest)

    monkeypatch.setattr(selection_ep, "gaussian_posterior", indefinite)
    with pytest.warns(ConvergenceWarning, match="the EP sites of x could not match their tilted moments"):
        fit = bayesvm.bsvm("y ~ x", frame, prior=SpikeSlab(pi=0.3, nu=1.5), vb="accurate")
    assert "WARNING  EP sites: the sites of x could not match" in str(fit.summary())
    monkeypatch.setattr(selection_ep, "gaussian_posterior", real)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the same fit without the refusal: no warning
        fit = bayesvm.bsvm("y ~ x", frame, prior=SpikeSlab(pi=0.3, nu=1.5), vb="accurate")
    assert fit.result.slopes.floored_weight.max() == 0.0 and "EP sites" not in str(fit.summary())


def test_inclusion_probabilities_stay_in_the_unit_interval(vb_fit, monkeypatch):
    """Averages of probabilities over nodes or draws can round to ``1 + 2e-16`` (found by the property test on a
    15-row Laplace-zero fit): the table keeps them in [0, 1]."""
    size = np.size(vb_fit.result.p_include)
    monkeypatch.setattr(type(vb_fit.result), "p_include", property(lambda self: np.full(size, 1.0 + 4e-16)))
    table = vb_fit.inclusion
    assert table["p_include"].between(0, 1).all() and table["p_positive"].between(0, 1).all()
    assert table["p_include"].max() == 1.0
