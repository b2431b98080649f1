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
import scipy.linalg as sla
from scipy import stats

from ..engines.hinge_levels import LevelLayout, draws_log_integral_sums, pieces
from ..engines.linear import compiled_rows
from ..engines.linear.ep import Hyperparameters
from ..engines.linear.vb import LOG_2PI
from ..linalg.dense import row_pool
from ..model.problems import VBProblem

#: Draws x groups x (largest group + 1) values processed at a time: about a dozen arrays of this
#: many doubles are alive at once (~400 MB at 4e6).
CHUNK_VALUES = 4e6
#: Largest groups x (largest group + 1) / rows for which the marginal check runs.
MAX_PADDING = 8.0


def integrable_component(problem: VBProblem) -> int | None:
    """Index of the component whose random effects the marginal check integrates out, or None.

    Needs one blocked grouping factor carrying a single single-column term (``(1 | g)``,
    ``(0 + x | g)``), on the dense/Schur path, with groups balanced enough that padding every group
    to the largest costs at most ``MAX_PADDING`` times the rows (the computation is vectorised over a
    groups x largest-group array).
    """
    if problem.blocked is None or problem.is_sparse or problem.blocked.values.shape[1] != 1:
        return None
    counts = np.bincount(problem.blocked.codes, minlength=problem.blocked.n_levels)
    if problem.blocked.n_levels * (counts.max() + 1) > MAX_PADDING * problem.n:
        return None
    blocked = [c for c, comp in enumerate(problem.components) if comp.blocked]
    if len(blocked) != 1 or problem.components[blocked[0]].k != 1:
        return None
    return blocked[0]


