"""The half-t prior's auxiliary form, and every engine's use of it, against exact answers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import digamma

from bayesvm.engines import variance_prior
from bayesvm.engines.components import ComponentPosterior
from bayesvm.priors import HalfT, InverseGamma

HALF_T = SimpleNamespace(name="(1 | g)", prior=HalfT(3.0, 2.5), n_levels=12)
INV_GAMMA = SimpleNamespace(name="(1 | g)", prior=InverseGamma(0.01, 0.01), n_levels=12)


def test_auxiliary_form_gives_the_half_t():
    """Huang & Wand (2013), Result 5: sigma^2 | a ~ IG(nu/2, nu/a), a ~ IG(1/2, 1/s^2) => sigma ~ half-t(nu, s)."""
    rng = np.random.default_rng(0)
    a = stats.invgamma(0.5, scale=1 / 2.5**2).rvs(200_000, random_state=rng)
    sigma = np.sqrt(stats.invgamma(1.5, scale=3.0 / a).rvs(random_state=rng))
    half_t_cdf = lambda x: 2 * stats.t(3, scale=2.5).cdf(x) - 1  # noqa: E731
    assert stats.kstest(sigma, half_t_cdf).pvalue > 0.01


@pytest.mark.parametrize("comp", [HALF_T, INV_GAMMA], ids=["half-t", "inverse-gamma"])
def test_log_density_is_a_normalised_density_of_the_variance(comp):
    total, _ = integrate.quad(lambda v: np.exp(variance_prior.log_density(comp, v)), 0, np.inf, limit=200)
    assert total == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("comp", [HALF_T, INV_GAMMA], ids=["half-t", "inverse-gamma"])
def test_log_density_of_log_variance_is_the_density_of_t(comp):
    """The scalar ``t -> log p(t)`` of the collapsed variance step is ``log p(sigma^2 = e^t) + t`` up to one constant,
    and the same constant across fourteen orders of magnitude."""
    t = np.linspace(-16.0, 16.0, 33)
    scalar = np.array([variance_prior.log_density_of_log_variance(comp)(x) for x in t])
    reference = variance_prior.log_density(comp, np.exp(t)) + t
    np.testing.assert_allclose(scalar - reference, (scalar - reference)[0], atol=1e-9)


def test_mode_is_the_conditional_mode():
    for S in (0.3, 5.0, 80.0):
        log_post = lambda v: -0.5 * HALF_T.n_levels * np.log(v) - S / (2 * v) + variance_prior.log_density(HALF_T, v)  # noqa: E731,B023
        grid = np.exp(np.linspace(-8, 8, 200_001))
        assert variance_prior.mode(HALF_T, S) == pytest.approx(grid[np.argmax(log_post(grid))], rel=1e-3)


def test_gibbs_steps_sample_the_exact_conditional_of_the_variance():
    """sigma^2 | u under the half-t (a integrated out), by quadrature, against the two-step Gibbs draws."""
    rng = np.random.default_rng(1)
    S, J = 6.0, HALF_T.n_levels
    draws, aux = np.empty(40_000), None
    for i in range(draws.size):
        draws[i], aux = variance_prior.draw(HALF_T, S, rng, aux)
    log_post = lambda v: -0.5 * J * np.log(v) - S / (2 * v) + variance_prior.log_density(HALF_T, v)  # noqa: E731
    grid = np.exp(np.linspace(-6, 6, 40_001))
    density = np.exp(log_post(grid) - log_post(grid).max()) * grid  # on log sigma^2
    cdf = np.cumsum(density) / density.sum()
    for p in (0.1, 0.5, 0.9):
        assert np.quantile(draws, p) == pytest.approx(np.interp(p, cdf, grid), rel=0.03)


def test_vb_update_is_the_coordinate_optimum_of_the_bound():
    """Each of q(sigma^2) and q(a) maximises the bound given the other: perturbing either lowers it."""
    second = 7.0
    post = variance_prior.update(HALF_T, second, None, ComponentPosterior)
    for _ in range(50):  # iterate to the fixed point of the two coordinate steps
        post = variance_prior.update(HALF_T, second, post, ComponentPosterior)

    def objective(p):
        shape, rate = p.shape, p.scale[0, 0]
        e_log, e_inv = np.log(rate) - digamma(shape), shape / rate
        return -0.5 * HALF_T.n_levels * e_log - 0.5 * e_inv * second + variance_prior.bound(HALF_T, p)

    best = objective(post)
    for d_rate, d_aux in ((1.05, 1.0), (0.95, 1.0), (1.0, 1.05), (1.0, 0.95)):
        moved = ComponentPosterior(post.shape, post.scale * d_rate, aux_rate=post.aux_rate * d_aux)
        assert objective(moved) < best


def _documented_prior() -> dict:
    """The example prior of the engines' reference page (docs/reference/engines.md), executed as written."""
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "reference" / "engines.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(next(b for b in blocks if "class ScaledInvChiSquare" in b), str(page), "exec"), namespace)
    return namespace


