"""Calibrated probabilities (bayesvm.results.calibration, bayesvm.results.crossfit, bayesvm.results.new_levels)."""

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import ndtr

import bayesvm
from bayesvm.errors import BayesvmError
from bayesvm.results.calibration import (
    CalibrationMap,
    MapPosterior,
    calibrated_probability,
    fit_calibration_map,
    probability_scores,
)
from tests.conftest import simulate_grouped, simulate_logistic


def _fixed_map(a_pos=1.3, a_neg=0.8, c=1.2) -> CalibrationMap:
    """A map with (numerically) no posterior spread, so the probability is equation (1) at one theta."""
    return CalibrationMap([MapPosterior("linear", np.log([a_pos, a_neg, c]), np.eye(3) * 1e-14, 0.0)], np.ones(1),
                          "test", 0)  # fmt: skip


# ----- the map never flips a class ------------------------------------------------------------------------
finite = st.floats(-30, 30, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    mean=st.lists(finite, min_size=1, max_size=20),
    log_var=st.floats(-12, 6),
    theta=st.lists(st.floats(-3, 3), min_size=25, max_size=25),
    spread=st.floats(1e-6, 4.0),
    new_var=st.floats(0.0, 50.0),
    weight=st.floats(0.0, 1.0),
    knots=st.lists(st.floats(0.001, 5.0), min_size=5, max_size=5, unique=True),
    knot_width=st.floats(0.005, 1.0),
)
def test_the_map_never_flips_a_class(mean, log_var, theta, spread, new_var, weight, knots, knot_width):
    mean = np.asarray(mean)
    where = np.vstack([np.sort(knots), np.full(5, knot_width)])
    maps = [MapPosterior("linear", np.asarray(theta[:3]), np.eye(3) * spread, 0.0),
            MapPosterior("flexible", np.asarray(theta[3:12]), np.eye(9) * spread, 0.0),
            MapPosterior("adaptive", np.asarray(theta[12:]), np.eye(13) * spread, 0.0, np.stack([where, where]))]  # fmt: skip
    cmap = CalibrationMap(maps, np.array([1.0 - weight, weight / 2, weight / 2]), "test", 0)
    var = np.full(mean.size, np.exp(log_var))
    law = (np.full((mean.size, 3), new_var) * [0.5, 1.0, 2.0], np.array([0.2, 0.5, 0.3]))
    for prob in (calibrated_probability(cmap, mean, var), calibrated_probability(cmap, mean, var, law)):
        assert np.all((prob > 0.5) == (mean > 0))
        assert np.all((prob >= 0.0) & (prob <= 1.0))


def test_classes_equal_prob_above_half_for_every_engine():
    data, formula = simulate_logistic(150, 3, seed=2)
    for options in ({}, {"method": "gibbs", "draws": 300, "tune": 200, "chains": 2, "seed": 1, "progress": False}):
        fit = bayesvm.bsvm(formula, data, **options)
        prob = fit.predict(data, kind="prob")
        cls = fit.predict(data)
        np.testing.assert_array_equal(cls == 1, prob > 0.5)
        np.testing.assert_array_equal(cls == 1, fit.predict(data, kind="link") > 0)


# ----- the map's posterior is right -----------------------------------------------------------------------
def test_map_recovers_known_slopes_and_variance_factor():
    rng = np.random.default_rng(0)
    n = 40_000
    mean, var = rng.normal(0, 2, n), rng.uniform(0, 1.0, n)
    truth = np.log([1.6, 0.6, 1.5])
    p = ndtr(np.exp(np.where(mean > 0, truth[0], truth[1])) * mean
             / np.sqrt(1 + np.exp(np.where(mean > 0, truth[0], truth[1])) ** 2 * np.exp(truth[2]) * var))  # fmt: skip
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    cmap = fit_calibration_map(pd.DataFrame({"mean": mean, "var": var, "new_var": 0.0, "y": y}), "test")
    linear = cmap._linear()
    sd = np.sqrt(np.diag(linear.cov))
    assert np.all(np.abs(linear.mode - truth) < 4 * sd), (linear.mode, truth, sd)
    assert np.all(sd < 0.2)
    assert cmap.weights[0] > 0.5  # the data are linear: the evidence keeps the linear map


