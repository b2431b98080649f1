"""The original, top-down PCVM by EM (Chen, Tino & Yao 2009; "PCVM_EM" in the EPCVM paper's tables).

Derived here (the EPCVM paper only names it).  Probit model with Albert & Chib's latent variable:
``h_n ~ N(f_n, 1)``, ``f_n = Phi_n' w``, ``y_n = sign(h_n)``, so ``p(y_n | w) = Psi(y_n f_n)`` exactly.
Priors: ``w_0 ~ N(0, 1/alpha_0)`` (``alpha_0`` = the package's vague bias precision) and, for the
label-signed basis functions ``Phi[:, j] = y_j k(., x_j)``, the truncated ``p(w_j | alpha_j) = 2 N(w_j | 0,
1/alpha_j) 1(w_j >= 0)`` with ``alpha_j ~ Gamma(c, d)`` (shape, rate).  Integrating ``alpha_j`` out gives
``p(w_j) ∝ (d + w_j^2 / 2)^-(c + 1/2)`` on ``w_j >= 0``; ``c = d = 0`` (the default, as in the original
PCVM and Figueiredo's adaptive sparseness) is the Jeffreys prior ``1 / w_j``.  EM maximises

    L(w) = sum_n log Psi(y_n f_n) - alpha_0 w_0^2 / 2 - (c + 1/2) sum_{j active} log(d + w_j^2 / 2)

over ``w_j >= 0`` with ``(h, alpha)`` missing:

* E-step: ``z_n = E[h_n | y_n, w] = f_n + y_n phi(f_n) / Psi(y_n f_n)`` (the truncated-normal mean) and
  ``abar_j = E[alpha_j | w_j] = (2c + 1) / (w_j^2 + 2d)`` (``alpha_j | w_j ~ Gamma(c + 1/2, d + w_j^2 / 2)``).
* M-step: ``Q(w) = -||z - Phi w||^2 / 2 - w' Abar w / 2`` is maximised without the constraint by
  ``w_u = M (I + M Phi' Phi M)^-1 M Phi' z`` with ``M = Abar^-1/2`` (Figueiredo's form: no infinite
  precision is ever formed, and ``M_j -> 0`` as ``w_j -> 0``).  If ``w_u`` leaves the constraint set, the
  step from the current ``w`` is shortened to the boundary: ``Q`` is concave with its maximum at ``w_u``, so
  ``Q`` still rises along the segment and the iteration is a generalised EM, for which ``L`` cannot
  decrease.  Weights that reach the boundary or fall below ``prune`` leave the model (top-down pruning:
  all ``N`` basis functions start in it).

At a fixed point ``Phi'(z - Phi w) = Abar w``, i.e. ``Phi' (y phi / Psi) = (2c + 1) w / (w^2 + 2d)``: the
gradient of ``L`` over the active weights is 0 (tested).  EM gives a point estimate (MAP); the
covariance reported for predictions is the inverse curvature of ``log p(w | y, abar)`` at the mode,
``Phi' Lambda Phi + Abar`` with ``lambda_n = r_n (y_n f_n + r_n)``, ``r_n = phi(f_n) / Psi(y_n f_n)`` (the
Laplace approximation with the hyperparameters fixed at their E-step values, as in the RVM).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import linalg
from scipy.special import log_ndtr

from ...linalg.dense import runs_with_blas_threads
from ...model.output import EngineOutput
from .pcvm import BIAS_PRECISION


@dataclass
class PCVMEMResult(EngineOutput):
    """MAP weights of the surviving basis functions and the curvature covariance at the mode."""

    active: np.ndarray  # candidate indices (columns 1: of Phi) still in the model
    alpha: np.ndarray  # their E-step precisions abar_j
    mean: np.ndarray  # (1 + |active|,) bias first
    cov: np.ndarray
    objective: np.ndarray  # L(w) after every iteration (on that iteration's support)
    support: np.ndarray  # |active| after every iteration
    n_iter: int
    converged: bool
    elapsed: float


def _mills(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``r = phi(f) / Psi(y f)``, stable for large ``|f|``."""
    return np.exp(-0.5 * f * f - 0.5 * np.log(2 * np.pi) - log_ndtr(y * f))


