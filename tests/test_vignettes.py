"""Execute every ``python`` block of each vignette, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

VIGNETTES = Path(__file__).resolve().parents[1] / "bayesvm" / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text())


#: Replicate counts cut in the default run (CI keeps the suite under 15 minutes on 2 cores): each vignette's random
#: splits and long chains, as ``{text as written: text run}``.  Every key must occur exactly once, so an edit of the
#: vignette that drops one fails here.  ``--runslow`` runs the vignettes exactly as written; the findings asserted
#: below hold in both runs.
QUICK = {
    "toenail.md": {
        "for split in range(100):": "for split in range(4):",
        "for split in range(10):": "for split in range(2):",
        "draws=3000,": "draws=1000,",
        "        tune=1000,": "        tune=500,",
    },
    "pcvm.md": {"splits_=3)": "splits_=2)"},
    "spam.md": {"SPLITS = 10\n": "SPLITS = 2\n", "draws=1000, tune=1000, chains=2": "draws=200, tune=200, chains=2"},
    "cardiac.md": {
        "SPLITS = 10\n": "SPLITS = 2\n",
        "draws=1000, tune=1000, chains=2, cores=2, seed=7": "draws=500, tune=500, chains=2, cores=2, seed=7",
    },
}


def _blocks_to_run(name: str, full: bool) -> list[str]:
    text = (VIGNETTES / name).read_text()
    if not full:
        for written, run in QUICK.get(name, {}).items():
            assert text.count(written) == 1, f"{name}: {written!r} should occur once (tests/test_vignettes.py QUICK)"
            text = text.replace(written, run)
    return BLOCK.findall(text)


def _run(name: str, tmp_path: Path, monkeypatch, request) -> dict:
    """Execute the vignette's blocks in one namespace, in a temporary working directory (with the replicate counts
    of :data:`QUICK` unless ``--runslow``)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__vignette__"}
    for block in _blocks_to_run(name, request.config.getoption("--runslow")):
        exec(compile(block, name, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("name", ["toenail.md"])
def test_vignette_runs(name, tmp_path, monkeypatch, capsys, request):
    assert _blocks(VIGNETTES / name), f"{name} has no python blocks"
    namespace = _run(name, tmp_path, monkeypatch, request)
    out = capsys.readouterr().out
    assert "Random effects" in out and "lower bound" in out
    ber = namespace["ber"]
    vb, svm = (sum(v) / len(v) for v in ber.values())
    # the finding the vignette's text reports: random intercepts halve the balanced error
    assert vb < 0.2 and svm > 0.3, (vb, svm)
    assert (tmp_path / "toenail_lower_bound.png").stat().st_size > 1000
    assert (tmp_path / "toenail_ber.png").stat().st_size > 1000
    # the VB-versus-Gibbs findings the text states
    comparison = namespace["comparison"]
    assert (
        comparison.loc["sigma^2 patientID", ("Gibbs", "mean")] > 2 * comparison.loc["sigma^2 patientID", ("VB", "mean")]
    )
    ratios = comparison[("VB / Gibbs", "sd ratio")].dropna()
    assert (ratios < 0.6).all(), ratios
    improved = namespace["improved"]
    # EP's visit effect is 0.47 Gibbs SDs steeper (its Gaussian given the variance); the PSIS check's correction brings
    # every mean within 0.08 (measured), the bound leaves room for the shorter chains of the quick run
    assert (improved[("accurate - Gibbs", "in Gibbs sds")].dropna().abs() < 0.25).all()
    assert "visit" in namespace["accurate"].result.fixed_correction.names
    assert (improved[("accurate / Gibbs", "sd ratio")].dropna().sub(1).abs() < 0.1).all()
    accurate_variance, gibbs_variance = improved.loc["sigma^2 patientID", [("accurate VB", "mean"), ("Gibbs", "mean")]]
    assert abs(accurate_variance / gibbs_variance - 1) < 0.05  # EP's own node weights: 12% low
    verdicts = namespace["verdicts"]
    assert verdicts.loc["mean-field VB", "verdict"] == "unreliable" and verdicts.loc["accurate VB", "verdict"] == "good"
    assert namespace["checks"]["accurate VB"].moved is None
    corrected = namespace["corrected"]
    assert abs(corrected.iloc[-1]["mean"] / corrected.iloc[-1]["Gibbs mean"] - 1) < 0.1  # the patient variance
    three = namespace["three_table"]
    assert (three["mean BER"] < 0.2).all() and three["mean BER"].max() - three["mean BER"].min() < 0.02


@pytest.mark.slow  # 50 s even with QUICK's replicate counts (CI's 15 minutes); --runslow runs it as written
def test_spam_vignette_runs(tmp_path, monkeypatch, capsys, request):
    namespace = _run("spam.md", tmp_path, monkeypatch, request)
    out = capsys.readouterr().out
    assert "Selected (p_include > 0.5)" in out
    vb, gibbs = namespace["vb"], namespace["gibbs"]
    # the findings the text states: about half of the predictors, VB and Gibbs mostly agree,
    # and the sparse Bayesian SVM classifies at least as well as the tuned linear SVMs
    assert 20 <= len(vb.selected) <= 40 and 20 <= len(gibbs.selected) <= 40
    assert namespace["agree"] >= 0.75
    assert "cs" in gibbs.selected and "cs" not in vb.selected
    table = namespace["summary"]
    assert table.loc["VB Laplace-zero", "mean BER"] <= table.loc["LinearSVC L2", "mean BER"] + 0.005
    assert table.loc["VB Laplace-zero", "variables used"] < 40
    assert (tmp_path / "spam_inclusion.png").stat().st_size > 1000


def test_cardiac_vignette_runs(tmp_path, monkeypatch, capsys, request):
    namespace = _run("cardiac.md", tmp_path, monkeypatch, request)
    out = capsys.readouterr().out
    assert "Imputed: log_chol 1246 value(s)" in out
    # the findings the text states
    assert namespace["vb_seconds"] < 6.0 and namespace["joint_seconds"] < 2.0
    coefficients = namespace["coefficients"].loc["log_chol"]
    complete = coefficients["VB complete cases"]
    # the paper's joint model inflates the imputed coefficient (VB and Gibbs); multiple imputation much less
    assert coefficients["VB joint (Alg. 4)"] > 10 * abs(complete)
    assert coefficients["Gibbs joint (App. C)"] > complete + 1
    for name in ("VB MI", "Gibbs MI"):
        assert abs(coefficients[name] - complete) < 0.5 * abs(coefficients["VB joint (Alg. 4)"] - complete)
    ber = namespace["ber"]["mean BER"]
    assert ber["VB MI"] < ber["VB complete cases"] and ber["VB joint (Alg. 4)"] < ber["VB complete cases"]
    assert ber["LinearSVC complete cases"] < ber["VB MI"]
    assert (tmp_path / "cardiac_imputation.png").stat().st_size > 1000


@pytest.mark.once
@pytest.mark.slow  # (53 s: the gp() engines' agreement it states is tested in tests/results/test_gp_effect.py)
def test_clinical_gp_vignette_runs(tmp_path, monkeypatch, capsys, request):
    """The statements of the gp() vignette: accurate VB within 0.35 Gibbs SD with SDs within 15%,
    mean-field shrinking g with SDs under 0.8 of Gibbs', the age shape recovered, and the toenail finding."""
    namespace = _run("clinical_gp.md", tmp_path, monkeypatch, request)
    comparison = namespace["comparison"]
    accurate, meanfield = comparison["accurate VB"], comparison["mean-field VB"]
    assert accurate["gap (Gibbs sd)"].abs().max() < 0.35, accurate
    assert accurate["sd ratio"].sub(1).abs().max() < 0.15, accurate
    ages = [label for label in comparison.index if label.startswith("g(")]
    assert meanfield.loc[ages, "sd ratio"].max() < 0.8 and meanfield.loc[ages, "gap (Gibbs sd)"].abs().max() > 0.4
    assert namespace["shape_correlation"] > 0.95
    toe = namespace["toe_table"]
    assert toe["Gibbs mean"].iloc[0] > 1.0 and toe["Gibbs mean"].iloc[-1] < -1.0  # the falling time course
    assert toe["sd ratio"].sub(1).abs().max() < 0.15 and 0.35 < toe["accurate - Gibbs (sd)"].iloc[0] < 0.9
    assert -0.8 < toe["accurate - Gibbs (sd)"].iloc[2] < -0.25  # month 3, as the text says
    assert toe["accurate - Gibbs (sd)"].iloc[3:].abs().max() < 0.35
    assert (tmp_path / "clinical_gp_age.png").stat().st_size > 1000


@pytest.mark.slow  # (90 s: the PCVM engines' checks are in tests/engines/kernel/test_pcvm*.py)
def test_pcvm_vignette_runs(tmp_path, monkeypatch, capsys, request):
    namespace = _run("pcvm.md", tmp_path, monkeypatch, request)
    out = capsys.readouterr().out
    assert "expectation propagation" in out and "leave-one-out" in out
    # the findings the text states
    banana = namespace["banana_table"]
    assert (banana["test error"] < 0.14).all() and (banana["vectors"] < 40).all()
    small = namespace["small"].set_index(["set", "method"])
    for name in ("breast_cancer", "heart_pooled", "thyroid_pooled"):
        assert small.loc[(name, "PCVM Laplace"), "vectors"] < small.loc[(name, "SVC (grid)"), "vectors"] / 4
    assert (tmp_path / "pcvm_banana.png").stat().st_size > 1000


def test_kernel_vignette_runs(tmp_path, monkeypatch, capsys, request):
    namespace = _run("kernel.md", tmp_path, monkeypatch, request)
    out = capsys.readouterr().out
    assert "Kernel Bayesian SVM fit by VB with 100 inducing points" in out and "Stochastic VI" in out
    # the findings the text states
    assert namespace["error"] < 0.13 and namespace["linear_error"] > 0.35
    short = namespace["short"]
    ours = short[short["method"] == "bayesvm RBF (learned)"].set_index("set")
    assert (ours["error"] < 0.35).all() and len(short) >= 6
    # titanic's cells: the hinge fit puts the men's low-rate cells at the margin, where GPC follows the rate
    men = namespace["cells"].xs(0.52, level="x3")
    low = men[men["rate"] < 0.2]
    assert len(low) == 3 and np.allclose(low["f"], -1.0, atol=0.1)
    half = men[men["rate"] == 0.5].iloc[0]
    assert half["prob"] < 0.3 and half["gpc"] > half["prob"] + 0.1  # (0.22 against 0.42 as written)
    assert (tmp_path / "kernel_banana.png").stat().st_size > 1000


def test_data_fight_back_vignette_runs(tmp_path, monkeypatch, capsys, request):
    namespace = _run("data_fight_back.md", tmp_path, monkeypatch, request)
    out = capsys.readouterr().out
    # the findings the text reports, each naming its culprit
    assert "quasi-complete separation: 'b' separates the classes by itself" in out
    assert (
        "so the coefficients of '(Intercept)', 'b' are bounded" in out
        and "penalty=None gives every fixed effect" in out
    )
    low, median, high = namespace["quantiles"]  # the paper's IG(0.01, 0.01) kept
    assert 2.2 < low < 2.7 and 4.8 < median < 6.0 and 70 < high < 140  # exact: 2.37 / 5.27 / 101.6
    assert namespace["default_quantiles"][2] < 30 and "half-t prior on its SD" in out  # the default where separated
    assert "(1 | g): 200 levels on 200 rows" in out and "only 0 of 200 levels have both classes" in out
    assert "525 of its 600 levels have a single row" in out
    assert "'const' (constant (the intercept's alias)); 'x2' (2 x 'x1')" in out
    assert namespace["dropped"].fixef.index.tolist() == ["(Intercept)", "x1", "x3"]
    assert "holds numbers stored as text" in out and "too large to compute with" in out
