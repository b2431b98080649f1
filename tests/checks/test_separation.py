"""Konis's separation test: complete and quasi-complete separation found, named and acted on."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bayesvm
from bayesvm.checks import Checks, IdentifiabilityError, detect_separation, separation
from bayesvm.errors import IdentifiabilityWarning
from tests.conftest import simulate_quasi_separated


def test_lp_classifies_none_quasi_and_complete():
    rng = np.random.default_rng(1)
    x = rng.normal(size=300)
    one = np.ones_like(x)
    noisy = np.where(rng.random(300) < 1 / (1 + np.exp(-x)), 1.0, -1.0)
    assert detect_separation(np.column_stack([one, x]), noisy, ["1", "x"]).kind == "none"
    complete = detect_separation(np.column_stack([one, x]), np.sign(x), ["1", "x"])
    assert complete.kind == "complete" and "x" in complete.columns and complete.isolated.all()
    # quasi-complete: the classes touch at x = 0 (ties on the boundary)
    tied = np.where(np.abs(x) < 0.3, 0.0, x)
    y = np.where(tied > 0, 1.0, -1.0)
    y[(tied == 0)] = np.where(rng.random((tied == 0).sum()) < 0.5, 1.0, -1.0)
    quasi = detect_separation(np.column_stack([one, tied]), y, ["1", "x"])
    assert quasi.kind == "quasi-complete" and "x" in quasi.columns
    assert not quasi.isolated[tied == 0].any() and quasi.isolated[tied != 0].all()


def test_the_separating_factor_level_is_named():
    data = simulate_quasi_separated()
    rows = data.b == 0
    separation = detect_separation(np.column_stack([np.ones(len(data)), data.x, data.b]),
                                   np.where(data.y == 1, 1.0, -1.0), ["(Intercept)", "x", "b"])  # fmt: skip
    assert separation.kind == "quasi-complete"
    assert set(separation.columns) == {"(Intercept)", "b"}  # 'x' alone does not separate
    np.testing.assert_array_equal(separation.isolated, rows.to_numpy())


def test_default_fit_warns_once_naming_the_column_and_class_and_says_so_in_summary():
    data = simulate_quasi_separated()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x + b", data, vb="meanfield")
    ours = [w for w in caught if issubclass(w.category, IdentifiabilityWarning)]
    assert len(ours) == 1
    message = str(ours[0].message)
    assert "quasi-complete separation" in message and "'b'" in message and "class 0" in message
    assert "'x'" not in message.split("isolating")[0]
    assert fit.diagnostics.frame().check.tolist() == ["separation"]
    text = str(fit.summary())
    assert "Identifiability:" in text and "quasi-complete separation" in text


def test_flat_prior_on_a_separating_coefficient_is_refused_with_the_prior_to_use():
    data = simulate_quasi_separated()
    with pytest.raises(IdentifiabilityError, match="penalty=None.*penalty='learn'.*penalty=1"):
        bayesvm.bsvm("y ~ x + b", data, penalty=None)
    with pytest.raises(IdentifiabilityError, match="unpenalized="):
        bayesvm.bsvm("y ~ x + b", data, unpenalized=["b"])
    # the same data with a fixed penalty: the classical SVM, a note and no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        fit = bayesvm.bsvm("y ~ x + b", data, penalty=1.0, vb="meanfield")
    assert fit.diagnostics.findings[0].action == "note"


def test_complete_separation_by_a_continuous_predictor():
    rng = np.random.default_rng(3)
    data = pd.DataFrame({"x": rng.normal(size=80), "z": rng.normal(size=80)})
    data["y"] = (data.x > 0.2).astype(int)
    with pytest.warns(IdentifiabilityWarning, match="complete separation: .*'x'"):
        bayesvm.bsvm("y ~ x + z", data, vb="meanfield")
    with pytest.raises(IdentifiabilityError, match="complete separation"):
        bayesvm.bsvm("y ~ x + z", data, checks=Checks(separation="stop"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        bayesvm.bsvm("y ~ x + z", data, vb="meanfield", checks=Checks(separation="ignore"))


def test_no_finding_on_overlapping_classes(toenail):
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        # (without the patients' random effects every row is predicted 'none or mild': tests/checks/
        # test_predicted_classes.py; this test is about separation)
        fit = bayesvm.bsvm("outcome ~ visit * treatment", toenail, vb="meanfield", checks=Checks(one_class="ignore"))
    assert not fit.diagnostics.findings


def test_checks_control_is_validated():
    with pytest.raises(ValueError, match="separation"):
        Checks(separation="maybe")
    with pytest.raises(ValueError, match="checks must be"):
        bayesvm.bsvm("y ~ x", simulate_quasi_separated(), checks={"separation": "ignore"})


def _signed(C, y):
    return (y[:, None] * C) / separation._column_scale(C)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(8, 60),
    p=st.integers(1, 5),
    kind=st.sampled_from(["overlap", "complete", "quasi", "binary", "collinear"]),
    seed=st.integers(0, 10_000),
)
def test_the_overlap_certificate_is_found_exactly_when_the_programme_finds_no_separation(n, p, kind, seed):
    # Stiemke's alternative: a positive lambda with signed' lambda = 0 exists iff no direction separates
    rng = np.random.default_rng(seed)
    C = np.column_stack([np.ones(n), rng.normal(size=(n, p))])
    if kind == "binary":
        C[:, 1:] = rng.random((n, p)) < 0.3
    if kind == "collinear":
        C = np.column_stack([C, C[:, 1] + 1e-6 * rng.normal(size=n)])
    score = C[:, 1] if kind in ("complete", "quasi") else rng.logistic(size=n) + C[:, 1:].sum(axis=1) * 0.3
    y = np.where(score > np.median(score), 1.0, -1.0)
    if kind == "quasi":
        C[:, 1] = np.where(score > np.median(score), C[:, 1], 0.0)  # ties on one side: quasi-complete or overlap
    if np.all(np.ptp(C[:, 1:], axis=0) == 0) or len(np.unique(y)) == 1:
        return
    signed = _signed(C, y)
    weights = separation._overlap_certificate(signed)
    t, _ = separation._largest_isolated_set(signed)
    separated = bool((t > separation.ROW_TOL).any())
    if weights is not None:
        assert weights.min() > 0 and np.abs(signed.T @ weights).max() <= 1e-8 * weights.sum()
        assert not separated
    elif kind == "overlap" and n >= 40 * p:
        # overlapping logistic data of this size: the certificate is expected, not just allowed, to exist
        assert separated


def test_overlapping_classes_never_reach_the_linear_programme(monkeypatch):
    rng = np.random.default_rng(5)
    C = np.column_stack([np.ones(20_000), rng.normal(size=(20_000, 6))])
    y = np.where(rng.random(20_000) < 1 / (1 + np.exp(-C[:, 1] - 2 * C[:, 2])), 1.0, -1.0)

    def refuse(*args, **kwargs):
        raise AssertionError("the programme ran on overlapping classes")

    monkeypatch.setattr(separation, "_largest_isolated_set", refuse)
    assert detect_separation(C, y, [f"c{j}" for j in range(7)]).kind == "none"


def test_a_column_that_separates_by_itself_is_named_among_many_diverging_ones():
    # the outcome recorded another way (birth weight under 2,500 g is 'low'), among ordinary predictors
    rng = np.random.default_rng(11)
    n = 190
    data = pd.DataFrame({"age": rng.normal(25, 5, n), "lwt": rng.normal(130, 30, n), "smoke": rng.random(n) < 0.4})
    data["bwt"] = rng.normal(2950, 700, n) - 150 * data.smoke
    data["low"] = (data.bwt < 2500).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("low ~ age + lwt + smoke + bwt", data, vb="meanfield")
    ours = [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)]
    assert len(ours) == 1
    assert ours[0].startswith("complete separation: 'bwt' separates the classes by itself (with the intercept)")
    assert "so every coefficient is bounded by its prior only" in ours[0]  # complete: the cone is open
    assert "response recorded another way" in ours[0]
    assert fit.diagnostics.frame().culprits.tolist() == ["bwt"]


def test_no_single_column_is_named_when_only_columns_together_separate():
    rng = np.random.default_rng(2)
    data = pd.DataFrame({"a": rng.normal(size=120), "b": rng.normal(size=120)})
    data["y"] = (data.a + data.b > 0).astype(int)
    result = detect_separation(np.column_stack([np.ones(120), data.a, data.b]), np.where(data.y == 1, 1.0, -1.0),
                               ["(Intercept)", "a", "b"])  # fmt: skip
    assert result.kind == "complete" and result.alone == ()
    with pytest.warns(IdentifiabilityWarning, match=r"complete separation: '\(Intercept\)', 'a', 'b' separate the"):
        bayesvm.bsvm("y ~ a + b", data, vb="meanfield")


def test_a_separation_by_many_columns_is_counted_not_listed():
    # 14 predictors on 20 rows: separable, and no predictor does it alone
    rng = np.random.default_rng(4)
    data = pd.DataFrame(rng.normal(size=(20, 14)), columns=[f"v{j}" for j in range(14)])
    data["y"] = (rng.random(20) < 0.5).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ " + " + ".join(f"v{j}" for j in range(14)), data, vb="meanfield")
    (message,) = [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)]
    assert message.startswith("complete separation: all 15 coefficients together separate the classes, isolating")
    assert "'v3'" not in message
    (finding,) = [f for f in fit.diagnostics.findings if f.check == "separation"]
    assert len(finding.culprits) == 15  # every name is kept in the diagnostics


def _diverging_by_programmes(signed):
    """Reference: Konis's ``2 p`` programmes, ``max / min d_j`` over ``signed d >= 0``, ``|d| <= 1``."""
    import scipy.optimize
    import scipy.sparse as sp

    n, p = signed.shape
    out = np.zeros(p, dtype=bool)
    for j in range(p):
        for sign in (1.0, -1.0):
            cost = np.zeros(p)
            cost[j] = -sign
            res = scipy.optimize.linprog(cost, A_ub=-sp.csr_matrix(signed), b_ub=np.zeros(n),
                                         bounds=[(-1.0, 1.0)] * p, method="highs")  # fmt: skip
            if res.status == 0 and -res.fun > 1e-7:
                out[j] = True
                break
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(10, 80), p=st.integers(2, 6), kind=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_the_null_space_names_the_diverging_columns_the_programmes_name(n, p, kind, seed):
    rng = np.random.default_rng(seed)
    C = np.column_stack([np.ones(n), rng.normal(size=(n, p))])
    if kind == 1:
        C[:, 1:] = rng.random((n, p)) < 0.3
    y = np.where(rng.logistic(size=n) + C[:, 1] > 0, 1.0, -1.0)
    if kind in (0, 2):  # a 0/1 column that is 0 only in class -1
        C[:, -1] = np.where(y > 0, 1.0, (rng.random(n) < 0.5) * 1.0)
    if kind == 3:  # a continuous column that is 0 throughout class -1
        C[:, 2] = np.where(y > 0, C[:, 2], 0.0)
    signed = _signed(C, y)
    t, _ = separation._largest_isolated_set(signed)
    isolated = t > separation.ROW_TOL
    if len(np.unique(y)) < 2 or not isolated.any() or isolated.all():
        return
    np.testing.assert_array_equal(separation._diverging_columns(signed, isolated), _diverging_by_programmes(signed))


