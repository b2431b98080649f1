"""The rescaling (partial non-centring) moves of the Gibbs sampler keep its target posterior."""

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

from bayesvm.engines.linear import interweave
from bayesvm.engines.linear.gibbs import sample_gibbs
from bayesvm.engines.linear.interweave import ScaleMoves, single_class_levels
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from tests.engines.intercept_quadrature import log_joint_grid

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _problem(formula, data, penalty, priors=None):
    design = build_design(parse_formula(formula), data)
    return build_model(design, penalty, PriorSet() if priors is None else priors, standardize=False).problem()


def _grouped(seed=1, groups=10, size=4, sd=1.5):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), size)
    u = rng.normal(0.0, sd, groups)
    x = rng.standard_normal(g.size)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(0.3 + 0.8 * x + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "x": x, "g": g.astype(str)})


def test_single_class_levels():
    data = pd.DataFrame({"y": ["a", "a", "b", "a", "b", "b"], "g": ["1", "1", "2", "2", "3", "3"]})
    problem = _problem("y ~ 1 + (1 | g)", data, penalty=1.0)
    assert single_class_levels(problem, problem.components[0]).tolist() == [True, False, True]


def _exact_marginals(problem):
    """Quadrature over (intercept, log sigma^2), the random intercepts integrated out exactly."""
    b, phi = np.linspace(-7, 7, 281), np.linspace(-9, 6, 301)
    log_p = log_joint_grid(problem, b, phi)
    weights = np.exp(log_p - logsumexp(log_p))
    return (b, weights.sum(axis=1)), (phi, weights.sum(axis=0))


def _quantiles(grid, mass, probabilities):
    return np.interp(probabilities, np.cumsum(mass) - 0.5 * mass, grid)


# (the papers' inverse-gamma priors run with --runslow for suite time: the component draw is the half-t's given its
# auxiliary variable, which the default case checks)
@pytest.mark.parametrize("priors", ["half-t", pytest.param("paper", marks=pytest.mark.slow)])
# (the narrow global width, a constant of the chain like the default one, runs with --runslow for suite time)
@pytest.mark.parametrize(
    "global_rows", [2_000, pytest.param(12, marks=pytest.mark.slow)], ids=["toenail-width", "narrow-global-width"]
)
def test_gibbs_with_moves_matches_quadrature(priors, global_rows, monkeypatch):
    """``global_rows=12``: the global rescaling gets the narrower slice width of large data (half of
    ``SLICE_WIDTH`` on these 48 rows, as 8,000 rows get by default), which must leave the target unchanged too."""
    monkeypatch.setattr(interweave, "GLOBAL_WIDTH_ROWS", global_rows)
    data = _grouped(groups=12, size=4, sd=3.0)
    problem = _problem("y ~ 1 + (1 | g)", data, 1.0, PriorSet.paper() if priors == "paper" else PriorSet())
    assert single_class_levels(problem, problem.components[0]).sum() >= 3  # the moves rescale some levels
    result = sample_gibbs(problem, draws=3000, tune=300, chains=4, seed=3, progress=False)
    (b, mass_b), (phi, mass_phi) = _exact_marginals(problem)
    probabilities = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    intercept = result.theta_d[..., 0].ravel()
    log_variance = np.log(result.components[0][..., 0, 0]).ravel()
    for draws, (grid, mass) in ((intercept, (b, mass_b)), (log_variance, (phi, mass_phi))):
        exact = _quantiles(grid, mass, probabilities)
        sampled = np.quantile(draws, probabilities)
        spread = exact[-1] - exact[0]
        np.testing.assert_allclose(sampled, exact, atol=0.06 * spread)


