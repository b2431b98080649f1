"""``draws="auto"`` for the selection samplers: sample until every fixed effect, inclusion indicator and component
SD has R-hat <= 1.01 and bulk ESS >= 400, or a cap (the same rule and runner as the linear sampler's)."""

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines import gibbs_driver
from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.priors import LaplaceZero, SpikeSlab
from bayesvm.results.diagnostics import mcmc_diagnostics


def _data(seed: int = 0, n: int = 200) -> pd.DataFrame:
    """Two signals, two nulls and a random intercept."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 10, n)
    X = rng.normal(size=(n, 4))
    eta = X @ [1.0, -0.7, 0.0, 0.0] + rng.normal(0, 1, 10)[g]
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    return pd.DataFrame(X, columns=list("abcd")).assign(y=y, g=[f"g{k}" for k in g])


FORMULA = "y ~ a + b + c + d + (1 | g)"


@pytest.mark.parametrize("prior", [LaplaceZero(rho=0.5), SpikeSlab(pi=0.5)], ids=["laplace-zero", "spike-slab"])
def test_auto_draws_continue_the_fixed_runs_chains(prior, monkeypatch):
    """The batches continue the same chains: the first draws equal a fixed-length run's with the same seed (two
    batches: the second continues the first)."""
    monkeypatch.setattr(gibbs_driver, "AUTO_MAX_DRAWS", 2 * gibbs_driver.AUTO_BATCH)
    monkeypatch.setattr(gibbs_driver, "AUTO_ESS", 10**9)  # (stop at the cap)
    model = bayesvm.bsvm(FORMULA, _data(), prior=prior, method="vb", vb="meanfield").model
    problem = model.selection_problem()
    auto = sample_selection(problem, draws="auto", tune=100, chains=2, seed=4, progress=False)
    fixed = sample_selection(problem, draws=2 * gibbs_driver.AUTO_BATCH, tune=100, chains=2, seed=4, progress=False)
    assert auto.draws == 2 * gibbs_driver.AUTO_BATCH and auto.stopping.startswith("stopped at the cap")
    np.testing.assert_array_equal(auto.theta_d, fixed.theta_d)
    np.testing.assert_array_equal(auto.include, fixed.include)
    np.testing.assert_array_equal(auto.components[0], fixed.components[0])
    np.testing.assert_array_equal(auto.log_posterior, fixed.log_posterior)


def test_auto_with_imputation_is_refused_by_the_engine():
    data = _data()
    data.loc[:19, "c"] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ a + b + c + d", data, prior=SpikeSlab(), method="gibbs", draws=20, tune=10, seed=1,
                           progress=False, missing="impute", imputation="mi")  # fmt: skip
    problem = fit.model.selection_problem()
    imputation = fit.model.design.imputation
    assert imputation is not None
    with pytest.raises(bayesvm.BayesvmError, match="draws='auto' does not run with imputation"):
        sample_selection(problem, draws="auto", tune=10, chains=2, seed=1, progress=False,
                         imputation=imputation)  # fmt: skip


def test_auto_stops_when_every_reported_quantity_has_converged():
    with warnings.catch_warnings():
        warnings.simplefilter("error", bayesvm.ConvergenceWarning)
        fit = bayesvm.bsvm(FORMULA, _data(), prior=LaplaceZero(rho=0.5), method="gibbs", draws="auto", tune=300,
                           seed=1, progress=False)  # fmt: skip
    result = fit.result
    assert result.stopping.startswith("converged after") and result.draws % gibbs_driver.AUTO_BATCH == 0
    table = mcmc_diagnostics(fit)  # the summary's own diagnostics agree with the stopping rule
    assert table["r_hat"].max() <= gibbs_driver.AUTO_RHAT and table["ess_bulk"].min() >= gibbs_driver.AUTO_ESS
    import arviz as az

    indicators = az.convert_to_dataset({"include": result.include.astype(float)})
    rhat = np.asarray(az.rhat(indicators)["include"].values, dtype=float)
    ess = np.asarray(az.ess(indicators, method="bulk")["include"].values, dtype=float)
    moving = np.isfinite(rhat)  # (an indicator that never moves in any chain has no R-hat)
    assert np.all(rhat[moving] <= gibbs_driver.AUTO_RHAT) and np.all(ess[moving] >= gibbs_driver.AUTO_ESS)
    assert 0.05 < fit.inclusion.loc["c", "p_include"] < 0.95  # a null slope: the indicator moves and is watched
    assert "draws='auto': converged after" in str(fit.summary())


def test_auto_stops_at_the_cap_and_says_so(monkeypatch):
    monkeypatch.setattr(gibbs_driver, "AUTO_MAX_DRAWS", gibbs_driver.AUTO_BATCH)
    monkeypatch.setattr(gibbs_driver, "AUTO_ESS", 10**9)  # unreachable
    with pytest.warns(bayesvm.ConvergenceWarning, match="draws='auto' stopped at the cap of 250 draws per chain"):
        fit = bayesvm.bsvm(FORMULA, _data(), prior=SpikeSlab(), method="gibbs", draws="auto", tune=50, seed=1,
                           progress=False)  # fmt: skip
    assert fit.result.draws == gibbs_driver.AUTO_BATCH and fit.inclusion["p_include"].notna().all()
