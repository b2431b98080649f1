"""Blocks that compose: a selection prior with random effects, through ``bsvm()``.

The engine-level exactness checks are in ``tests/engines/selection/test_selection_random.py``; here the whole route
runs on simulated data: VB and Gibbs agree, and every result method works on the combined fit.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.priors import LaplaceZero, Lasso, SpikeSlab


def _grouped_frame(seed: int = 2, n: int = 400, levels: int = 40) -> pd.DataFrame:
    """Two signals (a, b), two nulls (c, d) and a random intercept with SD 1."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(levels), n // levels)
    X = rng.standard_normal((n, 4))
    eta = 0.3 + 1.5 * X[:, 0] - 1.0 * X[:, 1] + rng.normal(0.0, 1.0, levels)[g]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")
    return pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(y=y, g=[f"g{j}" for j in g])


FORMULA = "y ~ a + b + c + d + (1 | g)"


@pytest.fixture(scope="module")
def laplace_zero_fits():
    data = _grouped_frame()
    prior = LaplaceZero(rho=0.5)
    gibbs = bayesvm.bsvm(FORMULA, data, prior=prior, method="gibbs", draws=1000, tune=500, seed=1, progress=False)
    vb = bayesvm.bsvm(FORMULA, data, prior=prior)
    return data, vb, gibbs


def test_selection_with_random_intercept_vb_agrees_with_gibbs(laplace_zero_fits):
    _, vb, gibbs = laplace_zero_fits
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    assert np.all(np.abs(vb.fixef - gibbs.fixef) < 0.5 * sd), pd.DataFrame({"vb": vb.fixef, "gibbs": gibbs.fixef})
    assert vb.selected == gibbs.selected == ["a", "b"]
    # the random intercept's variance is learned by both (truth 1; mean-field VB understates it, here by under 1%:
    # long Gibbs runs give 1.072 +- 0.004 against VB's 1.066, so the order is checked within 3 Monte Carlo SEs of
    # these 4 x 1,000 draws, 0.008)
    import arviz as az

    vb_var, gibbs_var = vb.variance_components[0].mean[0, 0], gibbs.variance_components[0].mean[0, 0]
    draws = gibbs.result.components[0][..., 0, 0]
    mcse = float(az.mcse(az.convert_to_dataset({"v": draws}))["v"])
    assert 0.3 < vb_var < gibbs_var + 3.0 * mcse and gibbs_var < 2.5


def _accurate_agrees_with_gibbs(accurate, gibbs, inclusion_gap: float = 0.1) -> None:
    """Issue 23's bar for the accurate fit: every coefficient within 0.35 Gibbs SD, the SDs within 20% (of the
    unpenalised and the selected coefficients: an excluded slope's SD comes from a few slab draws in a chain), each
    inclusion probability within ``inclusion_gap`` of Gibbs's, the random intercept's variance within 15%."""
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    table = pd.DataFrame({"accurate": accurate.fixef, "gibbs": gibbs.fixef, "gibbs sd": sd})
    assert np.all(np.abs(accurate.fixef - gibbs.fixef) < 0.35 * sd), table
    included = ~accurate.fixef.index.isin(accurate.inclusion.index) | accurate.fixef.index.isin(gibbs.selected)
    accurate_sd = np.sqrt(np.diag(accurate.fixef_cov))
    assert np.allclose(accurate_sd[included], sd[included], rtol=0.2), table.assign(accurate_sd=accurate_sd)
    gap = np.abs(accurate.inclusion["p_include"] - gibbs.inclusion["p_include"])
    assert not (gap > inclusion_gap).any(), pd.DataFrame({"accurate": accurate.inclusion["p_include"], "gap": gap})
    variance = accurate.variance_components[0].mean[0, 0]
    assert variance == pytest.approx(gibbs.variance_components[0].mean[0, 0], rel=0.15)
    assert accurate.converged and "accurate VB: EP with a site per slope" in str(accurate.summary())


def test_laplace_zero_with_random_intercept_accurate_vb_agrees_with_gibbs(laplace_zero_fits):
    """vb="accurate" with a selection prior (EP with a site per slope, integrated over the random intercept's
    variance and sigma_u): within 0.35 Gibbs SD (the accurate fit's bar), where mean-field VB is allowed 0.5."""
    data, vb, gibbs = laplace_zero_fits
    accurate = bayesvm.bsvm(FORMULA, data, prior=LaplaceZero(rho=0.5), vb="accurate")
    _accurate_agrees_with_gibbs(accurate, gibbs)
    assert accurate.selected == ["a", "b"]
    assert "E[sigma_u] =" in str(accurate.summary())
    with pytest.raises(bayesvm.BayesvmError, match="method='gibbs'"):
        accurate.check_vb()


