"""PSIS-corrected coefficients of the accurate fit (:mod:`bayesvm.results.psis_correction`): the moved Gaussians are
what they claim to be, nothing moves where EP is right, and where EP is off the corrected fit matches exact
quadrature (``y ~ x + (1 | g)``: the random intercepts integrate out in closed form, so the posterior of
``(intercept, slope, log sigma^2)`` is a three-dimensional integral)."""

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

import bayesvm
from bayesvm.engines.hyperparameters import Hyperparameters
from bayesvm.engines.linear.node_evidence import group_log_integrals
from bayesvm.results.psis_correction import correction_map, theta_moments

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _longitudinal(seed: int = 0, groups: int = 60, visits: int = 4) -> pd.DataFrame:
    """ohio-like: four visits per subject, a within-subject covariate, a large random intercept and a rare class."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), visits)
    x = np.tile(np.linspace(-1.5, 1.5, visits), groups)
    u = rng.normal(0.0, 2.5, groups)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(-1.5 - 0.6 * x + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "x": x, "g": g.astype(str)})


@pytest.fixture(scope="module")
def fits():
    data = _longitudinal()
    options = dict(penalty=1.0, standardize=False)  # the coefficients on the model's scale are the reported ones
    raw = bayesvm.bsvm("y ~ x + (1 | g)", data, checks=bayesvm.Checks(vb_check="ignore"), **options)
    corrected = bayesvm.bsvm("y ~ x + (1 | g)", data, **options)
    return raw, corrected


def _exact_moments(problem, center: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and SD of ``(intercept, slope)`` by quadrature over ``(intercept, slope, log sigma^2)``."""
    hyper = Hyperparameters(problem.components)
    grid = [np.linspace(center[0] - 2.8, center[0] + 2.8, 41), np.linspace(center[1] - 0.7, center[1] + 0.7, 41)]
    phi = np.linspace(-3.0, 4.5, 31)
    b0, b1, ph = (a.ravel() for a in np.meshgrid(*grid, phi, indexing="ij"))
    eta = b0[:, None] * problem.D[:, 0][None] + b1[:, None] * problem.D[:, 1][None]
    blocked = problem.blocked
    log_p = group_log_integrals(problem.y, eta, blocked.values[:, 0], blocked.codes, np.exp(ph), blocked.n_levels)
    lam = problem.fixed_precision
    log_p += -0.5 * lam[0] * b0**2 - 0.5 * lam[1] * b1**2
    log_p += np.array([hyper.log_prior(np.array([t])) for t in phi])[np.tile(np.arange(phi.size), 41 * 41)]
    weights = np.exp(log_p - logsumexp(log_p))
    edges = weights.reshape(41, 41, phi.size)
    assert edges[[0, -1]].sum() + edges[:, [0, -1]].sum() + edges[:, :, [0, -1]].sum() < 1e-6  # the grid holds it all
    theta = np.column_stack([b0, b1])
    mean = weights @ theta
    return mean, np.sqrt(weights @ (theta - mean) ** 2)


def test_corrected_fit_matches_quadrature(fits):
    """EP puts the slope about 0.2 posterior SDs from the exact mean; the corrected fit is within Monte Carlo error
    (measured: 0.23 -> 0.01 SD), and summary() says what moved."""
    raw, corrected = fits
    exact_mean, exact_sd = _exact_moments(raw.problem, raw.fixef.to_numpy())
    ep_error = (raw.fixef.to_numpy() - exact_mean) / exact_sd
    error = (corrected.fixef.to_numpy() - exact_mean) / exact_sd
    assert abs(ep_error[1]) > 0.15  # there is something to correct
    assert np.all(np.abs(error) < 0.07)
    sd = np.sqrt(np.diag(corrected.fixef_cov.to_numpy()))
    np.testing.assert_allclose(sd, exact_sd, rtol=0.05)
    record = corrected.result.fixed_correction
    assert record is not None and "x" in record.names
    assert "Coefficients corrected by PSIS" in str(corrected.summary(detail=True))
    assert "the PSIS check corrected the fixed effects" in str(corrected.summary())
    assert raw.result.fixed_correction is None  # vb_check="ignore": no check, so nothing corrected


