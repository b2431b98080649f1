"""``bsvm(..., probes=s)``: the probe engine through the formula interface."""

from __future__ import annotations

import functools
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm import fitting
from bayesvm.engines import defaults
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
        mi = {"missing": "impute", "imputation": "mi", "imputations": 4, "seed": 1}
        plain = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, **mi)
        grouped = bayesvm.bsvm("y ~ x1 + x2 + x3 + (1 | g)", frame, **mi)
        asked = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, **mi, vb="meanfield")
    assert plain.result.engine == "accurate" and plain.vb_note is None
    assert "accurate VB (EP integrated over the variance parameters) on each of 4" in str(plain.summary())
    assert grouped.result.engine == "meanfield" and "random-effect or gp() terms" in grouped.vb_note
    assert "Mean-field VB by default here (multiple imputation with random-effect" in str(grouped.summary())
    assert asked.result.engine == "meanfield" and asked.vb_note is None
    assert defaults.default_mi_vb(plain.problem) == ("accurate", None)
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MI_MAX_ROWS", 100)  # (120 rows)
    engine, why = defaults.default_mi_vb(plain.problem)
    assert engine == "meanfield" and "more than 100 rows" in why


def test_multiple_imputation_default_falls_back_to_mean_field_where_ep_fails(monkeypatch):
    """If EP fails on a completed data set, the default says so and pools mean-field fits; ``vb="accurate"`` raises."""
    from bayesvm.engines.hyper_grid import AccurateFitError
    from bayesvm.engines.imputation import multiple
    from tests.engines.imputation.test_joint_model import simulate

    def failing(problem):
        raise AccurateFitError("accurate VB: expectation propagation converged at no node of the variance parameters")

    monkeypatch.setattr(multiple, "fit_accurate", failing)
    frame, _, _ = simulate(n=80, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, missing="impute", imputation="mi", imputations=3, seed=1)
    assert fit.result.engine == "meanfield" and fit.vb_note.endswith("on a completed data set; fell back")
    assert "Mean-field VB by default here (accurate VB: expectation propagation" in str(fit.summary())
    with pytest.raises(AccurateFitError):
        bayesvm.bsvm("y ~ x1 + x2 + x3", frame, missing="impute", imputations=3, seed=1, vb="accurate")


def _sparse_signal(p, n=300, seed=8):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = np.where(1.5 * X[:, 0] - X[:, 1] + rng.logistic(size=n) > 0, "a", "b")
    return pd.DataFrame(X, columns=[f"x{j}" for j in range(p)]).assign(y=y)


