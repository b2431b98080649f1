"""missing="impute" through bsvm: report, summary, predictions with missing predictors, plot and errors."""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError, ConvergenceWarning, DataError, DesignError

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 240
    age = rng.normal(50, 10, n)
    chol = 200 + 2.0 * (age - 50) + rng.normal(0, 20, n)
    sex = rng.integers(0, 2, n)
    eta = 0.08 * (age - 50) + 0.03 * (chol - 200) - 0.8 * sex
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")
    data = pd.DataFrame({"age": age, "chol": chol, "sex": sex, "clinic": rng.choice(list("abcdef"), n), "y": y})
    data.loc[rng.random(n) < 0.3, "chol"] = np.nan
    data.index = [f"p{i}" for i in range(n)]
    return data


def _fit(data, formula="y ~ age + chol + sex", **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return bayesvm.bsvm(formula, data, missing="impute", **kwargs)


@pytest.fixture(scope="module", params=["mi", "joint"])
def vb_fit(frame, request):
    return _fit(frame, imputation=request.param, seed=0)


def test_report_tables(vb_fit, frame):
    report = vb_fit.imputation_report()
    hidden = frame["chol"].isna()
    assert report.variables.loc["chol", "n_missing"] == hidden.sum()
    assert report.variables.loc["age", "n_missing"] == 0
    assert list(report.rows["row"]) == list(frame.index[hidden])
    assert (report.rows["variable"] == "chol").all() and (report.rows["sd"] > 0).all()
    # the imputation model's mean is on the original scale, near the observed mean
    assert report.variables.loc["chol", "mu"] == pytest.approx(frame["chol"].mean(), rel=0.05)
    corr = report.correlation
    assert np.allclose(np.diag(corr), 1.0) and corr.loc["age", "chol"] > 0.5
    text = str(report)
    assert "missing completely at random" in text and "chol" in text


def test_summary_mentions_imputation(vb_fit, frame):
    text = str(vb_fit.summary())
    assert f"Imputed: chol {frame['chol'].isna().sum()} value(s)" in text
    assert "missing completely at random" in text
    assert "Dropped" not in text


def test_predict_integrates_missing_predictors(vb_fit, frame):
    new = frame.head(20).copy()
    new["chol"] = np.nan
    vb_fit.calibrate(newdata=frame.dropna())  # held-out style map: 20 imputations x 5 folds would cost a minute
    prob = vb_fit.predict(new, kind="prob")
    assert np.all(np.isfinite(prob)) and np.all((prob > 0) & (prob < 1))
    assert np.array_equal(vb_fit.predict(new), np.where(prob > 0.5, "yes", "no"))
    # a missing value widens the interval of f against the same row with chol at its conditional mean
    wide = vb_fit.predict_interval(new)
    filled = new.copy()
    report = vb_fit.imputation_report()
    mu, corr = report.variables["mu"], report.correlation
    sd = report.variables["observed_sd"]
    filled["chol"] = mu["chol"] + corr.loc["chol", "age"] * sd["chol"] / sd["age"] * (new["age"] - mu["age"])
    narrow = vb_fit.predict_interval(filled)
    assert (wide["sd"].to_numpy() > narrow["sd"].to_numpy()).all()
    # training predictions are available and coded like the response
    assert set(vb_fit.predict()) <= {"yes", "no"}


def test_gibbs_imputation_and_random_effects(frame):
    fit = _fit(frame, "y ~ age + chol + sex + (1 | clinic)", method="gibbs", draws=300, tune=200, chains=2, seed=1)
    report = fit.imputation_report()
    assert report.variables.loc["chol", "n_missing"] == frame["chol"].isna().sum()
    assert np.isfinite(fit.fixef).all() and "clinic" in fit.ranef
    idata = fit.to_inference_data()
    posterior = idata.posterior if hasattr(idata, "posterior") else idata["posterior"]
    assert posterior["impute_mu"].shape == (2, 300, 3)
    assert float(posterior["impute_mu"].sel(impute_var="chol").mean()) == pytest.approx(
        report.variables.loc["chol", "mu"], rel=1e-6
    )
    vb = _fit(frame, "y ~ age + chol + sex + (1 | clinic)", imputation="mi")  # a VB fit per completed data set
    assert len(vb.result.fits) == 20 and "clinic" in vb.ranef
    for bound in [f.lower_bound for f in vb.result.fits]:
        assert np.isfinite(bound).all() and np.diff(bound).min() >= -1e-8 * abs(bound[-1])
    joint = _fit(frame, "y ~ age + chol + sex + (1 | clinic)", imputation="joint")
    bound = joint.lower_bound
    assert np.isfinite(bound).all() and np.diff(bound).min() >= -1e-8 * abs(bound[-1])


def test_plot_imputation(vb_fit, tmp_path):
    ax = vb_fit.plot_imputation()
    assert ax.get_xlabel() == "chol"
    ax.figure.savefig(tmp_path / "imputation.png")


def test_errors_name_the_fault(frame):
    with pytest.raises(DesignError, match="'chol' has missing values and appears in the term 'np.log\\(chol\\)'"):
        _fit(frame, "y ~ age + np.log(chol)")
    with pytest.raises(DesignError, match="age:chol"):
        _fit(frame, "y ~ age * chol")
    bad_group = frame.copy()
    bad_group.loc["p3", "clinic"] = None
    with pytest.raises(DataError, match=r"grouping variable 'clinic' has 1 missing value\(s\) \(rows \['p3'\]\)"):
        _fit(bad_group, "y ~ age + chol + (1 | clinic)")
    one_level = frame.assign(site=pd.Series("a", index=frame.index).where(frame.index != "p5"))
    with pytest.raises(DataError, match="categorical predictor 'site' has missing values .* fewer than 2 observed"):
        _fit(one_level, "y ~ age + chol + site")
    factor = frame.assign(site=frame["clinic"].where(frame.index != "p5"))
    with pytest.raises(DesignError, match="'site' has missing values and appears in the term 'age:site'"):
        _fit(factor, "y ~ chol + age * site")
    with pytest.raises(BayesvmError, match="method='vb'"):
        _fit(frame, method="em")
    with pytest.raises(BayesvmError, match="accurate.*imputation='mi'"):  # (the joint model's q is mean-field)
        _fit(frame, vb="accurate", imputation="joint")
    with pytest.raises(BayesvmError, match="imputation must be 'auto', 'mi' or 'joint'"):
        _fit(frame, imputation="mice")
    with pytest.raises(BayesvmError, match="imputations must be an integer >= 2"):
        _fit(frame, imputations=1)


def test_error_and_drop_still_report_missing_values(frame):
    with pytest.raises(DataError, match=r"'chol': \d+"):
        bayesvm.bsvm("y ~ age + chol", frame)
    fit = bayesvm.bsvm("y ~ age + chol", frame, missing="drop")
    assert f"chol: {frame['chol'].isna().sum()}" in str(fit.summary())


def test_input_frame_unchanged(frame):
    before = frame.copy()
    _fit(frame)
    pd.testing.assert_frame_equal(frame, before)


@pytest.mark.parametrize("imputation", ["mi", "joint"])
def test_missing_categorical_predictors_are_imputed_through_their_indicator_columns(imputation):
    rng = np.random.default_rng(3)
    n = 300
    x = rng.normal(size=n)
    smoker = rng.choice(["no", "yes"], n, p=[0.6, 0.4])
    site = rng.choice(["north", "south", "west"], n)
    eta = 0.8 * x + 1.2 * (smoker == "yes") - 0.8 * (site == "west")
    data = pd.DataFrame({"y": np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "case", "control"), "x": x,
                         "smoker": pd.Categorical(smoker), "site": site})  # fmt: skip
    full = bayesvm.bsvm("y ~ x + smoker + site", data, positive="case")
    data.loc[rng.random(n) < 0.15, "smoker"] = np.nan
    data.loc[rng.random(n) < 0.10, "site"] = None
    before = data.copy()
    fit = _fit(data, "y ~ x + smoker + site", imputation=imputation, seed=1, positive="case")
    pd.testing.assert_frame_equal(data, before)  # the user's frame is not changed
    layout = fit.model.design.imputation
    assert layout.variables == ("x", "smoker[T.yes]", "site[T.south]", "site[T.west]")
    assert layout.source_columns == ("x", "smoker", "site", "site")
    report = fit.imputation_report().variables
    assert report.loc["smoker[T.yes]", "n_missing"] == data["smoker"].isna().sum()
    assert report.loc["site[T.west]", "n_missing"] == data["site"].isna().sum()
    text = str(fit.summary())  # a factor's missing values counted once, under the factor's name
    (imputed,) = [line for line in text.splitlines() if line.startswith(" Imputed:")]
    assert f"site {data['site'].isna().sum()}" in imputed and "site[T." not in imputed
    assert "site (its 2 indicator columns)" in text
    assert np.max(np.abs(fit.fixef - full.fixef)) < 0.4  # (full data: smoker 1.21, south 0.73, west 0.25)
    # a row whose factor is missing lies between the same row with either level
    rows = pd.DataFrame({"x": [0.2] * 3, "smoker": pd.Categorical([np.nan, "no", "yes"]), "site": ["north"] * 3})
    link = fit.predict(rows, kind="link").to_numpy()
    assert link[1] < link[0] < link[2]
    probability = fit.predict(rows, kind="prob").to_numpy()
    assert np.all((probability > 0) & (probability < 1))
    # newdata whose categorical lacks the placeholder level, or whose column holds only None, integrate it out too
    narrow = rows.assign(smoker=pd.Categorical([np.nan, "yes", "yes"], categories=["yes"]))
    assert fit.predict(narrow, kind="link").iloc[0] == pytest.approx(link[0])
    assert fit.predict(rows.head(1).assign(smoker=[None]), kind="link").iloc[0] == pytest.approx(link[0])
    with pytest.raises(DesignError, match="never saw"):  # a level that is not missing but new is still refused
        fit.predict(rows.assign(site=["east", "north", "north"]))
