"""The location shift of every random-effect term draws its orbit's exact conditional and leaves ``f`` unchanged."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bayesvm.engines.linear.location_shift import _shift_blocked_intercept, _shift_term, effects, shift, term_shifts
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _problem(formula, penalty):
    rng = np.random.default_rng(0)
    n = 60
    data = pd.DataFrame({
        "y": rng.choice(["a", "b"], n),
        "x": rng.standard_normal(n),
        "w": rng.standard_normal(n),
        "g": rng.choice(list("pqrstu"), n),
    })  # fmt: skip
    design = build_design(parse_formula(formula), data)
    return build_model(design, penalty, PriorSet(), standardize=False).problem()


def _predictor(problem, theta_d, theta_b):
    f = np.asarray(problem.D @ theta_d).ravel()
    if problem.blocked is not None:
        f = f + np.einsum("nk,nk->n", problem.blocked.values, theta_b[problem.blocked.codes])
    return f


def _log_prior(problem, move, covs, theta_d, theta_b):
    """The priors the shift sees, written from the model directly: each level's effects ``N(0, Sigma)`` and each
    location's normal prior."""
    comp = problem.components[move.c]
    out = stats.multivariate_normal(np.zeros(comp.k), covs[move.c]).logpdf(effects(comp, theta_d, theta_b)).sum()
    for location, penalised in zip(move.locations, move.penalised):
        variance = covs[move.penalty][0, 0] if penalised else 1.0 / problem.fixed_precision[location]
        out += stats.norm(0.0, np.sqrt(variance)).logpdf(theta_d[location])
    return float(out)


@pytest.mark.parametrize(
    "formula,penalty,penalised",
    [("y ~ x + (1 + x | g)", 1.0, [False, False]), ("y ~ x + w + (1 + x | g)", "learn", [False, True]),
     ("y ~ x + (1 | g)", 1.0, [False])],
    ids=["correlated", "correlated-penalised-slope", "intercept"],
)  # fmt: skip
def test_shift_draws_the_orbit_exactly(formula, penalty, penalised):
    """Repeated from one state, the shifts' total displacement ``Delta`` of the locations is a draw from the orbit's
    density ``pi(beta_L + Delta, u - P Delta)``: its mean and covariance are read off that density by finite
    differences (exact for a quadratic), independently of the move's algebra."""
    problem = _problem(formula, penalty)
    (move,) = term_shifts(problem)
    names = [0, 1][: len(penalised)]
    assert move.coordinates.tolist() == names  # the intercept and, for (1 + x | g), x
    assert move.penalised.tolist() == penalised
    rng = np.random.default_rng(4)
    theta_d = rng.normal(0.0, 0.7, problem.D.shape[1])
    theta_b = rng.normal(0.5, 0.8, (problem.blocked.n_levels, problem.blocked.K))
    k = problem.components[move.c].k
    covs = [np.array([[0.6]]) if c.k == 1 else np.array([[0.9, -0.3], [-0.3, 0.5]])[:k, :k] for c in
            problem.components]  # fmt: skip
    f0 = _predictor(problem, theta_d, theta_b)
    start_d, start_b = theta_d.copy(), theta_b.copy()

    def orbit(delta):
        td, tb = start_d.copy(), start_b.copy()
        td[move.locations] += delta
        tb[:, problem.components[move.c].index[0, move.coordinates]] -= delta
        return _log_prior(problem, move, covs, td, tb)

    m, h = move.locations.size, 1e-3
    basis = np.eye(m)
    gradient = np.array([(orbit(h * e) - orbit(-h * e)) / (2 * h) for e in basis])
    hessian = np.array([[(orbit(h * (a + b)) - orbit(h * (a - b)) - orbit(h * (b - a)) + orbit(-h * (a + b)))
                         / (4 * h * h) for b in basis] for a in basis])  # fmt: skip
    covariance = np.linalg.inv(-hessian)
    mean = covariance @ gradient

    draws = []
    for _ in range(4000):
        shift(problem, move, theta_d, theta_b, covs, rng)
        draws.append(theta_d[move.locations] - start_d[move.locations])
    draws = np.array(draws)
    np.testing.assert_allclose(_predictor(problem, theta_d, theta_b), f0, atol=1e-10)  # f unchanged
    sd = np.sqrt(np.diag(covariance))
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * sd / np.sqrt(len(draws)))
    np.testing.assert_allclose(np.cov(draws.T).reshape(m, m), covariance, rtol=0.08, atol=0.08 * sd.max() ** 2)


def test_no_location_without_a_matching_column():
    """``(0 + x | g)`` with no ``x`` among the fixed effects, or an imputed (varying) column: nothing to shift."""
    assert term_shifts(_problem("y ~ w + (0 + x | g)", 1.0)) == []
    problem = _problem("y ~ x + (1 + x | g)", 1.0)
    (move,) = term_shifts(problem, varying_columns=np.array([1]))
    assert move.locations.tolist() == [0]  # x varies: only the intercept shifts


def test_two_terms_in_the_design_and_blocked_keep_the_predictor():
    """``(1 | h) + (1 + x | g)``: one term blocked, the other among the design's columns (located by its columns'
    row sums); every shift keeps ``f`` and moves the intercept."""
    rng = np.random.default_rng(2)
    n = 80
    data = pd.DataFrame({
        "y": rng.choice(["a", "b"], n), "x": rng.standard_normal(n),
        "g": rng.choice(list("pqrstu"), n), "h": rng.choice(list("abcdefghij"), n),
    })  # fmt: skip
    problem = build_model(
        build_design(parse_formula("y ~ x + (1 | h) + (1 + x | g)"), data), 1.0, PriorSet(), standardize=False
    ).problem()
    moves = term_shifts(problem)
    assert sorted(problem.components[m.c].blocked for m in moves) == [False, True]
    theta_d = rng.normal(0.0, 0.7, problem.D.shape[1])
    theta_b = rng.normal(0.0, 0.7, (problem.blocked.n_levels, problem.blocked.K))
    covs = [np.eye(c.k) * 0.7 for c in problem.components]
    f0 = _predictor(problem, theta_d, theta_b)
    intercept = theta_d[0]
    for move in moves:
        shift(problem, move, theta_d, theta_b, covs, rng)
    np.testing.assert_allclose(_predictor(problem, theta_d, theta_b), f0, atol=1e-10)
    assert theta_d[0] != intercept


@pytest.mark.parametrize("penalty", [1.0, "learn"])
def test_random_intercept_shift_in_scalars_equals_the_general_shift(penalty):
    """A random intercept's shift in scalars (every iteration) makes the general shift's draw from the same seed."""
    problem = _problem("y ~ x + (1 | g)", penalty)
    (move,) = term_shifts(problem)
    comp = problem.components[move.c]
    rng = np.random.default_rng(2)
    theta_d, theta_b = rng.standard_normal(problem.D.shape[1]), rng.standard_normal((comp.n_levels, 1))
    covs = [np.array([[v]]) for v in rng.uniform(0.3, 3.0, len(problem.components))]
    out = []
    for kernel in (_shift_blocked_intercept, _shift_term):
        td, tb = theta_d.copy(), theta_b.copy()
        kernel(problem, move, comp, td, tb, covs, np.random.default_rng(7))
        out.append((td, tb))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-13)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-13)
    assert not np.allclose(out[0][0], theta_d)