@pytest.mark.slow  # (57 s; the moves' exactness runs by default in test_gibbs_with_moves_matches_quadrature)
@pytest.mark.parametrize(
    "formula,penalty",
    [("y ~ x + (1 + x | g)", None), ("y ~ x + x2 + (1 | g)", "learn")],
    ids=["inverse-wishart", "learned-penalty-half-t"],
)
def test_moves_and_paper_sampler_agree(formula, penalty):
    """The sampler with every move (partial and global rescaling, the fixed-effect coordinates) against the paper's
    (verified) sampler: an inverse-Wishart term; a learned penalty (its slopes' coordinate moves use its variance)
    with a half-t intercept term."""
    data = _grouped(seed=4, groups=12, size=6)
    data["x2"] = np.random.default_rng(7).standard_normal(len(data)) + 0.5 * data["x"]
    problem = _problem(formula, data, penalty)
    with_moves = sample_gibbs(problem, draws=1500, tune=300, chains=4, seed=5, progress=False)
    paper = sample_gibbs(problem, draws=1500, tune=300, chains=4, seed=6, progress=False, _interweave=False)
    for a, b in (
        (with_moves.theta_d, paper.theta_d),
        (np.log(np.diagonal(with_moves.components[0], axis1=-2, axis2=-1)),
         np.log(np.diagonal(paper.components[0], axis1=-2, axis2=-1))),
    ):  # fmt: skip
        a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        sd = np.sqrt(0.5 * (a.var(axis=0) + b.var(axis=0)))
        assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) < 0.15 * sd + 1e-12)
        assert np.all(np.abs(np.median(a, axis=0) - np.median(b, axis=0)) < 0.2 * sd + 1e-12)


def test_a_move_leaves_the_predictor_consistent():
    data = _grouped(seed=2)
    problem = _problem("y ~ x + (1 + x | g)", data, None)
    result = sample_gibbs(problem, draws=5, tune=5, chains=1, seed=1, progress=False)
    theta_d, theta_b = result.theta_d[0, -1], result.theta_b[0, -1]
    covs = [c[0, -1] for c in result.components]
    blocked = problem.blocked

    def predictor(td, tb):
        return problem.D @ td + np.einsum("nk,nk->n", blocked.values, tb[blocked.codes])

    moved = ScaleMoves(problem)(theta_d, theta_b, covs, [None] * len(covs), predictor(theta_d, theta_b),
                                np.random.default_rng(0))  # fmt: skip
    new_d, new_b, new_covs, f = moved
    np.testing.assert_allclose(f, predictor(new_d, new_b), atol=1e-10)
    assert not np.allclose(new_covs[-1], covs[-1])  # the term's covariance moved
    np.testing.assert_array_equal(theta_d, result.theta_d[0, -1])  # inputs untouched


@pytest.mark.parametrize("numba_switch", ["1", "0"], ids=["compiled", "numpy"])
@pytest.mark.parametrize("prior", ["inverse-gamma", "half-t"])
def test_random_intercept_rescaling_equals_the_general_move(prior, numba_switch, monkeypatch):
    """A random intercept's rescaling by ``ScaleMoves._blocked_intercept_move`` (the rescaled levels' rows only:
    ``compiled_rows.intercept_rescale``, or numpy without numba) makes the general loop's draw from the same seed:
    the same ``theta``, covariance and ``f``."""
    from bayesvm.engines.linear import compiled_rows
    from bayesvm.priors import InverseGamma

    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, numba_switch)

    data = _grouped(seed=3, groups=12)
    data.loc[data["g"].isin(["0", "1", "2"]), "y"] = "a"  # single-class levels: the rescaled subset
    priors = PriorSet(random=InverseGamma()) if prior == "inverse-gamma" else None  # default: the half-t
    problem = _problem("y ~ x + (1 | g)", data, "learn", priors)
    result = sample_gibbs(problem, draws=3, tune=3, chains=1, seed=1, progress=False)
    theta_d, theta_b = result.theta_d[0, -1], result.theta_b[0, -1]
    covs = [c[0, -1] for c in result.components]
    aux = [None if prior == "inverse-gamma" else 0.8] * len(covs)
    blocked = problem.blocked
    f = problem.D @ theta_d + blocked.values[:, 0] * theta_b[blocked.codes, 0]
    moves = ScaleMoves(problem)
    assert moves.subsets[-1].sum() >= 3
    for seed in range(10):  # (one seed's slice draw can be the same for a slightly different density)
        out = {}
        for fast in (True, False):
            monkeypatch.setattr(ScaleMoves, "intercept_path", fast)
            moves.calls = seed  # (the same turn of the learned penalty's move for both paths)
            out[fast] = moves._moves(theta_d, theta_b, covs, aux, f, np.random.default_rng(seed))
        for a, b in zip(out[True][:2], out[False][:2]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out[True][2][-1], out[False][2][-1], rtol=1e-12)
        np.testing.assert_allclose(out[True][3], out[False][3], rtol=1e-12, atol=1e-12)
        assert not np.allclose(out[True][2][-1], covs[-1])  # the variance moved