def test_flexible_map_is_chosen_for_a_bent_link_and_recovers_it():
    """Risk flat inside the margin and steep at |f| = 1, as hinge fits often show: a bent map wins."""
    rng = np.random.default_rng(3)
    n = 20_000
    mean, var = rng.normal(0, 1.2, n), np.full(n, 0.05)
    bent = np.sign(mean) * (0.2 * np.minimum(np.abs(mean), 0.8) + 2.0 * np.clip(np.abs(mean) - 0.8, 0, 0.5)
                            + 0.5 * np.maximum(np.abs(mean) - 1.3, 0))  # fmt: skip
    y = np.where(rng.random(n) < ndtr(bent), 1.0, -1.0)
    frame = pd.DataFrame({"mean": mean, "var": var, "new_var": 0.0, "y": y})
    cmap = fit_calibration_map(frame, "test")
    assert [m.family for m in cmap.maps] == ["linear", "flexible", "adaptive"]
    assert cmap.weights[0] < 0.01  # the flexible and adaptive maps share the rest
    grid = np.linspace(-2.5, 2.5, 51)
    truth = ndtr(np.sign(grid) * (0.2 * np.minimum(np.abs(grid), 0.8) + 2.0 * np.clip(np.abs(grid) - 0.8, 0, 0.5)
                                  + 0.5 * np.maximum(np.abs(grid) - 1.3, 0)))  # fmt: skip
    error = np.max(np.abs(calibrated_probability(cmap, grid, np.zeros_like(grid)) - truth))
    linear_only = CalibrationMap(cmap.maps[:1], np.ones(1), "test", n)
    linear_error = np.max(np.abs(calibrated_probability(linear_only, grid, np.zeros_like(grid)) - truth))
    assert error < 0.07 and error < 0.5 * linear_error, (error, linear_error)


def test_adaptive_map_follows_risk_inside_a_squeezed_band():
    """A hinge fit dominated by one binary predictor puts f in narrow bands around +-1 (f = +-1 + small terms),
    while the risk still varies steeply inside each band.  The fixed knots cannot follow that; the knots at
    the data's quantiles can, the evidence prefers them, and held-out log loss improves on both other maps."""
    rng = np.random.default_rng(11)

    def simulate(n):
        side = np.where(rng.random(n) < 0.6, 1.0, -1.0)
        within = rng.normal(0.0, 0.02, n)
        mean = side + within
        # steep inside each band, on the band's side of 1/2 (a sign-preserving map can only reach such risks)
        risk = ndtr(np.where(side > 0, 1.0 + 14.0 * within, -1.0 + 12.0 * within))
        y = np.where(rng.random(n) < risk, 1.0, -1.0)
        return pd.DataFrame({"mean": mean, "var": 1e-3, "new_var": 0.0, "y": y}), risk

    train, _ = simulate(3000)
    test, risk = simulate(3000)
    cmap = fit_calibration_map(train, "test")
    families = [m.family for m in cmap.maps]
    assert families == ["linear", "flexible", "adaptive"]
    assert cmap.weights[2] > 0.99, cmap.weights
    knots = cmap.maps[2].knots
    assert knots.shape == (2, 2, 5) and np.all((knots[:, 0] > 0.95) & (knots[:, 0] < 1.05))
    y, mean, var = test["y"].to_numpy(), test["mean"].to_numpy(), test["var"].to_numpy()

    def loss(cm):
        return probability_scores(y, calibrated_probability(cm, mean, var))["log_loss"]

    others = [CalibrationMap([m], np.ones(1), "test", 3000) for m in cmap.maps[:2]]
    truth = probability_scores(y, risk)["log_loss"]
    assert loss(cmap) < min(loss(m) for m in others) - 0.005
    assert loss(cmap) < truth + 0.01, (loss(cmap), truth)
    # the adaptive map is sign-preserving like the others, and fits learned before it existed still load
    assert np.all((calibrated_probability(cmap, mean, var) > 0.5) == (mean > 0))


