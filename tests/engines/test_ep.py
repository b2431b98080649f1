"""Accurate VB (EP given sigma^2, integrated over log sigma^2) against exact answers and Gibbs."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines.ep import run_ep, tilted_moments
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import InverseWishart, PriorSet
from tests.conftest import simulate_logistic


def test_tilted_moments_match_quadrature():
    rng = np.random.default_rng(0)
    y = rng.choice([-1.0, 1.0], 20)
    m = rng.normal(0, 2, 20)
    v = np.exp(rng.normal(-1, 1.5, 20))
    log_z, mean, var = tilted_moments(y, m, v)
    for i in range(20):
        f = np.linspace(m[i] - 12 * np.sqrt(v[i]), m[i] + 12 * np.sqrt(v[i]), 200001)
        dens = (
            np.exp(-0.5 * (f - m[i]) ** 2 / v[i]) / np.sqrt(2 * np.pi * v[i]) * np.exp(-2 * np.maximum(0, 1 - y[i] * f))
        )
        z = np.trapezoid(dens, f)
        mu = np.trapezoid(f * dens, f) / z
        np.testing.assert_allclose(
            [log_z[i], mean[i], var[i]],
            [np.log(z), mu, np.trapezoid((f - mu) ** 2 * dens, f) / z],
            rtol=1e-6,
            atol=1e-9,
        )


def test_ep_evidence_matches_quadrature_in_one_dimension():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(30)
    y = np.where(rng.random(30) < 1 / (1 + np.exp(-1.5 * x)), 1.0, -1.0)
    data = pd.DataFrame({"x": x, "y": y})
    problem = build_model(build_design(parse_formula("y ~ 0 + x"), data), 0.5, PriorSet(), False).problem()
    state = run_ep(problem, [], np.ones(30), y * 2.0)
    grid = np.linspace(-6, 8, 200001)
    log_joint = (
        -2 * np.maximum(0, 1 - y[None] * grid[:, None] * x[None]).sum(1)
        - 0.5 * 2.0 * grid**2
        + 0.5 * np.log(2.0 / (2 * np.pi))
    )
    exact = np.log(np.trapezoid(np.exp(log_joint - log_joint.max()), grid)) + log_joint.max()
    assert abs(state.log_evidence - exact) < 0.02, (state.log_evidence, exact)
    weights = np.exp(log_joint - log_joint.max())
    weights /= weights.sum()
    mean = (weights * grid).sum()
    np.testing.assert_allclose(state.theta.mean_d[0], mean, rtol=0.01)


def _gibbs(formula, data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        return bayesvm.bsvm(formula, data, method="gibbs", chains=4, cores=2, seed=11, progress=False, **kw)


def _compare(accurate, gibbs, mean_sd, sd_rel, var_rel=None):
    gibbs_sd = np.sqrt(np.diag(gibbs.fixef_cov))
    ours_sd = np.sqrt(np.diag(accurate.fixef_cov))
    assert np.all(np.abs(accurate.fixef - gibbs.fixef) < mean_sd * gibbs_sd), (accurate.fixef - gibbs.fixef) / gibbs_sd
    assert np.all(np.abs(ours_sd / gibbs_sd - 1) < sd_rel), ours_sd / gibbs_sd
    if var_rel is not None:
        ours, theirs = accurate.variance_components[0].mean[0, 0], gibbs.variance_components[0].mean[0, 0]
        assert abs(ours / theirs - 1) < var_rel, (ours, theirs)


def test_without_random_effects_matches_gibbs():
    data, formula = simulate_logistic(200, 10)
    accurate = bayesvm.bsvm(formula, data, vb="accurate")
    _compare(accurate, _gibbs(formula, data, draws=6000, tune=1000), 0.25, 0.15)


@pytest.mark.parametrize("groups, per_group", [(8, 60), (150, 3)])  # few large groups; many small groups
def test_simulated_random_intercepts_match_gibbs(groups, per_group):
    rng = np.random.default_rng(groups)
    g = np.repeat(np.arange(groups), per_group)
    x = rng.standard_normal(g.size)
    eta = 0.3 + 1.0 * x + rng.normal(0, 1.5, groups)[g]
    data = pd.DataFrame(
        {"x": x, "g": [f"g{k}" for k in g], "y": (rng.random(g.size) < 1 / (1 + np.exp(-eta))).astype(int)}
    )
    formula = "y ~ x + (1 | g)"
    accurate = bayesvm.bsvm(formula, data, penalty=None, vb="accurate")
    _compare(accurate, _gibbs(formula, data, penalty=None, draws=8000, tune=2000), 0.5, 0.25, 0.25)


def test_toenail_meets_the_bar_against_gibbs(toenail):
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    start = time.perf_counter()
    accurate = bayesvm.bsvm(formula, toenail, penalty=None, vb="accurate")
    elapsed = time.perf_counter() - start
    print(f"accurate VB on toenail: {elapsed:.2f} s")
    assert elapsed < 2.0  # about 0.8-0.95 s here; the margin absorbs this machine's timing noise
    _compare(accurate, _gibbs(formula, toenail, penalty=None, draws=8000, tune=2000), 0.5, 0.25, 0.25)


def test_two_components_learned_penalty_and_random_intercept(toenail):
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    accurate = bayesvm.bsvm(formula, toenail, vb="accurate")  # penalty="learn": two variance components
    assert accurate.result.log_variances.shape[1] == 2
    gibbs = _gibbs(formula, toenail, draws=6000, tune=2000)
    gibbs_sd = np.sqrt(np.diag(gibbs.fixef_cov))
    assert np.all(np.abs(accurate.fixef - gibbs.fixef) < 0.5 * gibbs_sd)
    assert np.all(np.abs(np.sqrt(np.diag(accurate.fixef_cov)) / gibbs_sd - 1) < 0.25)
    patient = [v.mean[0, 0] for v in accurate.variance_components if v.group == "patientID"][0]
    reference = [v.mean[0, 0] for v in gibbs.variance_components if v.group == "patientID"][0]
    assert abs(patient / reference - 1) < 0.25


def test_outside_its_scope_it_says_so(toenail):
    with pytest.raises(ValueError, match="single-column variance components"):
        bayesvm.bsvm(
            "outcome ~ visit + (1 + visit | patientID)",
            toenail,
            vb="accurate",
            priors=PriorSet(correlated=InverseWishart()),
        )
    with pytest.raises(ValueError, match="vb must be"):
        bayesvm.bsvm("outcome ~ visit", toenail, vb="exact")
