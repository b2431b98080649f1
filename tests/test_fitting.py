"""``bsvm(..., probes=s)``: the probe engine through the formula interface."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm import fitting
from bayesvm.errors import BayesvmError
from bayesvm.model import build_model


def _crossed(n: int = 3000, levels: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, levels, n), rng.integers(0, levels, n)
    x = rng.standard_normal(n)
    eta = 0.3 + x + rng.normal(0, 1, levels)[a] + rng.normal(0, 0.7, levels)[b]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")
    return pd.DataFrame({"y": y, "x": x, "a": [f"a{k}" for k in a], "b": [f"b{k}" for k in b]})


@pytest.fixture
def sparse_path(monkeypatch):
    """Every random-effect model on the sparse path (as with thousands of levels), at test size."""
    monkeypatch.setattr(fitting, "build_model", functools.partial(build_model, max_dense_columns=0))


def test_probe_fit_agrees_with_the_exact_fit_and_says_so(sparse_path):
    data = _crossed()
    before = data.copy()
    exact = bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data)
    probe = bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data, probes=48, seed=3)
    pd.testing.assert_frame_equal(data, before)
    assert exact.problem.probes is None and probe.problem.probes == 48 and probe.problem.probe_seed == 3
    fixed_p, fixed_e = probe.summary().fixed, exact.summary().fixed
    np.testing.assert_allclose(fixed_p["mean"], fixed_e["mean"], rtol=1e-3)
    np.testing.assert_allclose(fixed_p["sd"], fixed_e["sd"], rtol=1e-2)
    text = str(probe.summary())
    assert "Variances from 48 Rao-Blackwellised probes (fixed effects exact)" in text
    # predictions for new level combinations, with the estimated variance of f
    new = pd.DataFrame({"x": [0.0, 1.0], "a": ["a1", "a2"], "b": ["b7", "b99"]})
    np.testing.assert_allclose(probe.predict(new, kind="pseudo"), exact.predict(new, kind="pseudo"), atol=5e-3)
    interval_p, interval_e = probe.predict_interval(new), exact.predict_interval(new)
    np.testing.assert_allclose(interval_p["sd"], interval_e["sd"], rtol=0.05)
    # the same seed gives the same fit
    again = bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data, probes=48, seed=3)
    np.testing.assert_array_equal(again.result.theta.variance(), probe.result.theta.variance())


@pytest.mark.parametrize("probes", [1, 2.5, "32", True])
def test_probes_must_be_an_integer_of_at_least_two(probes, sparse_path):
    with pytest.raises(BayesvmError, match="probes must be an integer"):
        bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", _crossed(300, 20), probes=probes)


@pytest.mark.parametrize("options", [{"method": "gibbs"}, {"method": "em"}, {"vb": "accurate"}])
def test_probes_only_with_mean_field_vb(options, sparse_path):
    with pytest.raises(BayesvmError, match="probes apply to mean-field VB"):
        bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", _crossed(300, 20), probes=16, **options)


def test_probes_need_the_sparse_path():
    with pytest.raises(BayesvmError, match="sparse path"):
        bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", _crossed(300, 20), probes=16)


def test_summary_suggests_probes_for_a_large_dense_complement(sparse_path, monkeypatch):
    from bayesvm.results import summary

    data = _crossed(1500, 60)
    assert "probes=32 fits this model" not in str(bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data).summary())
    monkeypatch.setattr(summary, "PROBES_HINT_COLUMNS", 50)
    text = str(bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data).summary())
    assert "factorised a dense 62-column complement; probes=32 fits this model" in text


def test_warns_before_an_exact_fit_that_would_factorise_a_huge_dense_complement(sparse_path, monkeypatch):
    """Crossed factors whose dense complement is too large for the dense factorisation fall back to the general
    sparse one (hours at scale): the fit says so first and names ``probes``; nested factors do not warn."""
    from bayesvm.linalg import schur as sparse_schur

    monkeypatch.setattr(sparse_schur, "MAX_SCHUR_COLUMNS", 50)
    data = _crossed(1500, 60)
    with pytest.warns(bayesvm.ScaleWarning, match=r"dense 62-column complement.*probes=32"):
        bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bayesvm.ScaleWarning)
        bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data, probes=16)  # the probe engine needs no warning
        nested = bayesvm.Checks(nobs_vs_nre="ignore")  # 3,584 random effects on 3,000 rows: only the path matters
        bayesvm.bsvm("y ~ x + (1 | a/b)", _crossed(3000, 600), checks=nested)  # nested: the complement stays sparse


def test_multiple_imputation_defaults_to_the_accurate_fit_without_random_effects(monkeypatch):
    """``missing="impute"`` with ``vb=None``: the accurate fit on each completed data set where only the penalty
    has a variance (mean-field's intervals would be too narrow, tests/test_combinations.py); mean-field with a
    random-effect term, and the summary says why."""
    from tests.engines.imputation.test_joint_model import simulate

    frame, _, _ = simulate(n=120, seed=5, groups=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, missing="impute", imputations=4, seed=1)
        grouped = bayesvm.bsvm("y ~ x1 + x2 + x3 + (1 | g)", frame, missing="impute", imputations=4, seed=1)
        asked = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, missing="impute", imputations=4, seed=1, vb="meanfield")
    assert plain.result.engine == "accurate" and plain.vb_note is None
    assert "accurate VB (EP integrated over the variance parameters) on each of 4" in str(plain.summary())
    assert grouped.result.engine == "meanfield" and "random-effect or gp() terms" in grouped.vb_note
    assert "Mean-field VB by default here (multiple imputation with random-effect" in str(grouped.summary())
    assert asked.result.engine == "meanfield" and asked.vb_note is None
    assert fitting.default_mi_vb(plain.problem) == ("accurate", None)
    monkeypatch.setattr(fitting, "AUTO_ACCURATE_MI_MAX_ROWS", 100)  # (120 rows)
    engine, why = fitting.default_mi_vb(plain.problem)
    assert engine == "meanfield" and "more than 100 rows" in why


def test_multiple_imputation_default_falls_back_to_mean_field_where_ep_fails(monkeypatch):
    """If EP fails on a completed data set, the default says so and pools mean-field fits; ``vb="accurate"`` raises."""
    from bayesvm.engines.imputation import multiple
    from bayesvm.engines.linear.ep import AccurateFitError
    from tests.engines.imputation.test_joint_model import simulate

    def failing(problem):
        raise AccurateFitError("accurate VB: expectation propagation converged at no node of the variance parameters")

    monkeypatch.setattr(multiple, "fit_accurate", failing)
    frame, _, _ = simulate(n=80, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, missing="impute", imputations=3, seed=1)
    assert fit.result.engine == "meanfield" and fit.vb_note.endswith("on a completed data set; fell back")
    assert "Mean-field VB by default here (accurate VB: expectation propagation" in str(fit.summary())
    with pytest.raises(AccurateFitError):
        bayesvm.bsvm("y ~ x1 + x2 + x3", frame, missing="impute", imputations=3, seed=1, vb="accurate")