@pytest.mark.skipif(not interweave.compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("prior", ["inverse-gamma", "half-t"])
@pytest.mark.parametrize("formula", ["y ~ x + I(x**2) + (1 | g)", "y ~ x + I(x**2)"])
def test_fused_moves_equal_the_three_moves(formula, prior):
    """The global, coordinate and direction moves in one compiled call (``ScaleMoves._fused_moves``) make the draws of
    ``global_move``, ``coordinate_moves`` and ``direction_moves`` in turn, from the same seed: the same coefficients,
    variances (the learned penalty's and the random intercept's), predictor and line scales."""
    from bayesvm.priors import InverseGamma

    data = _grouped(seed=4, groups=12)
    priors = PriorSet(random=InverseGamma()) if prior == "inverse-gamma" else None
    problem = _problem(formula, data, "learn", priors)
    result = sample_gibbs(problem, draws=3, tune=3, chains=1, seed=1, progress=False)
    theta_d, theta_b = result.theta_d[0, -1], result.theta_b[0, -1]
    covs = [c[0, -1] for c in result.components]
    aux = [None if prior == "inverse-gamma" else 0.8] * len(covs)
    f = problem.D @ theta_d
    if problem.blocked is not None:
        f = f + problem.blocked.values[:, 0] * theta_b[problem.blocked.codes, 0]
    fused, separate = ScaleMoves(problem), ScaleMoves(problem)
    assert fused.fused and fused.directions.shape[1] >= 2
    separate.fused = False
    for seed in range(8):
        out = {}
        for moves in (fused, separate):
            moves.calls = seed  # (the same turn of the learned penalty's move)
            state = [theta_d.copy(), theta_b.copy(), [c.copy() for c in covs], f.copy()]
            out[moves is fused] = moves(*state[:3], aux, state[3], np.random.default_rng(seed))
        for a, b in zip(out[True][:2] + out[True][3:], out[False][:2] + out[False][3:]):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
        for a, b in zip(out[True][2], out[False][2]):
            np.testing.assert_allclose(a, b, rtol=1e-11)
        np.testing.assert_allclose(fused.direction_scales, separate.direction_scales, rtol=1e-11)
    assert not np.allclose(out[True][0], theta_d)  # the moves moved


def _log_joint_slope_grid(problem, b0, b1, phi):
    """``log p(y, beta_0, beta_1, phi)`` up to a constant on a grid, for ``y ~ x + (1 | g)`` with a fixed penalty: the
    random intercepts integrated out exactly (:func:`bayesvm.engines.linear.node_evidence.group_log_integrals`)."""
    from bayesvm.engines.hyperparameters import Hyperparameters
    from bayesvm.engines.linear.node_evidence import group_log_integrals

    hyper, blocked, lam = Hyperparameters(problem.components), problem.blocked, problem.fixed_precision
    B0, B1 = (a.ravel() for a in np.meshgrid(b0, b1, indexing="ij"))
    eta = B0[:, None] * problem.D[:, 0][None, :] + B1[:, None] * problem.D[:, 1][None, :]
    out = np.empty((b0.size, b1.size, phi.size))
    for k, t in enumerate(phi):
        values = group_log_integrals(problem.y, eta, blocked.values[:, 0], blocked.codes, np.full(B0.size, np.exp(t)),
                                     blocked.n_levels)  # fmt: skip
        values += -0.5 * lam[0] * B0**2 - 0.5 * lam[1] * B1**2 + hyper.log_prior(np.array([t]))
        out[:, :, k] = values.reshape(b0.size, b1.size)
    return out


def test_direction_moves_keep_the_posterior_of_collinear_fixed_effects():
    """The direction moves (along the eigenvectors of ``X_F' X_F``) run where the intercept and a slope are nearly
    collinear (``x`` far from 0, unstandardised): the sampler's marginals of both coefficients and of the variance
    match three-dimensional quadrature."""
    data = _grouped(seed=5, groups=12, size=4, sd=1.0)
    data["x"] = 2.0 + 0.5 * data["x"]
    problem = _problem("y ~ x + (1 | g)", data, 1.0)
    moves = ScaleMoves(problem)
    assert moves.directions.shape == (2, 2)  # both fixed columns, two lines
    result = sample_gibbs(problem, draws=3000, tune=300, chains=4, seed=8, progress=False)
    draws = [result.theta_d[..., 0].ravel(), result.theta_d[..., 1].ravel(),
             np.log(result.components[0][..., 0, 0]).ravel()]  # fmt: skip
    grids = [np.linspace(d.mean() - 7 * d.std(), d.mean() + 7 * d.std(), 81) for d in draws[:2]]
    grids.append(np.linspace(-9.0, 5.0, 71))
    log_p = _log_joint_slope_grid(problem, *grids)
    mass = np.exp(log_p - logsumexp(log_p))
    probabilities = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    for axis, (grid, sampled) in enumerate(zip(grids, draws)):
        marginal = mass.sum(axis=tuple(a for a in range(3) if a != axis))
        assert marginal[0] < 1e-4 and marginal[-1] < 1e-4  # the grid holds the mass
        exact = _quantiles(grid, marginal, probabilities)
        np.testing.assert_allclose(np.quantile(sampled, probabilities), exact, atol=0.06 * (exact[-1] - exact[0]))


def test_fixed_directions_cap_and_kept_lines(monkeypatch):
    """The lines are the eigenvectors of ``X_F' X_F`` (orthonormal, diagonalising it); a design above the cap gets none
    (the moves are skipped); given lines are kept and only carried to the new design."""
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(50), rng.standard_normal(50), rng.standard_normal(50)])
    X[:, 2] += 3.0 * X[:, 1]  # collinear
    columns = np.arange(3)
    lines, rows = interweave.fixed_directions(X, columns)
    np.testing.assert_allclose(lines.T @ lines, np.eye(3), atol=1e-12)
    gram = rows.T @ rows
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-9)
    moved = X + 0.1 * rng.standard_normal(X.shape)
    kept, moved_rows = interweave.fixed_directions(moved, columns, lines)
    assert kept is lines
    np.testing.assert_allclose(moved_rows, moved @ lines)
    monkeypatch.setattr(interweave, "DIRECTION_MAX_ENTRIES", 149)
    none, no_rows = interweave.fixed_directions(X, columns)
    assert none.shape == (3, 0) and no_rows.shape == (50, 0)
    assert interweave.fixed_directions(X, columns[:1])[0].shape == (1, 0)  # one column: its coordinate move serves


