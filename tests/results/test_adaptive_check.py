"""Adaptive importance sampling where q's marginal PSIS check fails (:mod:`bayesvm.results.adaptive_check`), against
exact quadrature: ``y ~ 1 + (1 | g)`` with 3,000 groups of three rows, most of them all one class, where EP's
intercept sits almost one posterior SD off and q's k-hat exceeds 0.7."""

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.results.adaptive_check import _log_t_density, adapt, adapted_moments
from tests.engines.intercept_quadrature import log_joint_grid

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _nearly_separated_groups(groups: int = 3000, size: int = 3, sd: float = 3.5, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), size)
    u = rng.normal(0.0, sd, groups)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(-2.5 + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "g": g.astype(str)})


@pytest.fixture(scope="module")
def fits():
    data = _nearly_separated_groups()
    ep_only = bayesvm.bsvm("y ~ 1 + (1 | g)", data, penalty=1.0, checks=bayesvm.Checks(vb_check="ignore"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ApproximationWarning)
        default = bayesvm.bsvm("y ~ 1 + (1 | g)", data, penalty=1.0)
    return ep_only, default


def _mixture_intercept(fit) -> tuple[float, float]:
    r = fit.result
    mean = sum(w * t.mean_d[0] for w, t in zip(r.weights, r.thetas))
    second = sum(w * (t.cov_d[0, 0] + t.mean_d[0] ** 2) for w, t in zip(r.weights, r.thetas))
    return float(mean), float(np.sqrt(second - mean**2))


def _exact(problem, centre: float) -> tuple[float, float, float]:
    """Posterior mean and SD of the intercept (model scale) and mean of sigma^2, by quadrature on a grid around
    ``centre`` (its edges hold no mass: asserted)."""
    intercepts, log_variances = np.linspace(centre - 0.6, centre + 0.6, 97), np.linspace(0.4, 3.2, 71)
    log_joint = log_joint_grid(problem, intercepts, log_variances)
    weights = np.exp(log_joint - log_joint.max())
    weights /= weights.sum()
    edges = np.concatenate([weights[[0, -1]].ravel(), weights[:, [0, -1]].ravel()])
    assert edges.max() < 1e-8 * weights.max()
    mean = float(weights.sum(axis=1) @ intercepts)
    sd = float(np.sqrt(weights.sum(axis=1) @ (intercepts - mean) ** 2))
    return mean, sd, float(weights.sum(axis=0) @ np.exp(log_variances))


def test_adapted_proposal_repairs_the_fixed_effects(fits):
    ep_only, fit = fits
    ep_mean, _ = _mixture_intercept(ep_only)
    mean, sd, variance = _exact(fit.problem, ep_mean)
    assert abs(ep_mean - mean) > 0.5 * sd  # EP's error that the check finds
    check = fit.check_vb(warn=False)
    assert check.marginal_khat > 0.7 and check.adapted is not None and check.adapted.khat <= 0.5
    assert fit.result.fixed_correction is not None and "adaptive importance sampling" in (
        fit.result.fixed_correction.describe()
    )
    corrected_mean, corrected_sd = _mixture_intercept(fit)
    assert abs(corrected_mean - mean) < 0.15 * sd
    assert abs(corrected_sd / sd - 1) < 0.1
    # the weighted variance component is the exact one (the table's own, from q's nodes, is not corrected)
    weighted = check.marginal.loc["sigma^2 (1 | g)", "mean"]
    assert abs(weighted / variance - 1) < 0.05, (weighted, variance)


def test_adapt_reaches_a_gaussian_target_from_a_poor_start():
    """A correlated Gaussian target in three dimensions, started from draws of a narrow, shifted proposal: the rounds
    end with k-hat <= 0.5 and the weighted moments are the target's."""
    rng = np.random.default_rng(0)
    mean = np.array([1.0, -2.0, 0.5])
    cov = np.array([[1.0, 0.6, 0.0], [0.6, 2.0, -0.3], [0.0, -0.3, 0.5]])
    precision = np.linalg.inv(cov)

    def target(theta_d, phi):
        x = np.hstack([theta_d, phi]) - mean
        return -0.5 * np.einsum("si,ij,sj->s", x, precision, x), []

    start = rng.normal(0.0, 0.3, (1000, 3))
    log_q = -0.5 * np.sum((start / 0.3) ** 2, axis=1)
    log_p, _ = target(start[:, :2], start[:, 2:])
    from bayesvm.results.psis import psis

    log_weights, khat = psis(log_p - log_q)
    assert khat > 0.7
    result = adapt(target, start[:, :2], start[:, 2:], log_weights, khat, rng, 2000)
    assert result.khat <= 0.5 and result.ess > 500
    moments = adapted_moments(np.zeros(2), np.ones(2), result)
    np.testing.assert_allclose(moments.weighted_mean, mean[:2], atol=0.1)
    np.testing.assert_allclose(moments.weighted_sd, np.sqrt(np.diag(cov)[:2]), rtol=0.1)
    assert np.all(moments.shift_se < 0.1)


def test_t_density_integrates_to_one():
    """The proposal's log density against scipy's multivariate t."""
    from scipy import stats

    location, scale = np.array([0.5, -1.0]), np.array([[2.0, 0.4], [0.4, 0.7]])
    x = np.random.default_rng(2).standard_normal((20, 2)) * 2
    ours = _log_t_density(x, location, np.linalg.cholesky(scale))
    theirs = stats.multivariate_t(loc=location, shape=scale, df=7.0).logpdf(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_a_saved_fit_keeps_its_adapted_check_and_correction(fits, tmp_path):
    _, fit = fits
    loaded = bayesvm.load(fit.save(tmp_path / "fit.bsvm"))
    assert str(loaded.summary(detail=True)) == str(fit.summary(detail=True))
    assert "adaptive importance sampling" in str(loaded.summary(detail=True))