def test_map_prior_follows_the_scale_of_runaway_decision_values():
    """Separable training data under a learned penalty let f run to the thousands; the map's prior is centred
    on the predictions' own scale, so the learned slope recovers the true link there (a ~ 1/1000) instead of
    staying near the unit link and calling every row certain."""
    from bayesvm.results.calibration import decision_scale_center

    rng = np.random.default_rng(4)
    n = 600
    latent = rng.normal(0.0, 1.5, n)
    y = np.where(rng.random(n) < ndtr(1.2 * latent), 1.0, -1.0)
    frame = pd.DataFrame({"mean": 1000.0 * latent, "var": 1e-6, "new_var": 0.0, "y": y})
    center = decision_scale_center(frame["mean"].to_numpy())
    assert all(-8.0 < c < -6.0 for c in center)  # -log(median |m|) ~ -log(1000)
    slopes = fit_calibration_map(frame, "test").slopes
    assert all(0.6e-3 < a < 2.4e-3 for a in slopes), slopes
    test_latent = rng.normal(0.0, 1.5, 4000)
    test_y = np.where(rng.random(4000) < ndtr(1.2 * test_latent), 1.0, -1.0)
    prob = calibrated_probability(fit_calibration_map(frame, "test"), 1000.0 * test_latent, np.full(4000, 1e-6))
    truth = probability_scores(test_y, ndtr(1.2 * test_latent))["log_loss"]
    assert probability_scores(test_y, prob)["log_loss"] < truth + 0.02
    # on the hinge's own scale the centre stays near the unit link
    hinge = rng.normal(0.0, 1.0, 2000)
    assert all(abs(c) < 0.5 for c in decision_scale_center(hinge))


def test_large_prediction_sets_are_subsampled_by_class(monkeypatch):
    from bayesvm.results import calibration

    monkeypatch.setattr(calibration, "MAP_MAX_ROWS", 2000)
    rng = np.random.default_rng(8)
    n = 9000
    mean = rng.normal(0.5, 1.5, n)
    y = np.where(rng.random(n) < ndtr(0.8 * mean), 1.0, -1.0)
    frame = pd.DataFrame({"mean": mean, "var": 0.01, "new_var": 0.0, "y": y})
    cmap = fit_calibration_map(frame, "test")
    assert cmap.n == 2000 and "a random 2,000 of them" in cmap.describe()
    assert abs(np.mean(cmap.predictions["y"] > 0) - np.mean(y > 0)) < 0.002  # the classes keep their shares
    assert all(abs(a - 0.8) < 0.15 for a in cmap.slopes)
    again = fit_calibration_map(frame, "test")  # the same subset every time
    np.testing.assert_array_equal(again.predictions.index, cmap.predictions.index)


def test_adaptive_map_needs_rows_on_both_sides():
    from bayesvm.results.calibration import ADAPTIVE_MIN_ROWS, adaptive_knots

    mean = np.r_[np.linspace(0.1, 2.0, 500), -np.linspace(0.1, 2.0, ADAPTIVE_MIN_ROWS - 1)]
    assert adaptive_knots(mean) is None
    assert adaptive_knots(np.r_[mean, -0.05]).shape == (2, 2, 5)
    assert adaptive_knots(np.r_[np.ones(300), -np.ones(300)]) is None  # no distinct quantiles


@pytest.mark.parametrize("family", ["linear", "flexible", "adaptive"])
def test_map_gradient_matches_finite_differences(family):
    """The analytic gradient L-BFGS and the Hessian use, against central differences of the log posterior, with
    new-level variances, rows at m = 0 and rows beyond the integration grid (|m| > 6)."""
    from bayesvm.results.calibration import (
        _negative_log_posterior,
        _objective_and_gradient,
        _prior_sd,
        _width,
        adaptive_knots,
    )

    rng = np.random.default_rng(1)
    n = 2000
    mean = rng.normal(0, 2.5, n)
    mean[:5], mean[5:10] = 0.0, [7.0, -8.0, 9.0, 6.5, -6.2]
    var, new_var = rng.uniform(0, 1, n), np.where(rng.random(n) < 0.3, rng.uniform(0, 2, n), 0.0)
    y = np.where(rng.random(n) < ndtr(mean), 1.0, -1.0)
    knots = adaptive_knots(mean) if family == "adaptive" else None
    n_knots = 3 if knots is None else knots.shape[-1]
    theta, sd, center = rng.normal(0, 0.4, _width(family, n_knots)), _prior_sd(family, n_knots), 0.1
    value, gradient = _objective_and_gradient(theta, mean, var, new_var, y, sd, knots, center)
    assert value == pytest.approx(_negative_log_posterior(theta, mean, var, new_var, y, sd, knots, center), abs=1e-9)
    steps = np.eye(theta.size) * 1e-6
    differences = [
        (_negative_log_posterior(theta + e, mean, var, new_var, y, sd, knots, center)
         - _negative_log_posterior(theta - e, mean, var, new_var, y, sd, knots, center)) / 2e-6
        for e in steps
    ]  # fmt: skip
    np.testing.assert_allclose(gradient, differences, atol=1e-5 * max(1.0, np.abs(differences).max()))