def _penalty_posterior_grid():
    """``y ~ x1 + x2`` with a learned penalty (``slopes ~ N(0, sigma_u^2)``, ``sigma_u^2 ~ IG(A, B)``): its problem, the
    grid of the three coefficients with their exact posterior weights (``sigma_u^2`` integrated out: the slopes' prior
    is ``(B + |beta|^2 / 2)^-(A + 1)``), and the exact density of ``log sigma_u^2`` on a grid ``t``."""
    rng = np.random.default_rng(11)
    n = 60
    x = rng.standard_normal((n, 2))
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(0.4 + x @ np.array([1.2, -0.6])))), "a", "b")
    data = pd.DataFrame({"y": y, "x1": x[:, 0], "x2": x[:, 1]})
    problem = _problem("y ~ x1 + x2", data, "learn")
    (penalty,) = problem.components
    assert penalty.source < 0 and penalty.n_levels == 2
    A, B = penalty.prior.a, penalty.prior.b
    D, sign = np.asarray(problem.D), problem.y
    axes = [np.linspace(-5.0, 5.0, 101), np.linspace(-3.5, 3.5, 141), np.linspace(-3.5, 3.5, 141)]
    b0, b1, b2 = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    log_lik = np.empty(b0.size)
    for rows in np.array_split(np.arange(b0.size), 40):
        f = np.outer(b0[rows], D[:, 0]) + np.outer(b1[rows], D[:, 1]) + np.outer(b2[rows], D[:, 2])
        log_lik[rows] = -2.0 * np.maximum(1.0 - sign * f, 0.0).sum(axis=1)
    log_lik -= 0.5 * problem.fixed_precision[0] * b0**2
    log_p = log_lik - (A + 1.0) * np.log(B + 0.5 * (b1**2 + b2**2))
    weights = np.exp(log_p - logsumexp(log_p))
    cube = weights.reshape(101, 141, 141)
    assert cube[[0, -1]].sum() + cube[:, [0, -1]].sum() + cube[:, :, [0, -1]].sum() < 1e-6
    # log sigma_u^2: the slopes' likelihood (intercept summed out) times N(beta; 0, s I) times IG(s) s
    slopes = logsumexp(log_lik.reshape(101, 141 * 141), axis=0)
    square = (b1**2 + b2**2).reshape(101, 141 * 141)[0]
    t = np.linspace(-4.0, 7.0, 221)
    s_ = np.exp(t)[:, None]
    log_t = logsumexp(slopes[None, :] - square[None, :] / (2.0 * s_) - np.log(2.0 * np.pi * s_), axis=1)
    log_t += -(A + 1.0) * t - B / np.exp(t) + t
    mass_t = np.exp(log_t - logsumexp(log_t))
    assert mass_t[[0, -1]].sum() < 1e-4
    return problem, axes, np.column_stack([b0, b1, b2]), weights, t, mass_t


