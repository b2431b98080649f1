"""Class weights (:mod:`bayesvm.model.class_weights`): resolved as scikit-learn resolves them, and in every engine
that takes them the exact weighted pseudo-posterior: EM equals scikit-learn's weighted SVC, mean-field VB and EM on
integer weights equal the fit of the data with the rows repeated, the VB bound matches its Monte Carlo estimate, and
the accurate fit and Gibbs match exact quadrature of the weighted model."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp
from sklearn.svm import SVC

import bayesvm
from bayesvm.engines.linear.vb import fit_vb
from bayesvm.model.class_weights import ClassWeightError, resolve_class_weight
from tests.engines.intercept_quadrature import log_joint_grid
from tests.engines.mc_bound import mc_lower_bound

QUIET = bayesvm.Checks(vb_check="ignore")


def _imbalanced(n: int = 300, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=n) > 1.2).astype(int)
    return pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1], "y": y})


def _grouped(seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(40), 6)
    u = rng.normal(0.0, 2.0, 40)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(-1.2 + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "g": g.astype(str)})


def test_resolved_as_scikit_learn_resolves_them():
    y = np.array([1.0, -1.0, -1.0, -1.0])
    balanced = resolve_class_weight("balanced", y, ("no", "yes"))
    assert (balanced.negative, balanced.positive) == (4 / 6, 4 / 2)
    np.testing.assert_allclose(balanced.rows(y), [2.0, 2 / 3, 2 / 3, 2 / 3])
    given = resolve_class_weight({"yes": 5}, y, ("no", "yes"))
    assert (given.negative, given.positive) == (1.0, 5.0)  # a class left out weighs 1
    assert resolve_class_weight({"1": 2.0}, y, (0, 1)).positive == 2.0  # as text (a command line)
    assert resolve_class_weight(None, y, ("no", "yes")) is None


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"maybe": 2.0}, "'maybe', which is not a class"),
        ({"yes": 0.0}, "positive finite"),
        ({"yes": float("nan")}, "positive finite"),
        ({"yes": "heavy"}, "must be a positive number"),
        ({"yes": True}, "must be a positive number"),
        ("balance", "'balance'"),
        ([1.0, 2.0], "got list"),
    ],
)
def test_bad_weights_are_refused_naming_the_class(bad, words):
    with pytest.raises(ClassWeightError, match=words) as caught:
        resolve_class_weight(bad, np.array([1.0, -1.0]), ("no", "yes"))
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("class_weight", ["balanced", {1: 3.0}, {0: 0.5, 1: 2.0}])
def test_em_with_a_fixed_penalty_is_scikit_learns_weighted_svc(class_weight):
    data = _imbalanced()
    alpha = 0.5
    fit = bayesvm.bsvm("y ~ x1 + x2", data, method="em", penalty=alpha, standardize=False, class_weight=class_weight)
    X, y = data[["x1", "x2"]].to_numpy(), data["y"].to_numpy()
    svc = SVC(kernel="linear", C=1 / (2 * alpha), class_weight=class_weight, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(fit.fixef.to_numpy(), [svc.intercept_[0], *svc.coef_[0]], atol=2e-5)
    unweighted = bayesvm.bsvm("y ~ x1 + x2", data, method="em", penalty=alpha, standardize=False)
    assert np.max(np.abs(fit.fixef.to_numpy() - unweighted.fixef.to_numpy())) > 0.1  # (the weights matter here)


@pytest.mark.parametrize("method, vb", [("vb", "meanfield"), ("em", None)])
def test_integer_weights_equal_repeated_rows(method, vb):
    """Weight 2 on a class is its rows twice (``exp(-4 h) = exp(-2 h)^2``): the same posterior, and for mean-field VB
    and EM the same fixed point (each copy's ``q(a)`` equals the other's), with random effects and a learned penalty."""
    data = _grouped()
    data["x"] = np.random.default_rng(2).normal(size=len(data))
    repeated = pd.concat([data, data[data["y"] == "b"]], ignore_index=True)
    kwargs = dict(method=method, checks=QUIET, standardize=False)  # (standardising uses each frame's moments)
    if vb is not None:  # (run to the fixed point: the two runs' SQUAREM steps differ in length)
        kwargs.update(vb=vb, tol=1e-13, max_iter=5000)
    weighted = bayesvm.bsvm("y ~ x + (1 | g)", data, class_weight={"b": 2.0}, **kwargs)
    copied = bayesvm.bsvm("y ~ x + (1 | g)", repeated, **kwargs)
    np.testing.assert_allclose(weighted.fixef.to_numpy(), copied.fixef.to_numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weighted.ranef["g"].to_numpy(), copied.ranef["g"].to_numpy(), rtol=1e-4, atol=1e-5)
    if method == "vb":
        np.testing.assert_allclose(weighted.fixef_cov.to_numpy(), copied.fixef_cov.to_numpy(), rtol=1e-4)


@pytest.mark.once
def test_point_mass_gibbs_with_integer_weights_equals_repeated_rows():
    """A spike-and-slab prior's Gibbs sampler (its swap, pair, line and sheared moves weigh each row's hinge): weight 2
    on a class samples the posterior of its rows twice, so inclusion probabilities and coefficients agree within
    Monte Carlo error, a weak slope's undecided indicator included."""
    rng = np.random.default_rng(4)
    n = 120
    X = rng.standard_normal((n, 4))
    eta = 1.5 * X[:, 0] - 1.0 * X[:, 1] + 0.35 * X[:, 2] - 0.8
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "b", "a")
    data = pd.DataFrame(X, columns=["x1", "x2", "x3", "x4"]).assign(y=y)
    repeated = pd.concat([data, data[data["y"] == "b"]], ignore_index=True)
    kwargs = dict(method="gibbs", prior=bayesvm.priors.SpikeSlab(), draws=2000, tune=1000, chains=2, seed=5,
                  standardize=False, checks=QUIET)  # fmt: skip
    weighted = bayesvm.bsvm("y ~ x1 + x2 + x3 + x4", data, class_weight={"b": 2.0}, **kwargs)
    copied = bayesvm.bsvm("y ~ x1 + x2 + x3 + x4", repeated, **kwargs)
    ours, theirs = weighted.inclusion["p_include"], copied.inclusion["p_include"]
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), atol=0.08)
    assert ours[["x3"]].between(0.1, 0.9).all(), ours  # the weak slope: an indicator that moves
    sd = np.sqrt(np.diag(copied.fixef_cov.to_numpy()))
    assert np.all(np.abs(weighted.fixef.to_numpy() - copied.fixef.to_numpy()) < 0.25 * sd + 1e-3)


