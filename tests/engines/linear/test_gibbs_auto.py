"""``draws="auto"``: sample until R-hat <= 1.01 and bulk ESS >= 400 for every reported quantity, or a cap."""

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines import gibbs_driver
from bayesvm.results.diagnostics import mcmc_diagnostics


def _data(seed=0, n=200):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 15, n)
    x = rng.standard_normal(n)
    y = np.where(0.8 * x + rng.normal(0, 1, 15)[g] + rng.logistic(size=n) > 0, "yes", "no")
    return pd.DataFrame({"y": y, "x": x, "g": g})


def test_auto_stops_when_every_reported_quantity_has_converged():
    fit = bayesvm.bsvm("y ~ x + (1 | g)", _data(), method="gibbs", draws="auto", tune=300, seed=1)
    result = fit.result
    assert result.stopping.startswith("converged after") and result.draws % gibbs_driver.AUTO_BATCH == 0
    table = mcmc_diagnostics(fit)  # the summary's own diagnostics agree with the stopping rule
    assert table["r_hat"].max() <= gibbs_driver.AUTO_RHAT and table["ess_bulk"].min() >= gibbs_driver.AUTO_ESS
    assert "draws='auto': converged after" in str(fit.summary())


def test_auto_stops_at_the_cap_and_says_so(monkeypatch):
    monkeypatch.setattr(gibbs_driver, "AUTO_MAX_DRAWS", gibbs_driver.AUTO_BATCH)
    monkeypatch.setattr(gibbs_driver, "AUTO_ESS", 10**9)  # unreachable
    with pytest.warns(bayesvm.ConvergenceWarning, match="draws='auto' stopped at the cap of 250 draws per chain"):
        fit = bayesvm.bsvm("y ~ x + (1 | g)", _data(), method="gibbs", draws="auto", tune=50, seed=1)
    assert fit.result.draws == gibbs_driver.AUTO_BATCH
    assert "stopped at the cap of 250 draws per chain" in fit.result.stopping


def test_auto_draws_match_fixed_draws_of_the_same_seed():
    """The batches continue the same chains: the first draws equal a fixed-length run's."""
    data = _data(seed=2)
    auto = bayesvm.bsvm("y ~ x + (1 | g)", data, method="gibbs", draws="auto", tune=100, seed=4)
    fixed = bayesvm.bsvm("y ~ x + (1 | g)", data, method="gibbs", draws=gibbs_driver.AUTO_BATCH, tune=100, seed=4)
    np.testing.assert_array_equal(auto.result.theta_d[:, : gibbs_driver.AUTO_BATCH], fixed.result.theta_d)


def test_auto_is_refused_where_it_does_not_apply():
    data = _data().assign(z=np.random.default_rng(1).standard_normal(200))
    data.loc[:9, "z"] = np.nan
    with pytest.raises(bayesvm.BayesvmError, match="draws='auto'.*imputation"):
        bayesvm.bsvm("y ~ x + z", data, method="gibbs", draws="auto", missing="impute")
    with pytest.raises(ValueError, match="draws"):
        bayesvm.bsvm("y ~ x", data, method="gibbs", draws="many")