@pytest.mark.slow  # a reference run against long chains (CI's 15 minutes); --runslow runs it
def test_spike_slab_with_random_intercept_vb_agrees_with_gibbs():
    """Spike-and-slab VB (Carbonetto & Stephens's factors) against Gibbs on the same data: the coefficients within
    0.5 Gibbs SD, the same selection, the random intercept's variance learned by both."""
    data = _grouped_frame()
    prior = SpikeSlab(pi=0.5)
    gibbs = bayesvm.bsvm(FORMULA, data, prior=prior, method="gibbs", draws=1000, tune=500, seed=1, progress=False)
    vb = bayesvm.bsvm(FORMULA, data, prior=prior)
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    assert np.all(np.abs(vb.fixef - gibbs.fixef) < 0.5 * sd), pd.DataFrame({"vb": vb.fixef, "gibbs": gibbs.fixef})
    assert vb.selected == gibbs.selected == ["a", "b"]
    assert 0.3 < vb.variance_components[0].mean[0, 0] < gibbs.variance_components[0].mean[0, 0] < 2.5
    text = str(vb.summary())
    assert "Carbonetto & Stephens" in text and "sigma_u" not in text
    accurate = bayesvm.bsvm(FORMULA, data, prior=prior, vb="accurate")
    _accurate_agrees_with_gibbs(accurate, gibbs)
    assert accurate.selected == ["a", "b"]


@pytest.mark.slow  # a reference run against long chains (CI's 15 minutes); --runslow runs it
def test_lasso_with_random_intercept_vb_agrees_with_gibbs():
    """Lasso VB (Park & Casella's scale mixture, nu learned) against Gibbs: coefficients within 0.5 Gibbs SD,
    ``E[nu]`` within 20%, no inclusion probabilities (the lasso has no mass at zero)."""
    data = _grouped_frame()
    gibbs = bayesvm.bsvm(FORMULA, data, prior=Lasso(), method="gibbs", draws=1000, tune=500, seed=1, progress=False)
    vb = bayesvm.bsvm(FORMULA, data, prior=Lasso())
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    assert np.all(np.abs(vb.fixef - gibbs.fixef) < 0.5 * sd), pd.DataFrame({"vb": vb.fixef, "gibbs": gibbs.fixef})
    assert vb.inclusion["p_include"].isna().all() and vb.selected == []
    assert vb.result.scale_law.mean_inverse == pytest.approx(float(np.mean(gibbs.result.scale)), rel=0.2)
    assert "E[nu] =" in str(vb.summary())
    accurate = bayesvm.bsvm(FORMULA, data, prior=Lasso(), vb="accurate")
    _accurate_agrees_with_gibbs(accurate, gibbs)
    assert accurate.inclusion["p_include"].isna().all() and accurate.selected == []
    assert accurate.result.slopes.scale == pytest.approx(float(np.mean(gibbs.result.scale)), rel=0.15)


def test_selection_with_random_intercept_results(laplace_zero_fits, tmp_path):
    data, vb, gibbs = laplace_zero_fits
    new_level = data.head(4).assign(g="unseen")
    for fit in (vb, gibbs):
        assert fit.ranef["g"].shape == (40, 1)
        fit.calibrate(folds=2)  # (the default 5 folds: tests/results/test_calibration.py)
        zeroed = fit.predict(new_level, kind="prob", new_levels="zero")
        integrated = fit.predict(new_level, kind="prob")
        assert np.all(np.isfinite(integrated)) and not np.allclose(zeroed, integrated)
        idata = fit.to_inference_data(draws=200)
        assert {"beta", "u_g", "sd_g"} <= set(idata.posterior.data_vars)
        assert "sd_g" in idata.posterior.data_vars and "Groups" in str(fit.summary())
        path = tmp_path / f"{fit.method}.bsvm"
        fit.save(path)
        np.testing.assert_allclose(
            bayesvm.load(path).predict(data.head(5), kind="link"), fit.predict(data.head(5), kind="link")
        )
    assert "include" in gibbs.to_inference_data(draws=200).posterior.data_vars