def test_vb_bound_rises_and_matches_its_monte_carlo_estimate():
    fit = bayesvm.bsvm("y ~ 1 + (1 | g)", _grouped(), vb="meanfield", class_weight="balanced", checks=QUIET)
    problem = fit.problem
    result = fit_vb(problem, accelerate=False)
    assert np.all(np.diff(result.lower_bound) >= -1e-9 * np.abs(result.lower_bound[1:]))
    estimate, se = mc_lower_bound(problem, result, draws=4000, seed=5)
    assert result.lower_bound[-1] == pytest.approx(estimate, abs=4 * se + 1e-6)


@pytest.fixture(scope="module")
def exact_moments():
    """Posterior mean and SD of the intercept and mean of the variance of ``y ~ 1 + (1 | g)`` (fixed penalty), each
    row's hinge times its class weight, by quadrature (random intercepts integrated in closed form)."""
    data = _grouped()
    fit = bayesvm.bsvm("y ~ 1 + (1 | g)", data, penalty=1.0, class_weight={"a": 3.0}, checks=QUIET)
    intercepts, phi = np.linspace(-8, 8, 481), np.linspace(-6, 5, 441)
    log_joint = log_joint_grid(fit.problem, intercepts, phi)
    p = np.exp(log_joint - logsumexp(log_joint))
    mean = float(p.sum(axis=1) @ intercepts)
    sd = float(np.sqrt(p.sum(axis=1) @ intercepts**2 - mean**2))
    return data, fit, mean, sd, float(p.sum(axis=0) @ np.exp(phi))


def test_accurate_fit_matches_quadrature_of_the_weighted_model(exact_moments):
    """Measured: intercept 0.937 against 0.902 (SD 0.311), variance 2.672 against 2.678; unweighted 1.266."""
    _, fit, mean, sd, variance = exact_moments
    result = fit.result
    assert result.node_weights.method == "importance"
    assert fit.fixef.iloc[0] == pytest.approx(mean, abs=0.2 * sd)
    assert float(result.weights @ result.covariances[0][:, 0, 0]) == pytest.approx(variance, rel=0.05)
    assert abs(mean - 1.266) > 1.0 * sd  # (the weights move the posterior)


