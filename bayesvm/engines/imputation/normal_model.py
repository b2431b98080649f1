"""The imputation model of multiple imputation: the predictors given the class (``imputation="mi"``).

    z_i | y_i ~ N(B' u_i, Sigma),   u_i = (1, y_i),   B ~ MN(0, s^2 I_2, Sigma),   Sigma ~ IW(nu, Psi),

on the engine's standardised scale, missing completely at random; sampled exactly by data augmentation
(Tanner & Wong 1987; the steps are in :mod:`bayesvm.engines.imputation.multiple`'s docstring).  Its posterior
does not involve the SVM, so the same chain serves every engine that imputes this way: multiple imputation by
VB, accurate VB or SVI (:mod:`~bayesvm.engines.imputation.multiple`), and the imputation segments of the
Gibbs samplers (:mod:`~bayesvm.engines.imputation.joint_model`'s chain runner, the selection samplers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model.problems import ImputationProblem


def missing_patterns(missing: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows grouped by their missingness pattern: ``(rows, missing-columns mask)``, complete rows left out."""
    rows = np.flatnonzero(missing.any(axis=1))
    if rows.size == 0:
        return []
    keys, inverse = np.unique(missing[rows], axis=0, return_inverse=True)
    return [(rows[inverse.ravel() == k], keys[k]) for k in range(keys.shape[0])]


@dataclass
class ImputationState:
    """Current state of the imputation chain: completed ``z``, ``B`` (2 x V) and ``Sigma``."""

    z: np.ndarray
    B: np.ndarray
    sigma: np.ndarray


def start_state(problem: ImputationProblem, rng: np.random.Generator) -> ImputationState:
    """Missing entries at 0 (the observed mean on the standardised scale) plus noise; ``B = 0``, ``Sigma = I``."""
    z = problem.z.copy()
    z[problem.missing] = rng.standard_normal(int(problem.missing.sum()))
    V = problem.V
    return ImputationState(z=z, B=np.zeros((2, V)), sigma=np.eye(V))


def _inverse_wishart(df: float, scale: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw of ``IW(df, scale)`` by Bartlett's decomposition: ``Sigma = (L A A' L')^-1``, ``L L' = scale^-1``."""
    V = scale.shape[0]
    L = np.linalg.cholesky(np.linalg.inv(scale))
    A = np.tril(rng.standard_normal((V, V)), -1)
    A[np.diag_indices(V)] = np.sqrt(rng.chisquare(df - np.arange(V)))
    LA = L @ A
    return np.linalg.inv(LA @ LA.T)


def imputation_step(state: ImputationState, problem: ImputationProblem, y: np.ndarray, patterns, rng) -> None:
    """One data-augmentation sweep (module docstring), in place; ``y`` in the rows' order of ``problem``.

    Small dense algebra by numpy (V is the number of imputation variables).
    """
    z = state.z
    U = np.column_stack([np.ones(y.size), y])
    draw_missing(z, patterns, U @ state.B, state.sigma, rng)

    def residual_squares(B):
        R = z - U @ B
        return R.T @ R

    state.B, state.sigma = draw_model(U.T @ U, U.T @ z, residual_squares, state.sigma, problem.mean_variance,
                                      problem.df, problem.scale, rng)  # fmt: skip


def draw_missing(z: np.ndarray, patterns, means: np.ndarray, sigma: np.ndarray, rng) -> None:
    """``z_{i,M} | z_{i,O}, B, Sigma``: the conditional normal of each row's missing entries given its observed ones
    under ``N(means_i, Sigma)``, vectorised per missingness pattern (:func:`missing_patterns`), in place."""
    for rows, mis in patterns:
        obs = ~mis
        S_mm = sigma[np.ix_(mis, mis)]
        if obs.any():
            S_mo = sigma[np.ix_(mis, obs)]
            A = np.linalg.solve(sigma[np.ix_(obs, obs)], S_mo.T).T  # Sigma_MO Sigma_OO^-1
            mean = means[np.ix_(rows, mis)] + (z[np.ix_(rows, obs)] - means[np.ix_(rows, obs)]) @ A.T
            cov = S_mm - A @ S_mo.T
        else:
            mean, cov = means[np.ix_(rows, mis)], S_mm
        chol = np.linalg.cholesky(0.5 * (cov + cov.T))
        z[np.ix_(rows, mis)] = mean + rng.standard_normal(mean.shape) @ chol.T


def draw_model(
    UtU: np.ndarray,
    Utz: np.ndarray,
    residual_squares,
    sigma: np.ndarray,
    mean_variance: float,
    df: float,
    scale: np.ndarray,
    rng,
) -> tuple[np.ndarray, np.ndarray]:
    """``(B, Sigma)`` given the completed ``z``, from its sufficient statistics (module docstring):
    ``B | z, Sigma ~ MN(G^-1 U'z, G^-1, Sigma)`` with ``G = U'U + I / s^2``, then
    ``Sigma | z, B ~ IW(nu + n + 2, Psi + (z - U B)'(z - U B) + B'B / s^2)``; ``residual_squares(B)`` is
    ``(z - U B)'(z - U B)`` and ``n = UtU[0, 0]``.  The rows enter only through ``U'U``, ``U'z`` and the residual
    squares, so partitions of the rows may supply their sums (:mod:`bayesvm.engines.imputation.stream_mi`)."""
    G_inv = np.linalg.inv(UtU + np.eye(2) / mean_variance)  # 2 x 2
    B_hat = G_inv @ Utz
    E = rng.standard_normal(B_hat.shape)
    B = B_hat + np.linalg.cholesky(G_inv) @ E @ np.linalg.cholesky(sigma).T  # row cov G^-1, column cov Sigma
    total = scale + residual_squares(B) + B.T @ B / mean_variance
    n = int(round(UtU[0, 0]))
    return B, _inverse_wishart(df + n + 2, 0.5 * (total + total.T), rng)


def marginal_moments(B: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ``z`` over the classes (the module docstring's reported ``mu``, ``Sigma``)."""
    ybar = float(np.mean(y))
    delta = B[1]
    return B[0] + ybar * delta, sigma + (1.0 - ybar**2) * np.outer(delta, delta)


@dataclass
class ImputationDraws:
    """``count`` completed data sets ``z`` (count, n, V) with the marginal ``mu`` and ``Sigma`` at each."""

    z: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray


def sample_imputations(
    problem: ImputationProblem, count: int, burn: int = 100, thin: int = 5, seed=None
) -> ImputationDraws:
    """``count`` draws of the imputation model's chain, ``thin`` sweeps apart after ``burn`` sweeps."""
    rng = np.random.default_rng(seed)
    y = problem.base.y
    patterns = missing_patterns(problem.missing)
    state = start_state(problem, rng)
    z_out = np.empty((count,) + problem.z.shape)
    mu_out = np.empty((count, problem.V))
    sigma_out = np.empty((count, problem.V, problem.V))
    for step in range(burn + count * thin):
        imputation_step(state, problem, y, patterns, rng)
        kept = step - burn
        if kept >= 0 and (kept + 1) % thin == 0:
            i = kept // thin
            z_out[i] = state.z
            mu_out[i], sigma_out[i] = marginal_moments(state.B, state.sigma, y)
    return ImputationDraws(z=z_out, mu=mu_out, sigma=sigma_out)
