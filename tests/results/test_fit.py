import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError, DesignError
from tests.conftest import simulate_grouped


@pytest.fixture(scope="module")
def grouped():
    return simulate_grouped(n_groups=15, per_group=8, p=2, seed=1)


@pytest.fixture(scope="module")
def fit(grouped):
    return bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", grouped)


def test_class_is_prob_above_half(fit, grouped):
    prob = fit.predict(grouped, kind="prob")
    cls = fit.predict(grouped, kind="class")
    assert ((prob > 0.5) == (cls == 1)).all()
    link = fit.predict(grouped, kind="link")
    assert ((link > 0) == (prob > 0.5)).all()
    assert np.all((prob > 0) & (prob < 1))


@pytest.mark.parametrize(
    "values, positive",
    [
        (["healthy", "sick"], "sick"),
        ([0, 1], 1),
        ([-1, 1], 1),
        ([False, True], True),
        (pd.Categorical(["control", "case"], categories=["control", "case"]), "case"),
    ],
)
def test_predicted_classes_use_the_response_coding(grouped, values, positive):
    values = np.asarray(values, dtype=object) if not isinstance(values, pd.Categorical) else values
    y = np.where(grouped["y"] == 1, values[1], values[0])
    data = grouped.assign(y=pd.Categorical(y, categories=list(values)) if isinstance(values, pd.Categorical) else y)
    fit = bayesvm.bsvm("y ~ x1 + x2", data)
    assert fit.model.design.response.positive == positive
    predicted = fit.predict(data)
    assert set(predicted) <= set(np.asarray(values).tolist())
    assert np.mean(predicted == np.asarray(data["y"])) > 0.6
    assert str(positive) in str(fit.summary())


def test_positive_argument_flips_the_sign(grouped):
    a = bayesvm.bsvm("y ~ x1 + x2", grouped, positive=1)
    b = bayesvm.bsvm("y ~ x1 + x2", grouped, positive=0)
    np.testing.assert_allclose(a.fixef, -b.fixef, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(a.predict(grouped), b.predict(grouped))


def test_unseen_group_level_has_the_population_mean(fit, grouped):
    new = grouped.head(4).assign(g=["g0", "new1", "new2", "g1"])
    link = fit.predict(new, kind="link")
    population = fit.predict(new, kind="link", include_random=False)
    np.testing.assert_allclose(link[[1, 2]], population[[1, 2]])
    expected = fit.fixef["(Intercept)"] + new[["x1", "x2"]].to_numpy() @ fit.fixef[["x1", "x2"]].to_numpy()
    np.testing.assert_allclose(population, expected)
    assert abs(link[0] - population[0]) > 1e-6


def test_r_spellings_of_what_to_predict_are_refused_naming_the_kind(fit, grouped):
    """R's ``predict(fit, type="response")`` (lme4, glm) gets an error naming ``kind="prob"``, never another quantity;
    ``kind="response"`` names it too, and a kind with no R twin lists the choices."""
    with pytest.raises(BayesvmError, match=r"not R's type=: R's type='response' is kind='prob'"):
        fit.predict(grouped, type="response")
    with pytest.raises(BayesvmError, match=r"type='link' is kind='link'"):
        fit.predict(grouped, type="link")
    with pytest.raises(BayesvmError, match=r"kind is one of \('class', 'prob', 'pseudo', 'link'\)"):
        fit.predict(grouped, type="terms")
    with pytest.raises(BayesvmError, match=r"got 'response' \(R's type='response' is kind='prob'\)"):
        fit.predict(grouped, kind="response")
    with pytest.raises(BayesvmError, match=r"got 'bogus'$"):
        fit.predict(grouped, kind="bogus")


def test_new_rows_missing_a_predictor_are_refused_naming_the_column_and_the_remedies(fit, grouped):
    new = grouped.head(6).copy()
    new.loc[new.index[[1, 4]], "x1"] = np.nan
    with pytest.raises(bayesvm.errors.DataError, match=r"newdata has missing or non-finite values in 'x1': 2") as info:
        fit.predict(new)
    assert "newdata.dropna(subset=['x1'])" in str(info.value) and "missing='impute'" in str(info.value)


def test_training_prediction_equals_newdata_prediction(fit, grouped):
    np.testing.assert_allclose(fit.predict(kind="prob"), fit.predict(grouped, kind="prob"))
    np.testing.assert_allclose(
        fit.predict(kind="link", include_random=False), fit.predict(grouped, kind="link", include_random=False)
    )


def test_ranef_layout(toenail):
    fit = bayesvm.bsvm("outcome ~ visit + (1 + visit | patientID)", toenail, vb="meanfield")
    ranef = fit.ranef["patientID"]
    assert list(ranef.columns) == ["(Intercept)", "visit"]
    assert len(ranef) == 294 and ranef.index.name == "patientID"
    assert fit.ranef_sd["patientID"].to_numpy().min() > 0


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"penalty": 0}, "positive"),
        ({"penalty": -1.0}, "positive"),
        ({"penalty": "auto"}, "'auto'"),
        ({"method": "magic"}, "unknown method 'magic'"),
        ({"missing": "impute-please"}, "missing must be"),
        ({"max_iter": 0}, "max_iter"),
    ],
)
def test_bad_arguments(grouped, kwargs, fragment):
    with pytest.raises(BayesvmError, match=fragment):
        bayesvm.bsvm("y ~ x1 + x2", grouped, **kwargs)