def test_the_correction_builds_a_new_fit_and_leaves_the_one_it_read(fits):
    """``correct_fixed`` returns a new fit whose result holds the moved nodes; the fit it read (EP's nodes) keeps its
    result, nodes and coefficients exactly: what ``bsvm()`` returns is built once and nothing changes it later."""
    from bayesvm.results.psis_correction import correct_fixed

    raw, _ = fits
    check = raw.check_vb(warn=False)
    thetas, means = list(raw.result.thetas), [t.mean_d.copy() for t in raw.result.thetas]
    fixef = raw.fixef.to_numpy().copy()
    moved = correct_fixed(raw, check.theta_moments, check.governing_khat, check.draws)
    assert moved is not None and moved is not raw and moved.result is not raw.result
    assert moved.result.fixed_correction is not None and raw.result.fixed_correction is None
    assert all(a is b for a, b in zip(raw.result.thetas, thetas))
    assert all(np.array_equal(t.mean_d, m) for t, m in zip(raw.result.thetas, means))
    np.testing.assert_array_equal(raw.fixef.to_numpy(), fixef)
    assert np.max(np.abs(moved.fixef.to_numpy() - fixef)) > 1e-3


def test_predictions_read_the_corrected_nodes(fits):
    """``predict`` reads the moved nodes: the fixed part of the link is the corrected coefficients', not EP's."""
    raw, corrected = fits
    new = pd.DataFrame({"x": [-1.5, 0.0, 1.5], "g": ["0", "1", "2"]})
    D = np.column_stack([np.ones(3), new["x"].to_numpy()])
    fixed = corrected.predict(new, kind="link", include_random=False).to_numpy()
    np.testing.assert_allclose(fixed, D @ corrected.fixef.to_numpy())
    assert np.max(np.abs(fixed - D @ raw.fixef.to_numpy())) > 1e-3


def test_moved_gaussian_matches_its_draws(fits):
    """``GaussianPosterior.moved``: the stored marginals of the blocked effects equal ``P_l^{-1} + G_l S^{-1} G_l'``
    before and after the move, and the moved means and covariances are those of its own joint draws."""
    raw, _ = fits
    theta = raw.result.thetas[int(np.argmax(raw.result.weights))]
    identity = theta.block_inv + np.einsum("jkq,qr,jlr->jkl", theta.gains.dense(), theta.cov_d, theta.gains.dense())
    np.testing.assert_allclose(theta.cov_b, identity, rtol=1e-8, atol=1e-10)
    center = theta.mean_d + np.array([0.1, -0.2])
    matrix = np.array([[0.8, 0.0], [0.4, 1.3]])  # a scaling and the second coordinate's regression on the first
    moved = theta.moved(center, np.array([0.3, -0.1]), matrix)
    np.testing.assert_allclose(moved.mean_d, center + np.array([0.3, -0.1]) + matrix @ (theta.mean_d - center))
    draws_d, draws_b = moved.sample(np.random.default_rng(1), 200_000)
    np.testing.assert_allclose(draws_d.mean(axis=0), moved.mean_d, atol=0.01)
    np.testing.assert_allclose(np.cov(draws_d.T), moved.cov_d, rtol=0.02, atol=5e-4)
    np.testing.assert_allclose(moved.cov_d, matrix @ theta.cov_d @ matrix.T)
    np.testing.assert_allclose(draws_b.mean(axis=0), moved.mean_b, atol=0.03)
    np.testing.assert_allclose(draws_b.var(axis=0), moved.cov_b[:, :, 0], rtol=0.03)
    # the conditional of the blocked effects given theta_d is unchanged
    t = draws_d[0]
    np.testing.assert_allclose(
        moved.mean_b - np.einsum("jkq,q->jk", moved.gains.dense(), t - moved.mean_d),
        theta.mean_b - np.einsum("jkq,q->jk", theta.gains.dense(), t - theta.mean_d),
    )
    assert moved.logdet_precision == pytest.approx(theta.logdet_precision - 2 * np.log(0.8 * 1.3))  # det M


