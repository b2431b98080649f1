"""SVI of the selection priors (``bayesvm.engines.selection.svi``): the minibatch message is unbiased, and SVI
reaches the batch coordinate ascent's optimum for every prior, with and without a random intercept."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines.augmentation import inverse_a_mean
from bayesvm.engines.selection.lasso_vb import fit_lasso_vb
from bayesvm.engines.selection.laws import law_of
from bayesvm.engines.selection.message import minibatch_message
from bayesvm.engines.selection.spike_slab_vb import fit_spike_slab_vb
from bayesvm.engines.selection.svi import NO_MOVES, fit_selection_svi
from bayesvm.engines.selection.vb import SelectionVBResult, fit_laplace_zero_vb
from bayesvm.engines.squarem import ascend
from bayesvm.priors import LaplaceZero, Lasso, SpikeSlab

PRIORS = {
    "laplace-zero": (LaplaceZero(rho=0.5), fit_laplace_zero_vb),
    "spike-slab": (SpikeSlab(pi=0.5), fit_spike_slab_vb),
    "lasso": (Lasso(), fit_lasso_vb),
}


def _frame(seed: int = 0, n: int = 3000, levels: int = 20) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, levels, n)
    X = rng.standard_normal((n, 5))
    eta = 0.3 + 1.5 * X[:, 0] - 1.0 * X[:, 1] + rng.normal(0, 1, levels)[g]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")
    return pd.DataFrame(X, columns=list("abcde")).assign(y=y, g=[f"g{j}" for j in g])


def ascent_result(problem, ascent) -> SelectionVBResult:
    fields = law_of(problem.prior).ascent(problem).fields(ascent.last)
    return SelectionVBResult(mean=ascent.last.mean, cov=ascent.last.cov, selected=problem.selected,
                             lower_bound=np.asarray(ascent.bounds), converged=ascent.converged, n_iter=ascent.n_sweeps,
                             decreases=ascent.decreases, elapsed=0.0, **fields)  # fmt: skip


def _problem(formula: str, prior):
    fit = bayesvm.bsvm(formula, _frame(), prior=prior, method="vb")  # (the model's selection problem)
    return fit.model.selection_problem()


def test_minibatch_messages_of_a_partition_average_to_the_full_message():
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((600, 4)), rng.choice([-1.0, 1.0], 600)
    w = inverse_a_mean(rng.gamma(2.0, 1.0, 600))
    full = minibatch_message(X, y, w, 1.0)
    parts = [minibatch_message(X[k::3], y[k::3], w[k::3], 3.0) for k in range(3)]
    np.testing.assert_allclose(np.mean([p[0] for p in parts], axis=0), full[0], rtol=1e-12)
    np.testing.assert_allclose(np.mean([p[1] for p in parts], axis=0), full[1], rtol=1e-12)
    np.testing.assert_allclose(full[0], X.T @ (w[:, None] * X), rtol=1e-12)
    np.testing.assert_allclose(full[1], X.T @ (y * (1.0 + w)), rtol=1e-12)


def _state(name: str, problem, fit) -> tuple:
    """The batch coordinate ascent's state at a fit's factors (``chi`` from the first sweep)."""
    sel, chi = problem.selected, np.ones(problem.y.size)
    if name == "laplace-zero":
        return chi, fit.include.copy(), 1.0 / fit.expected_b**2, fit.sigma2_scale, fit.components
    if name == "spike-slab":
        return chi, fit.include[sel].copy(), fit.mean[sel].copy(), fit.components
    second = np.diag(fit.cov)[sel] + fit.mean[sel] ** 2
    return chi, second, fit.scale_law.T, fit.components


@pytest.mark.parametrize("random", [False, True], ids=["fixed", "random-intercept"])
@pytest.mark.parametrize("name", list(PRIORS))
def test_svi_reaches_a_batch_optimum(name, random):
    """SVI ends at a fixed point of the batch coordinate ascent: the batch ascent started from SVI's factors stays
    there (the model-averaged coefficients within 0.03, the slopes' SDs being about 0.02-0.04 on the engine's scale;
    inclusion probabilities within 0.02; SDs within 5%).  Where the batch fit from its own start reaches the same
    optimum, SVI matches it too.  (Laplace-zero's indicators have two optima on this data: SVI's seeds land on
    either; the one without slope ``e`` has the higher bound, -3637.5 against the batch start's -3638.6.)"""
    prior, fit_batch = PRIORS[name]
    formula = "y ~ a + b + c + d + e" + (" + (1 | g)" if random else "")
    problem = _problem(formula, prior)
    svi = fit_selection_svi(problem, batch_size=300, seed=1)
    assert svi.converged and svi.n_iter < 2000
    ascent = law_of(problem.prior).ascent(problem)
    polished = ascend(ascent, _state(name, problem, svi), 1e-8, 500)
    batch = fit_batch(problem)
    if abs(polished.bounds[-1] - batch.lower_bound[-1]) < 1e-6 * abs(batch.lower_bound[-1]):  # the same optimum
        np.testing.assert_allclose(svi.coef_mean, batch.coef_mean, atol=0.03)
    else:
        assert name == "laplace-zero" and not random and polished.bounds[-1] > batch.lower_bound[-1]
    batch = ascent_result(problem, polished)
    np.testing.assert_allclose(svi.coef_mean, batch.coef_mean, atol=0.03)
    np.testing.assert_allclose(svi.include, batch.include, atol=0.02)
    np.testing.assert_allclose(np.sqrt(np.diag(svi.cov)), np.sqrt(np.diag(batch.cov)), rtol=0.05)
    if random:  # the random intercept's variance, learned by both
        np.testing.assert_allclose(
            svi.components[0].expected_precision(), batch.components[0].expected_precision(), rtol=0.1
        )
    if name == "lasso":
        assert svi.scale_law.mean_inverse == pytest.approx(batch.scale_law.mean_inverse, rel=0.05)
    if name == "laplace-zero":
        assert svi.sigma2_scale == pytest.approx(batch.sigma2_scale, rel=0.1)
    assert (NO_MOVES in svi.stopping) == (name == "spike-slab")
    # the selection: the batch fit's, with both signals in
    if name != "lasso":
        assert np.array_equal(svi.p_include > 0.5, batch.p_include > 0.5)
        assert {0, 1} <= set(np.flatnonzero(svi.p_include > 0.5))


def test_svi_through_bsvm_with_imputation_pools_one_fit_per_completed_data_set():
    frame = _frame(seed=3, n=1500)
    frame.loc[np.random.default_rng(2).random(len(frame)) < 0.1, "c"] = np.nan
    fit = bayesvm.bsvm("y ~ a + b + c + d + e", frame, prior=Lasso(), method="svi", missing="impute",
                       imputations=3, seed=1, batch_size=300)  # fmt: skip
    assert fit.result.engine == "svi" and len(fit.result.fits) == 3 and fit.converged
    batch = bayesvm.bsvm("y ~ a + b + c + d + e", frame, prior=Lasso(), missing="impute", imputations=3, seed=1)
    np.testing.assert_allclose(fit.fixef, batch.fixef, atol=0.05)
    assert "stochastic VI (Wenzel et al. 2017, section 4.5) on each of 3 completed data sets" in str(fit.summary())


def test_spike_slab_svi_holds_the_slopes_in_until_the_gaussian_fit_settles():
    """On the Fair affairs data (statsmodels; age and years married correlate 0.89) SVI released from the first
    step ended 27 nats below the batch optimum, with age out; holding every slope in its slab until the window rule
    is first met (the stochastic joint start) reaches the batch fit's model from this seed (15 of 20 runs do)."""
    import statsmodels.api as sm

    frame = sm.datasets.fair.load_pandas().data
    frame["y"] = np.where(frame["affairs"] > 0, "yes", "no")
    train = frame[~(np.random.default_rng(0).random(len(frame)) < 0.3)]
    formula = "y ~ rate_marriage + age + yrs_married + children + religious + educ + occupation + occupation_husb"
    batch = bayesvm.bsvm(formula, train, prior=SpikeSlab(pi=0.5))
    svi = fit_selection_svi(batch.model.selection_problem(), batch_size=500, seed=0)
    assert "every slope held in its slab for the first" in svi.stopping
    np.testing.assert_array_equal(svi.include > 0.5, batch.result.include > 0.5)
    assert batch.selected == ["rate_marriage", "age", "yrs_married", "religious"]