def test_a_new_variance_prior_is_one_record_one_law_and_one_line_of_the_table(monkeypatch, tmp_path):
    """The documented example: Scaled-Inv-chi^2(4, 0.5) is IG(2, 1), so every engine gives the inverse gamma's fit
    exactly (Gibbs seed for seed, by the Python steps and by the compiled whole iterations), as a random-effect
    variance's prior and as the learned penalty's; without its line of the
    table it is refused, naming the term; a law without a compiled form leaves the variance step to the Python
    steps, the inverse gamma's chain draw for draw."""
    import warnings

    import bayesvm
    from bayesvm.engines.linear import fused_iteration, gibbs
    from bayesvm.formula import build_design, parse_formula
    from bayesvm.model import build_model
    from bayesvm.priors import PriorSet
    from tests.conftest import simulate_grouped

    documented = _documented_prior()
    record, law = documented["ScaledInvChiSquare"], documented["ScaledInvChiSquareLaw"]
    data, formula = simulate_grouped(n_groups=15, per_group=10, seed=2), "y ~ x1 + x2 + (1 | g)"
    new, same = PriorSet(random=record(4.0, 0.5)), PriorSet(random=InverseGamma(2.0, 1.0))
    with pytest.raises(ValueError, match=r"ScaledInvChiSquare.*'\(1 \| g\)' has no law"):
        bayesvm.bsvm(formula, data, priors=new, vb="meanfield")
    monkeypatch.setitem(variance_prior.LAWS, record, law)
    monkeypatch.setattr(gibbs, "_whole_iterations_at_hand", lambda: False)  # (not by what numba's cache holds)
    gibbs_options = {
        "method": "gibbs",
        "draws": 300,
        "tune": 200,
        "chains": 2,
        "cores": 1,
        "seed": 3,
        "progress": False,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for options in ({"vb": "meanfield"}, {}, gibbs_options, {"method": "em"}):
            fit, reference = (bayesvm.bsvm(formula, data, priors=p, **options) for p in (new, same))
            np.testing.assert_allclose(
                fit.fixef.to_numpy(), reference.fixef.to_numpy(), rtol=1e-9, err_msg=str(options)
            )
        assert "(1 | g): sigma^2 ~ Scaled-Inv-chi2(4, 0.5)" in str(fit.summary())
        with pytest.raises(ValueError, match="ScaledInvChiSquare"):
            fit.save(tmp_path / "fit")
        # the same record as the learned penalty's prior: a ridge prior on the slopes with its own variance
        random = InverseGamma(1.0, 1.0)  # (a prior EM can maximise under)
        new, same = (
            PriorSet(penalty=record(4.0, 0.5), random=random),
            PriorSet(penalty=InverseGamma(2.0, 1.0), random=random),
        )
        for options in ({"vb": "meanfield"}, {}, gibbs_options, {"method": "em"}, {"method": "svi", "seed": 1}):
            fit, reference = (bayesvm.bsvm(formula, data, priors=p, **options) for p in (new, same))
            np.testing.assert_allclose(
                fit.fixef.to_numpy(), reference.fixef.to_numpy(), rtol=1e-9, err_msg=str(options)
            )
        assert "slopes ~ N(0, sigma_u^2), sigma_u^2 ~ Scaled-Inv-chi2(4, 0.5)" in str(fit.summary())

    def chain(priors, whole=True):
        problem = build_model(build_design(parse_formula(formula), data), "learn", priors, standardize=True).problem()
        return gibbs._chain(problem, 30, 20, 1, np.random.SeedSequence(8), False, whole=whole)["theta_d"]

    compiled_runs = []
    real_run = fused_iteration.FusedIteration.run
    monkeypatch.setattr(
        fused_iteration.FusedIteration, "run", lambda *a, **k: compiled_runs.append(1) or real_run(*a, **k)
    )
    np.testing.assert_array_equal(chain(new), chain(same))
    assert compiled_runs  # (the compiled whole iterations ran)
    compiled_runs.clear()
    monkeypatch.setattr(law, "compiled", lambda self: None)
    np.testing.assert_array_equal(chain(new), chain(same, whole=False))
    assert not compiled_runs  # (the Python steps only)


def test_em_refuses_a_prior_whose_law_makes_the_joint_mode_degenerate_naming_the_term():
    import bayesvm
    from bayesvm.priors import PriorSet
    from tests.conftest import simulate_grouped

    data = simulate_grouped(n_groups=10, per_group=6, seed=1)
    with pytest.raises(ValueError, match=r"\['\(1 \| g\)'\]: a half-t prior has positive density at sigma = 0"):
        bayesvm.bsvm("y ~ x1 + (1 | g)", data, method="em", priors=PriorSet(random=HalfT()))
    assert variance_prior.modal_refusal(INV_GAMMA) is None
