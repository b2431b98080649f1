"""Kernel fits say where f keeps its prior (bayesvm.checks.kernel_reach): at training rows far from every inducing
point, and at new rows far from every input the fit learned from."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.checks.kernel_reach import PRIOR_SHARE, unreached
from bayesvm.errors import IdentifiabilityWarning
from bayesvm.kernels import RBF


def _data(n=160, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2))
    y = np.where(x[:, 0] + 0.5 * rng.standard_normal(n) > 0, "a", "b")
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "y": y})


def _fit(data, lengthscale, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(lengthscale=lengthscale, learn=False), seed=0, **options)
    return fit, [w for w in caught if issubclass(w.category, IdentifiabilityWarning)]


def test_unreached_rows_are_those_whose_variance_is_the_prior():
    prior = np.array([2.0, 2.0, 2.0, 0.0])
    var = np.array([2.0, PRIOR_SHARE * 2.0 - 1e-9, 0.5, 0.0])
    assert unreached(var, prior).tolist() == [True, False, False, False]


def test_a_lengthscale_shorter_than_the_inputs_spacing_is_warned_about_once_and_in_the_summary():
    """40 inducing points for 160 rows and a lengthscale of 0.01: the 120 other training rows are out of reach (their f
    is the prior's), so the fit warns once and its summary says so; a usual lengthscale does neither."""
    data = _data()
    fit, caught = _fit(data, 0.01, inducing=40)
    assert len(caught) == 1 and "leaves f at its prior" in str(caught[0].message)
    assert "training rows" in str(caught[0].message) and "lengthscale=0.01" in str(caught[0].message)
    assert "WARNING: the kernel fit leaves f at its prior" in str(fit.summary())
    with pytest.warns(IdentifiabilityWarning, match="rows asked for"):  # (the training rows passed as newdata)
        link = fit.predict_interval(data)
    assert np.sum(np.abs(link["mean"].to_numpy()) < 1e-9) >= 100  # (what the finding says: f is 0 there)
    fit, caught = _fit(data, 1.0, inducing=40)
    assert caught == [] and "leaves f at its prior" not in str(fit.summary())


def test_new_rows_out_of_reach_are_warned_about_at_prediction():
    """A batch fit reaches every training row; new rows far from all of them get f's prior and P = 0.5, and predict
    says how many, once; rows among the training inputs are not flagged."""
    data = _data(n=80)
    fit, caught = _fit(data, 0.05, inducing="all")
    assert caught == []
    far = pd.DataFrame({"x1": [40.0, -40.0, 0.0], "x2": [0.0, 0.0, 40.0]})
    with pytest.warns(IdentifiabilityWarning, match="on 3 of 3 rows asked for") as record:
        prob = fit.predict(far, kind="pseudo")
    assert len([w for w in record if issubclass(w.category, IdentifiabilityWarning)]) == 1
    np.testing.assert_allclose(prob, 0.5, atol=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        fit.predict(data.head(10), kind="link")
