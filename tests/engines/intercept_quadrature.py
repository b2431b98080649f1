"""Exact log joint of an intercept-only random-intercept model on a grid of (intercept, log sigma^2).

The random intercepts integrate out in closed form (:func:`bayesvm.engines.linear.node_evidence.group_log_integrals`),
so ``log p(y, beta_0, log sigma^2)`` is a two-dimensional function: quadrature over it gives the log
evidence and the exact marginals that samplers and evidence estimates are tested against.
"""

import numpy as np

from bayesvm.engines.hyperparameters import Hyperparameters
from bayesvm.engines.linear.node_evidence import group_log_integrals


def log_joint_grid(problem, intercepts: np.ndarray, log_variances: np.ndarray) -> np.ndarray:
    """``log p(y, beta_0, phi)`` with every constant, shape ``(intercepts, log_variances)``, for a problem
    ``y ~ 1 + (1 | g)`` with a fixed penalty (``phi = log sigma^2``, its prior's Jacobian included; each row's hinge
    times its class weight where the problem has them)."""
    hyper = Hyperparameters(problem.components)
    B, PHI = np.meshgrid(intercepts, log_variances, indexing="ij")
    eta = B.reshape(-1, 1) * problem.D[:, 0][None, :]
    blocked = problem.blocked
    log_p = group_log_integrals(
        problem.y, eta, blocked.values[:, 0], blocked.codes, np.exp(PHI.ravel()), blocked.n_levels, problem.weights
    )
    lam = problem.fixed_precision[0]
    log_p += 0.5 * np.log(lam / (2 * np.pi)) - 0.5 * lam * B.ravel() ** 2
    log_p += np.array([hyper.log_prior(np.array([t])) for t in PHI.ravel()])
    return log_p.reshape(B.shape)
