"""The collapsed variance step ``(sigma^2, u) | rest`` targets the pseudo-posterior's conditional."""

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

from bayesvm.engines import variance_prior
from bayesvm.engines.linear.collapsed_variance import CollapsedVariance, eligible_terms
from bayesvm.engines.linear.gibbs import sample_gibbs
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from benchmarks.gibbs_mixing import one_row_groups
from tests.engines.intercept_quadrature import log_joint_grid

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _problem(formula, data, penalty=1.0, priors=None):
    design = build_design(parse_formula(formula), data)
    return build_model(design, penalty, PriorSet() if priors is None else priors, standardize=False).problem()


def _data(seed=0, n=30):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "y": rng.choice(["a", "b"], n),
        "x": rng.standard_normal(n),
        "g": rng.choice(list("pqrs"), n),
        "h": rng.choice(list("uvwxyz"), n),
    })  # fmt: skip


def _exact_log_variance(comp, y, z, codes, rest, n_levels, log_s):
    """``log p(log s | rest)`` on a grid, each ``u_j`` integrated out of the hinge pseudo-likelihood by brute-force
    quadrature over a grid of ``u`` (not the closed form the step uses)."""
    u = np.linspace(-15, 15, 6001)
    out = []
    for t in log_s:
        s = np.exp(t)
        total = float(variance_prior.log_density(comp, s)) + t
        for j in range(n_levels):
            rows = codes == j
            f = rest[rows][:, None] + z[rows][:, None] * u[None, :]
            log_lik = -2.0 * np.sum(np.maximum(0.0, 1.0 - y[rows][:, None] * f), axis=0)
            log_integrand = log_lik - 0.5 * u**2 / s - 0.5 * np.log(2 * np.pi * s)
            total += logsumexp(log_integrand) + np.log(u[1] - u[0])
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize(
    "formula,priors",
    [("y ~ x + (1 | g)", "half-t"), ("y ~ x + (1 | h) + (0 + x | g)", "paper")],
    ids=["intercept-half-t", "two-terms-paper"],
)
def test_chain_of_steps_matches_quadrature(formula, priors):
    """The step repeated with the rest of the predictor held fixed is a Markov chain on ``(sigma^2, a, u)``: its
    ``log sigma^2`` must follow the exact conditional and its ``u`` the exact conditional mean, each term's in turn
    (blocked and not)."""
    data = _data()
    problem = _problem(formula, data, priors=PriorSet.paper() if priors == "paper" else PriorSet())
    rng = np.random.default_rng(1)
    terms = eligible_terms(problem)
    assert len(terms) == formula.count("|")  # every term of these formulas is eligible
    y = problem.y
    theta_d = rng.normal(0.0, 0.5, problem.D.shape[1])
    theta_b = (
        rng.normal(0.0, 0.5, (problem.blocked.n_levels, problem.blocked.K)) if problem.blocked else np.zeros((0, 0))
    )

    def predictor(td, tb):
        f = problem.D @ td
        if problem.blocked is not None:
            f = f + np.einsum("nk,nk->n", problem.blocked.values, tb[problem.blocked.codes])
        return np.asarray(f).ravel()

    for index in range(len(terms)):
        step = CollapsedVariance(problem)
        term = step.terms[index]
        step.terms, step.layouts, step.active, step.few_rows = [term], [step.layouts[index]], [True], [True]
        term.location = None  # the collapsed draw alone (the shifts move the rest: test_location_shift.py)
        step.shifts = []
        comp = problem.components[term.c]
        td, tb = theta_d.copy(), theta_b.copy()
        covs = [np.eye(c.k) for c in problem.components]
        aux = [None] * len(covs)
        f = predictor(td, tb)
        rows = slice(None) if term.rows is None else term.rows
        u0 = tb[:, term.column] if term.rows is None else td[term.column]
        rest = f[rows] - term.values * u0[term.codes]
        draws = []
        for _ in range(4000):
            td, tb, covs, f = step(td, tb, covs, aux, f, rng)
            draws.append(np.log(covs[term.c][0, 0]))
        np.testing.assert_allclose(f, predictor(td, tb), atol=1e-10)  # the predictor follows the new u
        u = tb[:, term.column] if term.rows is None else td[term.column]
        np.testing.assert_allclose(f[rows] - term.values * u[term.codes], rest, atol=1e-10)  # the rest is untouched
        grid = np.linspace(-14, 6, 401)
        log_p = _exact_log_variance(comp, y[rows], term.values, term.codes, rest, term.n_levels, grid)
        mass = np.exp(log_p - logsumexp(log_p))
        probabilities = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
        exact = np.interp(probabilities, np.cumsum(mass) - 0.5 * mass, grid)
        sampled = np.quantile(draws[200:], probabilities)
        np.testing.assert_allclose(sampled, exact, atol=0.05 * (exact[-1] - exact[0]))