def test_laplace_zero_defaults_to_ep_with_few_slopes(monkeypatch):
    """``prior=LaplaceZero()`` with ``vb=None``: EP with a site per slope up to 12 penalised slopes (mean-field VB was
    off by up to 0.99 in an inclusion probability on public data, ``defaults.default_selection_vb``); mean-field
    beyond, and for spike-and-slab, with the summary saying why; a failed EP falls back to mean-field and says so."""
    from bayesvm.engines.hyper_grid import AccurateFitError
    from bayesvm.priors import LaplaceZero, SpikeSlab

    few, many = _sparse_signal(5), _sparse_signal(14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = bayesvm.bsvm("y ~ .", few, prior=LaplaceZero())
        wide = bayesvm.bsvm("y ~ .", many, prior=LaplaceZero())
        slab = bayesvm.bsvm("y ~ .", few, prior=SpikeSlab())
        asked = bayesvm.bsvm("y ~ .", few, prior=LaplaceZero(), vb="meanfield")
    assert "accurate VB: EP with a site per slope" in str(ep.summary()) and ep.vb_note is None
    # x2 is borderline: Gibbs 0.65 (4 x 1,000 draws), EP 0.58, mean-field 1.00
    assert 0.4 < ep.inclusion["p_include"]["x2"] < 0.85 and asked.inclusion["p_include"]["x2"] > 0.99
    assert "Alg. 3" in str(wide.summary())
    assert "Mean-field VB by default here (Laplace-zero selection over 14 slopes, more than 12" in str(wide.summary())
    assert "Carbonetto" in str(slab.summary()) and slab.vb_note is None
    assert "Alg. 3" in str(asked.summary()) and asked.vb_note is None

    def failing(problem, **options):
        raise AccurateFitError("accurate VB: expectation propagation did not converge for this selection model")

    from bayesvm.engines.selection import ep as selection_ep

    monkeypatch.setattr(selection_ep, "fit_selection_accurate", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fallen = bayesvm.bsvm("y ~ .", few, prior=LaplaceZero())
    assert "Alg. 3" in str(fallen.summary()) and fallen.vb_note.endswith("selection model; fell back")
    with pytest.raises(AccurateFitError):
        bayesvm.bsvm("y ~ .", few, prior=LaplaceZero(), vb="accurate")


def test_a_default_fit_does_not_load_scipy_stats():
    """A default fit, its summary and its probabilities run without ``scipy.stats`` (a second of imports on a fresh
    process): checks that need it import it where they run."""
    code = (
        "import sys, numpy as np, pandas as pd, bayesvm\n"
        "rng = np.random.default_rng(1); g = np.repeat(np.arange(40), 5); x = rng.normal(size=200)\n"
        "y = (x + rng.normal(size=40)[g] + rng.logistic(size=200) > 0).astype(int)\n"
        "fit = bayesvm.bsvm('y ~ x + (1 | g)', pd.DataFrame({'y': y, 'x': x, 'g': g}))\n"
        "str(fit.summary()); fit.predict(kind='prob'); fit.predict_interval()\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_fits_warnings_name_the_users_call():
    """Each warning a fit says (an identifiability finding before the engine, the PSIS check and the sampler's
    diagnostics after it) points at the line that called ``bsvm()``, not inside the package."""
    import warnings

    rng = np.random.default_rng(0)
    n = 120
    x, z = rng.standard_normal(n), rng.standard_normal(n)
    g = rng.integers(0, 8, n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(x - 0.5 * z + rng.normal(0, 1, 8)[g]))), "yes", "no")
    data = pd.DataFrame({"y": y, "x": x, "z": z, "g": [f"g{k}" for k in g]})
    separated = data.assign(y=np.where(g % 2 == 0, "yes", "no"))  # the levels alone separate the classes
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        bayesvm.bsvm("y ~ x + z + (1 | g)", data, vb="meanfield")  # PSIS k-hat above 0.7
        bayesvm.bsvm("y ~ x + z + (1 | g)", separated, vb="meanfield")  # separation by the random effects
        bayesvm.bsvm("y ~ x + z + (1 | g)", data, method="gibbs", draws=30, tune=30, chains=2, seed=1, progress=False)
    kinds = {type(w.message).__name__ for w in record}
    assert {"ApproximationWarning", "IdentifiabilityWarning", "ConvergenceWarning"} <= kinds
    assert {w.filename for w in record if w.category.__module__.startswith("bayesvm")} == {__file__}


def test_the_default_is_the_accurate_fit_on_more_rows_with_one_variance_hyperparameter(monkeypatch):
    """The accurate fit's cost is rows times its EP fits, about 40 for one variance hyperparameter and 150 for two, so
    the default keeps it on more rows where it integrates a single one (a random intercept with a fixed penalty)."""
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS", 50)  # (the 120 rows below: above both)
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER", 200)
    rng = np.random.default_rng(4)
    n = 120
    g = rng.integers(0, 12, n)
    x = rng.standard_normal(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(x + rng.normal(0, 1, 12)[g]))), "a", "b")
    data = pd.DataFrame({"y": y, "x": x, "g": [f"g{k}" for k in g]})
    checks = bayesvm.Checks(vb_check="ignore")
    one = bayesvm.bsvm("y ~ x + (1 | g)", data, penalty=None, checks=checks)
    assert one.posterior.kind == "mixture" and one.vb_note is None
    two = bayesvm.bsvm("y ~ x + (1 | g)", data, checks=checks)  # the learned penalty: two hyperparameters
    # (on 120 rows the slopes' posterior depends on the penalty: the fit with its variance integrated from the slopes
    # refuses, tests/engines/linear/test_penalty_from_slopes.py)
    assert two.posterior.kind == "variational"
    assert two.vb_note.startswith(
        "more than 50 rows with 2 variance hyperparameters, and there the slopes' posterior depends on the learned "
        "penalty (across its variance's range a mean leaves the line in 1/sigma_u^2 by"
    )
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER", 100)
    assert bayesvm.bsvm("y ~ x + (1 | g)", data, penalty=None, checks=checks).vb_note == "more than 100 rows"