def test_bad_newdata(fit, grouped):
    with pytest.raises(ValueError, match="'x2'"):
        fit.predict(grouped.drop(columns="x2"))
    with pytest.raises(ValueError, match="kind"):
        fit.predict(grouped, kind="probability")


def test_unseen_fixed_level_is_an_error(toenail):
    fit = bayesvm.bsvm("outcome ~ visit * treatment", toenail)
    new = toenail.head(3).astype({"treatment": object}).assign(treatment=["itraconazole", "placebo", "placebo"])
    with pytest.raises(DesignError, match=r"'treatment'.*placebo.*2 row"):
        fit.predict(new)


def test_missing_drop_fits_and_reports(grouped):
    data = grouped.copy()
    data.loc[[3, 7], "x1"] = np.nan
    before = data.copy()
    with pytest.raises(ValueError, match=r"'x1': 2"):
        bayesvm.bsvm("y ~ x1 + x2", data)
    fit = bayesvm.bsvm("y ~ x1 + x2", data, missing="drop")
    assert fit.model.design.n == len(data) - 2
    assert "Dropped rows" in str(fit.summary())
    pd.testing.assert_frame_equal(data, before)


def test_non_convergence_warns(grouped):
    with pytest.warns(bayesvm.ConvergenceWarning):
        fit = bayesvm.bsvm("y ~ x1 + x2 + (1|g)", grouped, max_iter=2, vb="meanfield")
    assert not fit.converged and fit.n_iter == 2
    assert "NOT converged" in str(fit.summary())


def test_summary_sections(toenail):
    fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail, penalty=None, vb="meanfield")
    text = str(fit.summary())
    for piece in [
        "Formula:",
        "Positive class (+1): outcome = 'moderate or severe'",
        "Random effects",
        "patientID, 294",
        "Fixed effects",
        "visit:treatment[T.terbinafine]",
        "lower bound",
        "converged",
        "Number of obs: 1908",
    ]:
        assert piece in text
    summary = fit.summary()
    assert list(summary.fixed.columns) == ["mean", "sd", "2.5%", "97.5%"]
    assert summary.random.loc[0, "group"] == "patientID"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary._repr_html_()


@pytest.mark.parametrize("kwargs", [{}, {"method": "em", "penalty": 0.5}, {"vb": "accurate"}])
def test_repr_for_every_engine(grouped, kwargs):
    fit = bayesvm.bsvm("y ~ x1 + x2", grouped, **kwargs)
    text = repr(fit)
    assert text.startswith("<BSVMFit") and "y ~ x1 + x2" in text


def test_probability_change_is_the_average_predictive_comparison():
    rng = np.random.default_rng(4)
    n = 300
    data = pd.DataFrame(
        {"x": rng.standard_normal(n), "arm": rng.choice(["a", "b", "c"], n), "keep": rng.standard_normal(n)}
    )
    f = 1.5 * data["x"] + np.where(data["arm"] == "c", 1.0, 0.0)
    data["y"] = np.where(f + rng.logistic(size=n) > 0, "yes", "no")
    fit = bayesvm.bsvm("y ~ x * arm", data)
    fit.calibrate(newdata=data)  # a fixed map: the comparison below is exact arithmetic on predict
    table = fit.probability_change("x")
    shifted = data.assign(x=data["x"] + 1.0)
    expected = np.mean(fit.predict(shifted, kind="prob") - fit.predict(data, kind="prob"))
    assert table.loc["x: x -> x + 1", "change"] == pytest.approx(expected) and expected > 0.05
    arms = fit.probability_change("arm")
    assert list(arms.index) == ["arm: a -> b", "arm: a -> c"]
    assert arms.loc["arm: a -> c", "change"] > arms.loc["arm: a -> b", "change"]
    pair = fit.probability_change("x", values=(-1, 1))
    assert pair["p_to"].iloc[0] > pair["p_from"].iloc[0]
    with pytest.raises(bayesvm.DataError, match="'keep' is not used"):
        fit.probability_change("keep")