PROBABILITIES = np.array([0.1, 0.25, 0.5, 0.75, 0.9])


def _quantile_checks(checks, share=0.05):
    for draws, grid, mass in checks:
        exact = _quantiles(grid, mass, PROBABILITIES)
        np.testing.assert_allclose(np.quantile(draws, PROBABILITIES), exact, atol=share * (exact[-1] - exact[0]))


def test_learned_penalty_rescaling_keeps_the_posterior():
    """Exact posterior draws of ``(beta, sigma_u^2)`` (the grid, then ``sigma_u^2 | beta ~ IG(A + 1, B + |beta|^2 /
    2)``) stay posterior draws after one penalty rescaling each (``w`` integrated out, so the move alone must keep
    the target): the quantiles of ``log sigma_u^2`` and of each slope against their exact marginals."""
    problem, axes, points, weights, t, mass_t = _penalty_posterior_grid()
    (penalty,) = problem.components
    rng = np.random.default_rng(2)
    size = 3000
    chosen = points[rng.choice(weights.size, size=size, p=weights)]
    chosen[:, 0] += rng.uniform(-0.05, 0.05, size)  # (uniform within each cell)
    chosen[:, 1:] += rng.uniform(-0.025, 0.025, (size, 2))
    variances = 1.0 / rng.gamma(penalty.prior.a + 1.0, 1.0 / (penalty.prior.b + 0.5 * np.sum(chosen[:, 1:] ** 2, 1)))
    mover = ScaleMoves(problem)
    D = np.asarray(problem.D)
    moved, moved_variance = np.empty_like(chosen), np.empty(size)
    for i in range(size):
        mover.calls = 0  # (its turn)
        theta, _, covs, f = mover._moves(chosen[i], np.zeros((0, 0)), [np.array([[variances[i]]])], [None],
                                         D @ chosen[i], rng)  # fmt: skip
        np.testing.assert_allclose(f, D @ theta)
        moved[i], moved_variance[i] = theta, covs[0][0, 0]
    assert np.mean(np.abs(moved_variance - variances) > 1e-12) > 0.9  # the move does move
    cube = weights.reshape(101, 141, 141)
    marginals = [cube.sum(axis=(1, 2)), cube.sum(axis=(0, 2)), cube.sum(axis=(0, 1))]
    _quantile_checks(
        [(np.log(variances), t, mass_t), (np.log(moved_variance), t, mass_t)]
        + [(moved[:, k], axes[k], marginals[k]) for k in (1, 2)],
        share=0.04,
    )


def test_gibbs_with_the_learned_penalty_rescaling_matches_quadrature():
    """The whole sampler, with the penalty's rescaling on its schedule, against the same quadrature."""
    problem, axes, _, weights, t, mass_t = _penalty_posterior_grid()
    result = sample_gibbs(problem, draws=3000, tune=300, chains=4, seed=8, progress=False)
    cube = weights.reshape(101, 141, 141)
    marginals = [cube.sum(axis=(1, 2)), cube.sum(axis=(0, 2)), cube.sum(axis=(0, 1))]
    _quantile_checks(
        [(result.theta_d[..., k].ravel(), axes[k], marginals[k]) for k in range(3)]
        + [(np.log(result.components[0][..., 0, 0]).ravel(), t, mass_t)]
    )