@pytest.mark.parametrize("prior", [SpikeSlab(), Lasso()], ids=["spike-slab", "lasso"])
def test_other_selection_priors_with_random_intercept_sample(prior):
    data = _grouped_frame(seed=4, n=200, levels=20)
    fit = bayesvm.bsvm(FORMULA, data, prior=prior, method="gibbs", draws=300, tune=300, seed=2, progress=False)
    assert fit.variance_components[0].mean[0, 0] > 0.1
    fit.calibrate(folds=2)
    assert np.all(np.isfinite(fit.predict(data.head(5), kind="prob")))


def test_lasso_em_with_random_intercept_increases_its_objective():
    data = _grouped_frame(seed=4, n=200, levels=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stopped at max_iter: the variance's EM is slow (as engines.linear.em's)
        fit = bayesvm.bsvm(FORMULA, data, prior=Lasso(), method="em", max_iter=400)
    objective = fit.result.objective
    stages = fit.result.stage
    same_stage = stages[1:] == stages[:-1]
    assert np.diff(objective)[same_stage].min() > -1e-8 * np.abs(objective).max()
    assert fit.result.covariances[0][0, 0] > 0.05


def test_svi_with_random_intercept_reaches_the_batch_vb_optimum():
    """SVI's stochastic natural gradient is that of the batch mean-field objective (random effects are global
    parameters in its one dense q), so it converges to the batch VB fit."""
    rng = np.random.default_rng(0)
    n, levels = 2000, 20
    g = rng.integers(0, levels, n)
    X = rng.standard_normal((n, 3))
    eta = 0.3 + 1.5 * X[:, 0] - 1.0 * X[:, 1] + rng.normal(0, 1, levels)[g]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")
    data = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y, g=[f"g{j}" for j in g])
    formula = "y ~ a + b + c + (1 | g)"
    batch = bayesvm.bsvm(formula, data, vb="meanfield")
    svi = bayesvm.bsvm(formula, data, method="svi", seed=1, batch_size=500)
    assert svi.result.converged
    np.testing.assert_allclose(svi.fixef, batch.fixef, atol=0.03)
    np.testing.assert_allclose(svi.variance_components[0].mean, batch.variance_components[0].mean, rtol=0.1)
    np.testing.assert_allclose(svi.ranef["g"], batch.ranef["g"], atol=0.08)


def test_svi_refuses_more_random_effects_than_its_dense_q_holds(monkeypatch):
    data = _grouped_frame(seed=1, n=400, levels=50)
    from bayesvm import model

    monkeypatch.setattr(model, "MAX_DENSE_COLUMNS", 40)  # (all_dense, shared by SVI and out-of-core)
    with pytest.raises(bayesvm.BayesvmError, match="one dense q over all 55 coefficients"):
        bayesvm.bsvm(FORMULA, data, method="svi")


@pytest.mark.slow  # a reference run against long chains (CI's 15 minutes); --runslow runs it
def test_accurate_vb_with_multiple_imputation_agrees_with_gibbs():
    """``vb="accurate"`` on each completed data set, pooled, targets the same cut posterior as the multiple-
    imputation Gibbs sampler: means within 0.35 Gibbs SD (the accurate fit's bar)."""
    from tests.engines.imputation.test_joint_model import simulate

    frame, _, _ = simulate(n=200, seed=3)
    formula = "y ~ x1 + x2 + x3"  # (with random effects each accurate fit costs more; the matrix below runs one)
    accurate = bayesvm.bsvm(formula, frame, missing="impute", vb="accurate", seed=2)
    gibbs = bayesvm.bsvm(formula, frame, missing="impute", method="gibbs", draws=3000, tune=500, chains=2, seed=4,
                         progress=False)  # fmt: skip
    assert accurate.result.engine == "accurate" and accurate.converged
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    gap = (accurate.fixef - gibbs.fixef).abs() / sd  # (20 imputations: Monte Carlo error about 0.1 SD)
    assert gap.max() < 0.35, gap
    ratio = np.sqrt(np.diag(accurate.fixef_cov)) / sd
    assert np.all((ratio > 0.85) & (ratio < 1.2)), ratio  # the accurate fit's SDs, unlike mean-field's
    text = str(accurate.summary())
    assert "accurate VB (EP integrated over the variance parameters) on each of 20 completed data sets" in text
    assert "understates posterior" not in text


