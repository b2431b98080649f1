"""Lasso posterior mode by EM / ECME (Polson & Scott 2011, sections 3.1 and 3.3 with ``alpha = 1``).

Objective (log pseudo-posterior up to a constant): ``-2 sum_i (1 - y_i f_i)_+ - sum_j |beta_j| / (nu s_j)``
(``+ log p(nu)`` and ``- m log nu`` when ``nu`` is learned).

E-step: ``omega_i = 1 / |1 - y_i f_i|`` (eq. 14) and ``E[1/tau_j | beta_j] = nu s_j / |beta_j|``, giving
the prior precision ``1 / (nu s_j |beta_j|)`` of slope j (eq. 11 with ``alpha = 1``).  M-step: weighted
least squares.  Both absolute values are floored at ``eps``; as in :mod:`bayesvm.engines.linear.em` this is
exactly the MM algorithm for the Huber-smoothed hinge and the Huber-smoothed L1 penalty
``H_eps(beta_j) / (nu s_j)``, so every iteration increases the smoothed objective (recorded); ``eps``
is lowered by continuation ``1e-2, ..., 1e-10``.  A slope whose mode is 0 ends inside ``|beta_j| < eps``
and is reported as exactly 0 (below ``ZERO_TOL``; the smoothed problem's minimiser lies within ``eps`` of the exact one's
zero; the paper instead drops columns once they are "sufficiently close to zero").

CME step (ECME, ``nu`` learned): the exact conditional mode of the observed-data posterior,
``1/nu = (a + m - 1) / (b + sum_j H_eps(beta_j) / s_j)`` under ``1/nu ~ Gamma(a, b)``.  (The paper's
printed ratio is upside down: the conditional of ``1/nu`` is ``Gamma(a + m, b + sum |beta_j| / s_j)``,
whose mode is the ratio above.)

Random-effect terms: their prior precision ``Sigma_c^{-1}`` joins the M-step's weighted least
squares, and a CM-step sets each ``Sigma_c`` to its conditional mode given the random effects
(:func:`bayesvm.engines.linear.em.component_mode`), so the objective, now with ``log N(u_c | 0, Sigma_c) +
log p(Sigma_c)``, still increases at every iteration.  As in :mod:`bayesvm.engines.linear.em`, the mode needs a
variance prior with zero density at ``Sigma = 0`` (``bsvm`` uses the paper's inverse gamma for EM).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import scipy.linalg as sla
from scipy.special import gammaln

from ...linalg.dense import blas_threads, spd_inverse
from ...model.output import EngineOutput
from ...model.problems import SelectionProblem
from ...priors import Lasso
from ..augmentation import row_terms
from ..joint import log_component_prior
from ..linear.em import (
    MARGIN_FLOORS,
    SUPPORT_TOL,
    FloorContinuation,
    component_mode,
    continued_ascent,
    smoothed_log_likelihood,
)
from .vb import LOG_2PI

#: Slopes below ``ZERO_TOL (1 + max |beta|)`` at convergence are reported as exactly 0: MM approaches the
#: kink of ``|beta_j|`` linearly, and the last 1e-8 of that approach carries no information.
ZERO_TOL = 1e-7


@dataclass
class LassoEMResult(EngineOutput):
    """Mode of the coefficients (exact zeros where the lasso sets them) and of ``nu``."""

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): a point: the mode.
    posterior_form: ClassVar[str] = "mode"

    coef: np.ndarray
    nu: float
    objective: np.ndarray
    stage: np.ndarray
    support: np.ndarray
    margin: np.ndarray
    selected: np.ndarray
    converged: bool
    n_iter: int
    elapsed: float
    covariances: list[np.ndarray] = field(default_factory=list)
    #: Where the continuation stopped before the last floor (:class:`bayesvm.engines.linear.em.FloorContinuation`)
    floor_note: str = ""

    @property
    def scale_estimate(self) -> tuple[str, float]:
        """The mode of the lasso's scale ``nu`` (the engine-output contract; the given ``nu`` when fixed)."""
        return "mode of {s}", self.nu

    # the layout of :class:`bayesvm.engines.linear.em.EMResult`, so results code reads both alike
    @property
    def theta_d(self) -> np.ndarray:
        return self.coef

    @property
    def theta_b(self) -> np.ndarray:
        return np.zeros((0, 0))

    @property
    def components(self) -> list[np.ndarray]:
        """Mode of each random-effect term's (co)variance."""
        return self.covariances


def _huber(x: np.ndarray, eps: float) -> np.ndarray:
    ax = np.abs(x)
    return np.where(ax < eps, 0.5 * x * x / eps + 0.5 * eps, ax)


def fit_lasso_em(problem: SelectionProblem, tol: float = 1e-10, max_iter: int = 20000) -> LassoEMResult:
    """EM (``nu`` fixed) or ECME (``nu`` learned) for the lasso pseudo-posterior mode."""
    if not isinstance(problem.prior, Lasso):
        raise TypeError("fit_lasso_em needs a Lasso prior")
    with blas_threads(problem.q):
        return _fit(problem, tol, max_iter)


