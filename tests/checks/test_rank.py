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


def _wide(n=40, p=60, seed=3):
    """More columns than rows: every column past the rank is a combination of earlier ones on these rows only."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + 400, p))
    y = np.where(2.0 * X[:, :5].sum(axis=1) + rng.logistic(size=n + 400) > 0, "a", "b")
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(p)]).assign(y=y, const=1.0, twin=X[:, 0])
    return frame.iloc[:n], frame.iloc[n:]


def test_a_wide_design_keeps_the_columns_past_its_rank_and_says_so():
    """A ridge or linear SVM keeps every column of a wide design; dropping the ones past the rank (by position)
    threw most of them away.  Constant columns and copies are still dropped as aliased."""
    train, _ = _wide()
    formula = "y ~ " + " + ".join(f"x{j}" for j in range(60)) + " + const + twin"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm(formula, train, penalty=1.0, vb="meanfield")
    messages = [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)]
    wide = [m for m in messages if "more columns (61) than rows (40)" in m]
    assert len(wide) == 1 and "21 coefficients ('x39'" in wide[0] and "only 40 directions of the 61" in wide[0]
    assert list(fit.fixef.index) == ["(Intercept)", *[f"x{j}" for j in range(60)]]
    rank = fit.diagnostics.frame().query("check == 'rank'")
    assert rank["culprits"].tolist() == ["const, twin"]
    kept = fit.diagnostics.frame().query("check == 'wide'")["culprits"].iloc[0]
    assert kept == ", ".join(f"x{j}" for j in range(39, 60))


def test_wide_columns_kept_predict_better_than_dropped_ones():
    """Held-out rows of the same model, the signal in ``x0..x4``.  Dropping by position kept the first 39 columns of
    the formula: written in reverse order, that lost the signal; now the order of the formula does not decide which
    columns are used (the SVM of EM with a fixed penalty is unique: the same coefficients either way)."""
    train, test = _wide()
    forward = [f"x{j}" for j in range(60)]
    backward = forward[::-1]
    quiet = bayesvm.Checks(rank="ignore", separation="ignore", vb_check="ignore")
    fits = {
        "forward": bayesvm.bsvm("y ~ " + " + ".join(forward), train, penalty=1.0, method="em", checks=quiet),
        "backward": bayesvm.bsvm("y ~ " + " + ".join(backward), train, penalty=1.0, method="em", checks=quiet),
        "dropped by position": bayesvm.bsvm("y ~ " + " + ".join(backward[:39]), train, penalty=1.0, method="em",
                                            checks=quiet),
    }  # fmt: skip
    error = {name: np.mean(fit.predict(test).to_numpy() != test["y"].to_numpy()) for name, fit in fits.items()}
    np.testing.assert_allclose(fits["backward"].fixef[forward], fits["forward"].fixef[forward], atol=1e-4)
    assert error["forward"] < 0.4 and error["dropped by position"] > 0.45  # 0.315 and 0.505


def test_wide_columns_without_a_proper_prior_are_dropped_and_the_listing_is_capped():
    """``unpenalized`` terms have a vague prior, so a wide design keeps nothing past its rank; the warning lists at
    most 8 aliased columns and counts the rest."""
    train, _ = _wide()
    formula = "y ~ " + " + ".join(f"x{j}" for j in range(60))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm(formula, train, penalty=1.0, vb="meanfield", unpenalized=["x0"])
    messages = [str(w.message) for w in caught if "rank deficient" in str(w.message)]
    assert len(messages) == 1 and "21 aliased column(s)" in messages[0]
    assert "and 13 more (fit.diagnostics.frame() lists them)" in messages[0] and "'x47'" not in messages[0]
    assert len(fit.fixef) == 40


def test_a_wide_design_names_its_columns_past_the_rank_without_a_fit_per_column(monkeypatch):
    """More columns than rows: every column past the rank is a combination of earlier ones; the reasons come from one
    product per column (copies and multiples still named), with no least-squares fit per column."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 200))
    X[:, 150] = 3.0 * X[:, 2]
    calls = []
    monkeypatch.setattr(np.linalg, "lstsq", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(AssertionError))
    found = {a.name: a for a in aliased_columns(X, [f"x{j}" for j in range(200)])}
    assert len(found) == 140 and calls == []
    assert found["x150"].reason == "3 x 'x2'"
    assert all(a.combination for name, a in found.items() if name != "x150")