def em_objective(w: np.ndarray, Phi: np.ndarray, y: np.ndarray, c: float = 0.0, d: float = 0.0) -> float:
    """``L(w)`` of the module docstring (every column of ``Phi`` after the first is an active basis function)."""
    f = Phi @ w
    return float(
        np.sum(log_ndtr(y * f)) - 0.5 * BIAS_PRECISION * w[0] ** 2 - (c + 0.5) * np.sum(np.log(d + 0.5 * w[1:] ** 2))
    )


def em_gradient(w: np.ndarray, Phi: np.ndarray, y: np.ndarray, c: float = 0.0, d: float = 0.0) -> np.ndarray:
    """Gradient of :func:`em_objective`."""
    r = y * _mills(Phi @ w, y)
    prior = np.concatenate([[BIAS_PRECISION * w[0]], (2 * c + 1) * w[1:] / (w[1:] ** 2 + 2 * d)])
    return Phi.T @ r - prior


@runs_with_blas_threads(lambda Phi, *_, **__: Phi.shape[1])
def fit_pcvm_em(
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    c: float = 0.0,
    d: float = 0.0,
    prune: float = 1e-3,
    tol: float = 1e-5,
    max_iter: int = 5000,
    seed: int | np.random.Generator | None = 0,
) -> PCVMEMResult:
    """PCVM_EM: start from all candidate basis functions (``Phi[:, 1:]``) and prune by generalised EM.

    ``Phi[:, 0]`` is the bias column; ``Phi[n, 1 + j] = y_j k(x_n, x_j)``.  As in the original code the start
    is random, ``w_j ~ U(0.2, 1.2)`` and bias 0 (``seed``), and the result depends on it: with the Jeffreys
    prior a set of identical basis functions (repeated rows, e.g. titanic's 3 binary inputs) started at
    equal weights keeps them equal, each pays ``-log w_j``, and all are pruned together; unequal starts let
    one of them take the weight.  Iterates until the largest weight change is below ``tol`` times the
    largest weight.
    """
    t0 = time.perf_counter()
    active = np.arange(Phi.shape[1] - 1)
    rng = np.random.default_rng(seed)
    w = np.concatenate([[0.0], 0.2 + rng.random(active.size)])
    objective, support = [], []
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (n_iter reports the last value)
        P = Phi[:, np.concatenate([[0], 1 + active])]
        f = P @ w
        z = f + y * _mills(f, y)  # E-step for h
        scale = np.concatenate([[1.0 / np.sqrt(BIAS_PRECISION)], np.sqrt((w[1:] ** 2 + 2 * d) / (2 * c + 1))])
        PM = P * scale[None, :]  # Phi M
        inner = PM.T @ PM
        inner[np.diag_indices_from(inner)] += 1.0
        chol = linalg.cho_factor(inner, lower=True, check_finite=False)
        w_u = scale * linalg.cho_solve(chol, PM.T @ z, check_finite=False)  # unconstrained M-step
        step = w_u - w
        leaving = step[1:] < 0
        t = 1.0
        if np.any(w_u[1:][leaving] < 0):  # shorten to the boundary w_j >= 0 (generalised EM)
            ratio = w[1:][leaving] / -step[1:][leaving]
            t = min(1.0, float(ratio.min()))
        new = w + t * step
        change = np.max(np.abs(new - w))
        keep = new[1:] > prune
        w = np.concatenate([[new[0]], new[1:][keep]])
        active = active[keep]
        P = Phi[:, np.concatenate([[0], 1 + active])]
        objective.append(em_objective(w, P, y, c, d))
        support.append(active.size)
        if keep.all() and change <= tol * max(1.0, np.max(np.abs(w))):
            converged = True
            break
    P = Phi[:, np.concatenate([[0], 1 + active])]
    f = P @ w
    r = _mills(f, y)
    lam = r * (y * f + r)  # -d^2 log Psi(y f) / df^2
    abar = (2 * c + 1) / (w[1:] ** 2 + 2 * d)
    precision = (P * lam[:, None]).T @ P + np.diag(np.concatenate([[BIAS_PRECISION], abar]))
    cov = linalg.cho_solve((linalg.cholesky(precision, lower=True), True), np.eye(P.shape[1]))
    return PCVMEMResult(
        active=active, alpha=abar, mean=w, cov=cov, objective=np.array(objective), support=np.array(support),
        n_iter=it, converged=converged, elapsed=time.perf_counter() - t0,
    )  # fmt: skip
