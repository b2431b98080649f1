"""PSIS check of the *marginal* q(fixed effects, variance parameters), random intercepts integrated exactly.

The joint check (:mod:`bayesvm.results.vb_check`) judges q over every coefficient at once; with
hundreds of random effects small per-coordinate mismatches compound and k-hat is large even for
a q whose marginal summaries match a long Gibbs run (toenail: 298 coefficients).  The summaries
a user reads (fixed effects, variance components) are marginals, and for a single random
intercept-like term (one blocked grouping factor with a single column ``v``, e.g. ``(1 | g)``)
the marginal pseudo-posterior is available in closed form.

For group ``j`` with rows ``i``, linear predictor ``eta_i`` from the other coefficients and
``u_j ~ N(0, sigma^2)``,

    I_j = int prod_i exp(-2 max(0, 1 - y_i eta_i - s_i u)) N(u; 0, sigma^2) du,   s_i = y_i v_i.

Each hinge is active on one side of ``b_i = (1 - y_i eta_i) / s_i`` (left if ``s_i > 0``), where it
contributes ``2 s_i (u - b_i)``.  Between consecutive sorted breakpoints the exponent is
``a + c u - u^2 / (2 sigma^2)``, so with ``m = c sigma^2``

    I_j = sum_intervals exp(a + c^2 sigma^2 / 2) [Phi((hi - m) / sigma) - Phi((lo - m) / sigma)].

Then ``log p(y, theta_d, phi) = sum_j log I_j + log p(theta_d | phi) + log p(phi)`` (``phi`` the
variance parameters of :class:`bayesvm.engines.linear.ep.Hyperparameters`), and q's marginal is
the Gaussian of ``theta_d`` times q of ``phi`` (mean-field: the inverse-gamma / inverse-Wishart
factors; accurate: the node mixture over its cells).  PSIS of the ratio gives the marginal k-hat.
"""

from __future__ import annotations

import numpy as np

from ..engines.hyperparameters import Hyperparameters
from ..engines.linear.node_evidence import (
    draws_log_integrals,
    fixed_marginal,
    gaussian_transform,
    integrable_component,
    log_prior_dense,
)


def integration_note(problem) -> str:
    """How the marginal check treats the random effects of ``problem``, for ``summary()``: the term integrated out
    exactly, and the coefficients of any other random-effect term (a crossed or second factor), which are drawn from
    q with the fixed effects, so that the check's k-hat is then partly a joint one over them."""
    skip = integrable_component(problem)
    if skip is None:
        return ""
    exact = f"random effects of {problem.components[skip].name} integrated out exactly"
    others = [
        f"the {comp.index.size} of {comp.name}"
        for j, comp in enumerate(problem.components)
        if j != skip and not comp.blocked and comp.source >= 0  # (random-effect terms: not the penalty, not gp())
    ]
    if not others:
        return exact
    return (
        f"{exact}; {' and '.join(others)} drawn with the fixed effects, so k-hat is partly a joint one over them "
        "(strict in high dimension)"
    )


