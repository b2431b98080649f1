"""A ``gp()`` term with a random intercept through every engine: the fitted function agrees across
VB, accurate VB, SVI and Gibbs, and every result method handles the term."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import log_expit

import bayesvm
from bayesvm.errors import BayesvmError, DataError

pytestmark = pytest.mark.once  # (the Python >= 3.12 run keeps the version-dependent export and storage tests)

FORMULA = "y ~ x + gp(age, k=12) + (1 | g)"
GRID = pd.DataFrame({"age": np.linspace(25.0, 75.0, 6)})


def _clinical(n: int = 400, levels: int = 40, seed: int = 1) -> pd.DataFrame:
    """A nonlinear age effect, a linear one and a random intercept (SD 0.8) on the logit scale."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, levels, n)
    age, x = rng.uniform(20, 80, n), rng.normal(size=n)
    eta = 0.8 * x + 1.5 * np.sin((age - 50) / 10) + rng.normal(0, 0.8, levels)[g]
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * eta))).astype(int)  # 1 (the positive class): a case
    return pd.DataFrame({"y": y, "x": x, "age": age, "g": [f"p{j}" for j in g]})


@pytest.fixture(scope="module")
def fits():
    data = _clinical()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (short chains)
        out = {
            "gibbs": bayesvm.bsvm(
                FORMULA, data, method="gibbs", draws=1500, tune=500, chains=2, seed=3, progress=False
            ),
            "accurate": bayesvm.bsvm(FORMULA, data),  # the default VB: EP integrated over the variances
            "vb": bayesvm.bsvm(FORMULA, data, vb="meanfield"),
            "svi": bayesvm.bsvm(FORMULA, data, method="svi", seed=0, batch_size=200, tol=1e-5),
        }
    return data, out


def test_vb_and_accurate_vb_agree_with_gibbs_on_the_function_and_the_effects(fits):
    """Issue 23's bar: accurate VB (the default) within 0.35 Gibbs SD, with SDs close to Gibbs' (measured: gaps
    at most 0.06 SD, SD ratios 0.96-1.04).  Mean-field VB ignores the dependence between the amplitude and the
    coefficients: it shrinks ``g`` (gaps up to 0.50 SD here) and halves its SDs, as its summary warns."""
    _, f = fits
    for name, bar in (("accurate", 0.35), ("vb", 0.55)):
        truth = f["gibbs"].gp_effect(newdata=GRID)
        effect = f[name].gp_effect(newdata=GRID)
        gap = np.abs(effect["mean"] - truth["mean"]) / truth["sd"]
        assert gap.max() < bar, (name, gap)
        sd = np.sqrt(np.diag(f["gibbs"].fixef_cov))
        assert np.all(np.abs(f[name].fixef - f["gibbs"].fixef) / sd < bar), name
    # the function is learned: it rises and falls with age as simulated (sin over 25..75: down, up, down)
    mean = f["gibbs"].gp_effect(newdata=GRID)["mean"].to_numpy()
    assert mean[1] < mean[0] - 0.3 and mean[4] > mean[1] + 1.5 and mean[5] < mean[4]
    ratio = f["accurate"].gp_effect(newdata=GRID)["sd"] / f["gibbs"].gp_effect(newdata=GRID)["sd"]
    assert np.all((ratio > 0.85) & (ratio < 1.15)), ratio


def test_svi_reaches_the_batch_optimum_with_a_gp_term_and_a_random_intercept(fits):
    _, f = fits
    assert f["svi"].converged
    np.testing.assert_allclose(f["svi"].fixef, f["vb"].fixef, atol=0.03)
    svi, vb = f["svi"].gp_effect(newdata=GRID), f["vb"].gp_effect(newdata=GRID)
    assert np.max(np.abs(svi["mean"] - vb["mean"]) / vb["sd"]) < 0.25