def test_gibbs_matches_quadrature_of_the_weighted_model(exact_moments):
    """The paper's sampler on the scaled design with margins ``omega`` (:mod:`bayesvm.engines.linear.gibbs`)."""
    data, _, mean, sd, variance = exact_moments
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ 1 + (1 | g)", data, penalty=1.0, class_weight={"a": 3.0}, method="gibbs",
                           draws=4000, chains=2, seed=3, progress=False, checks=QUIET)  # fmt: skip
    draws = fit.result.theta_d[..., 0].ravel()
    assert draws.mean() == pytest.approx(mean, abs=0.1 * sd)  # measured 0.906 against 0.902
    assert draws.std() == pytest.approx(sd, rel=0.1)
    assert float(fit.result.components[0].mean()) == pytest.approx(variance, rel=0.08)


def test_balanced_weights_call_the_smaller_class_and_say_so():
    data = _imbalanced()
    plain = bayesvm.bsvm("y ~ x1 + x2", data, checks=QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + x2", data, class_weight="balanced")
    calls = (fit.predict(kind="class") == 1).mean()
    assert calls > 2 * (plain.predict(kind="class") == 1).mean()
    assert calls > data["y"].mean()  # (balanced: the smaller class called at least as often as it occurs)
    text = str(fit.summary())
    assert "class weights (balanced): 0: 0.6048, 1: 2.885" in text
    notes = [f.message for f in plain.diagnostics.findings if f.check == "class_balance"]
    assert notes and "class_weight='balanced'" in notes[0]
    assert data.equals(_imbalanced())  # the user's frame unchanged


def test_routes_without_weighted_engines_refuse_naming_the_route():
    data = _imbalanced()
    three = data.assign(y=np.where(data["x1"] > 1, "c", np.where(data["y"] == 1, "b", "a")))
    with pytest.raises(bayesvm.BayesvmError, match="None or 'balanced'"):
        bayesvm.bsvm("y ~ x1 + x2", three, class_weight={"a": 2.0})
    with pytest.raises(bayesvm.BayesvmError, match="'maybe', which is not a class"):
        bayesvm.bsvm("y ~ x1 + x2", data, class_weight={"maybe": 2.0})


@pytest.mark.once
def test_imputed_predictors_with_weights_agree_across_engines():
    """Joint imputation with class weights: the mean-field fit's bound rises, and its importance-weighted draws (the
    missing values integrated out exactly, :mod:`bayesvm.results.imputation_check`) and a joint Gibbs run (the
    scaled rows with margins omega) give the same posterior means (measured: within 0.01; the unweighted chain puts
    the slopes near 0, every row at the larger class's margin)."""
    from bayesvm.results import vb_check
    from bayesvm.results.psis import psis
    from tests.results.test_imputation_check import _holed

    data = _holed(120, seed=7)
    data["y"] = ((data["y"] == 1) & (np.random.default_rng(0).random(len(data)) < 0.5)).astype(int)
    kwargs = dict(missing="impute", penalty=2.0, class_weight={1: 3.0}, checks=QUIET)
    fit = bayesvm.bsvm("y ~ a + b + c", data, **kwargs)
    bounds = fit.result.lower_bound
    assert np.all(np.diff(bounds) >= -1e-9 * np.abs(bounds[1:]))
    log_ratios, draws, _ = vb_check._imputed_draws(fit, np.random.default_rng(1), 8000)
    log_weights, _ = psis(log_ratios)
    weights = np.exp(log_weights - log_weights.max())
    weighted = (weights / weights.sum()) @ vb_check._fixef_draws(fit, draws)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gibbs = bayesvm.bsvm("y ~ a + b + c", data, imputation="joint", method="gibbs", draws=2500, chains=2, seed=2,
                             progress=False, **kwargs)  # fmt: skip
    chain = gibbs.result.theta_d.reshape(-1, gibbs.result.theta_d.shape[-1])[:, :4] @ gibbs.model.fixed_transform().T
    np.testing.assert_allclose(weighted, chain.mean(axis=0), atol=0.06)
    assert np.max(np.abs(chain.mean(axis=0)[1:])) > 0.5  # (the weights matter here)


def test_kernel_fits_take_class_weights():
    """The kernel engines weigh rows too (:mod:`bayesvm.engines.kernel.vb`; EM against LinearSVC in
    ``tests/engines/kernel/test_features.py``): balanced weights call the smaller class, and say so."""
    data = _imbalanced(400)
    kernel = bayesvm.kernels.RBF(lengthscale=1.0, variance=4.0, learn=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = bayesvm.bsvm("y ~ x1 + x2", data, kernel=kernel, inducing=30, seed=1)
        fit = bayesvm.bsvm("y ~ x1 + x2", data, kernel=kernel, inducing=30, seed=1, class_weight="balanced")
    assert fit.problem.weights is not None
    assert (fit.predict(kind="class") == 1).mean() > 2 * (plain.predict(kind="class") == 1).mean()
    assert "class weights (balanced)" in str(fit.summary())


def test_svi_reaches_the_weighted_batch_optimum():
    """Linear SVI weighs each minibatch row as batch VB does (measured: fixed effects within 0.002)."""
    data = _imbalanced(3000)
    batch = bayesvm.bsvm("y ~ x1 + x2", data, vb="meanfield", class_weight="balanced", checks=QUIET)
    svi = bayesvm.bsvm("y ~ x1 + x2", data, method="svi", class_weight="balanced", seed=1, batch_size=500)
    np.testing.assert_allclose(svi.fixef.to_numpy(), batch.fixef.to_numpy(), atol=0.02)


def test_saved_fit_keeps_its_weights(tmp_path):
    data = _imbalanced()
    fit = bayesvm.bsvm("y ~ x1 + x2", data, class_weight={1: 3.0}, checks=QUIET)
    fit.save(tmp_path / "fit.bsvm")
    loaded = bayesvm.load(tmp_path / "fit.bsvm")
    assert loaded.model.class_weights == fit.model.class_weights
    np.testing.assert_allclose(loaded.problem.weights, fit.problem.weights)
    pd.testing.assert_series_equal(loaded.predict(data, kind="class"), fit.predict(data, kind="class"))


def test_weighted_fits_probabilities_stay_the_datas():
    """The map is learned on the weighted classes and taken back by Bayes' rule (:mod:`bayesvm.results.calibration`):
    on held-out rows the balanced fit's probabilities average the data's rate and score as well as the unweighted
    fit's (measured on 20,000 rows: log loss 0.219 against 0.242; mean 0.101 against 0.087; without the correction
    0.293 and 0.192)."""
    rng = np.random.default_rng(3)

    def rows(n):
        X = rng.normal(size=(n, 2))
        y = (rng.random(n) < 1 / (1 + np.exp(-1.5 * (X[:, 0] + 0.5 * X[:, 1] - 2.2)))).astype(int)
        return pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1], "y": y})

    train, test = rows(1500), rows(6000)
    scores = {}
    for class_weight in (None, "balanced"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = bayesvm.bsvm("y ~ x1 + x2", train, class_weight=class_weight)
        prob = fit.predict(test, kind="prob").to_numpy()
        y = test["y"].to_numpy()
        scores[class_weight] = -np.mean(y * np.log(prob) + (1 - y) * np.log(1 - prob))
        assert prob.mean() == pytest.approx(y.mean(), abs=0.025)
    assert scores["balanced"] < scores[None] + 0.01


def test_a_fit_weighted_into_one_class_says_which_weight_to_raise():
    data = _imbalanced()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + x2", data, class_weight={1: 0.02})
    (finding,) = [f for f in fit.diagnostics.findings if f.check == "one_class"]
    assert "the fit weighs the classes 1 and 0.02: raise the weight of 1" in finding.message


@pytest.mark.parametrize("prior", ["laplace_zero", "spike_slab", "lasso_vb", "lasso_em"])
def test_selection_engines_with_integer_weights_equal_repeated_rows(prior):
    """The selection VB engines and the lasso's EM on a problem whose rows weigh 2 for one class, against the same
    problem with those rows repeated (the same prior scales): the same fixed point."""
    from dataclasses import replace

    from bayesvm.engines.selection import lasso_em, lasso_vb, spike_slab_vb, vb

    rng = np.random.default_rng(3)
    data = pd.DataFrame(rng.normal(size=(150, 4)), columns=["a", "b", "c", "d"])
    data["y"] = (data["a"] - data["b"] + rng.normal(size=150) > 0.8).astype(int)
    chosen = {
        "laplace_zero": (bayesvm.priors.LaplaceZero(), "vb", lambda p: vb.fit_laplace_zero_vb(p, tol=1e-12)),
        "spike_slab": (bayesvm.priors.SpikeSlab(), "vb", lambda p: spike_slab_vb.fit_spike_slab_vb(p, tol=1e-12)),
        "lasso_vb": (bayesvm.priors.Lasso(), "vb", lambda p: lasso_vb.fit_lasso_vb(p, tol=1e-12)),
        "lasso_em": (bayesvm.priors.Lasso(nu=0.5), "em", lambda p: lasso_em.fit_lasso_em(p)),
    }
    selection_prior, method, engine = chosen[prior]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ a + b + c + d", data, prior=selection_prior, method=method, class_weight={1: 2.0},
                           standardize=False, checks=QUIET)  # fmt: skip
    weighted = fit.model.selection_problem()
    rows = np.r_[np.arange(weighted.y.size), np.flatnonzero(weighted.y > 0)]
    repeated = replace(weighted, X=weighted.X[rows], y=weighted.y[rows], weights=None)
    ours, theirs = engine(weighted), engine(repeated)
    coefficients = "coef" if prior == "lasso_em" else "mean"
    np.testing.assert_allclose(getattr(ours, coefficients), getattr(theirs, coefficients), rtol=1e-5, atol=1e-6)


