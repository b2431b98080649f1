"""The moves of a random intercept nested in another draw the exact conditional of both variances and the outer
effects given the totals, leave ``f`` unchanged, and are made only for nested intercepts."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bayesvm.engines.linear.collapsed_variance import CollapsedVariance, eligible_terms
from bayesvm.engines.linear.nested_intercepts import nested_intercepts
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from tests.engines.linear.test_location_shift import _predictor

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _data(seed=0, n=90):
    rng = np.random.default_rng(seed)
    site = rng.choice(list("pqrst"), n)
    return pd.DataFrame({
        "y": rng.choice(["a", "b"], n),
        "x": rng.standard_normal(n),
        "site": site,
        "patient": np.char.add(site.astype(str), rng.choice(list("1234"), n)),  # nested in site
        "day": rng.choice(list("uvw"), n),  # crossed with site
    })  # fmt: skip


def _problem(formula, data=None, penalty=1.0):
    design = build_design(parse_formula(formula), _data() if data is None else data)
    return build_model(design, penalty, PriorSet(), standardize=False).problem()


def _effects(term, theta_d, theta_b):
    return theta_b[:, term.column].copy() if term.blocked else theta_d[term.column].copy()


def test_found_for_nested_intercepts_only():
    """``(1 | site/patient)`` (either way written) gets one shift, patients inside sites; crossed terms, a term and
    a random slope, or an intercept on other rows get none."""
    for formula in ("y ~ x + (1 | site/patient)", "y ~ x + (1 | site) + (1 | patient)"):
        problem = _problem(formula)
        (move,) = nested_intercepts(problem, eligible_terms(problem))
        assert problem.components[move.outer.c].n_levels == 5
        assert problem.components[move.inner.c].n_levels == 20
        data = _data()
        sites = data.groupby("patient")["site"].first()
        assert move.children.sum() == 20 and np.all(move.children == sites.value_counts().sort_index().to_numpy())
    assert nested_intercepts(*(lambda p: (p, eligible_terms(p)))(_problem("y ~ x + (1 | site) + (1 | day)"))) == []
    problem = _problem("y ~ x + (1 | site) + (0 + x | patient)")
    assert nested_intercepts(problem, eligible_terms(problem)) == []


@pytest.mark.parametrize("priors", ["half-t", "paper"])
def test_moves_draw_the_exact_conditional_of_the_variances_and_the_effects(priors):
    """The moves repeated with every total ``w_b = v_site(b) + u_b`` held fixed (so ``f`` never moves) are a Markov
    chain on ``(s_site, s_patient, v)`` whose target is their exact conditional given ``w``: the quantiles of both log
    variances and the mean of each site effect must match two-dimensional quadrature whose likelihood is each
    site's ``w`` under ``scipy.stats.multivariate_normal(0, s_patient I + s_site 11')``, written from the model
    directly, not from the move's algebra."""
    from bayesvm.engines import variance_prior

    problem_priors = PriorSet.paper() if priors == "paper" else PriorSet()
    problem = build_model(build_design(parse_formula("y ~ x + (1 | site/patient)"), _data()), 1.0, problem_priors,
                          standardize=False).problem()  # fmt: skip
    (move,) = nested_intercepts(problem, eligible_terms(problem))
    rng = np.random.default_rng(3)
    theta_d = rng.normal(0.0, 0.7, problem.D.shape[1])
    theta_b = rng.normal(0.4, 0.8, (problem.blocked.n_levels, problem.blocked.K))
    covs = [np.array([[0.8]]) for _ in problem.components]
    aux = [None for _ in problem.components]
    f0 = _predictor(problem, theta_d, theta_b)
    v0, u0 = _effects(move.outer, theta_d, theta_b), _effects(move.inner, theta_d, theta_b)
    w = u0 + v0[move.parent]
    outer, inner = problem.components[move.outer.c], problem.components[move.inner.c]

    grid = np.linspace(-9.0, 5.0, 141)
    t_o, t_i = np.meshgrid(grid, grid, indexing="ij")
    log_p = np.asarray(variance_prior.log_density(outer, np.exp(t_o)) + t_o, dtype=float)
    log_p = log_p + np.asarray(variance_prior.log_density(inner, np.exp(t_i)) + t_i, dtype=float)
    for site in range(move.outer.n_levels):  # log N(w_site; 0, s_i I + s_o 11'), dense, on the whole grid at once
        members = w[move.parent == site]
        m = members.size
        cov = np.exp(t_i)[..., None, None] * np.eye(m) + np.exp(t_o)[..., None, None] * np.ones((m, m))
        _, log_det = np.linalg.slogdet(cov)
        solved = np.linalg.solve(cov, np.broadcast_to(members[:, None], cov.shape[:-1] + (1,)))[..., 0]
        quadratic = np.einsum("i,...i->...", members, solved)
        log_p += -0.5 * (m * np.log(2 * np.pi) + log_det + quadratic)
    reference = stats.multivariate_normal(np.zeros(m), cov[3, 7]).logpdf(members)  # the dense formula is scipy's
    assert abs(-0.5 * (m * np.log(2 * np.pi) + log_det[3, 7] + quadratic[3, 7]) - reference) < 1e-9
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    probabilities = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    edges = grid + 0.5 * (grid[1] - grid[0])  # each cell's mass lies up to its upper edge
    exact_outer = np.interp(probabilities, np.cumsum(p.sum(axis=1)), edges)
    exact_inner = np.interp(probabilities, np.cumsum(p.sum(axis=0)), edges)
    s_o, s_i = np.exp(grid)[:, None], np.exp(grid)[None, :]
    totals = np.array([w[move.parent == site].sum() for site in range(move.outer.n_levels)])
    # E[v_site | w] = sum over the grid of E[v_site | w, s] p(s | w)
    exact_v = np.array([np.sum(p * (t / s_i) / (1 / s_o + n / s_i)) for t, n in zip(totals, move.children)])

    draws = []
    for _ in range(6000):
        move(problem, theta_d, theta_b, covs, aux, rng)
        draws.append((np.log(covs[move.outer.c][0, 0]), np.log(covs[move.inner.c][0, 0]),
                      *_effects(move.outer, theta_d, theta_b)))  # fmt: skip
    draws = np.array(draws[100:])
    np.testing.assert_allclose(_predictor(problem, theta_d, theta_b), f0, atol=1e-10)  # f never moved
    np.testing.assert_allclose(_effects(move.inner, theta_d, theta_b) + draws[-1, 2:][move.parent], w, atol=1e-10)
    spread = exact_outer[-1] - exact_outer[0]
    np.testing.assert_allclose(np.quantile(draws[:, 0], probabilities), exact_outer, atol=0.08 * spread)
    np.testing.assert_allclose(np.quantile(draws[:, 1], probabilities), exact_inner,
                               atol=0.08 * (exact_inner[-1] - exact_inner[0]))  # fmt: skip
    np.testing.assert_allclose(draws[:, 2:].mean(axis=0), exact_v, atol=0.06)


def test_sampler_makes_the_move():
    """The collapsed-variance moves of a Gibbs chain include the shift (and only for nested terms)."""
    assert CollapsedVariance(_problem("y ~ x + (1 | site/patient)")).nested
    assert not CollapsedVariance(_problem("y ~ x + (1 | site) + (1 | day)")).nested
