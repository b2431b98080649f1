"""The PSIS check of a joint-imputation VB fit, the imputed values integrated out exactly.

The joint model (:mod:`bayesvm.engines.imputation.joint_model`) has ``z_i ~ N(mu, Sigma)`` for the imputation
variables and the design column ``alpha_j + gamma_j z_ij``, so ``f_i = r_i + z_i' b`` with ``b = gamma o theta_K``
(``K``: the imputed columns' positions in ``theta_d``, ``r_i`` free of ``z``).  Given ``(theta, mu, Sigma)`` a row's
missing values ``z_{i,M}`` are ``N(m_i, S_M)`` given its observed ones (the conditional of ``N(mu, Sigma)``), so
``f_i`` is ``N(r_i + z_{i,O}' b_O + m_i' b_M, b_M' S_M b_M)`` and the row's factor of the pseudo-posterior,

    int exp(-2 max(0, 1 - y_i f_i)) N(z_{i,M}; m_i, S_M) dz_{i,M} = E exp(-2 max(0, 1 - y_i f_i)),

is the normaliser of a tilted Gaussian in one dimension (:func:`bayesvm.engines.hinge_sites.tilted_moments`), times
``N(z_{i,O}; mu_O, Sigma_OO)``.  The check's target is then

    log p(y, z_obs, theta, components, mu, Sigma) = sum_i [log Z_i + log N(z_{i,O}; mu_O, Sigma_OO)]
        + log p(theta | components) + log p(components) + log p(mu) + log p(Sigma),

exact in the few parameters ``(theta, components, mu, Sigma)`` whatever the number of missing values, and the
proposal is q's marginal over them, ``q(theta) q(components) q(mu) q(Sigma)``.  PSIS on ``log p - log q`` gives the
verdicts of :mod:`bayesvm.results.vb_check` (the same thresholds, the same second look near them).  Covers the
joint model's mean-field fit on the dense path without a blocked grouping factor (random effects in ``theta_d`` make
it a joint check over all their coefficients, judged as such).
"""

from __future__ import annotations

import numpy as np

from ..engines.hinge_sites import weighted_tilted_moments
from ..engines.joint import LogPrior
from ..model.problems import ImputationProblem

LOG_2PI = float(np.log(2.0 * np.pi))


def covers(fit) -> str | None:
    """Why this check does not cover a missing-data fit, or None when it does (a joint-model VB fit, dense, no
    blocked grouping factor)."""
    result = fit.result
    if getattr(result, "imputation", None) is not None:
        return (
            "no PSIS check for multiple imputation (the pooled posterior is a mixture over completed data sets; "
            "compare with method='gibbs')"
        )
    if fit.problem.blocked is not None or not isinstance(fit.problem.D, np.ndarray):
        return "no PSIS check for a joint-imputation fit with a blocked grouping factor (compare with method='gibbs')"
    return None


def imputed_log_likelihood(problem: ImputationProblem, theta_d: np.ndarray, mu: np.ndarray, sigma: np.ndarray):
    """``sum_i [log Z_i + log N(z_{i,O}; mu_O, Sigma_OO)]`` at one draw (module docstring), rows as in ``problem``."""
    return float(imputed_log_likelihoods(problem, theta_d[None], mu[None], sigma[None])[0])