def _objective(problem: SelectionProblem, margin, beta, nu, eps, covs) -> float:
    prior, sel, s = problem.prior, problem.selected, problem.prior_scale
    free = problem.unselected[problem.fixed_precision[problem.unselected] > 0]
    lam = problem.fixed_precision[free]
    total = smoothed_log_likelihood(margin, eps, problem.weights)
    total += 0.5 * float(np.sum(np.log(lam) - LOG_2PI - lam * beta[free] ** 2))
    total += float(np.sum(-np.log(2.0 * nu * s) - _huber(beta[sel], eps) / (nu * s)))
    if prior.nu is None:
        inv_nu = 1.0 / nu
        total += prior.a * np.log(prior.b) - gammaln(prior.a) + (prior.a - 1.0) * np.log(inv_nu) - prior.b * inv_nu
    return float(total + log_component_prior(problem.components, beta, np.zeros((0, 0)), covs))


def _fit(problem: SelectionProblem, tol: float, max_iter: int) -> LassoEMResult:
    start = time.perf_counter()
    state, floors = LassoModalState(problem), FloorContinuation()
    converged = continued_ascent(state, floors, tol, max_iter)
    sel, margin = problem.selected, state.margin
    floor = MARGIN_FLOORS[floors.stage - 1] if floors.note else floors.eps  # (the floor the kept mode solves)
    coef = state.beta.copy()
    zero = np.abs(coef[sel]) < max(floor, ZERO_TOL * (1.0 + np.max(np.abs(coef))))
    coef[sel[zero]] = 0.0
    return LassoEMResult(
        coef=coef,
        nu=state.nu,
        objective=np.asarray(floors.objective),
        stage=np.asarray(floors.stages),
        support=margin >= -SUPPORT_TOL,
        margin=margin,
        selected=sel,
        converged=converged,
        n_iter=len(floors.objective),
        elapsed=time.perf_counter() - start,
        covariances=state.covs,
        floor_note=floors.note,
    )


class LassoModalState:
    """The lasso's EM state for :func:`bayesvm.engines.linear.em.continued_ascent` (module docstring): the mode
    ``beta``, the Laplace scale ``nu`` (learned by its CME step where the prior leaves it free), the random-effect
    terms' covariances, the margins and both E-steps' weights; the start is the ridge-type solution with unit weights
    (``beta = 0`` would be a fixed point of plain EM)."""

    def __init__(self, problem: SelectionProblem) -> None:
        self.problem = problem
        self.nu = 1.0 if problem.prior.nu is None else float(problem.prior.nu)
        self.inverse = np.ones(problem.y.size)  # E[1/a_i | beta] (eq. 14, floored)
        self.penalty_weight = np.ones(problem.m)
        self.covs = [np.eye(c.k) for c in problem.components]  # random-effect terms: CM-step after each M-step
        self.beta = self.margin = None

    def propose(self, eps: float):
        """The M-step (weighted ridge with the slopes' E-step precisions), the CME step of ``nu`` and the components'
        CM-steps."""
        problem, prior = self.problem, self.problem.prior
        y, X, sel, s, q = problem.y, problem.X, problem.selected, problem.prior_scale, problem.q
        lam = problem.fixed_precision.copy()
        lam[sel] = self.penalty_weight / (self.nu * s)
        omega, rhs = row_terms(y, self.inverse, problem.weights)  # (class weights: each row's terms times omega_i)
        precision = problem.weighted_gram(omega)
        precision[np.diag_indices(q)] += lam
        problem.add_component_precisions(precision, [spd_inverse(c) for c in self.covs])
        new = sla.cho_solve(sla.cho_factor(precision, lower=True), X.T @ rhs)  # M-step
        new_nu = self.nu
        if prior.nu is None:  # CME step
            new_nu = (prior.b + float(np.sum(_huber(new[sel], eps) / s))) / (prior.a + problem.m - 1.0)
        new_covs = [component_mode(c, new[c.index]) for c in problem.components]  # CM-steps (as engines.linear.em)
        new_margin = 1.0 - y * (X @ new)
        objective = _objective(problem, new_margin, new, new_nu, eps, new_covs)
        return (new, new_nu, new_covs, new_margin), objective

    def accept(self, proposal, eps: float):
        new, self.nu, self.covs, self.margin = proposal
        self.inverse = 1.0 / np.maximum(np.abs(self.margin), eps)  # E-step, hinge
        self.penalty_weight = 1.0 / np.maximum(np.abs(new[self.problem.selected]), eps)  # E-step, E[1/tau_j] / (nu s_j)
        moved = None if self.beta is None else (np.max(np.abs(new - self.beta)), 1.0 + np.max(np.abs(new)))
        self.beta = new
        return moved

    def snapshot(self):
        return self.beta, self.nu, self.covs, self.margin

    def restore(self, snapshot) -> None:
        self.beta, self.nu, self.covs, self.margin = snapshot

    def reweight(self, eps: float) -> None:
        self.inverse = 1.0 / np.maximum(np.abs(self.margin), eps)
        self.penalty_weight = 1.0 / np.maximum(np.abs(self.beta[self.problem.selected]), eps)
