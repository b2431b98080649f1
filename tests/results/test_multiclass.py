"""A response of more than two classes: one-vs-rest fits, probabilities that sum to one, one summary, saved whole."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError, DataError
from bayesvm.results.arviz import group_names


@pytest.fixture(scope="module")
def three():
    rng = np.random.default_rng(0)
    n = 180
    data = pd.DataFrame({"x": rng.normal(size=n), "z": rng.normal(size=n), "g": rng.choice(list("abcdef"), n)})
    latent = 1.5 * data.x - 0.5 * data.z + rng.logistic(size=n)
    data["y"] = np.select([latent < -0.7, latent < 0.7], ["low", "mid"], "high")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x + z + (1 | g)", data, vb="meanfield")
    return fit, data


def test_one_fit_per_class_and_probabilities_that_sum_to_one(three):
    fit, data = three
    assert isinstance(fit, bayesvm.MulticlassFit) and fit.classes == ("high", "low", "mid")
    prob = fit.predict(data, kind="prob")
    assert list(prob.columns) == ["high", "low", "mid"]
    np.testing.assert_allclose(prob.sum(axis=1), 1.0)
    classes = fit.predict(data)
    assert (classes == prob.idxmax(axis=1)).all()
    assert (classes == data.y).mean() > 0.5  # the classes are ordered by x
    for label, binary in zip(fit.classes, fit.fits):
        assert binary.model.design.response.positive == label and binary.model.design.response.negative == "(rest)"
    assert fit.fixef.shape == (3, 3) and fit.fixef.loc["x", "high"] > 0 > fit.fixef.loc["x", "low"]


def test_one_summary_names_each_class(three):
    fit, _ = three
    text = str(fit.summary())
    assert text.startswith("One-vs-rest Bayesian SVM over 3 classes of 'y'")
    for label in fit.classes:
        assert f"===== class {label!r} against the rest =====" in text
    assert fit.summary().fixed.index.names[0] == "class"


def test_saved_and_loaded_whole(three, tmp_path):
    fit, data = three
    prob = fit.predict(data, kind="prob")
    loaded = bayesvm.load(fit.save(tmp_path / "multi.bsvm"))
    assert isinstance(loaded, bayesvm.MulticlassFit)
    pd.testing.assert_frame_equal(loaded.predict(data, kind="prob"), prob)


def test_positive_fits_one_class_against_the_rest(three):
    _, data = three
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x + z", data, positive="high", vb="meanfield")
    assert isinstance(fit, bayesvm.BSVMFit) and fit.model.design.response.positive == "high"
    with pytest.raises(BayesvmError, match="positive='top' is not a class"):
        bayesvm.bsvm("y ~ x + z", data, positive="top", vb="meanfield")


def test_a_multiclass_fit_refuses_kinds_it_has_not(three):
    fit, data = three
    with pytest.raises(BayesvmError, match="kind must be one of"):
        fit.predict(data, kind="pseudo")
    with pytest.raises(BayesvmError, match="R's type='response' is kind='prob'"):
        fit.predict(data, type="response")


def test_a_continuous_response_is_refused_and_whole_numbers_are_classes(three):
    """A measured response (more than two distinct numbers, some not whole) would be one fit per value: refused naming
    the response, before any fit; whole numbers stored as floats are classes."""
    _, data = three
    measured = data.assign(y=np.random.default_rng(1).normal(size=len(data)))
    with pytest.raises(DataError, match=r"response 'y' is continuous \(180 distinct values"):
        bayesvm.bsvm("y ~ x + z", measured, vb="meanfield")
    coded = data.assign(y=data["y"].map({"low": 0.0, "mid": 1.0, "high": 2.0}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x + z", coded, vb="meanfield")
    assert fit.classes == (0.0, 1.0, 2.0)


def test_each_class_fits_warnings_name_the_class_and_point_at_the_callers_line():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300)
    labels = np.where(np.arange(300) == 0, "c", np.where(rng.random(300) < 1 / (1 + np.exp(-x)), "a", "b"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bayesvm.bsvm("y ~ x", pd.DataFrame({"y": labels, "x": x}))
    said = [w for w in caught if issubclass(w.category, bayesvm.IdentifiabilityWarning)]
    assert said and all(str(w.message).startswith("class 'c' against the rest: ") for w in said)
    assert {w.filename for w in caught} == {__file__}


def test_each_class_exports_its_own_arviz_object():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(150)
    data = pd.DataFrame(
        {"y": np.where(x > 0.6, "hi", np.where(x < -0.6, "lo", "mid")), "x": x + rng.normal(0, 0.5, 150)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x", data, vb="meanfield")
        exported = fit.to_inference_data(draws=50)
    assert list(exported) == ["hi", "lo", "mid"]
    for label in fit.classes:  # (InferenceData or ArviZ 1.x's DataTree: the groups by name, the draws by shape)
        assert "posterior" in group_names(exported[label])
        assert exported[label].posterior["beta"].shape[:2] == (4, 12)  # 48 of the 50 draws, split into 4 chains


def test_a_binary_fits_attribute_says_where_it_is():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(120)
    data = pd.DataFrame({"y": np.where(x > 0.6, "hi", np.where(x < -0.6, "lo", "mid")), "x": x + rng.normal(0, 1, 120)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x", data, vb="meanfield")
    with pytest.raises(AttributeError, match=r"fit.fits\[k\].check_vb for class k of \['hi', 'lo', 'mid'\]"):
        fit.check_vb()
    with pytest.raises(AttributeError, match="has no attribute 'nonesuch'"):
        fit.nonesuch()
    assert fit.fits[0].check_vb(warn=False) is not None


def test_a_class_whose_rows_all_miss_a_predictor_is_named_and_left_out_under_drop(three):
    """``missing="drop"`` takes the classes from the rows it keeps: a class with none left has no fit against the rest
    (one warning names it); with fewer than two classes left the call is refused."""
    _, data = three
    holed = data.copy()
    gone, other = "low", "mid"
    holed.loc[holed["y"] == gone, "x"] = np.nan
    with pytest.warns(bayesvm.errors.IdentifiabilityWarning, match=f"every row of class\\(es\\) '{gone}' misses"):
        fit = bayesvm.bsvm("y ~ x + z", holed, missing="drop", vb="meanfield")
    assert gone not in fit.classes and len(fit.fits) == 2
    assert fit.nobs == int((data["y"] != gone).sum()) == fit.fits[1].nobs  # the rows every class's fit used
    assert gone not in set(fit.predict(data))
    only = holed.assign(z=np.where(holed["y"] == other, np.nan, holed["z"]))
    with pytest.raises(DataError, match="only 1 class"):
        bayesvm.bsvm("y ~ x + z", only, missing="drop", vb="meanfield")
