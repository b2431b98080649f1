"""The learned penalty's variance integrated from the slopes' posterior: against the whole lattice, its check, and the
default that takes it past the two-hyperparameter row limit and out of larger lattices."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

import bayesvm
from bayesvm.engines import defaults
from bayesvm.engines.hyper_grid import heaviest_nodes
from bayesvm.engines.linear import penalty_from_slopes as module
from bayesvm.engines.linear import routes
from bayesvm.priors import InverseGamma
from tests.conftest import simulate_grouped

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)

FORMULA = "y ~ x1 + x2 + x3 + (1 | g)"


@pytest.fixture(scope="module")
def grouped():
    return simulate_grouped(n_groups=300, per_group=10, p=3, seed=3)


@pytest.fixture(scope="module")
def whole_lattice(grouped):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bayesvm.bsvm(FORMULA, grouped, vb="accurate", progress=False)


def variance(result, k: int) -> float:
    """The posterior mean of variance parameter ``k`` under an accurate fit's node weights."""
    return float(result.variances[:, k] @ result.weights)


def _fixed_moments(result, p):
    mean, cov = result.fixed_moments(p)
    return mean, np.sqrt(np.diag(cov))


def test_it_matches_the_whole_lattice(whole_lattice):
    """The same posterior as EP on the lattice over both variances (which costs several times the EP fits)."""
    problem, full = whole_lattice.problem, whole_lattice.result
    hybrid, declined = module.fit_penalty_from_slopes(problem)
    assert hybrid is not None and declined == ""
    assert hybrid.penalty_from_slopes.ep_nodes < full.weights.size / 3
    p = problem.D.shape[1]
    (m_full, s_full), (m_hybrid, s_hybrid) = _fixed_moments(full, p), _fixed_moments(hybrid, p)
    assert np.max(np.abs(m_hybrid - m_full) / s_full) < 0.15
    np.testing.assert_allclose(s_hybrid, s_full, rtol=0.03)
    c = module.penalty_index(problem)
    other = 1 - c
    assert variance(hybrid, other) == pytest.approx(variance(full, other), rel=0.02)
    assert abs(hybrid.log_evidence - full.log_evidence) < 0.1
    # the penalty's posterior is spread over its axis, not a point: its variance's SD as the lattice's, roughly
    spread = lambda r: float(np.sqrt(r.variances[:, c] ** 2 @ r.weights - variance(r, c) ** 2))  # noqa: E731
    assert spread(hybrid) > 0.5 * spread(full)
    assert np.isclose(hybrid.weights.sum(), 1.0) and len(hybrid.thetas) == hybrid.weights.size


