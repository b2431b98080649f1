"""The VB engine proves its own algebra: monotone bound, closed form = Monte Carlo."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.engines.linear.vb import fit_vb
from bayesvm.formula import build_design, parse_formula
from bayesvm.linalg import schur as sparse_schur
from bayesvm.model import build_model
from bayesvm.priors import InverseGamma, InverseWishart, PriorSet
from tests.conftest import simulate_grouped
from tests.engines.mc_bound import mc_lower_bound


def _problem(formula, data, penalty="learn", standardize=True, priors=None, max_dense_columns=2000):
    design = build_design(parse_formula(formula), data)
    model = build_model(design, penalty, priors or PriorSet(), standardize, max_dense_columns=max_dense_columns)
    return model.problem()


def assert_monotone(bound):
    assert np.all(np.isfinite(bound))
    assert np.diff(bound).min() >= -1e-8 * abs(bound[-1])


@pytest.mark.parametrize("accelerate", [True, False])
def test_lower_bound_never_decreases_on_toenail(toenail, accelerate):
    design = build_design(parse_formula("outcome ~ visit * treatment + (1 | patientID)"), toenail)
    problem = build_model(design, None, PriorSet(), True).problem()
    result = fit_vb(problem, accelerate=accelerate)
    assert result.converged and result.n_iter > 5
    assert_monotone(result.lower_bound)


def test_acceleration_reaches_the_same_optimum(toenail):
    design = build_design(parse_formula("outcome ~ visit * treatment + (1 | patientID)"), toenail)
    problem = build_model(design, None, PriorSet(), True).problem()
    fast = fit_vb(problem, tol=1e-12, max_iter=5000)
    plain = fit_vb(problem, tol=1e-12, max_iter=5000, accelerate=False)
    assert fast.n_iter < plain.n_iter / 2
    np.testing.assert_allclose(fast.lower_bound[-1], plain.lower_bound[-1], rtol=1e-9)
    np.testing.assert_allclose(fast.theta.mean_d, plain.theta.mean_d, rtol=1e-4, atol=1e-5)


def test_lower_bound_never_decreases_with_learned_penalty():
    data = simulate_grouped(n_groups=40, per_group=10, p=6, seed=3)
    fit = bayesvm.bsvm("y ~ x1 + x2 + x3 + x4 + x5 + x6", data, penalty="learn", vb="meanfield")
    assert fit.converged
    assert_monotone(fit.lower_bound)
    assert fit.penalty_estimate > 0


def test_correlated_term_bound_monotone(toenail):
    fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 + visit | patientID)", toenail, vb="meanfield")
    assert_monotone(fit.lower_bound)


@pytest.mark.parametrize("penalty", ["learn", 0.5])
def test_separable_data_converge_to_finite_values(penalty):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(1, 3, 30), rng.uniform(-3, -1, 30)])
    data = pd.DataFrame({"x": x, "z": rng.standard_normal(60), "y": np.where(x > 0, "a", "b")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")  # no convergence or numerical warning ...
        warnings.simplefilter("always", bayesvm.IdentifiabilityWarning)  # ... but the separation is said
        # (the PSIS check may say mean-field q is too narrow here, and rightly: its SDs are half of Gibbs's)
        warnings.simplefilter("always", bayesvm.errors.ApproximationWarning)
        fit = bayesvm.bsvm("y ~ x + z", data, penalty=penalty, max_iter=2000, vb="meanfield")
    said = [str(w.message) for w in caught if not issubclass(w.category, bayesvm.errors.ApproximationWarning)]
    # a learned penalty leaves the separating direction's tail heavy (a warning); a fixed one is the usual SVM (a note)
    assert len(said) == (1 if penalty == "learn" else 0) and all("complete separation" in m for m in said)
    assert fit.diagnostics.findings[0].check == "separation"
    assert np.all(np.isfinite(fit.fixef)) and np.all(np.isfinite(fit.fixef_cov.to_numpy()))
    assert_monotone(fit.lower_bound)
    assert np.all(fit.predict() == data["y"].to_numpy())


CASES = {
    "alg1_fixed_penalty": ("y ~ x1 + x2 + x3", 0.7, {}),
    "alg2_learned_penalty": ("y ~ x1 + x2 + x3", "learn", {}),
    "alg2_one_factor": ("y ~ x1 + x2 + (1 | g)", None, {}),
    "alg2_two_factors": ("y ~ x1 + (1 | g) + (1 | h)", "learn", {}),
    "inverse_wishart": ("y ~ x1 + (1 + x1 | g)", None, {"correlated": InverseWishart(df=3.0, scale=0.5)}),
    "inverse_wishart_dense": ("y ~ x1 + (1 + x1 | h) + (1 | g)", None, {}),
}


MC_RUNS = [(case, "schur") for case in sorted(CASES)] + [
    (case, solver)
    for case in sorted(CASES)
    for solver in ("sparse", "sparse-general")
    if "|" in CASES[case][0]  # the sparse path needs random effects
]


def sparse_solver(monkeypatch, path: str) -> None:
    """``sparse``: elimination onto a dense Schur complement where it applies (the default);
    ``sparse-general``: the general sparse factorisation (CHOLMOD), by making the elimination decline;
    ``sparse-general-superlu``: the same with the SuperLU fallback."""
    if path.startswith("sparse-general"):
        monkeypatch.setattr(sparse_schur, "MIN_SCHUR_DENSITY", np.inf)
    monkeypatch.setenv("BAYESVM_CHOLMOD", "0" if path.endswith("superlu") else "1")


def assert_path(problem, path: str) -> None:
    assert problem.is_sparse == path.startswith("sparse")
    if problem.is_sparse:
        assert (problem.elimination is None) == path.startswith("sparse-general")


def schur_and_sparse(design, penalty, standardize: bool, path: str, monkeypatch, priors=None) -> dict:
    """The same model on the Schur path and on the sparse path ``path`` (``sparse`` or ``sparse-general``)."""
    sparse_solver(monkeypatch, path)
    problems = {}
    for name, limit in (("schur", 2000), (path, 0)):
        problems[name] = build_model(
            design, penalty, PriorSet() if priors is None else priors, standardize, max_dense_columns=limit
        ).problem()
        assert_path(problems[name], name)
    return problems


@pytest.mark.parametrize("case, solver", MC_RUNS)
def test_closed_form_bound_matches_monte_carlo(case, solver, monkeypatch):
    formula, penalty, prior_kw = CASES[case]
    data = simulate_grouped(n_groups=6, per_group=6, p=3, seed=11, slope_sd=0.5)
    sparse_solver(monkeypatch, solver)
    limit = 0 if solver.startswith("sparse") else 2000
    problem = _problem(formula, data, penalty=penalty, priors=PriorSet(**prior_kw), max_dense_columns=limit)
    assert_path(problem, solver)
    # stop early: the closed form must hold for any q, not only at convergence
    result = fit_vb(problem, max_iter=3)
    estimate, se = mc_lower_bound(problem, result, draws=4000, seed=5)
    closed = result.lower_bound[-1]
    assert abs(estimate - closed) < 3 * se + 1e-9, (closed, estimate, se)


def test_monte_carlo_check_can_fail():
    """The same check rejects a bound that is off by one nat."""
    data = simulate_grouped(n_groups=6, per_group=6, p=3, seed=11)
    problem = _problem("y ~ x1 + x2 + (1 | g)", data, penalty=None)
    result = fit_vb(problem, max_iter=3)
    estimate, se = mc_lower_bound(problem, result, draws=4000, seed=5)
    assert se < 0.3
    assert abs(estimate - (result.lower_bound[-1] + 1.0)) > 3 * se


def test_standardize_does_not_change_predictions_without_penalty(monkeypatch):
    from bayesvm.engines.linear import ep

    data = simulate_grouped(n_groups=10, per_group=10, p=2, seed=2)
    data["x1"] = 50 + 10 * data["x1"]
    kw = dict(penalty=None, tol=1e-15, max_iter=20000)

    def both():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
            return [bayesvm.bsvm("y ~ x1 * x2 + (1 | g)", data, standardize=s, **kw) for s in (True, False)]

    # the accurate fit's importance-sampled node weights carry the same standard normals through each scale's
    # Cholesky factor, which differ: the two fits agree to Monte Carlo error (measured 0.0015 on f)
    a, b = both()
    np.testing.assert_allclose(a.predict(kind="link"), b.predict(kind="link"), atol=0.01)
    monkeypatch.setattr(ep, "node_evidence", lambda *args, **kwargs: None)  # EP alone is exactly invariant
    a, b = both()
    np.testing.assert_allclose(a.predict(kind="link"), b.predict(kind="link"), atol=1e-6)
    np.testing.assert_allclose(a.predict(kind="pseudo"), b.predict(kind="pseudo"), atol=1e-6)


def test_schur_complement_matches_dense_solve():
    """Structured posterior equals the dense inverse of the full precision."""
    data = simulate_grouped(n_groups=7, per_group=5, p=2, seed=4, slope_sd=0.3)
    problem = _problem("y ~ x1 + x2 + (1 + x1 | g) + (1 | h)", data, penalty=None)
    result = fit_vb(problem, max_iter=4)
    theta = result.theta
    # rebuild the precision densely from the engine's inputs
    Zb = problem.blocked
    J, K = theta.mean_b.shape
    B = np.zeros((problem.n, J * K))
    for i, (c, z) in enumerate(zip(Zb.codes, Zb.values)):
        B[i, c * K : (c + 1) * K] = z
    C = np.hstack([problem.D, B])
    # sweep 5 updates q(theta) from sweep 4's q(a) and components
    result2 = fit_vb(problem, max_iter=5)
    chi_prev = result.chi
    weights = 1 / np.sqrt(chi_prev)
    from bayesvm.engines.components import prior_precisions

    prior_dd, prior_b = prior_precisions(problem, [c.expected_precision() for c in result.components])
    prior = np.zeros((C.shape[1], C.shape[1]))
    q = problem.D.shape[1]
    prior[:q, :q] = prior_dd
    for j in range(J):
        prior[q + j * K : q + (j + 1) * K, q + j * K : q + (j + 1) * K] = prior_b
    precision = C.T @ (weights[:, None] * C) + prior
    np.testing.assert_allclose(np.linalg.inv(precision), _full_cov(result2.theta), rtol=1e-7, atol=1e-10)
    dense_mean = np.linalg.solve(precision, C.T @ (problem.y * (1 + weights)))
    np.testing.assert_allclose(
        dense_mean, np.concatenate([result2.theta.mean_d, result2.theta.mean_b.ravel()]), rtol=1e-7, atol=1e-10
    )


def _full_cov(theta):
    from tests.engines.mc_bound import dense_covariance

    return dense_covariance(theta)[1]


@pytest.mark.parametrize("path", ["sparse", "sparse-general"])
def test_sparse_path_equals_schur_path(path, monkeypatch):
    data = simulate_grouped(n_groups=30, per_group=6, p=2, seed=8, slope_sd=0.4)
    formula = "y ~ x1 + x2 + (1 + x1 | g) + (1 | h)"
    sparse_solver(monkeypatch, path)
    schur = _problem(formula, data, penalty=None)
    sparse = _problem(formula, data, penalty=None, max_dense_columns=0)
    assert_path(schur, "schur")
    assert_path(sparse, path)
    a, b = fit_vb(schur, max_iter=6, accelerate=False), fit_vb(sparse, max_iter=6, accelerate=False)
    np.testing.assert_allclose(a.lower_bound, b.lower_bound, rtol=1e-10)
    np.testing.assert_allclose(a.chi, b.chi, rtol=1e-8)
    assert_monotone(fit_vb(sparse).lower_bound)


def test_sparse_path_predictions_for_new_level_combinations():
    data = simulate_grouped(n_groups=20, per_group=5, p=1, seed=9)
    design = build_design(parse_formula("y ~ x1 + (1 | g) + (1 | h)"), data)
    fits = {}
    for limit in (0, 2000):
        model = build_model(design, None, PriorSet(), True, max_dense_columns=limit)
        problem = model.problem()
        result = fit_vb(problem, tol=1e-12, max_iter=3000)
        fits[limit] = bayesvm.BSVMFit(model=model, problem=problem, method="vb", result=result)
    # pair levels of g and h that never occur together in training
    new = data.head(6).assign(h=["h0", "h1", "h2", "h3", "h4", "h0"][::-1])
    for kind in ("link", "pseudo"):  # the posterior's predictive (engine-level fits keep no call to cross-fit)
        np.testing.assert_allclose(fits[0].predict(new, kind=kind), fits[2000].predict(new, kind=kind), rtol=1e-6)
    ours = fits[0].predict_interval(new)["sd"].to_numpy()
    np.testing.assert_allclose(ours, fits[2000].predict_interval(new)["sd"].to_numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "formula", ["y ~ x1 + (1 | g/h)", "y ~ x1 + x2 + (1 + x1 | g) + (1 | h)", "y ~ x1 + (1 | g) + (1 | h)"]
)
@pytest.mark.parametrize("path", ["schur", "sparse", "sparse-general", "sparse-general-superlu"])
def test_nested_and_crossed_posteriors_equal_the_dense_solve(formula, path, monkeypatch):
    """One sweep's q(theta) on every structured path equals the dense inverse of the full precision."""
    import scipy.sparse as sp

    from bayesvm.engines.components import prior_precisions, sparse_prior

    data = simulate_grouped(n_groups=9, per_group=6, p=2, seed=11, slope_sd=0.3)
    sparse_solver(monkeypatch, path)
    problem = _problem(formula, data, penalty=None, max_dense_columns=0 if path.startswith("sparse") else 2000)
    assert_path(problem, path)
    before, after = fit_vb(problem, max_iter=3, accelerate=False), fit_vb(problem, max_iter=4, accelerate=False)
    weights = 1 / np.sqrt(before.chi)
    precisions = [c.expected_precision() for c in before.components]
    if path.startswith("sparse"):
        C = problem.D.toarray()
        prior = sparse_prior(problem, precisions).toarray()
    else:
        Zb, (J, K) = problem.blocked, after.theta.mean_b.shape
        B = np.zeros((problem.n, J * K))
        for i, (c, z) in enumerate(zip(Zb.codes, Zb.values)):
            B[i, c * K : (c + 1) * K] = z
        C = np.hstack([problem.D, B])
        prior_dd, prior_b = prior_precisions(problem, precisions)
        prior = sp.block_diag([prior_dd] + [prior_b] * J).toarray()
    precision = C.T @ (weights[:, None] * C) + prior
    mean = np.linalg.solve(precision, C.T @ (problem.y * (1 + weights)))
    theta = after.theta
    np.testing.assert_allclose(np.linalg.inv(precision), _full_cov(theta), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mean, np.concatenate([theta.mean_d, theta.mean_b.ravel()]), rtol=1e-8, atol=1e-10)


