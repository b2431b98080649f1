"""The joint pseudo-posterior's log densities (``bayesvm.engines.joint``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesvm.engines import variance_prior
from bayesvm.engines.joint import LogPrior, log_prior
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import HalfT, InverseGamma, PriorSet


def _problem(formula: str, penalty, priors: PriorSet):
    rng = np.random.default_rng(0)
    n = 80
    data = pd.DataFrame({
        "y": rng.choice(["a", "b"], n),
        "x": rng.standard_normal(n),
        "w": rng.standard_normal(n),
        "g": rng.choice(list("pqrstu"), n),
        "h": rng.choice(list("klm"), n),
    })  # fmt: skip
    design = build_design(parse_formula(formula), data)
    return build_model(design, penalty, priors, standardize=False).problem()


@pytest.mark.parametrize(
    "formula,penalty,priors",
    [
        ("y ~ x + w + (1 | g)", "learn", PriorSet()),
        ("y ~ x + (1 | g) + (1 | h)", 1.0, PriorSet(random=InverseGamma(0.5, 0.3))),
        ("y ~ x + (1 + x | g)", "learn", PriorSet(random=HalfT(4.0, 1.5))),
        ("y ~ x + w", 2.0, PriorSet()),
    ],
    ids=["intercept-half-t-penalty", "two-intercepts-inverse-gamma", "correlated", "fixed-only"],
)
def test_log_prior_with_constants_computed_once_equals_log_prior(formula, penalty, priors):
    problem = _problem(formula, penalty, priors)
    density = LogPrior(problem)
    rng = np.random.default_rng(1)
    J, K = (problem.blocked.n_levels, problem.blocked.K) if problem.blocked is not None else (0, 0)
    for _ in range(5):
        theta_d, theta_b = rng.standard_normal(problem.D.shape[1]), rng.standard_normal((J, K))
        covs = []
        for comp in problem.components:
            root = rng.standard_normal((comp.k, comp.k)) * 0.5 + np.eye(comp.k)
            covs.append(root @ root.T)
        assert density(theta_d, theta_b, covs) == pytest.approx(log_prior(problem, theta_d, theta_b, covs), rel=1e-12)
    # all draws at once, as the samplers compute it for their kept draws
    draws = [(rng.standard_normal(problem.D.shape[1]), rng.standard_normal((J, K))) for _ in range(6)]
    draw_covs = []
    for _ in draws:  # (correlated covariances for the inverse-Wishart terms)
        roots = [rng.standard_normal((c.k, c.k)) * 0.5 + np.eye(c.k) * rng.gamma(2.0) for c in problem.components]
        draw_covs.append([root @ root.T for root in roots])
    together = density.of_draws(
        np.stack([d for d, _ in draws]), np.stack([b for _, b in draws]),
        [np.stack([covs[c] for covs in draw_covs]) for c in range(len(problem.components))],
    )  # fmt: skip
    one_by_one = [density(d, b, covs) for (d, b), covs in zip(draws, draw_covs)]
    np.testing.assert_allclose(together, one_by_one, rtol=1e-12)


@pytest.mark.parametrize("prior", [InverseGamma(2.0, 0.7), HalfT(3.0, 2.5), HalfT(1.0, 0.2)], ids=str)
def test_scalar_log_density_equals_the_log_density(prior):
    problem = _problem("y ~ x + (1 | g)", 1.0, PriorSet(random=prior))
    (comp,) = [c for c in problem.components if c.source >= 0]
    scalar = variance_prior.scalar_log_density(comp)
    for v in (1e-6, 0.03, 1.0, 17.0, 1e5):
        assert scalar(v) == pytest.approx(float(variance_prior.log_density(comp, v)), rel=1e-12, abs=1e-12)