def test_the_conditional_is_the_inverse_gamma_of_the_slopes():
    """Under the inverse-gamma prior, one draw's conditional of ``t = log s`` is IG(a + m/2, b + |beta|^2 / 2) in
    ``t`` (its density times ``s``)."""
    component = type("Component", (), {"n_levels": 4, "prior": InverseGamma(2.0, 3.0)})()
    t = np.linspace(-6.0, 6.0, 4001)
    squares = np.array([5.0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module.variance_prior, "log_density", lambda comp, s: stats.invgamma(2.0, scale=3.0).logpdf(s))
        got = module.conditional_log_density(component, squares, t)
    exact = stats.invgamma(2.0 + 2.0, scale=3.0 + 2.5).logpdf(np.exp(t)) + t
    np.testing.assert_allclose(got, exact, atol=1e-5)


def test_the_check_refuses_slopes_that_the_penalty_moves():
    """Few rows and many weak slopes: the prior's precision is not small beside the data's, so the means are not a
    line in 1/s and the fit is left to the whole lattice (None)."""
    frame = simulate_grouped(n_groups=10, per_group=6, p=12, seed=1)
    formula = "y ~ " + " + ".join(f"x{j + 1}" for j in range(12)) + " + (1 | g)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(formula, frame, vb="meanfield", progress=False)
    responses = []
    original = module.slope_response

    def recorded(*args):
        responses.append(original(*args))
        return responses[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "slope_response", recorded)
        result, declined = module.fit_penalty_from_slopes(fit.problem)
    assert result is None and "depends on the learned penalty" in declined
    response = responses[-1]
    assert response.curvature > module.MAX_CURVATURE or response.sd_change > module.MAX_SD_CHANGE


def test_the_default_takes_it_past_the_row_limit_and_says_so(grouped, monkeypatch):
    """Past the two-hyperparameter row limit the default is this accurate fit, not mean-field VB; the summary names
    it, the calibration's folds refit at the other variance's values only, and the saved fit keeps it."""
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(FORMULA, grouped, progress=False)
    record = fit.result.penalty_from_slopes
    assert fit.posterior.over_nodes and record is not None
    assert f"EP at {record.ep_nodes} values" in str(fit.summary())
    assert "integrated from the slopes' posterior" in str(fit.summary(detail=True))
    heaviest = heaviest_nodes(fit.result)
    given = module.given_at_fitted_penalty(fit.result, heaviest)
    c = module.penalty_index_of(fit.result)
    assert np.allclose(given.nodes[:, c], np.log(record.fitted_at))
    assert given.nodes.shape[0] == np.unique(np.round(np.delete(heaviest.nodes, c, axis=1), 12), axis=0).shape[0]
    assert np.isclose(given.weights.sum(), 1.0)
    probabilities = fit.predict(grouped.head(20), kind="prob")
    assert np.all((probabilities > 0) & (probabilities < 1))


def test_the_exact_posterior_agrees_by_importance_sampling(grouped, monkeypatch):
    """The PSIS check against the exact posterior (the random intercepts integrated out in closed form, the penalty's
    variance drawn over its cells): k-hat at most 0.5, and no reported mean (fixed effects, both variances) moved by a
    tenth of its SD."""
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(FORMULA, grouped, progress=False)
        check = fit.check_vb(warn=False)
    assert fit.result.penalty_from_slopes is not None
    assert check.marginal_khat <= 0.5
    assert "penalty sigma_u^2" in check.shift.index  # (the penalty's variance among them)
    assert np.max(np.abs(check.shift["shift"])) < 0.1


def test_asking_for_the_accurate_fit_past_the_limit_takes_it_too(grouped, monkeypatch):
    """``vb="accurate"`` past the row limit gets the same fit (the whole lattice only where the check refuses)."""
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(FORMULA, grouped, vb="accurate", progress=False)
    assert fit.result.penalty_from_slopes is not None and fit.vb_note is None


def test_the_default_keeps_mean_field_where_it_does_not_apply(grouped, monkeypatch):
    """With the penalty fixed there is one variance and nothing to integrate from the slopes; past the row limit the
    default stays mean-field VB with its reason."""
    monkeypatch.setattr(defaults, "AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(FORMULA, grouped, penalty=1.0, progress=False)
    assert not fit.posterior.over_nodes


def test_the_default_takes_the_penalty_out_of_a_larger_lattice(monkeypatch):
    """Two random-effect terms and the learned penalty: below the row limit the default integrates the penalty from
    the slopes (a 2-D lattice of EP fits in place of a 3-D one) and gives the whole lattice's posterior."""
    frame = simulate_grouped(n_groups=150, per_group=10, p=3, seed=3)
    formula = FORMULA + " + (1 | h)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(formula, frame, progress=False)
        monkeypatch.setattr(routes, "default_penalty_from_slopes", lambda problem: False)
        whole = bayesvm.bsvm(formula, frame, progress=False)
    hybrid, full = fit.result, whole.result
    assert hybrid.penalty_from_slopes is not None and full.penalty_from_slopes is None
    assert hybrid.penalty_from_slopes.ep_nodes < full.weights.size / 2
    p = fit.problem.D.shape[1]
    (m_full, s_full), (m_hybrid, s_hybrid) = _fixed_moments(full, p), _fixed_moments(hybrid, p)
    assert np.max(np.abs(m_hybrid - m_full) / s_full) < 0.15
    np.testing.assert_allclose(s_hybrid, s_full, rtol=module.MAX_SD_CHANGE)  # (the check's bound on the SDs)
    c = module.penalty_index(fit.problem)
    for k in {0, 1, 2} - {c}:
        assert variance(hybrid, k) == pytest.approx(variance(full, k), rel=0.03)
    assert variance(hybrid, c) == pytest.approx(variance(full, c), rel=0.1)  # (three slopes: a wide posterior)
    assert abs(hybrid.log_evidence - full.log_evidence) < 0.1