def test_map_laplace_covariance_matches_the_posterior_spread():
    """The Laplace SD of log a_+ against the SD of the exact 1-D posterior on a grid (the others fixed)."""
    rng = np.random.default_rng(1)
    n = 400
    mean, var = rng.normal(0, 1.5, n), np.full(n, 0.2)
    y = np.where(rng.random(n) < ndtr(mean / np.sqrt(1.2)), 1.0, -1.0)
    frame = pd.DataFrame({"mean": mean, "var": var, "new_var": 0.0, "y": y})
    linear = fit_calibration_map(frame, "test")._linear()
    grid = linear.mode[0] + np.linspace(-1.5, 1.5, 601)
    from bayesvm.results.calibration import _negative_log_posterior

    logp = np.array([-_negative_log_posterior(np.r_[g, linear.mode[1:]], mean, var, 0.0, y, np.ones(3)) for g in grid])
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mu = w @ grid
    exact_sd = np.sqrt(w @ (grid - mu) ** 2)
    conditional_sd = 1.0 / np.sqrt(np.linalg.inv(linear.cov)[0, 0])
    assert abs(conditional_sd - exact_sd) < 0.1 * exact_sd


# ----- calibrated on data from a known model --------------------------------------------------------------
@pytest.mark.filterwarnings("ignore")
def test_held_out_ece_below_003_on_a_logistic_model():
    rng = np.random.default_rng(7)
    n = 5000
    X = rng.standard_normal((2 * n, 3))
    eta = 0.4 + X @ np.array([1.5, -1.0, 0.5])
    y = (rng.random(2 * n) < 1 / (1 + np.exp(-eta))).astype(int)
    frame = pd.DataFrame(X, columns=["x1", "x2", "x3"]).assign(y=y)
    train, test = frame.iloc[:n], frame.iloc[n:]
    fit = bayesvm.bsvm("y ~ x1 + x2 + x3", train)
    report = fit.calibration(test)
    assert report.metrics.loc["prob", "ece"] < 0.03, report
    # and far better than the raw pseudo-likelihood, whose link is too steep
    assert report.metrics.loc["prob", "log_loss"] < report.metrics.loc["pseudo", "log_loss"] - 0.02
    # the true probabilities' log loss is the floor; the calibrated ones are close to it
    truth = probability_scores(np.where(test["y"] == 1, 1.0, -1.0), 1 / (1 + np.exp(-eta[n:])))
    assert report.metrics.loc["prob", "log_loss"] < truth["log_loss"] + 0.01


# ----- new group levels -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def grouped():
    return simulate_grouped(n_groups=20, per_group=6, p=2, seed=3, slope_sd=0.7)


def _new_rows(grouped):
    return grouped.head(3).assign(g=["new_a", "new_b", "new_c"], x1=[0.4, -1.2, 2.0])