def group_log_integrals(y: np.ndarray, eta: np.ndarray, v: np.ndarray, codes: np.ndarray, sigma2: np.ndarray,
                        n_levels: int) -> np.ndarray:  # fmt: skip
    """``sum_j log I_j`` for draws ``eta (S, n)``, ``sigma2 (S,)`` (see the module docstring;
    :mod:`bayesvm.engines.hinge_levels` computes each ``I_j``: compiled where numba is installed, level by level
    without the padded ``(S, J, K + 1)`` arrays, else by numpy in chunks of draws; the two agree to rounding, tested)."""
    S = eta.shape[0]
    layout = LevelLayout(y, v, codes, n_levels)
    total = np.zeros(S)
    # rows with s_i = 0 do not involve u: their hinge is a constant factor
    flat = (y * v) == 0
    if np.any(flat):
        total += -2.0 * np.sum(np.maximum(0.0, 1.0 - y[flat] * eta[:, flat]), axis=1)
    if compiled_rows.available():  # the draws in two halves on the package's two row threads (the kernel is nogil)
        eta = np.ascontiguousarray(eta)
        halves = [slice(0, S // 2), slice(S // 2, S)]
        sums = row_pool().map(
            lambda h: draws_log_integral_sums(layout.y, eta[h], layout.slope, layout.rows, sigma2[h]), halves
        )
        return total + np.concatenate(list(sums))
    J, K = layout.shape
    step = max(1, int(CHUNK_VALUES // max(1, J * (K + 1))))
    for first in range(0, S, step):
        part = slice(first, min(S, first + step))
        total[part] += np.sum(pieces(layout, eta[part]).log_integrals(sigma2[part]), axis=1)
    return total


def _log_prior_dense(problem: VBProblem, theta_d: np.ndarray, covs: list[np.ndarray], skip: int) -> np.ndarray:
    """``log p(theta_d | variances)`` for draws ``theta_d (S, q)``; ``covs[c]`` is ``(S, k, k)``."""
    lam = problem.fixed_precision
    fixed = lam > 0
    total = np.sum(0.5 * np.log(lam[fixed]) - 0.5 * LOG_2PI - 0.5 * lam[fixed] * theta_d[:, fixed] ** 2, axis=1)
    for c, comp in enumerate(problem.components):
        if c == skip:
            continue
        u = theta_d[:, comp.index]  # (S, J, k)
        for s in range(theta_d.shape[0]):
            chol = np.linalg.cholesky(covs[c][s])
            z = sla.solve_triangular(chol, u[s].T, lower=True)
            total[s] += -0.5 * np.sum(z**2) - comp.n_levels * (np.sum(np.log(np.diag(chol))) + 0.5 * comp.k * LOG_2PI)
    return total


def marginal_log_ratios(fit, rng: np.random.Generator, draws: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(log p - log q, theta_d draws, covariance draws)`` of the marginal check."""
    problem = fit.problem
    skip = integrable_component(problem)
    hyper = Hyperparameters(problem.components)
    if fit.posterior.kind == "mixture":
        theta_d, phi, log_q = _mixture_marginal(fit.result, rng, draws)
    else:
        theta_d, phi, log_q = _mean_field_marginal(fit.result, hyper, rng, draws)
    covs_each = [hyper.covariances(t) for t in phi]
    covs = [np.stack([c[j] for c in covs_each]) for j in range(len(problem.components))]
    eta = theta_d @ problem.D.T
    blocked = problem.blocked
    log_p = group_log_integrals(
        problem.y, eta, blocked.values[:, 0], blocked.codes, covs[skip][:, 0, 0], blocked.n_levels
    )
    log_p += _log_prior_dense(problem, theta_d, covs, skip)
    log_p += np.array([hyper.log_prior(t) for t in phi])
    return log_p - log_q, theta_d, covs


def _gaussian_marginal(theta) -> tuple[np.ndarray, np.ndarray]:
    grid = np.arange(theta.mean_d.size)
    return theta.mean_d, theta.cov_entries(grid[:, None], grid[None, :])


def _gaussian_draws(rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray, size: int):
    """``size`` draws of ``N(mean, cov)`` and their log densities, through one Cholesky factor: positive definite is
    enough (scipy's density refuses covariances whose eigenvalues span more than about 1e12, which unstandardised
    columns on a scale of 1e6 give; its sampler and this density do not need that)."""
    chol = np.linalg.cholesky(cov)
    z = rng.standard_normal((size, mean.size))
    log_q = -0.5 * np.sum(z**2, axis=1) - np.sum(np.log(np.diag(chol))) - 0.5 * mean.size * LOG_2PI
    return mean + z @ chol.T, log_q


def _mean_field_marginal(result, hyper: Hyperparameters, rng, draws):
    mean, cov = _gaussian_marginal(result.theta)
    theta_d, log_q = _gaussian_draws(rng, mean, cov, draws)
    phi_parts, log_q_phi = [], np.zeros(draws)
    for comp, post in zip(hyper.components, result.components):
        if comp.k == 1:
            dist = stats.invgamma(a=post.shape, scale=post.scale[0, 0])
            sigma2 = dist.rvs(size=draws, random_state=rng)
            phi_parts.append(np.log(sigma2)[:, None])
            log_q_phi += dist.logpdf(sigma2)
        else:
            dist = stats.invwishart(df=post.shape, scale=post.scale)
            sigma = dist.rvs(size=draws, random_state=rng).reshape(draws, comp.k, comp.k)
            chol = np.linalg.cholesky(sigma)
            lower = np.tril_indices(comp.k, -1)
            part = np.concatenate([np.log(np.diagonal(chol, axis1=1, axis2=2)), chol[:, lower[0], lower[1]]], axis=1)
            phi_parts.append(part)
            log_q_phi += dist.logpdf(np.moveaxis(sigma, 0, -1))
    phi = np.concatenate(phi_parts, axis=1)
    log_q_phi += np.array([hyper.log_jacobian(t) for t in phi])  # density of phi
    return theta_d, phi, log_q + log_q_phi


def _mixture_marginal(result, rng, draws):
    nodes, phi, log_q_phi = cell_draws(result, rng, draws)
    theta_d = np.empty((draws, result.thetas[0].mean_d.size))
    log_q = np.empty(draws)
    for k, theta in enumerate(result.thetas):
        chosen = np.flatnonzero(nodes == k)
        if chosen.size:
            mean, cov = _gaussian_marginal(theta)
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
        half = r.step / 2.0
        at = r.lattice[nodes]
        lower = np.where(at < -half, -np.inf, np.where(at > half, half, -half))
        upper = np.where(at < -half, -half, np.where(at > half, np.inf, half))
        z = stats.truncnorm.rvs(lower, upper, random_state=rng)
        log_q = np.sum(stats.truncnorm.logpdf(z, lower, upper), axis=1)
    phi = r.center + z @ r.axes.T
    log_q = log_q + np.log(r.weights[nodes]) - np.log(abs(np.linalg.det(r.axes)))  # density of phi
    return nodes, phi, log_q