def marginal_proposal(fit, rng: np.random.Generator, draws: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``draws`` independent draws ``(theta_d, phi, log q)`` from q's marginal (cheap: the exact ``log p`` at them,
    :func:`marginal_ratios`, is the check's cost)."""
    if fit.posterior.over_nodes:
        return _mixture_marginal(fit.result, rng, draws)
    return _mean_field_marginal(fit.result, Hyperparameters(fit.problem.components), rng, draws)


def marginal_ratios(fit, theta_d: np.ndarray, phi: np.ndarray, log_q: np.ndarray):
    """``(log p - log q, theta_d, covariances, phi)`` at draws of :func:`marginal_proposal`."""
    log_p, covs = marginal_log_p(fit.problem, Hyperparameters(fit.problem.components), theta_d, phi)
    return log_p - log_q, theta_d, covs, phi


def marginal_log_p(problem, hyper: Hyperparameters, theta_d: np.ndarray, phi: np.ndarray):
    """``(log p(y, theta_d, phi), covariances)`` at draws ``theta_d (S, q)``, ``phi (S, d)``: the random intercepts
    integrated out in closed form (module docstring); every constant included."""
    skip = integrable_component(problem)
    covs = hyper.covariances_of_draws(phi)
    blocked = problem.blocked
    log_p = draws_log_integrals(
        problem.y, problem.D, theta_d, blocked.values[:, 0], blocked.codes, covs[skip][:, 0, 0], blocked.n_levels,
        problem.weights,
    )  # fmt: skip
    log_p += log_prior_dense(problem, theta_d, covs, skip)
    log_p += hyper.log_priors(phi)
    return log_p, covs


def _gaussian_draws(rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray, size: int):
    """``size`` draws of ``N(mean, cov)`` and their log densities."""
    return gaussian_transform(mean, cov, rng.standard_normal((size, mean.size)))


def _mean_field_marginal(result, hyper: Hyperparameters, rng, draws):
    from scipy import stats

    mean, cov = fixed_marginal(result.theta)
    theta_d, log_q = _gaussian_draws(rng, mean, cov, draws)
    phi_parts, log_q_phi = [], np.zeros(draws)
    for comp, post in zip(hyper.components, result.components):
        if comp.k == 1:
            # (scipy's distribution called directly: a frozen one costs more to build than a check's draws)
            sigma2 = stats.invgamma.rvs(post.shape, scale=post.scale[0, 0], size=draws, random_state=rng)
            phi_parts.append(np.log(sigma2)[:, None])
            log_q_phi += stats.invgamma.logpdf(sigma2, post.shape, scale=post.scale[0, 0])
        else:
            dist = stats.invwishart(df=post.shape, scale=post.scale)
            sigma = dist.rvs(size=draws, random_state=rng).reshape(draws, comp.k, comp.k)
            chol = np.linalg.cholesky(sigma)
            lower = np.tril_indices(comp.k, -1)
            part = np.concatenate([np.log(np.diagonal(chol, axis1=1, axis2=2)), chol[:, lower[0], lower[1]]], axis=1)
            phi_parts.append(part)
            log_q_phi += dist.logpdf(np.moveaxis(sigma, 0, -1))
    phi = np.concatenate(phi_parts, axis=1)
    log_q_phi += hyper.log_jacobians(phi)  # density of phi
    return theta_d, phi, log_q + log_q_phi


def _mixture_marginal(result, rng, draws):
    nodes, phi, log_q_phi = cell_draws(result, rng, draws)
    theta_d = np.empty((draws, result.thetas[0].mean_d.size))
    log_q = np.empty(draws)
    for k, theta in enumerate(result.thetas):
        chosen = np.flatnonzero(nodes == k)
        if chosen.size:
            mean, cov = fixed_marginal(theta)
            theta_d[chosen], log_q[chosen] = _gaussian_draws(rng, mean, cov, chosen.size)
    return theta_d, phi, log_q + log_q_phi


def cell_draws(result, rng: np.random.Generator, draws: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes ``k`` (probability ``w_k``), variance parameters ``phi`` spread over node k's cell, and
    ``log q(phi)`` (including ``log w_k``).

    The cell of a lattice node is the lattice cell around it (``phi`` uniform there); the cell of a
    Gauss-Hermite node is the product of the intervals between the midpoints of the 3-point rule in
    ``z`` (``z`` standard normal truncated to it); ``phi = center + axes @ z``.
    """
    r = result
    nodes = rng.choice(r.weights.size, size=draws, p=r.weights)
    d = r.nodes.shape[1]
    if r.design == "lattice":  # z uniform within the node's cell
        z = r.lattice[nodes] + r.step * (rng.random((draws, d)) - 0.5)
        log_q = np.full(draws, -d * np.log(r.step))
    else:  # z standard normal truncated to the node's cell
        from scipy import stats

        half = r.step / 2.0
        at = r.lattice[nodes]
        lower = np.where(at < -half, -np.inf, np.where(at > half, half, -half))
        upper = np.where(at < -half, -half, np.where(at > half, np.inf, half))
        z = stats.truncnorm.rvs(lower, upper, random_state=rng)
        log_q = np.sum(stats.truncnorm.logpdf(z, lower, upper), axis=1)
    phi = r.center + z @ r.axes.T
    log_q = log_q + np.log(r.weights[nodes]) - np.log(abs(np.linalg.det(r.axes)))  # density of phi
    return nodes, phi, log_q
