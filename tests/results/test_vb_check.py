import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import bayesvm
import bayesvm.engines.linear.vb
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from tests.conftest import simulate_grouped, simulate_logistic
from tests.engines.mc_bound import dense_covariance


def test_mean_field_vb_on_toenail_is_flagged(toenail):
    fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail, penalty=None, vb="meanfield")
    with pytest.warns(UserWarning, match="k-hat"):
        check = fit.check_vb()
    assert check.khat > 0.7 and check.fixef is None
    assert "k-hat" in str(fit.summary()) and "unreliable" in str(fit.summary())


def test_importance_weights_move_the_sd_towards_the_exact_posterior():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(40)
    y = np.where(rng.random(40) < 1 / (1 + np.exp(-(0.4 + 1.2 * x))), 1, -1)
    import pandas as pd

    fit = bayesvm.bsvm("y ~ 0 + x", pd.DataFrame({"x": x, "y": y}), penalty=0.5, standardize=False, vb="meanfield")
    check = fit.check_vb(draws=4000)
    assert check.khat <= 0.7
    grid = np.linspace(-3, 6, 20001)
    logp = -2 * np.maximum(0, 1 - y[None] * (grid[:, None] * x[None])).sum(1) - grid**2
    w = np.exp(logp - logp.max())
    w /= w.sum()
    exact_mean = (w * grid).sum()
    exact_sd = np.sqrt((w * (grid - exact_mean) ** 2).sum())
    vb_sd = np.sqrt(fit.fixef_cov.iloc[0, 0])
    assert abs(check.fixef["sd"].iloc[0] - exact_sd) < abs(vb_sd - exact_sd)


@pytest.mark.parametrize("limit", [0, 2000])
def test_log_density_of_q_matches_scipy(limit):
    data = simulate_grouped(n_groups=6, per_group=5, p=2, seed=3)
    design = build_design(parse_formula("y ~ x1 + (1 + x1 | g) + (1 | h)"), data)
    problem = build_model(design, None, PriorSet(), True, max_dense_columns=limit).problem()
    theta = bayesvm.engines.linear.vb.fit_vb(problem, max_iter=5).theta
    theta_d, theta_b = theta.sample(np.random.default_rng(1), 7)
    mean, cov = dense_covariance(theta)
    joint = np.concatenate([theta_d, theta_b.reshape(7, -1)], axis=1)
    np.testing.assert_allclose(
        theta.log_density(theta_d, theta_b), stats.multivariate_normal(mean, cov).logpdf(joint), rtol=1e-8
    )


def test_check_vb_refuses_other_engines(toenail):
    fit = bayesvm.bsvm("outcome ~ visit", toenail, method="em", penalty=0.5)
    with pytest.raises(ValueError, match="variational"):
        fit.check_vb()


def test_psis_weights_follow_the_log_ratios():
    from bayesvm.results.psis import psis

    ratios = np.random.default_rng(0).standard_normal(2000) * 1.5
    log_weights, khat = psis(ratios)
    assert np.corrcoef(log_weights, ratios)[0, 1] > 0.99
    np.testing.assert_allclose(np.exp(log_weights).sum(), 1.0)
    assert 0.2 < khat < 0.5  # a normal-ratio tail, as ArviZ 0.x gives 0.34 here


def test_accurate_fit_is_not_flagged_without_random_effects_but_mean_field_is_worse():
    data, formula = simulate_logistic(200, 10)
    accurate = bayesvm.bsvm(formula, data, vb="accurate").check_vb(draws=2000)
    assert accurate.khat < 0.5 and accurate.fixef is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mean_field = bayesvm.bsvm(formula, data, vb="meanfield").check_vb(draws=2000)
    assert mean_field.khat > accurate.khat + 0.2