@pytest.mark.slow  # a reference run against long chains (CI's 15 minutes); --runslow runs it
def test_accurate_selection_with_multiple_imputation_agrees_with_gibbs():
    """A selection prior with ``vb="accurate"`` and ``missing="impute"``: EP with a site per slope on each completed
    data set, the draws pooled (each slope carried to its tilted distribution, so excluded slopes are exact zeros
    and the indicators are read from them), against the selection sampler with its imputation step (the same cut posterior): means within 0.35 Gibbs SD,
    inclusion probabilities within 0.1."""
    from tests.engines.imputation.test_joint_model import simulate

    frame, _, _ = simulate(n=200, seed=3)
    frame = frame.assign(x4=np.random.default_rng(8).standard_normal(len(frame)))  # a null predictor
    formula, prior = "y ~ x1 + x2 + x3 + x4", SpikeSlab(pi=0.3, nu=3.0)
    accurate = bayesvm.bsvm(formula, frame, prior=prior, missing="impute", vb="accurate", seed=2)
    gibbs = bayesvm.bsvm(formula, frame, prior=prior, missing="impute", method="gibbs", draws=1000, tune=300,
                         chains=2, seed=4, progress=False)  # fmt: skip
    assert accurate.result.engine == "accurate" and accurate.converged
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    gap = (accurate.fixef - gibbs.fixef).abs() / sd
    assert gap.max() < 0.35, gap
    inclusion = (accurate.inclusion["p_include"] - gibbs.inclusion["p_include"]).abs()
    assert inclusion.max() < 0.1, pd.DataFrame({"accurate": accurate.inclusion["p_include"], "gap": inclusion})
    text = str(accurate.summary())
    assert "accurate VB (EP with a site per slope" in text and "confirm with method='gibbs'" in text


def test_svi_with_multiple_imputation_matches_mean_field_on_the_same_imputations():
    """``method="svi"`` with ``missing="impute"``: one SVI fit per completed data set, pooled; the completed data
    sets are those of the mean-field fit with the same seed, and SVI reaches each batch optimum."""
    from tests.engines.imputation.test_joint_model import simulate

    frame, _, _ = simulate(n=1000, seed=5)
    formula = "y ~ x1 + x2 + x3"
    batch = bayesvm.bsvm(formula, frame, missing="impute", imputation="mi", imputations=4, seed=3)
    svi = bayesvm.bsvm(formula, frame, method="svi", missing="impute", imputations=4, seed=3, batch_size=250)
    assert svi.result.engine == "svi" and len(svi.result.fits) == 4 and svi.converged
    np.testing.assert_allclose(svi.fixef, batch.fixef, atol=0.05)
    assert "stochastic VI (Wenzel et al. 2017, section 4.5) on each of 4 completed data sets" in str(svi.summary())


# ----- the combination matrix ------------------------------------------------------------------------------
PRIORS = {"penalty": None, "laplace-zero": LaplaceZero(rho=0.5), "spike-slab": SpikeSlab(), "lasso": Lasso()}
ENGINES = {
    "vb": {"method": "vb", "vb": "meanfield"},
    "accurate": {"method": "vb", "vb": "accurate", "penalty": 0.5},  # (one variance parameter fewer: faster)
    "gibbs": {"method": "gibbs", "draws": 60, "tune": 60, "chains": 2},
    "em": {"method": "em", "max_iter": 300},
    "svi": {"method": "svi", "max_iter": 300},
}
#: Cells that cross-fit their calibration map (2 fold refits): every cell of the penalty, and the selection priors'
#: linear cells of these engines; the others learn the map from held-out rows (a fold refit is the cell's own fit
#: on fewer rows, and the selection priors' gp() and accurate cells are the slowest).  The selection priors' Gibbs
#: fits with random effects cross-fit in test_selection_with_random_intercept_results and
#: test_other_selection_priors_with_random_intercept_sample.
CROSS_FITTED = ("vb",)
#: Refusals with a mathematical reason, and the words that give it.
MATH = {
    "point mass": "a mode does not exist under a point mass at zero",
    "no uncertainty to pool": "an EM mode has nothing to pool over imputations",
    "the kernel's variance is the penalty": "a kernel fit has no slopes to penalise",
    "with no additive blocks beside it": "kernel= is one GP over the whole fixed part: use gp() terms",
    "a GP is nonlinear in its inputs": "the conditional of a missing GP input is not Gaussian",
}


