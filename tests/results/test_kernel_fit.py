"""``bsvm(..., kernel=...)``: the user-facing kernel fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError, FormulaError
from bayesvm.kernels import RBF, Constant, Matern52
from bayesvm.results.fit import BSVMFit
from bayesvm.results.kernel_fit import KernelFit


@pytest.fixture(scope="module")
def banana():
    data = bayesvm.datasets.load_ratsch("banana")
    frame = data.frame.assign(label=np.where(data.frame["y"] > 0, "yes", "no"))
    train, test = frame.iloc[data.train[0]], frame.iloc[data.test[0][:1000]]
    return train.reset_index(drop=True), test.reset_index(drop=True)


@pytest.fixture(scope="module")
def fit(banana):
    train, _ = banana
    return bayesvm.bsvm("label ~ x1 + x2", train, kernel=RBF(), inducing=40, seed=0)


def test_kernel_fit_predicts_banana_well(fit, banana):
    _, test = banana
    assert isinstance(fit, KernelFit) and isinstance(fit, BSVMFit)
    error = np.mean(fit.predict(test) != test["label"])
    assert error < 0.14  # Raetsch's banana: SVM about 0.115, a linear rule about 0.45
    prob = fit.predict(test, kind="prob")
    assert np.all((prob > 0) & (prob < 1))
    np.testing.assert_array_equal(fit.predict(test) == "yes", prob > 0.5)
    pseudo = fit.predict(test, kind="pseudo")
    np.testing.assert_array_equal(pseudo > 0.5, prob > 0.5)
    interval = fit.predict_interval(test)
    assert np.all(interval["lower"] < interval["mean"]) and np.all(interval["sd"] > 0)
    np.testing.assert_allclose(interval["mean"], fit.predict(test, kind="link"))


def test_kernel_fit_input_frame_is_unchanged(banana):
    train, _ = banana
    before = train.copy()
    bayesvm.bsvm("label ~ x1 + x2", train, kernel=RBF(learn=False), inducing=10)
    pd.testing.assert_frame_equal(train, before)


def test_summary_reports_kernel_hyperparameters_and_inducing_points(fit):
    text = str(fit.summary())
    assert "inducing points" in text and "RBF" in text and "lengthscale" in text
    assert "Positive class (+1): label = 'yes'" in text and "converged" in text
    assert len(fit.hyperparameters) == 2 and fit.inducing_points.shape == (40, 2)


def test_coefficients_are_refused_with_a_clear_error(fit):
    for what in ("fixef", "ranef"):
        with pytest.raises(BayesvmError, match="not defined for a kernel fit"):
            getattr(fit, what)
    with pytest.raises(BayesvmError, match="ArviZ"):
        fit.to_inference_data()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "em", "vb": "accurate"}, "goes with method='vb'"),
        ({"penalty": 1.0}, "do not apply to a kernel"),
        ({"inducing": "some"}, "inducing must be"),
        ({"inducing": np.zeros((3, 5))}, "shape"),
        ({"inducing": 0}, "at least 1"),
        ({"method": "svi", "learn_inducing": True}, "learn_inducing"),
        ({"inducing_method": "gmm"}, "inducing_method"),
        ({"batch_size": 0, "method": "svi"}, "batch_size"),
        ({"learning_rate": "fast", "method": "svi"}, "learning_rate"),
    ],
)
def test_bad_kernel_options_raise(banana, kwargs, message):
    train, _ = banana
    with pytest.raises(BayesvmError, match=message):
        bayesvm.bsvm("label ~ x1 + x2", train, kernel=RBF(), **kwargs)


def test_random_effects_with_a_kernel_are_refused():
    toenail = bayesvm.datasets.load_toenail()
    with pytest.raises(BayesvmError, match="write the GP as a formula term: y ~ gp"):
        bayesvm.bsvm("outcome ~ time + (1 | patientID)", toenail, kernel=RBF())
    with pytest.raises(BayesvmError, match="use one or the other"):
        bayesvm.bsvm("outcome ~ treatment + gp(time)", toenail, kernel=RBF())
    with pytest.raises(BayesvmError, match="only an intercept"):
        bayesvm.bsvm("outcome ~ 1", toenail, kernel=RBF())


def test_newdata_missing_a_column_names_it(fit, banana):
    _, test = banana
    with pytest.raises(FormulaError, match="x2"):
        fit.predict(test.drop(columns="x2"))


def test_batch_and_svi_and_explicit_locations(banana):
    train, test = banana
    batch = bayesvm.bsvm("label ~ x1 + x2", train.iloc[:150], kernel=Matern52() + Constant(), inducing="all")
    assert batch.result.engine == "batch" and batch.inducing_points.shape == (150, 2)
    locations = train[["x1", "x2"]].to_numpy()[:25]
    explicit = bayesvm.bsvm("label ~ x1 + x2", train, kernel=RBF(learn=False), inducing=locations)
    np.testing.assert_allclose(explicit.inducing_points.to_numpy(), locations)
    svi = bayesvm.bsvm("label ~ x1 + x2", train, kernel=RBF(), inducing=30, method="svi", seed=2)
    assert "Stochastic VI" in str(svi.summary()) and "moving window" in str(svi.summary())
    assert np.mean(svi.predict(test) != test["label"]) < 0.16


def test_save_and_load_round_trip(fit, banana, tmp_path):
    _, test = banana
    fit.calibrate(newdata=test)  # held-out rows: the map is saved with the fit
    fit.save(tmp_path / "kernel.pkl")
    again = bayesvm.load(tmp_path / "kernel.pkl")
    np.testing.assert_allclose(again.predict(test, kind="prob"), fit.predict(test, kind="prob"))