def test_the_fit_runs_the_check_warns_once_naming_the_parameter_and_summary_prints_it(monkeypatch):
    from bayesvm.engines.linear import ep
    from bayesvm.errors import ApproximationWarning

    data = bayesvm.datasets.load_toenail()
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm(formula, data, penalty=None)  # accurate by default, nodes weighted by importance sampling
    # the importance-sampled node weights put the patient variance where the exact marginal posterior has it (13.4;
    # EP's weights: 11.7, Gibbs 13.5): the check passes the fit without a word
    assert not [w for w in caught if issubclass(w.category, ApproximationWarning)]
    assert fit.last_vb_check.marginal_khat < 0.5 and fit.last_vb_check.moved is None
    verdict = next(line for line in str(fit.summary()).splitlines() if "fixed effects and variance components:" in line)
    assert verdict.split()[0] == "OK"
    # EP's own node weights (the fit before importance-sampled weights) are what the check is there to catch
    monkeypatch.setattr(ep, "node_evidence", lambda *args, **kwargs: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm(formula, data, penalty=None)
    told = [w for w in caught if issubclass(w.category, ApproximationWarning)]
    assert len(told) == 1 and "'sigma^2 (1 | patientID)'" in str(told[0].message)
    check = fit.last_vb_check
    assert check is not None and check.draws == 1000
    text = str(fit.summary())
    assert fit.last_vb_check is check  # not run again
    assert check is not None and check.marginal_khat < 0.5 < 0.7 < check.khat
    lines = text.splitlines()
    verdict = next(line for line in lines if "fixed effects and variance components:" in line)
    # k-hat passes q, but the weights move the patient variance by about 0.9 of q's SDs (q's mean is 12% low):
    # the verdict names it instead of calling q a match
    name, shift, q_mean, weighted = check.moved
    assert name == "sigma^2 (1 | patientID)" and shift > 0.5 and weighted > 1.1 * q_mean
    assert verdict.split()[0] == "CAUTION" and f"k-hat = {check.marginal_khat:.2f}" in verdict
    assert f"'{name}' by {shift:.1f} of q's posterior SDs" in verdict and "fit.check_vb().marginal" in verdict
    joint = next(line for line in lines if "individual random effects:" in line)
    assert joint.split()[0] == "CAUTION" and f"k-hat = {check.khat:.2f} for the joint q" in joint
    with pytest.warns(ApproximationWarning, match=r"k-hat \(fixed effects and variance components\) = .* > 0.7"):
        meanfield = bayesvm.bsvm(formula, data, penalty=None, vb="meanfield")
    text = str(meanfield.summary())
    assert meanfield.last_vb_check.marginal_khat > 0.7
    verdict = next(line for line in text.splitlines() if "fixed effects and variance components:" in line)
    assert verdict.split()[0] == "FAIL" and f"k-hat = {meanfield.last_vb_check.marginal_khat:.2f} > 0.7" in verdict
    assert "unreliable" in verdict
    # a failed check points where q and its weighted draws disagree most: mean-field VB shrinks the patient variance
    # about threefold (4.1 against Gibbs's 13.5, the vignette), the largest of its errors
    suspects = meanfield.last_vb_check.suspects
    assert len(suspects) == 3 and "sigma^2 (1 | patientID)" in suspects
    assert "disagree most on " + ", ".join(repr(n) for n in suspects) in verdict


def test_checks_vb_check_ignore_leaves_the_check_to_summary(toenail):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all: the fit does not run the check
        fit = bayesvm.bsvm(
            "outcome ~ visit * treatment + (1 | patientID)", toenail, penalty=None,
            checks=bayesvm.Checks(vb_check="ignore"),
        )  # fmt: skip
    assert fit.last_vb_check is None
    assert "fixed effects and variance components:" in str(fit.summary()) and fit.last_vb_check is not None


def test_no_check_at_the_end_of_a_fit_the_identifiability_checks_distrust():
    """A separated column leaves the posterior shaped by the prior: the fit warns about the separation, names the
    column, and does not add a k-hat verdict about a posterior the data do not identify (summary() says why)."""
    from bayesvm.errors import ApproximationWarning

    rng = np.random.default_rng(2)
    x = rng.standard_normal(60)
    frame = pd.DataFrame({"x": x, "z": rng.standard_normal(60), "y": np.where(x > 0, "a", "b")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = bayesvm.bsvm("y ~ x + z", frame)
    assert any("'x'" in str(w.message) for w in caught)
    assert not any(issubclass(w.category, ApproximationWarning) for w in caught)
    assert fit.last_vb_check is None and "no verdict" in str(fit.summary())


def _quadrature_log_integrals(y, eta, v, codes, sigma2, n_levels, u) -> np.ndarray:
    """``sum_j log I_j`` for each draw by the trapezoid rule over the grid ``u`` (brute force, not the closed form)."""
    out = np.zeros(eta.shape[0])
    for s in range(eta.shape[0]):
        for j in range(n_levels):
            rows = codes == j
            hinge = np.maximum(0, 1 - y[rows][None] * (eta[s, rows][None] + v[rows][None] * u[:, None])).sum(1)
            log_f = -2 * hinge - u**2 / (2 * sigma2[s]) - 0.5 * np.log(2 * np.pi * sigma2[s])
            top = log_f.max()
            out[s] += top + np.log(np.trapezoid(np.exp(log_f - top), u))
    return out


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_group_integrals_match_quadrature(compiled, monkeypatch):
    from bayesvm.engines.linear import compiled_rows
    from bayesvm.engines.linear.node_evidence import group_log_integrals

    if compiled == "1" and not compiled_rows.available():
        pytest.skip("numba is not installed")
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, compiled)  # the numba kernel, then the numpy path
    rng = np.random.default_rng(0)
    n, J = 40, 6
    codes = rng.integers(0, J, n)
    y = rng.choice([-1.0, 1.0], n)
    v = rng.choice([1.0, 0.5, -2.0, 0.0], n)  # slopes of either sign, and rows that do not involve u
    eta = rng.normal(0, 1.5, (3, n))
    sigma2 = np.array([0.3, 2.0, 9.0])
    got = group_log_integrals(y, eta, v, codes, sigma2, J)
    exact = _quadrature_log_integrals(y, eta, v, codes, sigma2, J, np.linspace(-40, 40, 200001))
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-6)


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_group_integrals_of_very_unbalanced_levels_match_quadrature(compiled, monkeypatch):
    """Levels of 1 to 300 rows (the compiled kernel sorts the small ones' kinks by insertion and the large ones' by
    argsort, so both sorts run in one call) and a level without rows: taken in classes of similar size, each level's
    integral is still the quadrature's."""
    from bayesvm.engines.hinge_levels import INSERTION_ROWS
    from bayesvm.engines.linear import compiled_rows
    from bayesvm.engines.linear.node_evidence import group_log_integrals

    if compiled == "1" and not compiled_rows.available():
        pytest.skip("numba is not installed")
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, compiled)
    rng = np.random.default_rng(7)
    sizes = [300, 1, 1, 2, 3, 5, 9, 17, 40, 0, 4]
    assert min(s for s in sizes if s) < INSERTION_ROWS < max(sizes)
    codes = np.repeat(np.arange(len(sizes)), sizes)
    n, J = codes.size, len(sizes)
    y = rng.choice([-1.0, 1.0], n)
    v = rng.choice([1.0, 0.7, -1.2, 0.0], n)
    eta = rng.normal(0, 1.0, (2, n))
    sigma2 = np.array([0.5, 4.0])
    got = group_log_integrals(y, eta, v, codes, sigma2, J)
    exact = _quadrature_log_integrals(y, eta, v, codes, sigma2, J, np.linspace(-30, 30, 120001))
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-5)


