"""The one-class check after the fit (:mod:`bayesvm.checks.predicted_classes`)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import IdentifiabilityWarning


def _imbalanced(n=600, seed=0, shift=-2.2):
    """A logistic model with a clear slope and about 12% cases: the hinge fit collapses to 'no case' everywhere."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = np.where(shift + 0.8 * x + rng.logistic(size=n) > 0, "case", "control")
    return pd.DataFrame({"y": y, "x": x, "g": rng.integers(0, 10, n)})


def test_a_fit_that_predicts_one_class_everywhere_says_so_once():
    data = _imbalanced()
    with pytest.warns(IdentifiabilityWarning, match="predicts 'control' for every one of the 600 training rows") as got:
        fit = bayesvm.bsvm("y ~ x", data, positive="case")
    assert sum("for every one of" in str(w.message) for w in got) == 1
    assert (fit.predict() == "control").all()
    assert fit.diagnostics.frame().query("check == 'one_class'")["culprits"].tolist() == ["case"]
    text = str(fit.summary())
    assert "for every one of the 600 training rows" in text and "WARNING  classes" in text
    assert "prior-driven" not in text  # an identified fit, not one shaped by its prior


def test_balanced_classes_and_an_ignored_check_give_no_finding():
    data = _imbalanced(shift=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        fit = bayesvm.bsvm("y ~ x", data, positive="case")
        quiet = bayesvm.bsvm("y ~ x", _imbalanced(), positive="case", checks=bayesvm.Checks(one_class="ignore"))
    assert "one_class" not in fit.diagnostics.frame()["check"].tolist()
    assert "one_class" not in quiet.diagnostics.frame()["check"].tolist()


def test_toenail_without_its_random_effects_predicts_no_case_and_says_so():
    """Real data: 21% of toenail's visits are 'moderate or severe'; without the patients' random effects the hinge
    fit puts every visit on the 'none or mild' side (with them it does not: the vignettes and tests of the mixed
    model fit it without this warning)."""
    toenail = bayesvm.datasets.load_toenail()
    with pytest.warns(IdentifiabilityWarning, match="'none or mild' for every one of the 1,908 training rows"):
        bayesvm.bsvm("outcome ~ visit * treatment", toenail, vb="meanfield")
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        mixed = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail, vb="meanfield")
    assert "one_class" not in mixed.diagnostics.frame()["check"].tolist()


def test_a_one_class_fit_with_random_effects_names_their_variances():
    """With random effects the warning says that their variances are not measured either (a mode at zero variance
    beside another: the engines can disagree, module docstring)."""
    data = _imbalanced().assign(g=lambda d: d["g"].astype(str))
    with pytest.warns(IdentifiabilityWarning, match=r"nor do the variances of \(1 \| g\): the pseudo-posterior"):
        bayesvm.bsvm("y ~ x + (1 | g)", data, positive="case", vb="meanfield")
    with pytest.warns(IdentifiabilityWarning) as plain:
        bayesvm.bsvm("y ~ x", data, positive="case")
    assert not any("nor do the variances" in str(w.message) for w in plain)


def _two_cells(n=800, seed=1):
    """A binary column sets the majority class (85% against 15% cases), and a continuous one carries a clear logistic
    association (log-odds 0.7 per SD) that moves no cell's majority."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 2, n)
    x = rng.standard_normal(n)
    eta = np.where(group == 1, 1.73, -1.73) + 0.7 * x
    y = np.where(eta + rng.logistic(size=n) > 0, "case", "control")
    return pd.DataFrame({"y": y, "group": group, "x": x})


def test_a_fit_holding_most_rows_at_a_margin_says_so_and_names_the_deciding_column():
    """Most rows at ``f = +/-1`` (the side set by ``group``): the coefficient of ``x`` is held near 0 although a
    logistic regression finds it (the module docstring's HMDA, Titanic and Womenlf)."""
    data = _two_cells()
    with pytest.warns(IdentifiabilityWarning, match=r"of the training rows \(.* of 800\) are held at a margin") as got:
        fit = bayesvm.bsvm("y ~ group + x", data, positive="case")
    assert sum("held at a margin" in str(w.message) for w in got) == 1
    assert "the side follows 'group'" in str(got[0].message)
    found = fit.diagnostics.frame().query("check == 'margin'")
    assert found["culprits"].tolist() == ["group"]
    text = str(fit.summary())
    assert "held at a margin" in text and "WARNING  classes" in text
    assert "prior-driven" not in text  # identified: a step, not a prior's shape
    assert abs(fit.fixef["x"]) < 0.1  # what the warning is about: x's effect is 0.7 on the log-odds


def test_a_fit_whose_coefficients_carry_the_association_has_no_margin_finding():
    """Balanced classes with a continuous predictor: most rows lie inside the margin or beyond it, not on it."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((600, 2))
    y = np.where(1.5 * x[:, 0] - x[:, 1] + rng.logistic(size=600) > 0, "a", "b")
    data = pd.DataFrame({"y": y, "x1": x[:, 0], "x2": x[:, 1]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        fit = bayesvm.bsvm("y ~ x1 + x2", data)
    assert "margin" not in fit.diagnostics.frame()["check"].tolist()
    quiet = bayesvm.bsvm("y ~ group + x", _two_cells(), checks=bayesvm.Checks(one_class="ignore"))
    assert "margin" not in quiet.diagnostics.frame()["check"].tolist()


def _rare_class(seed=12, n=300):
    rng = np.random.default_rng(seed)
    x, z = rng.standard_normal(n), rng.standard_normal(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(-2.0 + 1.5 * x + 0.4 * z))), "low", "normal")
    return pd.DataFrame({"y": pd.Categorical(y, categories=["normal", "low"]), "x": x, "z": z})


def test_decisions_that_rarely_call_the_smaller_class_get_a_note_with_the_balancing_threshold():
    data = _rare_class()
    fit = bayesvm.bsvm("y ~ x + z", data)
    share = float(np.mean(data["y"] == "low"))
    called = float(np.mean(fit.predict() == "low"))
    assert called < 0.5 * share  # the sign of f sides with the larger class
    (finding,) = [f for f in fit.diagnostics.findings if f.check == "class_balance"]
    assert finding.action == "note" and finding.culprits == ("low",)
    assert f"threshold={share:.2f}" in finding.message and "class_balance" not in str(fit.summary())
    assert f"threshold={share:.2f}" in str(fit.summary())
    balanced = fit.predict(kind="class", threshold=share)
    probability = fit.predict(kind="prob")
    assert np.array_equal(balanced == "low", probability >= share)
    assert np.mean(balanced == "low") > called
    quiet = bayesvm.bsvm("y ~ x + z", data, checks=bayesvm.Checks(one_class="ignore"))
    assert not [f for f in quiet.diagnostics.findings if f.check == "class_balance"]


def test_balanced_decisions_get_no_note(toenail):
    fit = bayesvm.bsvm("outcome ~ treatment * time", toenail)
    assert not [f for f in fit.diagnostics.findings if f.check == "class_balance"]


@pytest.mark.parametrize(
    ("kind", "threshold", "match"),
    [("prob", 0.3, "kind='class'"), ("class", 1.5, "strictly between 0 and 1"), ("class", True, "probability"),
     ("class", "0.3", "probability"), ("link", 0.5, "kind='class'")],
)  # fmt: skip
def test_a_threshold_outside_class_decisions_or_0_1_is_refused(kind, threshold, match):
    fit = bayesvm.bsvm("y ~ x + z", _rare_class(n=120), method="em", penalty=1.0)
    with pytest.raises(ValueError, match=match):
        fit.predict(kind=kind, threshold=threshold)