def imputed_log_likelihoods(
    problem: ImputationProblem, theta_d: np.ndarray, mu: np.ndarray, sigma: np.ndarray
) -> np.ndarray:
    """:func:`imputed_log_likelihood` of ``S`` draws at once (``theta_d (S, q)``, ``mu (S, V)``, ``sigma (S, V, V)``):
    one product for every row's ``r_i``; per pattern of missing values, the observed values' density from the
    pattern's sufficient statistics and the conditionals of all draws by small batched solves; one tilted normaliser
    per row and draw."""
    base, cols = problem.base, np.asarray(problem.columns)
    y, z, weights = base.y, problem.z, base.weights  # (class weights: each row's hinge times omega_i)
    D = np.asarray(base.D)
    b = problem.gamma * theta_d[:, cols]  # (S, V)
    rest = theta_d @ D.T - theta_d[:, cols] @ D[:, cols].T + (theta_d[:, cols] @ problem.alpha)[:, None]  # (S, n)
    total = np.zeros(theta_d.shape[0])
    keys, inverse = np.unique(problem.missing, axis=0, return_inverse=True)
    for k, hidden in enumerate(keys):
        rows = np.flatnonzero(inverse.ravel() == k)
        seen = ~hidden
        z_seen = z[np.ix_(rows, seen)]  # (rows, |O|)
        mean_f = rest[:, rows] + b[:, seen] @ z_seen.T  # (S, rows)
        if seen.any():  # log N(z_O; mu_O, Sigma_OO) summed over the pattern's rows by its sufficient statistics
            sigma_oo, mu_o, m = sigma[:, seen][:, :, seen], mu[:, seen], rows.size
            first, second = z_seen.sum(axis=0), z_seen.T @ z_seen
            scatter = (
                second[None] - mu_o[:, :, None] * first[None, None, :] - first[None, :, None] * mu_o[:, None, :]
                + m * mu_o[:, :, None] * mu_o[:, None, :]
            )  # sum_i (z_iO - mu_O)(z_iO - mu_O)'  # fmt: skip
            log_det = np.linalg.slogdet(sigma_oo)[1]
            quadratic = np.trace(np.linalg.solve(sigma_oo, scatter), axis1=1, axis2=2)
            total += -0.5 * quadratic - 0.5 * m * (log_det + seen.sum() * LOG_2PI)
        if not hidden.any():
            hinge = np.maximum(0.0, 1.0 - y[rows] * mean_f)
            total += -2.0 * np.sum(hinge if weights is None else weights[rows] * hinge, axis=1)
            continue
        b_hidden = b[:, hidden]
        if seen.any():  # E[z_M | z_O]' b_M = mu_M' b_M + (z_O - mu_O)' Sigma_OO^{-1} Sigma_OM b_M
            gain = np.linalg.solve(sigma_oo, sigma[:, seen][:, :, hidden])  # (S, |O|, |M|)
            carried = np.einsum("som,sm->so", gain, b_hidden)
            shift = (mu[:, hidden] * b_hidden).sum(axis=1)[:, None] + carried @ z_seen.T
            shift -= (mu_o * carried).sum(axis=1)[:, None]
            cond_cov = sigma[:, hidden][:, :, hidden] - np.einsum("smo,sol->sml", sigma[:, hidden][:, :, seen], gain)
        else:
            shift = (mu[:, hidden] * b_hidden).sum(axis=1)[:, None]
            cond_cov = sigma[:, hidden][:, :, hidden]
        var_f = np.maximum(np.einsum("sm,sml,sl->s", b_hidden, cond_cov, b_hidden), 1e-300)
        shape = mean_f.shape
        log_z, _, _ = weighted_tilted_moments(
            np.broadcast_to(y[rows], shape).ravel(),
            (mean_f + shift).ravel(),
            np.broadcast_to(var_f[:, None], shape).ravel(),
            None if weights is None else np.broadcast_to(weights[rows], shape).ravel(),
        )
        total += log_z.reshape(shape).sum(axis=1)
    return total


def imputed_log_ratios(
    fit, problem: ImputationProblem, rng: np.random.Generator, draws: int, proposal
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(log p - log q, theta_d draws, coefficients)`` of ``draws`` draws from q's marginal over
    ``(theta, components, mu, Sigma)``; ``problem`` is the fit's joint imputation problem
    (``fit.model.imputation_problem("joint")``, built once for every batch); ``proposal(fit, rng, draws)`` gives q's
    draws of ``theta`` and the components with their ``log q`` (:func:`bayesvm.results.vb_check`'s mean-field
    proposal)."""
    from scipy import stats  # (imported here: a default fit's path never loads scipy.stats)

    base, result = problem.base, fit.result
    theta_d, theta_b, covs, log_q = proposal(fit, rng, draws)
    q_mu = stats.multivariate_normal(result.mu_mean, result.mu_cov)
    q_sigma = stats.invwishart(df=result.sigma_df, scale=result.sigma_scale)
    V = result.mu_mean.size
    mus = q_mu.rvs(size=draws, random_state=rng).reshape(draws, V)
    sigmas = q_sigma.rvs(size=draws, random_state=rng).reshape(draws, V, V)
    log_q = log_q + q_mu.logpdf(mus).reshape(draws) + _iw_logpdf(q_sigma, sigmas)
    prior_mu = stats.multivariate_normal(np.zeros(V), problem.mean_variance * np.eye(V))
    prior_sigma = stats.invwishart(df=problem.df, scale=problem.scale)
    log_p = prior_mu.logpdf(mus).reshape(draws) + _iw_logpdf(prior_sigma, sigmas)
    log_p += imputed_log_likelihoods(problem, theta_d, mus, sigmas)
    log_p += LogPrior(base).of_draws(theta_d, theta_b, covs)
    return log_p - log_q, theta_d, theta_d.shape[1]


def _iw_logpdf(law, sigmas: np.ndarray) -> np.ndarray:
    """``log IW`` of each matrix of ``sigmas`` ``(draws, V, V)`` (scipy takes a 1 x 1 matrix as a scalar)."""
    if sigmas.shape[1] == 1:
        return np.atleast_1d(law.logpdf(sigmas[:, 0, 0]))
    return np.atleast_1d(law.logpdf(np.moveaxis(sigmas, 0, -1)))
