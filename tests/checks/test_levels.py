"""Random-effect identifiability: lme4's level checks and separation by the random effects."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.checks import Checks, IdentifiabilityError, detect_separation
from bayesvm.errors import IdentifiabilityWarning


def _groups(n_levels, per_level, seed=0):
    rng = np.random.default_rng(seed)
    n = n_levels * per_level
    data = pd.DataFrame({"x1": rng.normal(size=n), "g": np.repeat(np.arange(n_levels), per_level)})
    data["y"] = (2 * data.x1 + rng.normal(size=n) > 0).astype(int)
    return data


def _identifiability(caught):
    return [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)]


@pytest.mark.parametrize("n_levels", [200, 2000])
def test_one_row_per_level_is_refused_naming_the_term(n_levels):
    with pytest.raises(IdentifiabilityError, match=rf"\(1 \| g\): {n_levels:,} levels on {n_levels:,} rows"):
        bayesvm.bsvm("y ~ x1 + (1 | g)", _groups(n_levels, 1))


def test_one_row_per_level_when_allowed_says_the_random_effects_separate_the_classes():
    data = _groups(200, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm(
            "y ~ x1 + (1 | g)", data, vb="meanfield", checks=Checks(nobs_vs_nlev="warn", nobs_vs_nre="warn")
        )
    messages = _identifiability(caught)
    assert any("200 levels on 200 rows" in m for m in messages)
    assert any(
        "random effects of 'g' alone separate the classes" in m and "determined by its prior" in m for m in messages
    )
    assert "no verdict" in str(fit.summary())


def test_mostly_single_row_levels_are_warned_about():
    rng = np.random.default_rng(4)
    ids = np.concatenate([np.arange(600), rng.integers(0, 600, 80)])  # 600 ids on 680 rows, as in the issue
    data = pd.DataFrame({"x1": rng.normal(size=ids.size), "id": ids})
    data["y"] = (data.x1 + rng.normal(size=ids.size) > 0).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x1 + (1 | id)", data, vb="meanfield")
    messages = _identifiability(caught)
    assert len(messages) == 1 and "of its 600 levels have a single row" in messages[0]
    assert any("random effects of 'id' alone separate the classes" in f.message for f in fit.diagnostics.findings)


def test_few_levels_and_too_many_random_effects():
    data = _groups(3, 30)
    with pytest.warns(IdentifiabilityWarning, match="'g' has only 3 levels"):
        bayesvm.bsvm("y ~ x1 + (1 | g)", data, vb="meanfield")
    with pytest.raises(IdentifiabilityError, match="'g' has 1 level"):
        bayesvm.bsvm("y ~ x1 + (1 | g)", data.assign(g=0))
    slopes = _groups(40, 2)
    with pytest.raises(IdentifiabilityError, match="80 coefficients for 80 rows"):
        bayesvm.bsvm("y ~ x1 + (1 + x1 | g)", slopes)


def test_toenail_gets_a_note_not_a_warning(toenail):
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail, vb="meanfield")
    (finding,) = fit.diagnostics.findings
    assert finding.action == "note" and finding.check == "re_separation"
    assert "1,141 of 1,908 rows" in finding.message and "115 of 294 levels have both classes" in finding.message


def test_singular_variance_components_are_named():
    from bayesvm.checks import singular_findings
    from bayesvm.results.fit import VarianceEstimate

    zero = VarianceEstimate("g", ("(Intercept)",), np.array([[1e-10]]), "(1 | g)")
    perfect = VarianceEstimate("h", ("(Intercept)", "x"), np.array([[1.0, 2.0], [2.0, 4.0 + 1e-9]]), "(1 + x | h)")
    fine = VarianceEstimate("k", ("(Intercept)", "x"), np.array([[1.0, 0.3], [0.3, 2.0]]), "(1 + x | k)")
    penalty = VarianceEstimate("penalty", ("slopes",), np.array([[0.0]]), "penalty")
    found = singular_findings([zero, perfect, fine, penalty])
    assert [f.culprits for f in found] == [("g",), ("h",)]
    assert "the SD of '(Intercept)' is 1e-05" in found[0].message
    assert "the correlation of 'x' and '(Intercept)' is +1.0000" in found[1].message


def test_only_the_factor_with_one_class_levels_is_blamed_for_random_effect_separation(monkeypatch):
    # 'site' (3 levels, every one with both classes) does not separate anything: its few levels are the
    # nlevels check's finding; 'plant' has 6 of 30 levels whose rows are all one class.  The programme's
    # separating direction is one vertex of many: here it is made to move 'site' too (as HiGHS's did on
    # lme4's Arabidopsis, nested factors), which must not make 'site' a culprit
    from bayesvm.checks import levels

    def with_site(C, y, names, **kwargs):
        result = detect_separation(C, y, names, **kwargs)
        site = tuple(name for name in names if "|site[" in name)
        return dataclasses.replace(result, columns=result.columns + site)

    monkeypatch.setattr(levels, "detect_separation", with_site)
    rng = np.random.default_rng(8)
    plant = np.repeat(np.arange(30), 12)
    data = pd.DataFrame({"x1": rng.normal(size=plant.size), "plant": plant, "site": plant // 10})
    data["y"] = (data.x1 + rng.normal(size=plant.size) > 0).astype(int)
    data.loc[data.plant < 6, "y"] = 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x1 + (1 | site) + (1 | plant)", data, vb="meanfield")
    messages = _identifiability(caught)
    assert len(messages) == 1 and "'site' has only 3 levels" in messages[0]
    (finding,) = [f for f in fit.diagnostics.findings if f.check == "re_separation"]
    assert finding.action == "note" and finding.culprits == ("plant",)
    assert "random effects of 'plant' alone separate the classes for 72 of 360 rows" in finding.message
    assert "'site'" not in finding.message and "24 of 30 levels have both classes" in finding.message


def test_rows_isolated_only_by_a_level_with_a_fixed_effect_are_called_cells_not_one_class_levels():
    # IBM attrition's shape: every department has both classes, but the managers of department 0 are all one
    # class, and its other rows hold a job found only there ('clerk'): u_0 = -a with clerk = +a isolates them
    rng = np.random.default_rng(9)
    n = 600
    dept = rng.integers(0, 6, n)
    manager = rng.random(n) < 0.15
    data = pd.DataFrame({"x1": rng.normal(size=n), "dept": dept, "manager": manager.astype(int)})
    data["y"] = (data.x1 + rng.normal(size=n) > 0).astype(int)
    data.loc[(dept == 0) & manager, "y"] = 0
    data["clerk"] = ((dept == 0) & ~manager).astype(int)
    cell = int(((dept == 0) & manager).sum())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x1 + manager + clerk + (1 | dept)", data, vb="meanfield")
    assert not _identifiability(caught)
    (finding,) = [f for f in fit.diagnostics.findings if f.check == "re_separation"]
    assert finding.action == "note" and finding.culprits == ("dept",)
    assert f"'dept' together with the fixed effects separate the classes for {cell} of {n} rows" in finding.message
    assert "every level has both classes" in finding.message and "determined by" not in finding.message


def test_a_random_slope_note_counts_the_levels_with_both_classes_per_term():
    """With ``(month | subject)`` a level with both classes can still be separated by its own line: the note says how
    many levels have both classes, and how many of them inform the variances."""
    import warnings

    rng = np.random.default_rng(1)
    levels, visits = 44, 5
    g = np.repeat(np.arange(levels), visits)
    month = np.tile(np.arange(visits), levels).astype(float)
    u, s = rng.normal(0, 3, levels), rng.normal(0, 1, levels)
    y = (rng.random(g.size) < 1 / (1 + np.exp(-(u[g] + (0.5 + s[g]) * (month - 2))))).astype(int)
    data = pd.DataFrame({"y": y, "month": month, "subject": g.astype(str)})
    both = int(sum(0 < data.y[g == j].mean() < 1 for j in range(levels)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ month + (month | subject)", data, vb="meanfield")
    notes = [m for m in fit.diagnostics.frame().message if "separate the classes" in m]
    assert notes and f"({both} have both classes, but their own effects, with the slope of 'month'" in notes[0]
    assert notes[0].endswith("inform the variances")


def test_levels_of_one_class_from_the_counts_alone_note_or_warn_by_the_informative_levels():
    """(the out-of-core form of the random-effect separation check, on the level counts an in-memory design gives)"""
    from bayesvm.checks.levels import MIN_INFORMATIVE_LEVELS, one_class_levels
    from bayesvm.formula import build_design, parse_formula

    data = _groups(12, 20, seed=3)
    data.loc[data.g < 4, "y"] = 1  # four levels of one class; eight keep both
    design = build_design(parse_formula("y ~ x1 + (1 | g)"), data)
    rows, positive = design.level_counts(design.re_terms[0])
    assert rows.tolist() == [20] * 12 and positive[:4].tolist() == [20] * 4
    (finding,) = one_class_levels(design, Checks())
    assert (
        finding.action == "note" and "4 of the 12 levels of 'g' hold one class only (80 of 240 rows)" in finding.message
    )
    data.loc[data.g >= 4 + MIN_INFORMATIVE_LEVELS - 1, "y"] = 0  # leaves MIN_INFORMATIVE_LEVELS - 1 with both
    design = build_design(parse_formula("y ~ x1 + (1 | g)"), data)
    (finding,) = one_class_levels(design, Checks())
    assert finding.action == "warn" and "determined by its prior" in finding.message
    assert one_class_levels(design, Checks(random_separation="ignore")) == []


@pytest.mark.parametrize("formula", ["y ~ x + C(g) + (1 | g)", "y ~ x * C(g) + (1 + x | g)"])
def test_a_term_the_fixed_effects_can_express_is_refused_and_warned_about_on_request(formula):
    """A grouping factor that is also a fixed-effect factor: each level's random effect enters only through its sum
    with the fixed effects, so the term's variance is its prior's (lme4 fits it without a word)."""
    rng = np.random.default_rng(1)
    g = rng.integers(0, 12, 240)
    x = rng.standard_normal(240)
    data = pd.DataFrame({"y": rng.random(240) < 1 / (1 + np.exp(-x)), "x": x, "g": g})
    with pytest.raises(IdentifiabilityError, match="the fixed effects can express every one of its effects"):
        bayesvm.bsvm(formula, data, vb="meanfield")
    with pytest.warns(IdentifiabilityWarning, match="remove 'g' from the fixed part"):
        bayesvm.bsvm(formula, data, vb="meanfield", checks=Checks(nobs_vs_nlev="warn", vb_check="ignore"))


@pytest.mark.parametrize("formula", ["y ~ x + C(h) + (1 | g)", "y ~ x + C(g) + (0 + x | g)", "y ~ x + g + (1 | g)"])
def test_a_term_outside_the_fixed_effects_span_is_not_named(formula):
    rng = np.random.default_rng(1)
    g = rng.integers(0, 12, 240)
    x = rng.standard_normal(240)
    data = pd.DataFrame({"y": rng.random(240) < 1 / (1 + np.exp(-x)), "x": x, "g": g, "h": rng.integers(0, 12, 240)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bayesvm.bsvm(formula, data, vb="meanfield", checks=Checks(vb_check="ignore"))
    assert not any("can express" in str(w.message) for w in caught)


def test_the_normal_equations_residual_share_equals_least_squares_even_with_aliased_columns():
    """Out of core the span check reads ``X'X``, ``X'P`` and ``P'P`` summed over partitions: the residual share they
    give equals the least-squares one, with an aliased column kept (streamed designs keep them) and a zero probe."""
    from bayesvm.checks.levels import gram_residual_shares, span_products

    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 6)) * [1, 1e3, 1e-3, 1, 1, 1]
    X[:, 5] = X[:, 0] - 2 * X[:, 3]  # aliased
    P = np.column_stack([rng.standard_normal(300), X @ rng.standard_normal(6), np.zeros(300)])
    halves = [span_products(X[:150], P[:150]), span_products(X[150:], P[150:])]
    summed = tuple(a + b for a, b in zip(*halves))
    residual = P - X @ np.linalg.lstsq(X, P, rcond=None)[0]
    expected = np.sum(residual**2, axis=0)[:2] / np.sum(P**2, axis=0)[:2]
    shares = gram_residual_shares(*summed)
    np.testing.assert_allclose(shares[:2], expected, atol=1e-12)
    assert 0.9 < shares[0] < 1 and shares[1] < 1e-14 and shares[2] == 1.0
