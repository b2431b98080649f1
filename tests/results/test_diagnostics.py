import pandas as pd

from bayesvm.results.diagnostics import mcmc_problems


def test_problems_say_how_long_to_run():
    table = pd.DataFrame(
        {"r_hat": [1.002, 1.03], "ess_bulk": [900.0, 50.0], "ess_tail": [800.0, 120.0]}, index=["x", "sd_g"]
    )
    text = mcmc_problems(table, chains=4, draws=1000)
    # ESS 50 of the 400 wanted after 1,000 draws per chain: about 8,000 per chain
    assert "R-hat > 1.01 for ['sd_g']" in text and "below 400 for ['sd_g']" in text
    assert "draws=8000 per chain" in text
    only_rhat = table.assign(ess_bulk=[900.0, 900.0], ess_tail=[900.0, 900.0])
    assert "draws=2000 per chain" in mcmc_problems(only_rhat, chains=4, draws=1000)
    assert mcmc_problems(only_rhat.assign(r_hat=[1.0, 1.0]), chains=4, draws=1000) is None
