"""Aliased columns: found in formula order, named with their reason, dropped and never given a posterior."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.svm import SVC

import bayesvm
from bayesvm.checks import aliased_columns
from bayesvm.errors import DesignError, IdentifiabilityWarning


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    n = 150
    frame = pd.DataFrame({"x1": rng.normal(size=n), "x3": rng.normal(size=n)})
    frame["const"] = 3.0
    frame["x2"] = 2 * frame.x1
    frame["s"] = frame.x1 + frame.x3
    frame["y"] = (frame.x1 - frame.x3 + rng.normal(size=n) > 0).astype(int)
    return frame


def test_reasons_name_the_relation():
    rng = np.random.default_rng(1)
    x, z = rng.normal(size=(2, 50))
    X = np.column_stack([np.ones(50), x, 2 * x, np.full(50, 3.0), z, x + z, x, np.zeros(50)])
    found = {a.name: a.reason for a in aliased_columns(X, ["(Intercept)", "x", "x2", "c", "z", "s", "dup", "zero"])}
    assert found == {
        "x2": "2 x 'x'",
        "c": "constant (the intercept's alias)",
        "s": "a linear combination of earlier columns (1 x 'x' + 1 x 'z')",
        "dup": "duplicate of 'x'",
        "zero": "all zero",
    }
    assert aliased_columns(X[:, [0, 1, 4]], ["(Intercept)", "x", "z"]) == []


def test_aliased_columns_are_dropped_named_and_not_reported_as_posterior(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x1 + const + x2 + x3 + s", data, vb="meanfield")
    ours = [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)]
    assert len(ours) == 1
    assert "'const' (constant" in ours[0] and "'x2' (2 x 'x1')" in ours[0] and "'s' (a linear combination" in ours[0]
    assert list(fit.fixef.index) == ["(Intercept)", "x1", "x3"]
    text = str(fit.summary())
    assert "aliased column(s) are dropped and not estimated" in text
    fixed_table = text.split("Fixed effects")[1]
    assert "const" not in fixed_table and "x2" not in fixed_table
    reference = bayesvm.bsvm("y ~ x1 + x3", data, vb="meanfield")
    np.testing.assert_allclose(fit.fixef.to_numpy(), reference.fixef.to_numpy(), rtol=1e-10)
    np.testing.assert_allclose(fit.predict(data, kind="pseudo"), reference.predict(data, kind="pseudo"), rtol=1e-10)


def test_collinear_columns_with_em_give_the_svm_of_the_kept_columns(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        fit = bayesvm.bsvm("y ~ x1 + x2 + x3", data, method="em", penalty=0.5, standardize=False)
    svc = SVC(kernel="linear", C=1.0, tol=1e-10).fit(data[["x1", "x3"]], data.y)
    np.testing.assert_allclose(fit.fixef[["x1", "x3"]].to_numpy(), svc.coef_.ravel(), atol=1e-4)


def test_rank_stop_refuses_naming_the_columns(data):
    with pytest.raises(DesignError, match="rank deficient.*'x2': 2 x 'x1'"):
        bayesvm.bsvm("y ~ x1 + x2", data, checks=bayesvm.Checks(rank="stop"))


def test_one_level_factor_is_named(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x1 + f", data.assign(f="only"), vb="meanfield")
    messages = " ".join(str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning))
    assert "'f'" in messages
    assert all("f" not in name for name in fit.fixef.index)


def test_kernel_inputs_keep_every_column(data):
    from bayesvm.kernels import RBF

    fit = bayesvm.bsvm("y ~ x1 + x2", data, kernel=RBF(), inducing=10)
    assert fit.model.design.aliased == () and "x2" in fit.model.design.x_names