def test_compiled_group_integrals_agree_with_numpy_on_toenail_sized_draws(monkeypatch):
    """The compiled kernel against the padded numpy path on uneven levels (1 to 9 rows, some with ``s_i = 0``), tails
    included (``eta`` up to 30, ``sigma2`` from 1e-3 to 1e3)."""
    from bayesvm.engines.linear import compiled_rows
    from bayesvm.engines.linear.node_evidence import group_log_integrals

    if not compiled_rows.available():
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(5)
    J = 60
    codes = np.repeat(np.arange(J), rng.integers(1, 10, J))
    n = codes.size
    y = rng.choice([-1.0, 1.0], n)
    v = rng.choice([1.0, 1.0, 0.3, -1.5, 0.0], n)
    eta = rng.normal(0, 1, (25, n)) * np.logspace(-1, np.log10(30), 25)[:, None]
    sigma2 = np.logspace(-3, 3, 25)
    compiled = group_log_integrals(y, eta, v, codes, sigma2, J)
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    np.testing.assert_allclose(compiled, group_log_integrals(y, eta, v, codes, sigma2, J), rtol=1e-10, atol=1e-8)


def test_marginal_check_only_where_the_random_effects_integrate_exactly():
    from bayesvm.engines.linear.node_evidence import integrable_component

    data = simulate_grouped(n_groups=8, per_group=6, p=2, seed=4)
    for formula, expected in [
        ("y ~ x1 + x2 + (1 | g)", True),
        ("y ~ x1 + (0 + x2 | g)", True),
        ("y ~ x1 + x2 + (1 | g) + (1 | h)", True),  # h is small: its effects stay in the dense block
        ("y ~ x1 + (1 + x2 | g)", False),  # a 2-vector per group
        ("y ~ x1 + x2", False),
    ]:
        problem = build_model(build_design(parse_formula(formula), data), "learn", PriorSet(), True).problem()
        assert (integrable_component(problem) is not None) == expected, formula
    # very unbalanced groups (one of 40 rows, the rest of 1-2) are integrated in classes of similar size
    unbalanced = data.assign(g=np.where(np.arange(len(data)) < 40, "big", np.arange(len(data)) // 2).astype(str))
    problem = build_model(
        build_design(parse_formula("y ~ x1 + (1 | g)"), unbalanced), "learn", PriorSet(), True
    ).problem()
    assert integrable_component(problem) is not None


def test_summary_explains_when_there_is_no_check():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.standard_normal(60), "z": rng.standard_normal(60)})
    frame["y"] = (frame["x"] + rng.standard_normal(60) > 0).astype(int)
    frame.loc[:9, "z"] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the joint fit's own check may warn)
        fit = bayesvm.bsvm("y ~ x + z", frame, missing="impute", imputation="joint")
    assert "imputed values integrated out exactly" in str(fit.summary())  # (results/imputation_check.py)
    assert fit.check_vb(warn=False).detail == "imputed values integrated out exactly"
    mi = bayesvm.bsvm("y ~ x + z", frame, missing="impute", imputation="mi")
    assert "no PSIS check for multiple imputation" in str(mi.summary())
    with pytest.raises(bayesvm.BayesvmError, match="multiple imputation"):
        mi.check_vb()


