"""The accurate fit's importance-sampled node weights (:mod:`bayesvm.engines.linear.node_evidence`) against exact
quadrature: for ``y ~ 1 + (1 | g)`` the random intercepts integrate out in closed form, so ``p(y | sigma^2)`` and the
posterior of ``(intercept, log sigma^2)`` are two-dimensional integrals."""

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

import bayesvm
from bayesvm.engines.hyperparameters import Hyperparameters
from bayesvm.engines.linear import ep
from bayesvm.engines.linear.ep import fit_accurate
from tests.engines.intercept_quadrature import log_joint_grid

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)

INTERCEPTS = np.linspace(-6, 6, 481)


def _grouped(groups: int = 40, size: int = 6, sd: float = 2.0, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), size)
    u = rng.normal(0.0, sd, groups)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(0.3 + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "g": g.astype(str)})


@pytest.fixture(scope="module")
def fits():
    fit = bayesvm.bsvm("y ~ 1 + (1 | g)", _grouped(), penalty=1.0, checks=bayesvm.Checks(vb_check="ignore"))
    return fit, fit_accurate(fit.problem, importance_weights=False)


def _exact_log_evidence(problem, phi: np.ndarray) -> np.ndarray:
    """``log p(y | phi)`` at each ``phi`` by quadrature over the intercept (the random intercepts in closed form)."""
    hyper = Hyperparameters(problem.components)
    log_joint = log_joint_grid(problem, INTERCEPTS, phi)
    prior = np.array([hyper.log_prior(np.array([t])) for t in phi])
    return logsumexp(log_joint, axis=0) + np.log(INTERCEPTS[1] - INTERCEPTS[0]) - prior


def test_each_node_evidence_matches_quadrature(fits):
    """EP's ``log Z_EP(phi)`` is off by an amount that grows with the variance; the importance-sampled value is exact
    to Monte Carlo error at every node that carries weight."""
    fit, ep_only = fits
    result = fit.result
    assert result.node_weights.method == "importance"
    hyper = result.hyperparameters
    phi = result.nodes[:, 0]
    exact = _exact_log_evidence(fit.problem, phi)
    sampled = result.node_log_posterior - np.array([hyper.log_prior(np.array([t])) for t in phi])
    heavy = result.weights > 1e-3
    np.testing.assert_allclose(sampled[heavy], exact[heavy], atol=0.02)
    ep_error = np.interp(phi, ep_only.nodes[:, 0], ep_only.node_log_posterior) - exact - prior_of(hyper, phi)
    # EP's error changes across the nodes (that is what moves the weights): by far more than the sampled one's
    assert np.ptp(ep_error[heavy]) > 10 * np.ptp((sampled - exact)[heavy])


def prior_of(hyper, phi: np.ndarray) -> np.ndarray:
    return np.array([hyper.log_prior(np.array([t])) for t in phi])


def test_reweighted_posterior_matches_quadrature(fits):
    """The posterior mean of the variance and the intercept, and log p(y), from the importance-weighted nodes equal
    the exact ones; EP's weights miss the variance."""
    fit, ep_only = fits
    phi = np.linspace(-6, 5, 441)
    log_joint = log_joint_grid(fit.problem, INTERCEPTS, phi)
    p = np.exp(log_joint - logsumexp(log_joint))
    exact_variance = float(p.sum(axis=0) @ np.exp(phi))
    exact_intercept = float(p.sum(axis=1) @ INTERCEPTS)
    exact_evidence = float(logsumexp(log_joint) + np.log(INTERCEPTS[1] - INTERCEPTS[0]) + np.log(phi[1] - phi[0]))
    result = fit.result
    variance = float(result.weights @ result.covariances[0][:, 0, 0])
    ep_variance = float(ep_only.weights @ ep_only.covariances[0][:, 0, 0])
    assert variance == pytest.approx(exact_variance, rel=0.01)  # measured: 2.500 exact 2.505, EP 2.240
    assert abs(ep_variance / exact_variance - 1) > 2 * abs(variance / exact_variance - 1)
    intercept = float(result.weights @ np.array([t.mean_d[0] for t in result.thetas]))
    assert intercept == pytest.approx(exact_intercept, abs=0.01)
    assert result.log_evidence == pytest.approx(exact_evidence, abs=0.02)  # EP: 3.7 nats low


def test_unreliable_importance_weights_keep_eps(fits, monkeypatch):
    """Where the importance draws' effective sample size is too small the fit keeps EP's weights, and says so."""
    fit, ep_only = fits
    monkeypatch.setattr(ep, "MIN_ESS_FRACTION", 1.01)
    kept = fit_accurate(fit.problem)
    assert kept.node_weights.method == "EP" and kept.node_weights.ess_fraction > 0.5
    np.testing.assert_allclose(kept.weights, ep_only.weights)
    np.testing.assert_allclose(kept.nodes, ep_only.nodes)