def test_nothing_moves_without_evidence():
    """Equal weights (q is the posterior) correct nothing; weights that tilt one coordinate by much more than their
    Monte Carlo error move that coordinate's mean by the weighted estimate, and no other."""
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(4000, 3))
    corrected, shift, ratio = correction_map(theta_moments(draws, np.full(4000, 1 / 4000)))
    assert not corrected.any() and np.all(shift == 0) and np.all(ratio == 1)
    noise = np.exp(0.1 * rng.normal(size=4000))  # weights unrelated to the draws: below Monte Carlo error
    assert not correction_map(theta_moments(draws, noise / noise.sum()))[0][:2].any()
    tilt = np.exp(0.3 * draws[:, 1])  # q is N(0, 1), the target N(0.3, 1) in the second coordinate
    moments = theta_moments(draws, tilt / tilt.sum())
    corrected, shift, ratio = correction_map(moments)
    np.testing.assert_array_equal(corrected, [False, True, False])
    assert shift[1] == pytest.approx(0.3, abs=0.05) and shift[0] == 0 and shift[2] == 0
    assert ratio[0] == ratio[2] == 1.0  # (the moved coordinate takes its weighted SD: 1 for a pure tilt)
    assert ratio[1] == pytest.approx(1.0, abs=0.05) and ratio[1] != 1.0
    assert moments.shift_se[1] == pytest.approx(1 / np.sqrt(4000), rel=0.5)  # about sigma / sqrt(S) for a mild tilt


def test_a_moved_coordinate_takes_its_weighted_sd():
    """A coordinate whose mean moves beyond Monte Carlo error takes the weighted SD even where the SD's own change is
    below the significance bar (q's marginal is shown off there); not where that SD is too noisy, and no other
    coordinate changes."""
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(600, 2))
    # target: N(0.25, 0.97^2) in the first coordinate, q's N(0, 1) in the second
    log_w = -0.5 * ((draws[:, 0] - 0.25) / 0.97) ** 2 + 0.5 * draws[:, 0] ** 2
    weights = np.exp(log_w - log_w.max())
    moments = theta_moments(draws, weights / weights.sum())
    log_ratio = np.log(moments.weighted_sd[0] / moments.sd[0])
    assert abs(log_ratio) < 3 * moments.log_ratio_se[0] <= 3 * 0.15  # below the bar on its own
    corrected, shift, ratio = correction_map(moments)
    np.testing.assert_array_equal(corrected, [True, False])
    assert ratio[0] == pytest.approx(moments.weighted_sd[0] / moments.sd[0]) and ratio[1] == 1.0
    noisy = theta_moments(draws, weights / weights.sum())
    noisy = type(noisy)(**{**noisy.__dict__, "log_ratio_se": np.array([0.2, 0.2])})
    assert correction_map(noisy)[2][0] == 1.0  # too noisy an SD: the mean alone moves


def test_fit_that_ep_gets_right_is_unchanged():
    """On a well-identified random-intercept model EP is within Monte Carlo error of the check's weighted moments,
    so the fit is exactly EP's (no noise added)."""
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(30), 20)
    x = rng.normal(size=g.size)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(0.5 + x + rng.normal(0, 1.0, 30)[g]))), "a", "b")
    data = pd.DataFrame({"y": y, "x": x, "g": g.astype(str)})
    fit = bayesvm.bsvm("y ~ x + (1 | g)", data, penalty=1.0)
    raw = bayesvm.bsvm("y ~ x + (1 | g)", data, penalty=1.0, checks=bayesvm.Checks(vb_check="ignore"))
    assert fit.result.fixed_correction is None
    np.testing.assert_array_equal(fit.fixef.to_numpy(), raw.fixef.to_numpy())