@pytest.mark.once
def test_selection_gibbs_with_weights_agrees_with_the_accurate_fit():
    """The selection sampler on weighted rows (the scaled rows with margins omega, without the moves): the lasso's
    posterior means as its EP fit gives them (measured: within 0.02)."""
    rng = np.random.default_rng(3)
    data = pd.DataFrame(rng.normal(size=(400, 4)), columns=["a", "b", "c", "d"])
    data["y"] = (data["a"] - data["b"] + rng.normal(size=400) > 1.2).astype(int)
    kwargs = dict(prior=bayesvm.priors.Lasso(), class_weight="balanced", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accurate = bayesvm.bsvm("y ~ a + b + c + d", data, vb="accurate", **kwargs)
        gibbs = bayesvm.bsvm("y ~ a + b + c + d", data, method="gibbs", draws=2000, chains=2, progress=False, **kwargs)
    np.testing.assert_allclose(gibbs.fixef.to_numpy(), accurate.fixef.to_numpy(), atol=0.06)
    assert gibbs.fixef.iloc[0] > -1.0  # (unweighted: -1.57)


def test_selection_svi_and_accurate_fit_agree_with_weighted_vb():
    rng = np.random.default_rng(3)
    data = pd.DataFrame(rng.normal(size=(400, 4)), columns=["a", "b", "c", "d"])
    data["y"] = (data["a"] - data["b"] + rng.normal(size=400) > 1.2).astype(int)
    fits = {}
    for name, kwargs in {"vb": {}, "accurate": {"vb": "accurate"}, "svi": {"method": "svi", "batch_size": 200}}.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits[name] = bayesvm.bsvm("y ~ a + b + c + d", data, prior=bayesvm.priors.Lasso(), class_weight="balanced",
                                      seed=1, **kwargs).fixef.to_numpy()  # fmt: skip
    np.testing.assert_allclose(fits["svi"], fits["vb"], atol=0.03)  # measured: within 0.01
    np.testing.assert_allclose(fits["accurate"], fits["vb"], atol=0.05)  # measured: within 0.03
    assert fits["vb"][0] > -1.0  # (unweighted: -1.57)


def test_extreme_weights_fit_without_numpy_warnings():
    """scikit-learn's estimator check weighs one class 1e7 times the other: the fit says it predicts one class (an
    IdentifiabilityWarning), and no numpy overflow escapes (SQUAREM rejects an extrapolation that overflows)."""
    data = _grouped()
    data["x"] = np.random.default_rng(3).normal(size=len(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", bayesvm.IdentifiabilityWarning)
        for weights in ({"b": 1e6}, {"a": 1000.0, "b": 1e-4}):
            fit = bayesvm.bsvm("y ~ x + (1 | g)", data, class_weight=weights, checks=QUIET)
            assert np.all(np.isfinite(fit.fixef))