def test_summary_says_how_the_nodes_were_weighted(fits):
    text = str(fits[0].summary(detail=True))
    assert "Nodes weighted by importance-sampled evidence p(y | variances)" in text
    assert "(importance-sampled at each node)" in text


def test_draws_are_reproducible(fits):
    fit, _ = fits
    again = fit_accurate(fit.problem)
    np.testing.assert_array_equal(again.weights, fit.result.weights)


def test_a_node_without_a_cholesky_factor_keeps_eps_weights_and_summary_says_why(fits, monkeypatch):
    from bayesvm.engines.linear import node_evidence

    def singular(*args):
        raise np.linalg.LinAlgError("not positive definite")

    fit, ep_only = fits
    monkeypatch.setattr(node_evidence, "gaussian_transform", singular)
    kept = fit_accurate(fit.problem)
    assert kept.node_weights.method == "EP" and "no Cholesky factor" in kept.node_weights.reason
    np.testing.assert_allclose(kept.weights, ep_only.weights)
    monkeypatch.setattr(fit, "result", kept)
    text = str(fit.summary())
    assert "Nodes weighted by EP's evidence, not importance-sampled evidence (" in text
    assert "no Cholesky factor" in text


def test_log_prior_of_the_coefficients_matches_scipy_draw_by_draw():
    """The batched prior density equals scipy's normal densities draw by draw, with a different covariance per draw,
    for a one-column and a two-column term (the term ``skip`` names is left out)."""
    from types import SimpleNamespace

    from scipy import stats

    from bayesvm.engines.linear.node_evidence import log_prior_dense

    rng = np.random.default_rng(3)
    S, p = 5, 2
    one = SimpleNamespace(k=1, n_levels=3, index=p + np.arange(3).reshape(3, 1))
    two = SimpleNamespace(k=2, n_levels=4, index=p + 3 + np.arange(8).reshape(4, 2))
    skipped = SimpleNamespace(k=1, n_levels=2, index=p + 11 + np.arange(2).reshape(2, 1))
    problem = SimpleNamespace(fixed_precision=np.array([0.0, 0.5] + [0.0] * 13), components=[one, two, skipped])
    theta = rng.standard_normal((S, p + 13)) * 2.0
    sigma1 = rng.exponential(size=(S, 1, 1)) + 0.1
    factors = rng.standard_normal((S, 2, 2))
    sigma2 = factors @ factors.transpose(0, 2, 1) + 0.2 * np.eye(2)
    covs = [sigma1, sigma2, np.full((S, 1, 1), np.nan)]  # the skipped term's covariance is never read
    expected = stats.norm(0.0, np.sqrt(2.0)).logpdf(theta[:, 1])
    for s in range(S):
        expected[s] += stats.norm(0.0, np.sqrt(sigma1[s, 0, 0])).logpdf(theta[s, one.index.ravel()]).sum()
        expected[s] += stats.multivariate_normal(np.zeros(2), sigma2[s]).logpdf(theta[s, two.index]).sum()
    np.testing.assert_allclose(log_prior_dense(problem, theta, covs, skip=2), expected, rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_level_classes_formed_once_give_the_same_integrals(weighted):
    """The size classes a node evidence forms once (:func:`level_classes`) give every node the integrals that forming
    them per call gives, with class weights and rows whose slope is zero (their hinge a constant) too."""
    from bayesvm.engines.linear.node_evidence import group_log_integrals, level_classes

    rng = np.random.default_rng(3)
    n, J, S = 900, 120, 10
    codes = rng.integers(0, J, n)
    codes[:40] = rng.integers(0, 3, 40)  # a few large levels beside many small ones
    y = rng.choice([-1.0, 1.0], n)
    v = np.where(rng.random(n) < 0.1, 0.0, rng.normal(1.0, 0.3, n))
    eta = rng.normal(0.0, 1.0, (S, n))
    sigma2 = rng.uniform(0.5, 3.0, S)
    weights = rng.uniform(0.5, 2.0, n) if weighted else None
    fresh = group_log_integrals(y, eta, v, codes, sigma2, J, weights)
    classes = level_classes(y, v, codes, J, weights)
    assert classes.flat.size > 0 and len(classes.classes) > 2
    np.testing.assert_allclose(group_log_integrals(y, eta, v, codes, sigma2, J, weights, classes), fresh, rtol=1e-13)
    # against the integrals level by level with every row in one class (no size classes at all)
    by_level = sum(
        group_log_integrals(y[codes == j], eta[:, codes == j], v[codes == j], np.zeros(int(np.sum(codes == j)), int),
                            sigma2, 1, None if weights is None else weights[codes == j])
        for j in range(J)
    )  # fmt: skip
    np.testing.assert_allclose(fresh, by_level, rtol=1e-10)
    # the predictor of draws formed class by class: the same integrals as at theta_d D'
    from bayesvm.engines.linear.node_evidence import draws_log_integrals

    D, theta_d = rng.normal(size=(n, 4)), rng.normal(size=(S, 4))
    np.testing.assert_allclose(
        draws_log_integrals(y, D, theta_d, v, codes, sigma2, J, weights, classes),
        group_log_integrals(y, theta_d @ D.T, v, codes, sigma2, J, weights, classes),
        rtol=1e-12,
    )


def test_large_data_take_fewer_draws_only_where_the_first_node_shows_they_suffice(fits, monkeypatch):
    """Above FEW_DRAWS_FROM_VALUES rows x draws, a first estimate whose effective sample size is at least
    FEW_DRAWS_ESS makes every estimate (its own included) use the first FEW_DRAWS draws: exactly the estimator built
    with that many; a lower one takes more (thinned_draws), up to every draw; below the threshold nothing changes."""
    from bayesvm.engines.linear import node_evidence as ne

    fit, _ = fits
    problem, hyper = fit.problem, fit.result.hyperparameters
    node, theta = fit.result.nodes[np.argmax(fit.result.weights)], fit.result.thetas[np.argmax(fit.result.weights)]
    full = ne.node_evidence(problem, hyper)(node, theta)
    few = ne.node_evidence(problem, hyper, draws=ne.FEW_DRAWS)(node, theta)
    assert full.ess_fraction >= ne.FEW_DRAWS_ESS  # (this node: the draws suffice)
    assert ne.node_evidence(problem, hyper).may_thin is False  # (240 rows: below the threshold)
    monkeypatch.setattr(ne, "FEW_DRAWS_FROM_VALUES", 0.0)
    thinned = ne.node_evidence(problem, hyper)
    assert thinned(node, theta) == few and thinned.draws == ne.FEW_DRAWS
    assert thinned(fit.result.nodes[0], fit.result.thetas[0]) == ne.node_evidence(problem, hyper, draws=8)(
        fit.result.nodes[0], fit.result.thetas[0]
    )
    # a lower effective sample size takes as many draws as the Monte Carlo variance (1/f - 1)/S needs: here 12
    waste = 1.0 / full.ess_fraction - 1.0
    monkeypatch.setattr(ne, "FEW_DRAWS_ESS", 1.0 / (1.0 + waste * ne.FEW_DRAWS / 12.0))
    graded = ne.node_evidence(problem, hyper)
    twelve = ne.node_evidence(problem, hyper, draws=12)
    twelve.may_thin = False  # (the estimator built with 12 draws)
    assert graded(node, theta) == twelve(node, theta) and graded.draws == 12
    monkeypatch.setattr(ne, "FEW_DRAWS_ESS", 1.0 / (1.0 + waste * ne.FEW_DRAWS / ne.DRAWS / 2.0))  # (needs 64)
    kept = ne.node_evidence(problem, hyper)
    assert kept(node, theta) == full and kept.draws == ne.DRAWS


def test_thinned_draws_keep_the_monte_carlo_variance_of_few_draws_at_the_threshold():
    """``(1/f - 1) / S`` at the thinned draws is at most its value at FEW_DRAWS draws and FEW_DRAWS_ESS, and two
    draws fewer would exceed it (within the bounds FEW_DRAWS and DRAWS); no usable ESS keeps every draw."""
    from bayesvm.engines.linear.node_evidence import DRAWS, FEW_DRAWS, FEW_DRAWS_ESS, thinned_draws

    limit = (1.0 / FEW_DRAWS_ESS - 1.0) / FEW_DRAWS
    for f in np.linspace(0.05, 1.0, 96):
        S = thinned_draws(f, DRAWS)
        assert FEW_DRAWS <= S <= DRAWS and S % 2 == 0
        if S < DRAWS:
            assert (1.0 / f - 1.0) / S <= limit * (1 + 1e-9)
        if S > FEW_DRAWS:
            assert (1.0 / f - 1.0) / (S - 2) > limit
    assert thinned_draws(FEW_DRAWS_ESS, DRAWS) == FEW_DRAWS
    assert thinned_draws(0.0, DRAWS) == thinned_draws(float("nan"), DRAWS) == DRAWS