def test_rows_in_two_levels_keep_the_conditional_draw():
    """A term whose rows load on several of its columns (a GP basis, say) does not integrate out level by level."""
    import dataclasses

    problem = _problem("y ~ x + (1 | h) + (0 + x | g)", _data())
    in_design = [term for term in eligible_terms(problem) if not term.blocked]
    assert len(in_design) == 1
    columns = problem.components[in_design[0].c].index[:, 0]
    D = np.array(problem.D, dtype=float, copy=True)
    D[0, columns] = 1.0  # row 0 now in every level of the term
    assert [term.c for term in eligible_terms(dataclasses.replace(problem, D=D))] == [
        term.c for term in eligible_terms(problem) if term.blocked
    ]


def test_step_with_location_matches_quadrature_of_intercept_and_variance():
    """With a location column (the intercept of ``y ~ 1 + (1 | g)``) the step moves ``(beta, sigma^2, u)`` with ``w``
    and ``u`` integrated out (module docstring): repeated alone, its draws of ``beta`` and ``log sigma^2`` must follow
    the exact joint, two-dimensional quadrature with the random intercepts integrated in closed form."""
    problem = _problem("y ~ 1 + (1 | g)", one_row_groups())
    b, phi = np.linspace(-2.5, 0.5, 601), np.linspace(-30, 6, 181)
    log_p = log_joint_grid(problem, b, phi)
    p = np.exp(log_p - logsumexp(log_p))
    probabilities = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    exact_b = np.interp(probabilities, np.cumsum(p.sum(axis=1)), b)
    exact_phi = np.interp(probabilities, np.cumsum(p.sum(axis=0)), phi)
    step = CollapsedVariance(problem)
    (term,) = step.terms
    assert term.location == 0
    rng = np.random.default_rng(0)
    theta_d, theta_b = np.array([-1.0]), np.zeros((problem.blocked.n_levels, 1))
    covs, aux = [np.eye(1)], [None]
    f = problem.D @ theta_d + problem.blocked.values[:, 0] * theta_b[problem.blocked.codes, 0]
    draws = []
    for _ in range(12000):
        step.collapsed_draw(term, step.layouts[0], theta_d, theta_b, covs, aux, f, rng)
        draws.append((theta_d[0], np.log(covs[0][0, 0])))
    np.testing.assert_allclose(f, problem.D @ theta_d + theta_b[problem.blocked.codes, 0], atol=1e-10)
    sampled = np.quantile(np.array(draws[200:]), probabilities, axis=0)
    np.testing.assert_allclose(sampled[:, 0], exact_b, atol=0.015)  # b's quartiles span about 0.05
    np.testing.assert_allclose(sampled[:, 1], exact_phi, atol=0.05 * (exact_phi[-1] - exact_phi[0]))


def test_default_sampler_finds_the_small_mode_in_proportion():
    """The paper's step ``sigma^2 | u`` sticks in the upper mode (measured: 28-81% of each chain's draws there against
    14% exact); with the collapsed step the pooled chains put the exact share there and every chain crosses.

    (The intercept's SD is about 0.02 in the larger mode, near ``sigma = 0``: the quadrature's grid must resolve it, or
    the exact share comes out 0.10 instead of 0.14.)"""
    problem = _problem("y ~ 1 + (1 | g)", one_row_groups())
    result = sample_gibbs(problem, draws=1500, tune=300, chains=4, seed=2, progress=False)
    b, phi = np.linspace(-2.5, 0.5, 601), np.linspace(-30, 6, 181)  # b's SD is about 0.02 near sigma = 0
    log_p = log_joint_grid(problem, b, phi)
    mass = np.exp(log_p - logsumexp(log_p)).sum(axis=0)
    log_variance = np.log(result.components[0][..., 0, 0])
    exact_upper = mass[phi > -3].sum()
    assert 0.12 < exact_upper < 0.16
    assert abs(np.mean(log_variance > -3) - exact_upper) < 0.06
    upper = log_variance > -3
    assert np.all(upper.mean(axis=1) > 0) and np.all(upper.mean(axis=1) < 0.5)  # every chain crosses between them


def test_sticky_rule_reads_the_lag_one_autocorrelation():
    from bayesvm.engines.linear.collapsed_variance import STICKY_LAG1, _sticky

    rng = np.random.default_rng(0)

    def ar1(rho, n=375):
        x = np.zeros(n)
        for i in range(1, n):
            x[i] = rho * x[i - 1] + np.sqrt(1 - rho**2) * rng.standard_normal()
        return list(x)

    assert _sticky(ar1(0.97))
    assert not _sticky(ar1(0.7))
    assert not _sticky(ar1(STICKY_LAG1 - 0.15))
    assert _sticky([-11.0] * 50)  # draws that never move stick
    assert not _sticky(ar1(0.99, n=7))  # too few draws to tell


