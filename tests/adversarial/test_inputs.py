"""Replays of the careless-user and attacker cases: each ends in a clear error naming the culprit, or works."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm import kernels
from bayesvm.errors import BayesvmError, DesignError, IdentifiabilityWarning

N = 60
FORMULA = "y ~ x1 + x2"
FAST = {"vb": "meanfield"}
GIBBS = {"method": "gibbs", "draws": 10, "tune": 10, "chains": 1, "progress": False}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    data = pd.DataFrame(
        {
            "x1": rng.normal(size=N),
            "x2": rng.normal(size=N),
            "f": rng.choice(list("abc"), N),
            "g": rng.integers(0, 6, N),
        }
    )
    data["y"] = (data.x1 + rng.normal(size=N) > 0).astype(int)
    return data


@pytest.fixture(scope="module")
def fit(frame):
    return bayesvm.bsvm(FORMULA + " + f", frame, method="em", penalty=0.5)


REFUSED = {
    # case: (call, words the message must contain)
    "seed text": (lambda d: bayesvm.bsvm(FORMULA, d, seed="abc", **GIBBS), ["seed", "'abc'"]),
    "seed float": (lambda d: bayesvm.bsvm(FORMULA, d, seed=1.5, **GIBBS), ["seed", "1.5"]),
    "seed negative": (lambda d: bayesvm.bsvm(FORMULA, d, seed=-1, **GIBBS), ["seed", "-1"]),
    "seed bool": (lambda d: bayesvm.bsvm(FORMULA, d, seed=True, **GIBBS), ["seed", "True"]),
    "pcvm seed": (lambda d: bayesvm.pcvm(FORMULA, d, method="em", seed="x"), ["seed", "'x'"]),
    "draws True": (lambda d: bayesvm.bsvm(FORMULA, d, method="gibbs", draws=True), ["draws", "True"]),
    "chains float": (lambda d: bayesvm.bsvm(FORMULA, d, method="gibbs", chains=2.0), ["chains", "2.0"]),
    "priors dict": (lambda d: bayesvm.bsvm(FORMULA, d, priors={}), ["priors", "PriorSet", "dict"]),
    "standardize text": (lambda d: bayesvm.bsvm(FORMULA, d, standardize="yes"), ["standardize", "'yes'"]),
    "empty fixed part": (lambda d: bayesvm.bsvm("y ~ 0", d), ["no columns", "y ~ 1"]),
    "empty fixed part with groups": (lambda d: bayesvm.bsvm("y ~ 0 + (1 | g)", d), ["no columns"]),
    "duplicated columns": (lambda d: bayesvm.bsvm(FORMULA, pd.concat([d, d[["x1"]]], axis=1)), ["duplicated", "x1"]),
    "numbers as text": (
        lambda d: bayesvm.bsvm(FORMULA, d.assign(x2=d.x2.round(2).astype(str))),
        ["'x2'", "stored as text", "pd.to_numeric"],
    ),
    "numbers as objects": (
        lambda d: bayesvm.bsvm(FORMULA, d.assign(x2=d.x2.astype(object))),
        ["'x2'", "dtype object", "pd.to_numeric"],
    ),
    "stray text value": (
        lambda d: bayesvm.bsvm(FORMULA, d.assign(x2=d.x2.round(2).astype(str).where(d.index != 3, "?"))),
        ["'x2'", "['?']"],
    ),
    "dates": (lambda d: bayesvm.bsvm("y ~ x1 + d", d.assign(d=pd.Timestamp("2020-01-01"))), ["'d'", "dates"]),
    "complex": (lambda d: bayesvm.bsvm("y ~ x1 + c", d.assign(c=d.x1 + 1j)), ["'c'", "complex"]),
    "lists in cells": (lambda d: bayesvm.bsvm("y ~ x1 + c", d.assign(c=[[1]] * N)), ["'c'", "list"]),
    "huge column": (lambda d: bayesvm.bsvm(FORMULA, d.assign(x2=d.x2 * 1e300)), ["'x2'", "too large"]),
    "code in formula": (lambda d: bayesvm.bsvm("y ~ np.save('pwned', x1)", d), ["np.save", "does not evaluate"]),
    "import in formula": (lambda d: bayesvm.bsvm("y ~ {__import__('os').getcwd()}", d), ["__import__"]),
    "dunder attribute": (lambda d: bayesvm.bsvm("y ~ I(x1.__class__)", d), ["x1.__class__"]),
    "code in a bar": (lambda d: bayesvm.bsvm("y ~ x1 + (open('f') | g)", d), ["open"]),
    "not a frame": (lambda d: bayesvm.bsvm(FORMULA, [1, 2, 3]), ["data", "list"]),
    "kernel all too big": (
        lambda d: bayesvm.bsvm(FORMULA, pd.concat([d] * 5000, ignore_index=True), kernel=kernels.RBF(), inducing="all"),
        ["GiB", "inducing"],
    ),
    "pcvm too big": (lambda d: bayesvm.pcvm(FORMULA, pd.concat([d] * 5000, ignore_index=True)), ["GiB", "inducing"]),
    # arguments a method would ignore, and requests past their bounds
    "draws under vb": (lambda d: bayesvm.bsvm(FORMULA, d, draws=100, **FAST), ["draws=", "method='gibbs'"]),
    "chains under em": (lambda d: bayesvm.bsvm(FORMULA, d, method="em", chains=2), ["chains=", "'em'"]),
    "accurate with em": (lambda d: bayesvm.bsvm(FORMULA, d, method="em", vb="accurate"), ["vb='accurate'", "'em'"]),
    "a million chains": (lambda d: bayesvm.bsvm(FORMULA, d, method="gibbs", chains=10**6), ["chains=1,000,000"]),
    "ten million imputations": (
        lambda d: bayesvm.bsvm(FORMULA, d.assign(x2=d.x2.where(d.index % 5 > 0)), missing="impute", imputations=10**7),
        ["imputations=10,000,000"],
    ),
    "tiny lengthscale": (lambda d: bayesvm.bsvm(FORMULA, d, kernel=kernels.RBF(lengthscale=1e-300)), ["lengthscale"]),
    "huge variance": (lambda d: bayesvm.bsvm(FORMULA, d, kernel=kernels.RBF(variance=1e300)), ["variance"]),
    "gp basis": (lambda d: bayesvm.bsvm("y ~ x1 + gp(x2, k=1000000)", d), ["k=", "1000"]),
    "ten thousand levels in the fixed part": (
        lambda d: bayesvm.bsvm(
            "y ~ x1 + h",
            pd.concat([d] * 200, ignore_index=True).assign(h=lambda t: [f"h{i % 10000}" for i in t.index]),
            method="em",
            penalty=1.0,
        ),
        ["10,000 levels", "(1 | h)"],
    ),
    # formulas R would refuse
    "trailing plus": (lambda d: bayesvm.bsvm("y ~ x1 +", d), ["'+'"]),
    "removing a column that is not there": (lambda d: bayesvm.bsvm("y ~ . - zz", d[["y", "x1"]]), ["'zz'"]),
    "numbers and text in the response": (
        lambda d: bayesvm.bsvm("y ~ x1", d.assign(y=d.y.map({0: 0, 1: "1"}))),
        ["'y'", "numbers and text"],
    ),
    "a number that names a column": (
        lambda d: bayesvm.bsvm("y ~ 0 + 1", pd.DataFrame({0: d.x1, 1: d.x2, "y": d.y})),
        ["backticks", "`0`"],
    ),
    "non-ASCII name in a call": (
        lambda d: bayesvm.bsvm("y ~ np.log(größe)", d.assign(größe=d.x2.abs())),
        ["'größe'", "backticks"],
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_input_gets_a_clear_error_naming_the_culprit(frame, case):
    call, words = REFUSED[case]
    before = frame.copy(deep=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BayesvmError) as info:
            call(frame)
    for word in words:
        assert word in str(info.value), (case, str(info.value))
    pd.testing.assert_frame_equal(frame, before)


ACCEPTED = {
    "numpy integers": lambda d: bayesvm.bsvm(
        FORMULA,
        d,
        draws=np.int64(10),
        tune=np.int32(5),
        chains=np.int64(1),
        method="gibbs",
        progress=False,
        max_iter=np.int64(50),
    ),  # fmt: skip
    "RandomState seed": lambda d: bayesvm.bsvm(FORMULA, d, seed=np.random.RandomState(0), **GIBBS),
    "Generator seed": lambda d: bayesvm.bsvm(FORMULA, d, seed=np.random.default_rng(0), **GIBBS),
    "SeedSequence seed": lambda d: bayesvm.bsvm(FORMULA, d, seed=np.random.SeedSequence(3), **GIBBS),
    "string factor": lambda d: bayesvm.bsvm("y ~ x1 + f", d.assign(f=d.f.astype("string")), **FAST),
    "categorical factor": lambda d: bayesvm.bsvm("y ~ x1 + f", d.assign(f=d.f.astype("category")), **FAST),
    "Int64 with NA, imputed": lambda d: bayesvm.bsvm(
        "y ~ x1 + x3", d.assign(x3=pd.array([1, None, 3] * 20, dtype="Int64")), missing="impute", imputations=2
    ),
    "Float64 with NA, dropped": lambda d: bayesvm.bsvm(
        "y ~ x1 + x3", d.assign(x3=pd.array([1.5, None] * 30, dtype="Float64")), missing="drop", **FAST
    ),
    "boolean predictor": lambda d: bayesvm.bsvm(
        "y ~ x1 + b", d.assign(b=pd.array([True, False, True] * 20, dtype="boolean")), **FAST
    ),
    "boolean response": lambda d: bayesvm.bsvm(
        "b ~ x1", d.assign(b=pd.array(d.y.astype(bool), dtype="boolean")), **FAST
    ),
    "string response": lambda d: bayesvm.bsvm(
        "b ~ x1", d.assign(b=d.y.map({0: "no", 1: "yes"}).astype("string")), **FAST
    ),
    "numeric codes as a factor": lambda d: bayesvm.bsvm("y ~ x1 + C(k)", d.assign(k=d.g.astype(str)), **FAST),
    "a column named np": lambda d: bayesvm.bsvm("y ~ np + np.log(x2 ** 2)", d.assign(np=d.x1), **FAST),
    "integer column names in backticks": lambda d: bayesvm.bsvm(
        "y ~ `0` + `1`", pd.DataFrame({0: d.x1, 1: d.x2, "y": d.y}), **FAST
    ),
    "non-ASCII column names": lambda d: bayesvm.bsvm("y ~ größe + np.log(`größe` ** 2)", d.assign(größe=d.x2), **FAST),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_plain_counterparts_of_pandas_dtypes_and_seeds_are_accepted(frame, case):
    before = frame.copy(deep=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ACCEPTED[case](frame)
    assert np.isfinite(fit.fixef.to_numpy()).all()
    pd.testing.assert_frame_equal(frame, before)


def test_extension_dtypes_fit_like_their_plain_counterparts(frame):
    plain = bayesvm.bsvm("y ~ x1 + f", frame, **FAST)
    nullable = frame.assign(f=frame.f.astype("string"), x1=pd.array(frame.x1, dtype="Float64"))
    again = bayesvm.bsvm("y ~ x1 + f", nullable, **FAST)
    np.testing.assert_allclose(again.fixef.to_numpy(), plain.fixef.to_numpy(), rtol=1e-10)


def test_seed_objects_are_reproducible(frame):
    a = bayesvm.bsvm(FORMULA, frame, seed=np.random.RandomState(5), **GIBBS)
    b = bayesvm.bsvm(FORMULA, frame, seed=np.random.RandomState(5), **GIBBS)
    np.testing.assert_array_equal(a.result.theta_d, b.result.theta_d)


@pytest.mark.parametrize("library", ["polars", "pyarrow"])
def test_other_libraries_frames_are_accepted(frame, library):
    lib = pytest.importorskip(library)
    other = lib.from_pandas(frame) if library == "polars" else lib.Table.from_pandas(frame)
    fit = bayesvm.bsvm("y ~ x1 + f", other, **FAST)
    np.testing.assert_allclose(fit.fixef.to_numpy(), bayesvm.bsvm("y ~ x1 + f", frame, **FAST).fixef.to_numpy())
    np.testing.assert_array_equal(fit.predict(other), fit.predict(frame))


def test_many_level_factor_is_warned_about_before_the_design_is_built():
    rng = np.random.default_rng(1)
    data = pd.DataFrame({"x": rng.normal(size=300), "id": [f"s{i}" for i in range(300)]})
    data["y"] = (data.x > 0).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bayesvm.bsvm("y ~ x + id", data, method="em", penalty=0.5, max_iter=20)
    ours = [
        str(w.message)
        for w in caught
        if issubclass(w.category, IdentifiabilityWarning) and "levels on" in str(w.message)
    ]
    assert len(ours) == 1
    assert "'id' is a factor with 300 levels on 300 rows" in ours[0] and "(1 | id)" in ours[0]


@pytest.mark.parametrize("level", [1.5, 0, 1, -0.1, "0.9", True])
def test_levels_outside_zero_one_are_refused(fit, frame, level):
    with pytest.raises(BayesvmError, match="level must be"):
        fit.predict_interval(frame, level=level)
    with pytest.raises(BayesvmError, match="level must be"):
        fit.summary(level=level)


@pytest.mark.parametrize(
    "bad, words",
    [
        (lambda d: d.assign(x1="abc"), ["'x1'", "abc"]),
        (lambda d: d.assign(f="zz"), ["'f'", "zz"]),
        (lambda d: d.assign(x1=1e200), ["'x1'", "too large"]),
        (lambda d: d.drop(columns="x2"), ["'x2'"]),
        (lambda d: pd.concat([d, d[["x1"]]], axis=1), ["duplicated", "x1"]),
        (lambda d: d.assign(x1=pd.array([1.0, None] * 30, dtype="Float64")), ["'x1'", "missing"]),
        (lambda d: d.assign(x1=pd.Timestamp("2021-01-01")), ["'x1'"]),
    ],
)
def test_a_failed_predict_leaves_the_fit_exactly_as_it_was(fit, frame, tmp_path, bad, words):
    before = fit.predict(frame, kind="prob")
    with pytest.raises(BayesvmError) as info:
        fit.predict(bad(frame))
    for word in words:
        assert word in str(info.value)
    np.testing.assert_array_equal(fit.predict(frame, kind="prob"), before)
    again = bayesvm.load(fit.save(tmp_path / "after.bsvm"))
    np.testing.assert_array_equal(again.predict(frame, kind="prob"), before)


def test_new_data_with_numbers_as_text_or_objects_predict_like_numbers(fit, frame):
    expected = fit.predict(frame, kind="link")
    np.testing.assert_allclose(fit.predict(frame.assign(x1=frame.x1.astype(str)), kind="link"), expected)
    np.testing.assert_array_equal(fit.predict(frame.assign(x1=frame.x1.astype(object)), kind="link"), expected)
    np.testing.assert_array_equal(fit.predict(frame.assign(f=frame.f.astype("string")), kind="link"), expected)


def test_design_errors_are_value_errors():
    assert issubclass(DesignError, ValueError)


def test_an_export_that_would_not_fit_in_memory_is_refused_before_drawing(fit):
    with pytest.raises(BayesvmError, match=r"ArviZ export \(1,000,000,000 draws.*GiB.*draws="):
        fit.to_inference_data(draws=10**9)
    with pytest.raises(BayesvmError, match="draws must be"):
        fit.to_inference_data(draws=True)


@pytest.mark.parametrize("flag", ["no", 0, None, "False"])
def test_include_random_must_be_a_flag(fit, frame, flag):
    with pytest.raises(BayesvmError, match="include_random must be True or False"):
        fit.predict(frame, include_random=flag)


def test_a_factor_trained_on_text_refuses_numbers_it_never_saw(fit, frame):
    with pytest.raises(BayesvmError, match=r"'f'.*\[0, 1, 2\].*never saw"):
        fit.predict(frame.assign(f=np.arange(len(frame)) % 3))


def test_a_refused_fit_leaves_a_fitted_estimator_intact(frame):
    from bayesvm.sklearn import BayesianSVC

    X, y = frame[["x1", "x2"]].to_numpy(), frame.y.to_numpy()
    model = BayesianSVC().fit(X, y)
    before = model.predict_proba(X)
    with pytest.raises(ValueError):
        model.fit(X, np.zeros(len(y)))
    with pytest.raises(ValueError):
        model.fit(X[:, :1], np.array(["a"] * len(y)))
    np.testing.assert_array_equal(model.classes_, [0, 1])
    np.testing.assert_array_equal(model.predict_proba(X), before)


def test_command_line_usage_errors_take_one_line(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bayesvm", "fit", "--bogus"], capture_output=True, text=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--help" in lines[0] and "usage:" not in done.stderr


@pytest.mark.parametrize("name", ["../../../etc/hostname", "/etc/passwd", "toenail/../spam", ""])
def test_the_vignettes_are_read_by_name_never_by_path(name):
    with pytest.raises(BayesvmError, match="no vignette"):
        bayesvm.docs.text(name)