def _small_random_intercept_data(seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    groups, size = 8, 5
    g = np.repeat(np.arange(groups), size)
    u = rng.normal(0.0, 1.0, groups)
    y = np.where(rng.random(groups * size) < 1 / (1 + np.exp(-(0.3 + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "g": g.astype(str)})


def test_log_evidence_matches_quadrature_and_importance_sampling():
    """EP's log evidence and the importance-sampled one against exact quadrature over (intercept, log sigma^2).

    The random intercepts integrate out in closed form (:func:`group_log_integrals`), so ``log p(y)`` is a
    two-dimensional integral: the importance-sampled estimate matches it to Monte Carlo error and EP's
    approximation (hinge sites: not exact) to within 1 nat here.
    """
    from scipy.special import logsumexp

    from tests.engines.intercept_quadrature import log_joint_grid

    fit = bayesvm.bsvm("y ~ 1 + (1 | g)", _small_random_intercept_data(), penalty=1.0)
    b, phi = np.linspace(-6, 6, 241), np.linspace(-8, 5, 261)
    exact = logsumexp(log_joint_grid(fit.problem, b, phi)) + np.log(b[1] - b[0]) + np.log(phi[1] - phi[0])
    sampled, se = fit.check_vb(draws=4000).log_evidence
    assert abs(sampled - exact) < max(4 * se, 0.02)
    assert abs(fit.result.log_evidence - exact) < 1.0
    assert "Fit criterion: log evidence log p(y) =" in str(fit.summary())


def test_ep_log_evidence_is_exact_where_the_hinge_is_linear():
    """With a strong prior every row stays inside the margin, each hinge is linear in f and EP is exact."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(1)
    x = rng.normal(size=30)
    data = pd.DataFrame({"y": np.where(x + rng.normal(size=30) > 0, "a", "b"), "x": x})
    fit = bayesvm.bsvm("y ~ 0 + x", data, penalty=1e4, standardize=False)
    lam, X, y = fit.problem.fixed_precision[0], fit.problem.D[:, 0], fit.problem.y
    beta = np.linspace(-40, 40, 20001) / np.sqrt(lam)
    log_joint = (
        -2 * np.maximum(0, 1 - y * np.outer(beta, X)).sum(1) + 0.5 * np.log(lam / (2 * np.pi)) - 0.5 * lam * beta**2
    )
    exact = logsumexp(log_joint) + np.log(beta[1] - beta[0])
    assert fit.result.log_evidence == pytest.approx(exact, abs=1e-6)


def test_inverse_wishart_prior_has_every_constant():
    from scipy import stats

    fit = bayesvm.bsvm("y ~ x + (1 + x | g)", _correlated_data(), vb="meanfield")
    from bayesvm.engines.hyperparameters import Hyperparameters

    hyper = Hyperparameters(fit.problem.components)
    comp = next(c for c in fit.problem.components if c.is_wishart)
    phi = hyper.start(fit.result.components)
    cov = hyper.covariances(phi)[[c.is_wishart for c in fit.problem.components].index(True)]
    expected = stats.invwishart(df=comp.prior_df, scale=comp.prior_scale).logpdf(cov)
    others = sum(
        float(bayesvm.engines.variance_prior.log_density(c, cv[0, 0]))
        for c, cv in zip(fit.problem.components, hyper.covariances(phi))
        if not c.is_wishart
    )
    assert hyper.log_prior(phi) - hyper.log_jacobian(phi) == pytest.approx(expected + others, rel=1e-10)


def _correlated_data() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(12), 10)
    x = rng.normal(size=g.size)
    f = 0.5 * x + rng.normal(0, 1, 12)[g] + rng.normal(0, 0.5, 12)[g] * x
    return pd.DataFrame({"y": np.where(f + rng.logistic(size=g.size) > 0, 1, 0), "x": x, "g": g})


def test_the_shift_is_the_weighted_minus_the_plain_mean_in_plain_sds():
    from bayesvm.results.vb_check import SHIFT_LIMIT, VBCheck, _weighted

    rng = np.random.default_rng(3)
    values = rng.standard_normal((4000, 2)) * [1.0, 2.0]
    log_weights = 0.8 * values[:, 0]  # tilts the first column towards +0.8; the second is untouched
    table, shift = _weighted(["a", "b"], values, log_weights)
    w = np.exp(log_weights - log_weights.max())
    w /= w.sum()
    np.testing.assert_allclose(table["mean"], w @ values)
    np.testing.assert_allclose(shift["shift"], (w @ values - values.mean(axis=0)) / values.std(axis=0))
    assert 0.7 < shift.loc["a", "shift"] < 0.9 and abs(shift.loc["b", "shift"]) < 0.1
    check = VBCheck(khat=0.3, draws=4000, fixef=table, shift=shift)
    assert check.moved[0] == "a" and check.verdict.startswith("usable") and SHIFT_LIMIT == 0.5
    _, small = _weighted(["a", "b"], values, 0.1 * values[:, 0])
    assert VBCheck(khat=0.3, draws=4000, fixef=table, shift=small).moved is None
    assert VBCheck(khat=0.3, draws=4000, fixef=table, shift=small).verdict.startswith("good")


def test_random_effects_the_check_cannot_integrate_out_get_a_caution_not_a_failure():
    """With a correlated term ``(1 + x | g)`` k-hat judges every coefficient at once: above 0.7 the summary says
    so as a CAUTION naming how many, and the fit does not warn (the README's correlated-slopes comparison puts the
    accurate fit within 0.05 Gibbs SDs); a model without random effects keeps its verdict and warning."""
    from bayesvm.errors import ApproximationWarning
    from bayesvm.results.vb_check import VBCheck, check_warning

    data = _correlated_data()
    fit = bayesvm.bsvm("y ~ x + (1 + x | g)", data, checks=bayesvm.Checks(vb_check="ignore"))
    check = fit.check_vb(warn=False)
    assert check.marginal_khat is None and check.joint_only == 2 + 2 * 12
    failed = VBCheck(khat=0.9, draws=1000, fixef=None, joint_only=check.joint_only)
    assert check_warning(failed) is None and failed.verdict.startswith("not judged")
    fit = replace(fit, end_of_fit_check=failed)  # (a fit whose end-of-fit check failed so)
    line = next(line for line in str(fit.summary()).splitlines() if "coefficients jointly" in line)
    assert line.split()[0] == "CAUTION" and "all 26 coefficients jointly: k-hat = 0.90 > 0.7" in line
    plain = VBCheck(khat=0.9, draws=1000, fixef=None, suspects=("x",))
    assert "disagree most on 'x'" in check_warning(plain) and plain.verdict.startswith("unreliable")
    assert issubclass(ApproximationWarning, UserWarning)


def test_a_check_that_cannot_factorise_q_never_breaks_the_fit(monkeypatch):
    """Unstandardised columns on a scale of 1e6 give q a covariance whose eigenvalues span 1e12: scipy's normal density
    refused it (a raw LinAlgError from bsvm()).  The check's own Cholesky takes it; where none does, the fit still
    returns and summary() says why there is no check."""
    rng = np.random.default_rng(2)
    g = rng.integers(0, 30, 300)
    x = rng.standard_normal(300)
    y = (rng.random(300) < 1 / (1 + np.exp(-(x + rng.normal(0, 1, 30)[g])))).astype(int)
    data = pd.DataFrame({"x": x * 1e6, "g": g, "y": y})
    fit = bayesvm.bsvm("y ~ x + (1 | g)", data, standardize=False)
    assert fit.last_vb_check.marginal_khat < 0.7

    def refuse(*args, **kwargs):
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    import bayesvm.results.vb_check as vb_check

    monkeypatch.setattr(vb_check, "check_vb", refuse)
    fit = bayesvm.bsvm("y ~ x + (1 | g)", data, standardize=False)
    assert isinstance(fit.last_vb_check, str) and "standardize=True" in fit.last_vb_check
    assert "no PSIS check: the PSIS check could not factorise" in str(fit.summary())
    with pytest.raises(bayesvm.BayesvmError, match="could not factorise"):
        fit.check_vb()


def test_near_threshold_marks_the_bands_around_both_verdict_thresholds():
    from bayesvm.results.vb_check import near_threshold

    assert [near_threshold(k) for k in (0.2, 0.45, 0.55, 0.65, 0.75, 0.95)] == [False, True, True, True, True, False]


def test_a_borderline_first_look_takes_a_second_look_and_the_verdict_holds_across_seeds(toenail):
    from bayesvm.results.vb_check import FIRST_LOOK_DRAWS, SECOND_LOOK_DRAWS, near_threshold

    fit = bayesvm.bsvm("outcome ~ treatment * time + (1 | patientID)", toenail)
    first = [fit.check_vb(draws=FIRST_LOOK_DRAWS, seed=s, warn=False) for s in range(10)]
    adaptive = [fit.check_vb(seed=s, warn=False) for s in range(10)]
    for one, other in zip(first, adaptive):  # the first look's draws are the first of the second look's
        assert other.draws == (SECOND_LOOK_DRAWS if near_threshold(one.governing_khat) else FIRST_LOOK_DRAWS)
    assert {one.verdict.split(" ")[0].rstrip(":") for one in first} == {"good", "usable"}  # 1,000 draws flip
    assert {other.verdict.split(" ")[0] for other in adaptive} == {"good"}


def test_a_clearly_unreliable_first_look_stops_early_and_one_that_goes_on_gives_the_full_look_exactly(toenail):
    """The first look evaluates the exact posterior look by look (EARLY_LOOKS): a k-hat already at a look's threshold
    (mean-field toenail: about 2) is the verdict, as 1,000 draws also give it, and costs a tenth of them; a first look
    that goes on is the same draws as the explicit 1,000-draw check, to rounding."""
    from bayesvm.results.vb_check import EARLY_LOOKS, FIRST_LOOK_DRAWS

    formula = "outcome ~ visit * treatment + (1 | patientID)"
    far = bayesvm.bsvm(formula, toenail, penalty=None, vb="meanfield", checks=bayesvm.Checks(vb_check="ignore"))
    thresholds = dict(EARLY_LOOKS)
    for seed in range(4):
        early, full = far.check_vb(seed=seed, warn=False), far.check_vb(draws=FIRST_LOOK_DRAWS, seed=seed, warn=False)
        assert early.draws in thresholds and early.marginal_khat >= thresholds[early.draws]
        assert full.draws == FIRST_LOOK_DRAWS and full.marginal_khat > 0.7
        assert early.verdict == full.verdict and early.verdict.startswith("unreliable")
        assert early.suspects[0] == full.suspects[0] == "sigma^2 (1 | patientID)"
    data, formula = simulate_logistic(1000, 3, seed=8)  # (k-hat about 0.84: neither early nor a second look)
    near = bayesvm.bsvm(formula, data, vb="meanfield", checks=bayesvm.Checks(vb_check="ignore"))
    looked, explicit = near.check_vb(seed=4, warn=False), near.check_vb(draws=FIRST_LOOK_DRAWS, seed=4, warn=False)
    assert 0.7 < looked.khat < min(thresholds.values()) and looked.draws == FIRST_LOOK_DRAWS
    np.testing.assert_allclose(looked.khat, explicit.khat, rtol=1e-10)
    assert looked.suspects == explicit.suspects and looked.verdict == explicit.verdict


def test_the_marginal_check_of_a_mean_field_fit_looks_early_and_goes_on_to_the_same_draws():
    """With a random intercept the marginal k-hat governs: a first look that goes on past its early looks (and a
    second look) gives the explicit check's k-hats and table exactly (the joint and the marginal draws on streams of
    their own, made in the looks' sizes)."""
    from bayesvm.results.vb_check import FIRST_LOOK_DRAWS, SECOND_LOOK_DRAWS

    data = simulate_grouped(n_groups=10, per_group=100, seed=1)  # (marginal k-hat 0.5-0.85 across seeds)
    fit = bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", data, vb="meanfield", checks=bayesvm.Checks(vb_check="ignore"))
    looks = [fit.check_vb(seed=seed, warn=False) for seed in range(2)]
    assert [look.draws for look in looks] == [FIRST_LOOK_DRAWS, SECOND_LOOK_DRAWS]
    for seed, looked in enumerate(looks):
        explicit = fit.check_vb(draws=looked.draws, seed=seed, warn=False)
        assert looked.marginal_khat == explicit.marginal_khat  # (a second look adds marginal draws only)
        assert looked.khat == explicit.khat or looked.draws > FIRST_LOOK_DRAWS
        assert looked.verdict == explicit.verdict and looked.suspects == explicit.suspects
        if looked.marginal is not None:  # (reported where the marginal k-hat is at most 0.7)
            pd.testing.assert_frame_equal(looked.marginal, explicit.marginal)


def test_draw_streams_make_their_draws_in_the_same_increments_however_they_are_asked():
    from bayesvm.results.check_draws import DrawStream, increments

    assert increments(0, 1000, (100, 250)) == [100, 150, 750]
    assert increments(100, 2500, (100, 250)) == [150, 750, 1000, 600]
    assert increments(0, 2500, ()) == [1000, 1000, 500]

    def sampler(fit, rng, size):
        return (rng.standard_normal((size, 3)), [rng.random(size)])

    whole = DrawStream(sampler, None, np.random.default_rng(5), (100, 250))
    piecewise = DrawStream(sampler, None, np.random.default_rng(5), (100, 250))
    at_once = whole.take(1200)
    by_looks = piecewise.take(100) + piecewise.take(150) + piecewise.take(950)
    np.testing.assert_array_equal(np.vstack([p[0] for p in at_once]), np.vstack([p[0] for p in by_looks]))
    np.testing.assert_array_equal(
        np.concatenate([p[1][0] for p in at_once]), np.concatenate([p[1][0] for p in by_looks])
    )
    assert whole.made == piecewise.made == 1200


@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_the_compiled_hinge_sums_of_joint_draws_equal_the_predictor_path(toenail, class_weight, monkeypatch):
    """The joint check's hinge pseudo-likelihood at each draw, row by row in compiled code, equals it through the
    ``(draws, rows)`` predictor, with class weights and random effects."""
    from bayesvm.linalg import compiled
    from bayesvm.results import vb_check

    if not compiled.available():
        pytest.skip("numba is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail, class_weight=class_weight,
                           vb="meanfield", checks=bayesvm.Checks(vb_check="ignore"))  # fmt: skip
    problem, rng = fit.problem, np.random.default_rng(0)
    theta_d = rng.normal(size=(300, problem.D.shape[1]))
    theta_b = rng.normal(size=(300, problem.blocked.n_levels, 1))
    rowwise = vb_check.hinge_sums(problem, theta_d, theta_b)
    monkeypatch.setattr(compiled, "available", lambda: False)
    np.testing.assert_allclose(rowwise, vb_check.hinge_sums(problem, theta_d, theta_b), rtol=1e-12)
    assert not np.allclose(rowwise, vb_check.hinge_sums(problem, theta_d + 0.1, theta_b))
