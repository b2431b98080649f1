import warnings

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.results.diagnostics import mcmc_problems, separation_tail


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
    # Rao-Blackwellised draws near 0, a little larger in some chains than in others: a large R-hat, but every chain's
    # probability is below 0.001 (MASS::birthwt's 'age' under LaplaceZero): not a disagreement
    conditional = np.full((4, 500, 3), 0.5)
    conditional[..., 0] = np.exp(rng.normal(-9.0 + 0.5 * np.arange(4)[:, None], 1.0, (4, 500)))  # chains 0.0002-0.0006
    rhat_fit = SimpleNamespace(
        result=SimpleNamespace(include=include, include_probability=conditional), inclusion=inclusion
    )
    from bayesvm.results.arviz import import_arviz

    az = import_arviz()
    assert float(az.rhat(conditional[..., 0])) > 1.05  # the rank-normalised R-hat alone would flag it
    assert inclusion_disagreement(rhat_fit) is None
    conditional[3, 200:, 0] = 0.05  # one chain at 0.03 against 0.00: a spread of 0.03, R-hat far above 1.05
    assert "'age' (0.00-0.03)" in inclusion_disagreement(rhat_fit)
    lasso = SimpleNamespace(result=SimpleNamespace(include=include), inclusion=inclusion.assign(p_include=np.nan))
    assert inclusion_disagreement(lasso) is None


def test_a_chain_that_sat_apart_is_named():
    """One chain of four several SDs from the others is named with the quantities it differs on; chains that differ
    by a fraction of an SD (slow mixing) or split into two equal groups (no majority) name none."""
    from bayesvm.results.diagnostics import mcmc_problems, separated_chains

    rng = np.random.default_rng(0)
    draws = rng.standard_normal((4, 500, 3))
    assert separated_chains(draws + np.array([0.0, 0.3, -0.3, 0.0])[:, None, None], ["a", "b", "c"]) is None
    stuck = draws.copy()
    stuck[1, :, 2] = 6.0 + 0.1 * stuck[1, :, 2]
    text = separated_chains(stuck, ["a", "b", "c"])
    assert text.startswith("chain 2 sat apart from the others on ['c'] ('c': mean 5.99 against") and "chains=8" in text
    halves = draws.copy()
    halves[2:, :, 0] += 8.0
    assert separated_chains(halves, ["a", "b", "c"]) is None
    joint = separated_chains(stuck, ["a", "b", "c"], imputed=["c"])  # an imputed column's coefficient: the joint model
    assert "imputation='joint') can have several modes" in joint and "(['c'] here)" in joint and "chains=8" not in joint
    assert separated_chains(stuck, ["a", "b", "c"], imputed=["a"]) == text  # (apart elsewhere: the general advice)
    table = pd.DataFrame(
        {"r_hat": [1.3, 1.0], "ess_bulk": [900.0, 900.0], "ess_tail": [900.0, 900.0]}, index=["a", "c"]
    )
    assert mcmc_problems(table, 4, 500, text).endswith(text)  # the advice where R-hat fails
    table["r_hat"] = 1.0
    table["ess_bulk"] = 50.0
    assert "run about draws=" in mcmc_problems(table, 4, 500, text)  # (only the ESS fails: more draws help)


def test_a_joint_imputation_chain_apart_on_an_imputed_coefficient_gets_the_joint_models_advice():
    """chain_separation reads which columns the joint model imputed (pima2 with imputation='joint': one chain of four
    with insulin's coefficient of the other sign, glucose's a third of the others')."""
    from bayesvm.results.diagnostics import chain_separation
    from tests.engines.imputation.test_joint_model import simulate

    frame, _, _ = simulate(n=150, seed=4)
    options = dict(method="gibbs", missing="impute", draws=100, tune=100, chains=4, seed=1, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, imputation="joint", **options)
        mi = bayesvm.bsvm("y ~ x1 + x2 + x3", frame, **options)
    for each in (fit, mi):
        column = list(each.fixef.index).index("x2")
        each.result.theta_d[1, :, column] += 20.0 * each.result.theta_d[..., column].std()
    assert "(['x2'] here)" in chain_separation(fit)
    assert "chains=8" in chain_separation(mi)  # multiple imputation: the general advice


def test_separation_under_a_learned_penalty_replaces_the_advice_to_run_longer():
    """Fixed effects that separate the classes under the learned penalty (IG(0.01, 0.01): the slopes' prior is a t with
    0.02 degrees of freedom) leave the posterior without a mean along the separating direction: the mixing warning
    names the column and says longer chains will not help, instead of asking for more draws.  A fixed penalty keeps
    the usual advice.  (The paper's prior asked for by giving the priors: without them, separated classes get a
    half-t on the penalty's SD, whose chain settles.)"""
    from bayesvm.errors import ConvergenceWarning

    rng = np.random.default_rng(0)
    x1 = rng.normal(size=20)
    frame = pd.DataFrame({"y": np.where(x1 > 0, "a", "b"), "x1": x1, "x2": x1 + rng.normal(scale=0.3, size=20)})
    options = dict(method="gibbs", draws=200, tune=200, chains=4, seed=1, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bayesvm.bsvm("y ~ x1 + x2", frame, priors=bayesvm.priors.PriorSet(), **options)
    [mixing] = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert "separated by ['x1']" in mixing and "longer chains will not settle" in mixing, mixing
    assert "run about draws" not in mixing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bayesvm.bsvm("y ~ x1 + x2", frame, penalty=1.0, **options)
    assert not any("longer chains will not settle" in str(w.message) for w in caught)
    # a half-t(nu) on the penalty's SD: tails of a t with nu degrees of freedom, a mean where nu > 1
    for nu, settles in ((0.5, False), (3.0, True)):
        priors = bayesvm.priors.PriorSet(penalty=bayesvm.priors.HalfT(nu, 2.5))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = bayesvm.bsvm("y ~ x1 + x2", frame, priors=priors, **options)
        assert (separation_tail(fit) is None) == settles, nu
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = bayesvm.bsvm("y ~ x1 + x2", frame, **options)
    assert isinstance(default.model.priors.penalty, bayesvm.priors.HalfT) and separation_tail(default) is None


def test_one_chain_reports_no_r_hat_and_arviz_stays_quiet(capfd):
    """R-hat compares chains: with one it is not computed (ArviZ would log a shape warning), and the summary's mixing
    line says so instead of claiming R-hat <= 1.01."""
    rng = np.random.default_rng(0)
    n = 200
    data = pd.DataFrame({"x1": rng.normal(size=n), "g": rng.integers(0, 15, n).astype(str)})
    data["y"] = (data.x1 + rng.normal(size=n) > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + (1|g)", data, method="gibbs", draws=200, tune=200, chains=1, seed=1)
        text = str(fit.summary())
    assert fit.summary().fixed["r_hat"].isna().all()
    assert "no R-hat from one chain" in text and "R-hat <= 1.01" not in text
    assert "Shape validation failed" not in capfd.readouterr().err