def _many_rows_per_level(seed=0, groups=15, rows=50, rate=0.12, sd=0.0):
    """Levels of many rows and mostly one class (as lme4's cbpp): with ``sd = 0`` the variance's posterior sits near 0,
    where ``sigma^2 | u`` crawls because rows on the margin pin every ``u_j``."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), rows)
    u = rng.normal(0.0, sd, groups)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(np.log(rate / (1 - rate)) + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "g": g.astype(str)})


def test_many_row_term_gets_the_step_where_its_variance_sticks(monkeypatch):
    """A term with many rows per level has no collapsed step unless its variance's draws stick in the first half of
    tuning (``STICKY_LAG1``); then the step runs from half-way through tuning on, and the draws follow the exact
    posterior (quadrature with the random intercepts integrated in closed form) with ten times the effective draws
    (measured: bulk ESS of ``log sigma^2`` 46-77 of 4,000 draws without, 684-739 with)."""
    import arviz as az

    from bayesvm.engines.linear import collapsed_variance

    calls = []
    original = CollapsedVariance.collapsed_draw

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CollapsedVariance, "collapsed_draw", counted)
    problem = _problem("y ~ 1 + (1 | g)", _many_rows_per_level())
    (term,) = eligible_terms(problem)
    assert np.median(np.bincount(term.codes)) > collapsed_variance.FEW_ROWS
    result = sample_gibbs(problem, draws=1000, tune=1000, chains=4, seed=1, progress=False)
    assert len(calls) == 4 * (500 + 1000) // collapsed_variance.COLLAPSED_EVERY  # from tune / 2 on, every 4th
    log_variance = np.log(result.components[0][..., 0, 0])
    assert float(az.ess(log_variance)) > 400
    # the intercept is pinned within about 1e-3 at small sigma (the majority's margin): a grid of 1e-4 resolves it
    b, phi = np.linspace(0.99, 1.07, 801), np.linspace(-30.0, 4.0, 69)
    log_p = np.concatenate([log_joint_grid(problem, b, phi[i : i + 8]) for i in range(0, phi.size, 8)], axis=1)
    p = np.exp(log_p - logsumexp(log_p))
    probabilities = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    # (each cell's mass lies up to its upper edge, half a step above its grid point)
    exact = np.interp(probabilities, np.cumsum(p.sum(axis=0)), phi + 0.5 * (phi[1] - phi[0]))
    np.testing.assert_allclose(np.quantile(log_variance, probabilities), exact, atol=0.4)  # spread 6

    calls.clear()  # a well-identified term with as many rows per level: no step
    problem = _problem("y ~ 1 + (1 | g)", _many_rows_per_level(rate=0.4, sd=1.0))
    sample_gibbs(problem, draws=200, tune=1000, chains=1, seed=1, progress=False)
    assert not calls


def test_level_draw_is_the_exact_conditional_of_the_effects():
    """The every-iteration draw of a term's effects with ``w`` integrated out: given ``sigma^2`` and the rest of the
    predictor, each level's draws average to its exact conditional mean (grid quadrature), and the predictor follows
    the new effects while the rest stays."""
    data = _data(seed=4)
    problem = _problem("y ~ x + (1 | g)", data)
    step = CollapsedVariance(problem)
    term, layout = step.terms[0], step.layouts[0]
    rng = np.random.default_rng(2)
    theta_d = rng.normal(0.0, 0.5, problem.D.shape[1])
    theta_b = rng.normal(0.0, 0.5, (problem.blocked.n_levels, 1))
    covs = [np.array([[0.8]]) if c.source >= 0 else np.eye(c.k) for c in problem.components]
    f = problem.D @ theta_d + problem.blocked.values[:, 0] * theta_b[problem.blocked.codes, 0]
    rest = f - term.values * theta_b[term.codes, 0]
    draws = []
    for _ in range(6000):
        step.level_draw(term, layout, theta_d, theta_b, covs, f, rng)
        draws.append(theta_b[:, 0].copy())
    np.testing.assert_allclose(f, rest + term.values * theta_b[term.codes, 0], atol=1e-12)
    u = np.linspace(-8, 8, 8001)
    for j in range(term.n_levels):
        rows = term.codes == j
        hinge = np.maximum(0.0, 1.0 - problem.y[rows, None] * (rest[rows, None] + term.values[rows, None] * u)).sum(0)
        log_density = -2.0 * hinge - 0.5 * u**2 / 0.8
        weights = np.exp(log_density - log_density.max())
        exact_mean = float(np.sum(u * weights) / np.sum(weights))
        exact_sd = float(np.sqrt(np.sum((u - exact_mean) ** 2 * weights) / np.sum(weights)))
        assert np.mean(np.array(draws)[:, j]) == pytest.approx(exact_mean, abs=4 * exact_sd / np.sqrt(6000))