def test_tidy_table_has_broom_columns():
    from bayesvm.results.tables import tidy

    rng = np.random.default_rng(2)
    g = rng.integers(0, 10, 150)
    x = rng.standard_normal(150)
    data = pd.DataFrame({"y": np.where(x + rng.normal(0, 1, 10)[g] + rng.logistic(size=150) > 0, 1, 0), "x": x, "g": g})
    fit = bayesvm.bsvm("y ~ x + (1 | g)", data, vb="meanfield")
    table = tidy(fit.summary(level=0.9))
    assert list(table["effect"]) == ["fixed", "fixed", "ran_pars"]
    row = table.set_index("term").loc["x"]
    assert row["estimate"] == pytest.approx(fit.fixef["x"])
    assert row["conf_low"] < row["estimate"] < row["conf_high"]
    assert table.set_index("term").loc["sd__(Intercept)", "group"] == "g"


def test_summary_says_a_penalty_learned_from_one_slope_is_mostly_its_prior():
    """A learned penalty shows its prior's numbers, and says when one or two slopes are all that inform it."""
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"y": rng.integers(0, 2, 80), "x": rng.normal(size=80), "z": rng.normal(size=80),
                         "w": rng.normal(size=80)})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = str(bayesvm.bsvm("y ~ x", data, method="vb", vb="meanfield").summary())
        three = str(bayesvm.bsvm("y ~ x + z + w", data, method="vb", vb="meanfield").summary())
    assert "sigma_u^2 ~ IG(0.01, 0.01)" in one and "sigma_u^2 ~ IG(0.01, 0.01)" in three
    assert "only 1 slope informs sigma_u^2, so its posterior is mostly its prior" in one
    assert "inform sigma_u^2" not in three and "informs sigma_u^2" not in three


def test_summary_prints_a_small_coefficient_in_significant_digits():
    """A predictor on a scale of 10^5 has a coefficient of about 1e-5 per unit: the table shows its digits, not
    0.0000."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=300) * 1e5
    y = (x / 1e5 + rng.logistic(size=300) > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x", pd.DataFrame({"y": y, "x": x}), vb="meanfield", progress=False)
    row = next(line for line in str(fit.summary()).splitlines() if line.startswith("x "))
    assert f"{fit.fixef['x']:.3e}" in row and "0.0000" not in row


def test_nobs_counts_the_rows_the_fit_used(fit, grouped):
    """``fit.nobs`` as statsmodels' and lme4's ``nobs()``: the rows used, those dropped for missing values left out."""
    assert fit.nobs == len(grouped)
    holed = grouped.assign(x1=grouped["x1"].where(np.arange(len(grouped)) != 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert bayesvm.bsvm("y ~ x1 + (1 | g)", holed, missing="drop", vb="meanfield").nobs == len(grouped) - 1


def test_conf_int_is_the_summarys_interval(fit):
    """``fit.conf_int(level)`` as statsmodels' ``conf_int()``: the summary's interval columns at that level."""
    table = fit.conf_int(0.9)
    assert list(table.columns) == ["5%", "95%"] and list(table.index) == list(fit.fixef.index)
    assert np.all(table["5%"] < fit.fixef) and np.all(fit.fixef < table["95%"])
    wider = fit.conf_int()
    assert np.all(wider["2.5%"] < table["5%"]) and np.all(wider["97.5%"] > table["95%"])


def test_reading_predicting_and_saving_leave_the_fit_as_bsvm_built_it(grouped, tmp_path):
    """The fit ``bsvm()`` returns holds its checks' findings, its PSIS check and its call from the start; summaries,
    predictions, draws and saving (out-of-core calls included, which save without their lazy data) change none of
    its fields, only the memos of what was computed on request (the probability map, the last check)."""
    from dataclasses import fields

    fit = bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", grouped)
    assert fit.call is not None and fit.end_of_fit_check is not None and fit.last_vb_check is fit.end_of_fit_check
    before = {f.name: getattr(fit, f.name) for f in fields(fit)}
    str(fit.summary())
    fit.predict(grouped.head(5), kind="prob")
    fit.predict_interval(grouped.head(5))
    fit.to_inference_data(draws=50)
    fit.save(tmp_path / "fit.bsvm")
    assert all(getattr(fit, name) is value for name, value in before.items())
    assert fit.learned_calibration is not None
