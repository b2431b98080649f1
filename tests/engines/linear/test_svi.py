"""Linear SVI (``bayesvm.engines.linear.svi``): its start and its fixed point with random effects."""

import numpy as np
import pandas as pd
import pytest

from bayesvm.engines.linear.svi import fit_linear_svi
from bayesvm.engines.linear.vb import fit_vb
from bayesvm.fitting import build_design, build_model, parse_formula
from bayesvm.model import all_dense
from bayesvm.priors import PriorSet


def _clinical_problem(seed: int = 0):
    """Toenail-shaped data: 300 patients with 2-8 visits, a patient-level treatment, a visit trend, 20% cases
    (the shape on which SVI ran away: intercept 775 where batch VB gives 2.15)."""
    rng = np.random.default_rng(seed)
    visits = rng.integers(2, 9, 300)
    patient = np.repeat(np.arange(300), visits)
    visit = np.concatenate([np.arange(v) for v in visits]).astype(float)
    treat = rng.integers(0, 2, 300)[patient]
    eta = -1.0 - 0.4 * visit - 0.2 * treat * visit + rng.normal(0, 2.0, 300)[patient]
    y = np.where(rng.random(patient.size) < 1 / (1 + np.exp(-eta)), "case", "none")
    data = pd.DataFrame({"y": y, "visit": visit, "treat": np.where(treat == 1, "b", "a"), "id": patient})
    design = build_design(parse_formula("y ~ visit * treat + (1 | id)"), data)
    return all_dense(build_model(design, "learn", PriorSet(), True), "dense").problem()


def test_first_steps_start_where_batch_vb_starts():
    """Alg. 2's start (``E[1/a_i] = 1``, components at ``E[precision] = I``), not the ``q(a)`` optimal under the
    prior ``q(theta)``: that one's vague intercept (variance 1e8) gave every row ``w_i ~ 1e-4`` and the first step
    an intercept in the thousands, from which the variance components ran to 1e6 and never came back."""
    problem = _clinical_problem()
    batch = fit_vb(problem)
    early = fit_linear_svi(problem, batch_size=100, max_iter=300, tol=1e-12, seed=0)
    assert abs(early.theta.mean_d[0] - batch.theta.mean_d[0]) < 0.5, early.theta.mean_d[:4]
    for got, want in zip(early.components, batch.components):
        ratio = got.expected_precision()[0, 0] / want.expected_precision()[0, 0]
        assert 0.5 < ratio < 2.0, ratio


@pytest.mark.slow  # a reference run against long chains (CI's 15 minutes); --runslow runs it
def test_default_batch_size_reaches_the_batch_fit_with_a_learned_penalty_and_random_intercept():
    """The whole default run: the fixed effects and both variance components of batch mean-field VB."""
    problem = _clinical_problem(seed=1)
    batch = fit_vb(problem)
    svi = fit_linear_svi(problem, seed=2)
    assert svi.converged
    sd = np.sqrt(np.diag(batch.theta.cov_d)[:4])
    np.testing.assert_array_less(np.abs(svi.theta.mean_d[:4] - batch.theta.mean_d[:4]) / sd, 0.3)
    for got, want in zip(svi.components, batch.components):
        ratio = got.expected_precision()[0, 0] / want.expected_precision()[0, 0]
        assert 0.8 < ratio < 1.25, ratio