def test_a_large_dense_fit_started_from_a_subsample_reaches_the_full_optimum(monkeypatch):
    from bayesvm.engines.linear import vb
    from bayesvm.model.problems import VarianceComponent, VBProblem

    rng = np.random.default_rng(5)
    n, d = 60_000, 6
    X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    eta = X @ rng.normal(0, 0.5, d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), 1.0, -1.0)
    penalty = VarianceComponent("penalty", np.arange(1, d)[:, None], False, d - 1, prior=InverseGamma(0.01, 0.01))
    problem = VBProblem(y=y, D=X, fixed_precision=np.r_[1e-8, np.zeros(d - 1)], components=(penalty,))
    warm = fit_vb(problem)
    assert warm.converged and not warm.decreases
    assert_monotone(warm.lower_bound)
    monkeypatch.setattr(vb, "SUBSAMPLE_FROM_ROWS", 10**9)  # from here on, the paper's start
    cold = fit_vb(problem)
    tight = fit_vb(problem, tol=1e-15, max_iter=3000)
    assert tight.converged
    sd = np.sqrt(np.diag(tight.theta.cov_d))
    for fit in (warm, cold):
        assert np.max(np.abs(fit.theta.mean_d - tight.theta.mean_d) / sd) < 0.03
        np.testing.assert_allclose(np.sqrt(np.diag(fit.theta.cov_d)), sd, rtol=0.01)
        np.testing.assert_allclose(fit.components[0].scale, tight.components[0].scale, rtol=0.01)
    assert warm.n_iter < cold.n_iter  # the full-data sweeps the subsample saves