def test_separated_classes_get_a_half_t_on_the_learned_penaltys_sd_by_default_and_predict_as_a_linear_svm():
    """Where the fixed effects separate the classes, the paper's IG(0.01, 0.01) on sigma_u^2 leaves a posterior with
    no finite mean along the separating direction (posterior means of 1e4-1e8, held-out rows misclassified); with no
    priors given, the learned penalty gets the half-t(3, 2.5) on its SD, said in the warning and the summary, and
    classifies held-out wine as a linear SVM does.  priors=PriorSet() keeps the paper's prior."""
    from sklearn.datasets import load_wine
    from sklearn.svm import LinearSVC

    from bayesvm.priors import HalfT, InverseGamma, PriorSet

    X, y = load_wine(return_X_y=True, as_frame=True)
    X = (X - X.mean()) / X.std()
    X.columns = [f"x{j}" for j in range(X.shape[1])]
    train, test = np.arange(len(X)) % 3 != 0, np.arange(len(X)) % 3 == 0
    data = X.assign(y=(y == 1).to_numpy())
    formula = "y ~ " + " + ".join(X.columns)
    with pytest.warns(IdentifiabilityWarning, match="half-t prior on its SD .* the paper's IG") as caught:
        fit = bayesvm.bsvm(formula, data[train])
    assert isinstance(fit.model.priors.penalty, HalfT) and "sigma ~ half-t(3, 2.5)" in str(fit.summary())
    assert sum("separation" in str(w.message) for w in caught) == 1
    held_out = (np.asarray(fit.predict(data[test], kind="link")) > 0) == data.y[test].to_numpy()
    svm = LinearSVC().fit(X[train], data.y[train]).score(X[test], data.y[test])
    assert held_out.mean() >= svm - 0.02 and np.abs(fit.fixef.to_numpy()).max() < 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paper = bayesvm.bsvm(formula, data[train], priors=PriorSet(), vb="meanfield")
    assert isinstance(paper.model.priors.penalty, InverseGamma)
