"""Selection priors with multiple imputation: the selection sampler with imputation segments
targets the cut posterior ``E_{z | y, x_obs} p(gamma | y, z)``.

The exact answer averages, over independent draws of the imputation model's chain
(:func:`bayesvm.engines.imputation.multiple.sample_imputations`), each completed data set's exact model probabilities
(enumeration with quadrature, as ``tests/engines/selection/test_selection.py``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from bayesvm.engines.imputation.multiple import fit_mi_selection_vb
from bayesvm.engines.imputation.normal_model import sample_imputations
from bayesvm.engines.imputation.segments import ImputedSegments
from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.model.problems import ImputationProblem, SelectionProblem
from bayesvm.priors import LaplaceZero, SpikeSlab

from ..model_enumeration import enumerate_models, sampled_model_probabilities

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _problems(prior, n=40, seed=8):
    """``x_1`` (30% missing) and ``x_2`` correlated 0.6; y from ``x_1``."""
    rng = np.random.default_rng(seed)
    x1 = rng.standard_normal(n)
    x2 = 0.6 * x1 + 0.8 * rng.standard_normal(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-1.5 * x1)), 1.0, -1.0)
    X = np.column_stack([x1, x2])
    missing = np.zeros((n, 2), dtype=bool)
    missing[rng.random(n) < 0.3, 0] = True
    X_obs = np.where(missing, 0.0, X)
    imputation = ImputationProblem(
        base=SimpleNamespace(y=y, D=X_obs), columns=np.arange(2), alpha=np.zeros(2), gamma=np.ones(2),
        z=X_obs.copy(), missing=missing, mean_variance=1e8, df=3.0, scale=0.01 * np.eye(2), mode="mi",
    )  # fmt: skip
    selection = SelectionProblem(
        y=y, X=X_obs, selected=np.arange(2), fixed_precision=np.zeros(2), prior=prior, prior_scale=np.ones(2)
    )
    return imputation, selection


def _spike_slab_probabilities(selection, prior):
    def log_prior_of_model(on, integral):
        base = len(on) * np.log(prior.pi) + (2 - len(on)) * np.log1p(-prior.pi)
        if integral is None:
            return base
        points, cell, log_lik = integral
        return base + float(logsumexp(log_lik + stats.norm(0, prior.nu).logpdf(points).sum(axis=1)) + np.log(cell))

    return enumerate_models(selection, log_prior_of_model)


def test_spike_slab_gibbs_with_multiple_imputation_matches_the_cut_posterior():
    prior = SpikeSlab(pi=0.4, nu=1.5)
    imputation, selection = _problems(prior)
    completed = sample_imputations(imputation, 40, burn=100, thin=5, seed=3)
    per_imputation = np.array(
        [
            _spike_slab_probabilities(SelectionProblem(**{**selection.__dict__, "X": imputation.design(z)}), prior)
            for z in completed.z
        ]
    )
    exact = per_imputation.mean(axis=0)
    se_exact = per_imputation.std(axis=0, ddof=1) / np.sqrt(per_imputation.shape[0])
    result = sample_selection(selection, draws=3000, tune=300, chains=2, seed=4, progress=False,
                              imputation=ImputedSegments(imputation))  # fmt: skip
    sampled = sampled_model_probabilities(result, 2)
    se = np.sqrt(se_exact**2 + exact * (1 - exact) / 1500)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))
    assert per_imputation.std(axis=0).max() > 0.02  # the imputations matter on this problem
    assert result.imputation.z_var[imputation.missing].min() > 0.01  # imputed values vary; observed ones do not
    assert np.all(result.imputation.z_var[~imputation.missing] == 0)


def test_laplace_zero_vb_pooled_over_imputations():
    imputation, selection = _problems(LaplaceZero(0.5), n=120)
    result = fit_mi_selection_vb(imputation, selection, imputations=8, draws_per_imputation=50, seed=2)
    assert len(result.fits) == 8 and result.converged
    assert all(np.diff(f.lower_bound).min() >= -1e-8 * abs(f.lower_bound[-1]) for f in result.fits)
    assert result.include.shape == result.theta_d.shape[:2] + (2,)
    # the draws of excluded slopes are exact zeros, and the pooled inclusion is the average of the fits' q(gamma)
    excluded = result.include == 0
    assert np.all(result.theta_d[excluded[..., 0], 0] == 0)
    pooled = result.include.reshape(-1, 2).mean(axis=0)
    expected = np.mean([f.p_include for f in result.fits], axis=0)
    assert np.all(np.abs(pooled - expected) < 0.08)
    assert np.all(np.isfinite(result.log_posterior))