def _mc_new_level_probability(fit, rows, draws: int, rng) -> np.ndarray:
    """Monte Carlo over Sigma ~ posterior and u ~ N(0, Sigma): mean of equation (1) at the map's mode."""
    cmap = fit._calibration
    mean, var = fit.posterior.link(*fit._rows(rows, True)[0])
    term = fit.model.design.re_terms[0]
    z = fit.model.design.rematerialize(rows).values[0]
    comp = next(c for c, comp in enumerate(fit.problem.components) if comp.source == 0)
    law = fit.posterior.component_law(comp)
    if law.kind == "discrete":
        pick = rng.choice(law.weights.size, size=draws, p=law.weights / law.weights.sum())
        sigma = law.values[pick]
    elif term.k == 1:
        sigma = stats.invgamma(a=law.shape, scale=law.scale[0, 0]).rvs(size=draws, random_state=rng)[:, None, None]
    else:
        sigma = stats.invwishart(df=law.shape, scale=law.scale).rvs(size=draws, random_state=rng)
    chol = np.linalg.cholesky(sigma + 1e-300 * np.eye(term.k))
    u = np.einsum("sij,sj->si", chol, rng.standard_normal((draws, term.k)))
    out = []
    for i in range(len(rows)):
        theta = cmap.maps[0].mode
        slope = np.exp(theta[0] if mean[i] > 0 else theta[1])
        f = mean[i] + u @ z[i]
        out.append(ndtr(slope * f / np.sqrt(1 + slope**2 * np.exp(theta[2]) * var[i])).mean())
    return np.array(out)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "formula, options",
    [
        ("y ~ x1 + x2 + (1 | g)", {"vb": "meanfield"}),  # inverse gamma q
        ("y ~ x1 + x2 + (1 + x1 | g)", {"vb": "meanfield"}),  # inverse Wishart q
        ("y ~ x1 + x2 + (1 | g)", {}),  # the integrated fit's weighted nodes
        (
            "y ~ x1 + x2 + (1 | g)",
            {"method": "gibbs", "draws": 400, "tune": 200, "chains": 2, "seed": 3, "progress": False},
        ),  # the chains' draws
    ],  # fmt: skip
)
def test_new_level_probabilities_match_monte_carlo(grouped, formula, options):
    fit = bayesvm.bsvm(formula, grouped, **options)
    fit._calibration = _fixed_map()
    rows = _new_rows(grouped)
    prob = fit.predict(rows, kind="prob")
    mc = _mc_new_level_probability(fit, rows, 2_000_000, np.random.default_rng(11))
    np.testing.assert_allclose(prob, mc, atol=1e-3)
    # integrating over a new level pulls the probability towards 1/2 compared with u = 0
    zero = fit.predict(rows, kind="prob", new_levels="zero")
    assert np.all(np.abs(prob - 0.5) < np.abs(zero - 0.5))
    np.testing.assert_array_equal(fit.predict(rows, kind="link"), fit.predict(rows, kind="link", new_levels="zero"))


def test_new_level_option_is_checked(grouped):
    fit = bayesvm.bsvm("y ~ x1 + (1 | g)", grouped, vb="meanfield")
    with pytest.raises(BayesvmError, match="new_levels"):
        fit.predict(grouped, kind="prob", new_levels="sample")


# ----- cross-fitting, reports, storage --------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_fit():
    data, formula = simulate_logistic(160, 3, seed=5)
    return bayesvm.bsvm(formula, data, vb="meanfield"), data


def test_cross_fitting_is_stratified_and_out_of_sample(small_fit):
    fit, data = small_fit
    cmap = fit.calibrate(folds=4, seed=2, method="crossfit")
    pred = cmap.predictions
    assert len(pred) == len(data) and set(pred["fold"]) == {0, 1, 2, 3}
    for k in range(4):  # both classes in every fold, in proportion
        share = (pred.loc[pred["fold"] == k, "y"] > 0).mean()
        assert abs(share - (pred["y"] > 0).mean()) < 0.05
    # an out-of-fold prediction is not the in-sample one
    assert np.abs(pred["mean"].to_numpy() - fit.predict(kind="link")).max() > 1e-3
    assert "4-fold cross-fitted" in cmap.describe() and "4-fold" in str(fit.summary())
    again = fit.calibrate(folds=4, seed=2, method="crossfit")  # deterministic given the seed
    np.testing.assert_allclose(again.weights, cmap.weights)
    np.testing.assert_allclose(again.maps[0].mode, cmap.maps[0].mode)


def test_calibration_report_and_plot(small_fit):
    fit, data = small_fit
    report = fit.calibration()
    assert report.source.startswith("cross-validated")
    assert report.reliability["count"].sum() == len(data)
    assert set(report.metrics.index) == {"prob", "pseudo"}
    held = fit.calibration(data.iloc[:50])
    assert held.source == "held-out" and int(held.metrics.loc["prob", "n"]) == 50
    assert "log_loss" in str(report)
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    ax = fit.plot_calibration()
    assert "ECE" in ax.get_title() and ax.get_xlabel()