def _expected(prior: str, random: bool, missing: bool, nonlinear: str, engine: str) -> str:
    """``"fit"`` or ``"math"`` (refused for a mathematical reason): no cell is left unbuilt.
    A ``gp()`` term is one more variance component on dense columns: it composes exactly as the linear model."""
    if nonlinear == "kernel":  # Gibbs, EM and accurate VB on the whitened features (engines/kernel/features.py)
        if prior != "penalty" or random or missing:  # write the GP as a gp() term (or impute linearly)
            return "math"
        return "fit"
    if engine == "em" and prior in ("laplace-zero", "spike-slab"):
        return "math"
    if engine == "em" and missing:
        return "math"
    return "fit"


def _matrix_frame(missing: bool) -> pd.DataFrame:
    data = _grouped_frame(seed=6, n=120, levels=12)
    if missing:
        data.loc[np.random.default_rng(1).random(len(data)) < 0.15, "b"] = np.nan
    return data


CELLS = [
    (p, r, m, k, e)
    for p in PRIORS
    for r in (False, True)
    for m in (False, True)
    for k in ("linear", "gp", "kernel")
    for e in ENGINES
    if not (k == "kernel" and (r or m) and p != "penalty")  # (the prior refusal comes first: kernel-only cells)
    and not (k == "gp" and not r)  # (a gp() term alone is the random-intercept cells' path without the levels)
]


def _cell(p, r, m, k, e):
    """Accurate VB of a gp() term with random effects integrates EP over three variance parameters: 25-65 s on
    this data, run outside CI (``--runslow``); so do a selection prior's accurate fits with random effects and
    imputation (EP over the variance and the prior's scale on each of 3 completed data sets, and again in each of
    the 2 fold refits: 7-15 s each; the same cells without random effects, and the accurate selection fit pooled
    over imputations against Gibbs, run in CI)."""
    slow = k == "gp" and r and e == "accurate" or (p != "penalty" and r and m and e == "accurate")
    marks = [pytest.mark.slow] if slow else []
    cell_id = f"{p}-{'re' if r else 'fixed'}-{'impute' if m else 'complete'}-{k}-{e}"
    return pytest.param(p, r, m, k, e, marks=marks, id=cell_id)


@pytest.mark.once
@pytest.mark.parametrize("prior,random,missing,nonlinear,engine", [_cell(*cell) for cell in CELLS])
def test_combination_matrix(prior, random, missing, nonlinear, engine):
    """Every (block combination x engine) cell fits on small simulated data or is refused with a mathematical
    reason (``MATH``), as ``_expected`` says."""
    expected = _expected(prior, random, missing, nonlinear, engine)
    formula = "y ~ a + b + " + ("gp(c, k=8)" if nonlinear == "gp" else "c") + (" + (1 | g)" if random else "")
    options = dict(ENGINES[engine], seed=1, progress=False)
    if PRIORS[prior] is not None:  # (a selection prior replaces the penalty)
        options["prior"] = PRIORS[prior]
        options.pop("penalty", None)
    if missing:
        options.update(missing="impute", imputations=3)
    if nonlinear == "kernel":  # (the kernel's variance is the penalty)
        options.pop("penalty", None)
        options.update(kernel=bayesvm.kernels.RBF(), inducing=20)
    data = _matrix_frame(missing)
    if expected == "fit":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # short chains and capped iterations
            fit = bayesvm.bsvm(formula, data, **options)
        cross_fitted = prior == "penalty" or (engine in CROSS_FITTED and nonlinear == "linear")
        if cross_fitted:  # the fold refits (2 of them: the suite's time)
            assert fit.calibrate(folds=2).n == len(data)
        else:  # the map from held-out rows (the rows' own, enough to run the route)
            assert fit.calibrate(newdata=data).n == len(data)
        rows = data.head(6).assign(b=data["b"].fillna(0.0).head(6))
        if random:  # a level the fit never saw: its random effect integrated over the fitted distribution
            rows["g"] = ["unseen"] * 3 + rows["g"].tolist()[3:]
        probabilities = fit.predict(rows, kind="prob")
        assert np.all(np.isfinite(probabilities)) and np.all((probabilities > 0) & (probabilities < 1))
        assert "Bayesian" in str(fit.summary())
        return
    with pytest.raises(bayesvm.BayesvmError) as refused:
        bayesvm.bsvm(formula, data, **options)
    message = str(refused.value)
    assert expected == "math" and any(reason in message for reason in MATH), message
