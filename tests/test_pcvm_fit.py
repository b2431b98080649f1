"""``bayesvm.pcvm()``: the PCVM with the formula interface."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

import bayesvm
from bayesvm.errors import BayesvmError
from bayesvm.kernels import RBF
from bayesvm.results.arviz import fit_to_datasets
from bayesvm.results.base import Fit


@pytest.fixture(scope="module")
def banana():
    data = bayesvm.datasets.load_ratsch("banana")
    frame = data.frame.assign(label=np.where(data.frame["y"] > 0, "yes", "no"))
    return frame.iloc[data.train[0]], frame.iloc[data.test[0][:2000]]


@pytest.mark.parametrize("method", ["laplace", "ep", "em"])
def test_pcvm_is_sparse_and_accurate_on_banana(banana, method):
    train, test = banana
    fit = bayesvm.pcvm("label ~ x1 + x2", train, kernel=RBF(lengthscale=0.5, learn=False), method=method)
    assert isinstance(fit, Fit)
    vectors = fit.relevance_vectors
    assert 3 <= len(vectors) <= 40 and (vectors["weight"] >= 0).all()
    assert set(vectors.index) <= set(train.index)
    error = np.mean(fit.predict(test) != test["label"])
    assert error < 0.14, error  # SVM about 0.11 on these splits; a linear rule about 0.45
    fit.calibrate(newdata=test)  # held-out rows (cross-fitting a PCVM is tested in test_calibration.py)
    prob = fit.predict(test, kind="prob")
    np.testing.assert_array_equal(prob > 0.5, fit.predict(test) == "yes")
    summary = fit.summary()
    text = str(summary)
    assert "Relevance vectors" in text and "Positive class (+1): label = 'yes'" in text
    assert list(summary.fixed.index) == ["bias"] and summary.tidy()["term"].tolist() == ["bias"]
    np.testing.assert_allclose(summary.fixed["sd"], np.sqrt(fit.result.cov[0, 0]))
    if method == "em":
        assert "MAP by EM with top-down pruning" in text and fit.result.converged
    if method == "ep":
        assert "leave-one-out" in text and 0 <= fit.result.loo_error < 0.3
    groups = fit_to_datasets(fit, draws=200)  # draws of f = basis @ w, w ~ N(mean, cov); the probit likelihood
    f = groups["posterior"]["f"].values
    y = fit.model.design.y
    np.testing.assert_allclose(groups["log_likelihood"]["label"].values, norm.logcdf(y * f))


def test_pcvm_options_are_checked(banana):
    train, _ = banana
    with pytest.raises(BayesvmError, match="method must be"):
        bayesvm.pcvm("label ~ x1 + x2", train, method="mcmc")
    with pytest.raises(BayesvmError, match=r"pcvm\(\) fits one kernel expansion .* random effects \['patientID'\]"):
        bayesvm.pcvm("outcome ~ time + (1 | patientID)", bayesvm.datasets.load_toenail())
    with pytest.raises(BayesvmError, match=r"cannot take gp\(\) terms \['gp\(x2\)'\]") as refused:
        bayesvm.pcvm("label ~ x1 + gp(x2)", train)
    assert "kernel=" not in str(refused.value)  # (pcvm() has no kernel= shorthand to speak of)
    missing = train.assign(x1=train["x1"].where(train.index != train.index[0]))
    with pytest.raises(BayesvmError, match="missing='impute'"):
        bayesvm.pcvm("label ~ x1 + x2", missing, missing="impute")