def test_held_out_calibration_and_response_errors(small_fit):
    fit, data = small_fit
    with pytest.raises(BayesvmError, match="no response column 'y'"):
        fit.calibrate(newdata=data.drop(columns="y"))
    with pytest.raises(BayesvmError, match="other than"):
        fit.calibrate(newdata=data.assign(y=data["y"] + 5))
    cmap = fit.calibrate(newdata=data.iloc[:80])
    assert cmap.source == "held-out" and cmap.n == 80
    with pytest.raises(BayesvmError, match="held-out"):
        fit.calibration()


def test_the_fit_keeps_its_own_copy_of_the_rows():
    data, formula = simulate_logistic(120, 2, seed=8)
    data["unused"] = "text the formula never mentions"
    before = data.copy()
    fit = bayesvm.bsvm(formula, data, vb="meanfield")
    data.loc[:, "x0"] = 0.0  # the user reuses the frame
    first = fit.calibrate(seed=0).maps[0].mode
    pd.testing.assert_frame_equal(fit.call.data, before[["x0", "x1", "y"]])
    fresh = bayesvm.bsvm(formula, before, vb="meanfield").calibrate(seed=0).maps[0].mode
    np.testing.assert_allclose(first, fresh)


def test_rows_dropped_for_missing_values_are_not_cross_fitted():
    data, formula = simulate_logistic(120, 2, seed=9)
    data.loc[[3, 10, 50], "x1"] = np.nan
    fit = bayesvm.bsvm(formula, data, vb="meanfield", missing="drop")
    assert len(fit.call.data) == 117
    assert fit.calibrate().n == 117


def test_saved_fit_keeps_its_map_and_can_recalibrate(tmp_path, small_fit):
    fit, data = small_fit
    fit.calibrate(seed=4)
    path = tmp_path / "fit.bsvm"
    fit.save(path)
    loaded = bayesvm.load(path)
    np.testing.assert_array_equal(loaded.predict(data, kind="prob"), fit.predict(data, kind="prob"))
    np.testing.assert_allclose(loaded.calibrate(seed=4).maps[0].mode, fit.calibrate(seed=4).maps[0].mode)


def test_a_fit_without_its_rows_says_how_to_calibrate(small_fit):
    fit, data = small_fit
    import copy

    orphan = copy.copy(fit)
    orphan.call, orphan._calibration = None, None
    with pytest.raises(BayesvmError, match=r"fit.calibrate\(newdata=frame\)"):
        orphan.calibrate(method="crossfit")
    assert orphan.predict(data, kind="pseudo").shape == (len(data),)
    # PSIS leave-one-out needs the fit's own rows only
    assert orphan.predict(data, kind="prob").shape == (len(data),)
    assert orphan.calibration_map().source == "PSIS leave-one-out"