def test_summary_reports_the_amplitude_and_its_prior(fits):
    _, f = fits
    text = str(f["vb"].summary())
    assert " gp(age)   amplitude" in text and "gp(age): sigma ~ half-t(3, 2.5)" in text
    labels = [v.label for v in f["vb"].variance_components]
    assert labels == ["penalty", "(1 | g)", "gp(age)"]


def test_predictions_keep_the_gp_term_without_random_effects_and_match_new_rows(fits):
    data, f = fits
    for fit in (f["vb"], f["gibbs"]):
        np.testing.assert_allclose(fit.predict(data, kind="link"), fit.predict(kind="link"), atol=1e-9)
        fixed_only = fit.predict(data, kind="link", include_random=False)
        np.testing.assert_allclose(fixed_only, fit.predict(kind="link", include_random=False), atol=1e-9)
        p = fit.model.design.p
        mean = fit.posterior.means()[0]
        start = fit.model.gp_offsets()[0]
        expected = fit.problem.D[:, :p] @ mean[:p] + fit.problem.D[:, start : start + 12] @ mean[start : start + 12]
        np.testing.assert_allclose(fixed_only, expected, atol=1e-9)


def test_gp_effect_band_and_refusals(fits):
    data, f = fits
    effect = f["gibbs"].gp_effect(points=9, level=0.9)
    assert list(effect.columns) == ["age", "mean", "sd", "lower", "upper"] and len(effect) == 9
    assert np.all(effect["lower"] < effect["mean"]) and np.all(effect["mean"] < effect["upper"])
    assert effect["age"].min() == pytest.approx(data["age"].min()) and effect["age"].max() == pytest.approx(
        data["age"].max()
    )
    np.testing.assert_allclose(f["vb"].gp_effect("age", GRID), f["vb"].gp_effect("gp(age)", GRID))
    with pytest.raises(BayesvmError, match="'bmi' is not a gp\\(\\) term"):
        f["vb"].gp_effect("bmi")
    with pytest.raises(DataError, match="lacks the input"):
        f["vb"].gp_effect(newdata=pd.DataFrame({"x": [1.0]}))
    plain = bayesvm.bsvm("y ~ x + age", data, vb="meanfield")
    with pytest.raises(BayesvmError, match="no gp\\(\\) term"):
        plain.gp_effect()


def test_arviz_export_and_storage_carry_the_gp_term(fits, tmp_path):
    data, f = fits
    fit = f["gibbs"]
    idata = fit.to_inference_data(draws=200)
    posterior = idata.posterior
    assert {"gp_age", "sd_gp_age", "u_g", "sd_g"} <= set(posterior.data_vars)
    assert posterior["gp_age"].shape[-1] == 12
    # the exported log-likelihood is that of f = X beta + Z u + basis v, draw by draw
    theta = fit.result.theta_d.reshape(-1, fit.result.theta_d.shape[-1])
    u = fit.result.theta_b.reshape((theta.shape[0],) + fit.result.theta_b.shape[2:])  # (the Schur-blocked u_g)
    f_draws = theta @ fit.problem.D.T + u[:, fit.problem.blocked.codes, 0]
    log_odds = 2.0 * np.maximum(1.0 + f_draws, 0.0) - 2.0 * np.maximum(1.0 - f_draws, 0.0)
    expected = log_expit(fit.model.design.y * log_odds).reshape(fit.result.theta_d.shape[:2] + (-1,))
    np.testing.assert_allclose(idata.log_likelihood["y"].values, expected, atol=1e-8)
    for name in ("vb", "gibbs"):
        path = tmp_path / f"{name}.bsvm"
        f[name].save(path)
        loaded = bayesvm.load(path)
        np.testing.assert_allclose(
            loaded.predict(data.head(5), kind="link"), f[name].predict(data.head(5), kind="link")
        )
        np.testing.assert_allclose(loaded.gp_effect(newdata=GRID)["mean"], f[name].gp_effect(newdata=GRID)["mean"])
