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


def test_inclusion_disagreement_names_the_variables():
    from types import SimpleNamespace

    import numpy as np

    from bayesvm.results.diagnostics import inclusion_disagreement

    rng = np.random.default_rng(0)
    include = rng.random((4, 500, 3)) < 0.5  # slopes 1, 2: every chain includes them half of the time
    include[:2, :, 0], include[2:, :, 0] = True, False  # slope 0: two chains always, two never
    inclusion = pd.DataFrame({"p_include": include.mean(axis=(0, 1))}, index=["age", "bmi", "dose"])
    fit = SimpleNamespace(result=SimpleNamespace(include=include), inclusion=inclusion)
    text = inclusion_disagreement(fit)
    assert "'age' (0.00-1.00)" in text and "bmi" not in text and "dose" not in text
    include[:, :, 0] = rng.random((4, 500)) < 0.9
    assert inclusion_disagreement(fit) is None
    lasso = SimpleNamespace(result=SimpleNamespace(include=include), inclusion=inclusion.assign(p_include=np.nan))
    assert inclusion_disagreement(lasso) is None