def test_a_failing_fold_is_named_and_the_prior_map_used(monkeypatch):
    """A fold fit that fails (here the third refit raises what a fit raises on bad data) is named in the warning,
    and the probabilities use the prior's map, which the map's description and summary() say."""
    import bayesvm.results.crossfit as crossfit
    from bayesvm.errors import DataError

    data, formula = simulate_logistic(60, 2, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(formula, data, vb="meanfield")
    real, calls = crossfit.REFITTERS["bsvm"], {"n": 0}

    def third_fails(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise DataError("column 'x0' has a value the fold cannot take")
        return real(*args, **kwargs)

    monkeypatch.setitem(crossfit.REFITTERS, "bsvm", third_fails)
    with pytest.warns(UserWarning, match=r"folds other than 3 of 5 failed .*cannot take.*held-out rows"):
        cmap = fit.calibrate(folds=5, method="crossfit")
    assert cmap.n == 0 and "cannot take" in cmap.describe() and "prior" in str(fit.summary())


def test_a_numerical_failure_of_a_fold_fit_is_named_not_raised(monkeypatch):
    """A fold fit that fails numerically (a LinAlgError, not one of the package's errors) gives the same warning
    naming the fold and the cause, and the prior's map, instead of a raw traceback from ``predict``."""
    import bayesvm.results.crossfit as crossfit

    data, formula = simulate_logistic(60, 2, seed=1)
    fit = bayesvm.bsvm(formula, data, vb="meanfield")
    real, calls = crossfit.REFITTERS["bsvm"], {"n": 0}

    def second_fails(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise np.linalg.LinAlgError("the posterior precision is not positive definite")
        return real(*args, **kwargs)

    monkeypatch.setitem(crossfit.REFITTERS, "bsvm", second_fails)
    with pytest.warns(UserWarning, match=r"folds other than 2 of 5 failed \(LinAlgError: the posterior precision"):
        fit.calibrate(method="crossfit")
    prob = fit.predict(data, kind="prob")
    assert np.all(np.isfinite(prob)) and "prior only" in fit.calibration_map().describe()


def test_a_level_on_one_row_does_not_fail_a_fold():
    """The case the test above used to build its failing fold: one row of a level.  The fold fits build their
    columns with the full fit's spec (bayesvm.results.crossfit), so the fold holding that row out predicts it."""
    data, formula = simulate_logistic(60, 2, seed=1)
    data["rare"] = ["a"] * 59 + ["b"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(formula + " + rare", data, vb="meanfield")
        cmap = fit.calibrate(folds=5, method="crossfit")
    assert cmap.n == 60 and "5-fold cross-fitted" in cmap.describe()


@pytest.mark.filterwarnings("ignore")
def test_kernel_and_pcvm_fits_use_the_same_map():
    data, formula = simulate_logistic(150, 2, seed=3)
    kfit = bayesvm.bsvm(formula, data, kernel=bayesvm.kernels.RBF(), inducing=20, seed=0)
    prob = kfit.predict(data, kind="prob")
    np.testing.assert_array_equal(prob > 0.5, kfit.predict(data, kind="link") > 0)
    assert "cross-fitted" in kfit.calibration_map().describe()
    with pytest.warns(FutureWarning, match="deprecated"):
        old = kfit.predict(data, kind="prob", probability="probit")
    mean, var = kfit.posterior.link(kfit._inputs(data))
    np.testing.assert_allclose(old, ndtr(mean / np.sqrt(1 + var)))
    pfit = bayesvm.pcvm(formula, data)
    pp = pfit.predict(data, kind="prob")
    np.testing.assert_array_equal(pp > 0.5, pfit.predict(data, kind="link") > 0)
    mean, var = pfit.posterior.link(pfit._inputs(data))
    np.testing.assert_allclose(pfit.predict(data, kind="pseudo"), ndtr(mean / np.sqrt(1 + var)))


def test_sklearn_predict_proba_is_the_calibrated_probability():
    from bayesvm.sklearn import BayesianSVC

    data, _ = simulate_logistic(150, 2, seed=4)
    X, y = data[["x0", "x1"]].to_numpy(), data["y"].to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = BayesianSVC().fit(X, y)
        proba = clf.predict_proba(X)[:, 1]
        np.testing.assert_allclose(proba, clf.result_.predict(clf._check(X), kind="prob"))
        np.testing.assert_array_equal(clf.predict(X), (proba > 0.5).astype(int))
        assert clf.result_.calibration_map().source == "PSIS leave-one-out"  # a fixed-effect fit: no refits
        three = BayesianSVC(calibration_folds=3).fit(X, y)
        three.predict_proba(X[:3])
        assert set(three.result_.calibration_map().predictions["fold"]) == {0, 1, 2}
        em = BayesianSVC(method="em", penalty=0.5).fit(X, y)
        np.testing.assert_array_equal(em.predict(X), (em.predict_proba(X)[:, 1] > 0.5).astype(int))
        assert np.all(np.diff(em.decision_function(X)[np.argsort(em.predict_proba(X)[:, 1])]) >= -1e-9)


def test_too_few_rows_to_cross_fit_fall_back_to_the_prior_map_and_say_so():
    data = pd.DataFrame({"x": [0.1, -0.3, 0.5, 1.0, -1.2], "y": [1, 0, 0, 0, 0]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x", data, penalty=1.0, vb="meanfield")
    with pytest.warns(UserWarning, match="smaller class has 1.*not one learned from these data"):
        prob = fit.predict(data, kind="prob")
    assert np.all((prob > 0.5) == (fit.predict(data, kind="link") > 0))
    assert "prior" in fit.calibration_map().describe() and "prior" in str(fit.summary())


def test_held_out_rows_with_missing_values_are_left_out_of_a_drop_fits_scores():
    """A ``missing="drop"`` fit scores and calibrates on held-out rows as it fitted: rows missing a used value (the
    response too) are left out and counted in the report; a ``missing="error"`` fit still names the missing value."""
    data, formula = simulate_logistic(300, 2, seed=8)
    train, held = data.iloc[:200].copy(), data.iloc[200:].copy()
    train.loc[train.index[:3], "x0"] = np.nan
    held.loc[held.index[:4], "x1"] = np.nan
    held["y"] = held["y"].astype(float)
    held.loc[held.index[10], "y"] = np.nan
    held["unused"] = np.nan  # a column the formula does not use never leaves a row out
    fit = bayesvm.bsvm(formula, train, missing="drop", vb="meanfield", seed=1)
    report = fit.calibration(held)
    assert "5 row(s) with missing values left out" in report.source
    assert int(report.reliability["count"].sum()) == 95
    complete = held.dropna(subset=["x0", "x1", "y"])
    np.testing.assert_allclose(report.metrics.loc["prob"].to_numpy(), fit.calibration(complete).metrics.loc["prob"])
    assert "left out" in fit.calibrate(newdata=held).describe()
    strict = bayesvm.bsvm(formula, data.iloc[:200], vb="meanfield", seed=1)
    with pytest.raises(bayesvm.DataError, match="x1"):
        strict.calibration(held.drop(index=held.index[10]))


def test_predictions_too_large_for_the_maps_curvature_fall_back_to_the_prior_map_quietly():
    """Held-out decision values of 1e15-1e20, a quarter on the wrong side (a separated fit under a vague variance
    prior): the probit's curvature overflows, so no family has a Laplace evidence and the prior's map is used, without
    a numpy error or warning."""
    from bayesvm.results.calibration import fit_calibration_map

    rng = np.random.default_rng(0)
    y = np.where(rng.random(120) < 0.4, 1.0, -1.0)
    mean = y * 10 ** rng.uniform(15, 19.8, 120) * np.where(rng.random(120) < 0.25, -1.0, 1.0)
    var = np.where(rng.random(120) < 0.3, 0.0, 10 ** rng.uniform(18, 22.7, 120))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = fit_calibration_map(pd.DataFrame({"mean": mean, "var": var, "new_var": 0.0, "y": y}), "held-out")
    assert fitted.n == 0 and "no information in 120 predictions" in fitted.describe()


def test_leave_one_out_that_rests_on_a_few_draws_gives_way_to_refits():
    """Separable classes (scikit-learn's wine, class 1 against the rest): most rows' leave-one-out weights fall on
    the few draws that misclassify them, so their PSIS-LOO means land on the wrong side; the map is learned from
    cross-fitted refits instead, and the held-out probabilities are sharp.  ``method="loo"`` still gives PSIS-LOO."""
    from sklearn.datasets import load_wine

    from bayesvm.results import loo

    X, y = load_wine(return_X_y=True, as_frame=True)
    X = (X - X.mean()) / X.std()
    X.columns = [f"x{j}" for j in range(X.shape[1])]
    data = X.assign(y=(y == 1).to_numpy())
    train, test = data[np.arange(len(data)) % 3 != 0], data[np.arange(len(data)) % 3 == 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ " + " + ".join(X.columns), train)
        assert loo.thin_share(loo.loo_predictions(fit)) > loo.MAX_THIN_SHARE
        assert "cross-fitted" in fit.calibrate().describe()
        held_out = np.asarray(fit.predict(test, kind="prob"), float)
        truth = test["y"].to_numpy()
        log_loss = -np.mean(np.where(truth, np.log(held_out), np.log1p(-held_out)))
        assert log_loss < 0.2, log_loss
        assert "PSIS leave-one-out" in fit.calibrate(method="loo").describe()
