"""Posterior modes by EM and ECME (Polson & Scott 2011, section 3).

E-step: ``omega_i = E[1/a_i | theta] = 1 / |1 - y_i c_i' theta|`` (their eq. 14).
M-step: ``theta = (C' Omega C + prior precision)^{-1} C' Y (1 + omega)``, weighted least squares
through the same structured elimination as VB and Gibbs.  With class weights ``w_i``
(:mod:`bayesvm.model.class_weights`) the majoriser of ``w_i |m_i|`` is ``w_i`` times the unweighted one, so the
M-step's precision and linear term carry ``w_i omega_i`` and ``w_i y_i (1 + omega_i)``: the mode of
``sum_i w_i hinge_i`` plus the log prior (scikit-learn's ``SVC(class_weight=...)`` at a fixed penalty).
CM-step for each variance component (ECME when a penalty or random-effect variance is
learned): its conditional mode given ``theta``, ``sigma^2 = (B + ||u||^2 / 2) / (A + m/2 + 1)`` or
``Sigma = (Psi + sum_j u_j u_j') / (nu + J + k + 1)``; it does not involve ``a``, so maximising the
complete-data and the observed-data posterior coincide (Liu & Rubin 1994).

Stability on the margin (their section 3.2): support vectors have ``m_i = 1 - y_i f_i = 0`` and
an infinite weight.  Instead of restricted least squares (which pins a point to the margin
for good once it lands there) we floor ``|m_i|`` at ``eps``: ``omega_i = 1 / max(|m_i|, eps)``.
Writing the hinge as ``2 (m)_+ = |m| + m``, EM majorises ``|m|`` by ``m^2 / (2 |m_0|) + |m_0| / 2``;
with the floor it is exactly the MM algorithm for the Huber-smoothed hinge
``H_eps(m) + m``, ``H_eps(m) = m^2 / (2 eps) + eps / 2`` for ``|m| < eps`` and ``|m|`` otherwise,
so every iteration increases ``-sum_i (H_eps(m_i) + m_i) + log prior`` (recorded in
``objective``).  ``eps`` is lowered by continuation, ``1e-2, 1e-3, ..., 1e-10``, each stage run to
convergence from the previous one: points can still leave the margin while ``eps`` is large, and
the last stage solves the SVM problem to about ``1e-9`` (tested against scikit-learn).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import scipy.sparse as sp

from ...errors import refuse
from ...linalg.dense import blas_threads, gaussian_mean, spd_inverse
from ...linalg.schur import schur_sparse_mean
from ...linalg.sparse import SparseCholesky
from ...model.output import EngineOutput
from ...model.problems import PENALTY_SOURCE, VarianceComponent, VBProblem, sorted_by_level
from .. import variance_prior
from ..augmentation import row_terms
from ..components import component_values, prior_precisions, sparse_prior
from ..joint import log_prior

#: Continuation schedule of the floor on |1 - y f| (the last one is the final accuracy).
MARGIN_FLOORS = tuple(10.0**-k for k in range(2, 11))
#: A stage also ends when the MM ascent is at rounding level: over the last ``STALL_ITERATIONS`` iterations every change
#: of the objective is below ``STALL_RTOL`` (relative) and at least ``STALL_DECREASES`` of them are decreases, which an
#: exact MM step never makes.  With many rows on the margin (a kernel's whitened features put up to one per feature
#: there) the weights ``1 / eps`` make the last stages' systems so ill conditioned that the coefficients jitter above
#: ``tol`` at the optimum and the objective by +-1e-9 (15 margin rows on 30 features: 16,000 iterations that the
#: coefficient rule never ended, the objective already equal to scikit-learn's LinearSVC's).
STALL_RTOL = 1e-10
STALL_ITERATIONS = 20
STALL_DECREASES = 3
#: Within a stage an exact MM step never lowers the objective.  A drop of more than this (relative) means the weighted
#: solves have lost the precision the floor asks for: with hundreds of rows on the margin the weights ``1 / eps`` make
#: the system too ill conditioned (mlmRev's Contraception with ``(1 + urban | district)``: 1,716 of 1,934 rows on the
#: margin; at ``eps = 1e-7`` the objective jumped by +-2e-4 for 12,800 iterations and at ``1e-8`` drifted 0.7 below the
#: optimum).  The continuation then stops, and the fit is the mode at the last floor whose stage finished.
BREAKDOWN_RTOL = 1e-9
#: A training row is a support vector when ``y_i f_i <= 1 + SUPPORT_TOL`` (on or inside the margin).
SUPPORT_TOL = 1e-6


@dataclass
class EMResult(EngineOutput):
    """Mode ``(theta_d, theta_b)``, the components' modes and the objective per iteration."""

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): a point: the mode.
    posterior_form: ClassVar[str] = "mode"

    theta_d: np.ndarray
    theta_b: np.ndarray
    components: list[np.ndarray]
    objective: np.ndarray
    stage: np.ndarray  # index into MARGIN_FLOORS of each iteration
    support: np.ndarray  # boolean, training-row order
    margin: np.ndarray  # 1 - y_i f_i, training-row order
    converged: bool
    n_iter: int
    elapsed: float
    #: Where the continuation stopped before the last floor (:data:`BREAKDOWN_RTOL`): what the mode solves, else ""
    floor_note: str = ""


def component_mode(comp: VarianceComponent, u: np.ndarray) -> np.ndarray:
    """Conditional mode of ``sigma^2`` (IG) or ``Sigma`` (IW) given the coefficients ``u`` (J x k)."""
    if comp.is_wishart:
        return (comp.prior_scale + u.T @ u) / (comp.prior_df + comp.n_levels + comp.k + 1.0)
    return np.array([[variance_prior.mode(comp, float(np.sum(u**2)))]])


def modal_refusal(components) -> str | None:
    """Why EM cannot take these variance components (``None`` where it can): a prior whose joint posterior mode is
    degenerate (its law's ``modal_refusal``: a half-t's positive density at sigma = 0), naming the components."""
    refused = [(c, variance_prior.modal_refusal(c)) for c in components if not c.is_wishart]
    refused = [(comp, reason) for comp, reason in refused if reason is not None]
    if not refused:
        return None
    fields = sorted({"penalty" if comp.source == PENALTY_SOURCE else "random" for comp, _ in refused})
    where = ", ".join(f"{name}=InverseGamma(...)" for name in fields)
    return (
        f"method='em' cannot use the prior of {[comp.name for comp, _ in refused]}: {refused[0][1]}, where the "
        "joint posterior mode of the coefficients and their variance collapses (sigma -> 0, every coefficient 0). "
        f"Use an InverseGamma prior, which vanishes at 0 (PriorSet({where}), as method='em' chooses by default), or "
        "method='vb' / 'gibbs', which integrate instead of maximising"
    )


def smoothed_log_likelihood(margin: np.ndarray, eps: float, weights: np.ndarray | None = None) -> float:
    """``-sum_i omega_i (H_eps(m_i) + m_i)``: the hinge term of the objective EM increases at floor ``eps``
    (``omega_i`` the rows' class weights, 1 without them)."""
    absm = np.abs(margin)
    huber = np.where(absm < eps, 0.5 * margin**2 / eps + 0.5 * eps, absm)
    rows = huber + margin
    return -float(np.sum(rows if weights is None else weights * rows))


def _stalled(objective: list[float], stages: list[int]) -> bool:
    """Whether the current stage's ascent is at rounding level (see :data:`STALL_RTOL`)."""
    if len(objective) <= STALL_ITERATIONS or stages[-STALL_ITERATIONS - 1] != stages[-1]:
        return False
    recent = np.diff(objective[-STALL_ITERATIONS - 1 :])
    tiny = np.all(np.abs(recent) < STALL_RTOL * abs(objective[-1]))
    return bool(tiny and np.sum(recent < 0) >= STALL_DECREASES)


class FloorContinuation:
    """The continuation over :data:`MARGIN_FLOORS` (module docstring), shared by EM and the lasso's EM
    (:mod:`bayesvm.engines.selection.lasso_em`): the objective's trace and each iteration's stage, and where a stage's
    ascent breaks down (:data:`BREAKDOWN_RTOL`), the state at the end of the last finished stage."""

    def __init__(self) -> None:
        self.stage = 0
        self.objective: list[float] = []
        self.stages: list[int] = []
        self.best = -np.inf  # the current stage's highest objective
        self.finished = None  # the caller's state at the end of the last finished stage
        self.note = ""

    @property
    def eps(self) -> float:
        return MARGIN_FLOORS[self.stage]

    def record(self, value: float) -> bool:
        """Append this iteration's objective; True when it fell below the stage's best by more than
        :data:`BREAKDOWN_RTOL` after an earlier stage finished (the caller then returns :attr:`finished`)."""
        self.objective.append(value)
        self.stages.append(self.stage)
        if self.finished is not None and value < self.best - BREAKDOWN_RTOL * abs(self.best):
            return True
        self.best = max(self.best, value)
        return False

    def finish_stage(self, state) -> bool:
        """The current stage converged at ``state``: True at the last floor, else the next floor starts."""
        if self.stage == len(MARGIN_FLOORS) - 1:
            return True
        self.finished, self.best = state, -np.inf
        self.stage += 1
        return False

    def stopped(self, on_margin: int) -> float:
        """Record why the continuation stopped (:attr:`note`); returns the floor the kept state solves."""
        self.note = (
            f"the margin floor stopped at {MARGIN_FLOORS[self.stage - 1]:.0e}: below it the weighted solves on "
            f"{on_margin:,} rows on or inside the margin lost precision (the ascent at {self.eps:.0e} was no longer "
            f"monotone), so the mode solves the hinge problem smoothed within {MARGIN_FLOORS[self.stage - 1]:.0e} of "
            "the margin"
        )
        return MARGIN_FLOORS[self.stage - 1]

    def stalled(self) -> bool:
        """:func:`_stalled` of the current stage."""
        return _stalled(self.objective, self.stages)


class MarginAscent(Protocol):
    """One modal engine's state as :func:`continued_ascent` asks it (EM here, the lasso's EM in
    :mod:`bayesvm.engines.selection.lasso_em`)."""

    def propose(self, eps: float) -> tuple[object, float]:
        """The M- and CM-steps at the current E-step weights, and the objective there (the hinge smoothed within
        ``eps``, plus the log prior)."""
        ...

    def accept(self, proposal, eps: float) -> tuple[float, float] | None:
        """Take ``proposal`` and its E-step weights (floored at ``eps``); ``(change, scale)``: the largest change of a
        coefficient from the mode before and ``1 +`` the largest coefficient (None at the first iteration)."""
        ...

    def snapshot(self) -> object:
        """The state to keep at the end of a stage."""
        ...

    #: the margins ``1 - y f`` at the current mode
    margin: np.ndarray

    def restore(self, snapshot) -> None:
        """Back to ``snapshot``."""
        ...

    def reweight(self, eps: float) -> None:
        """The E-step weights of the current mode at a new floor ``eps``."""
        ...


def continued_ascent(state: MarginAscent, floors: FloorContinuation, tol: float, max_iter: int) -> bool:
    """The MM ascent of ``state`` through the floors of ``floors`` (module docstring), at most ``max_iter`` iterations
    in all: a stage ends when no coefficient changes by more than ``tol`` times ``1 + max |theta|`` or its ascent is at
    rounding level (:data:`STALL_RTOL`); where a stage's ascent breaks down (:data:`BREAKDOWN_RTOL`) the state goes
    back to the last finished stage.  Returns whether the continuation ended (its last floor, or a breakdown)."""
    for _ in range(max_iter):
        proposal, objective = state.propose(floors.eps)
        if floors.record(objective):
            state.restore(floors.finished)
            floors.stopped(int(np.sum(state.margin >= -SUPPORT_TOL)))
            return True
        moved = state.accept(proposal, floors.eps)
        if moved is not None and (moved[0] < tol * moved[1] or floors.stalled()):
            if floors.finish_stage(state.snapshot()):
                return True
            state.reweight(floors.eps)
    return False


def fit_em(problem: VBProblem, tol: float = 1e-10, max_iter: int = 20000) -> EMResult:
    """See :func:`_fit_em`; runs with the BLAS threading of :func:`linalg.blas_threads`."""
    refuse(modal_refusal(problem.components))  # (the route refuses first: supports_em)
    with blas_threads(problem.D.shape[1], problem.n):
        return _fit_em(problem, tol, max_iter)


def _fit_em(problem: VBProblem, tol: float, max_iter: int) -> EMResult:
    """EM (fixed penalty, no components) or ECME (learned components) for the posterior mode.

    A stage stops when the largest change of a coefficient is below ``tol`` times
    ``1 + max |theta|``; ``max_iter`` bounds the iterations of all stages together.
    """
    start = time.perf_counter()
    order, problem = sorted_by_level(problem)
    state, floors = ModalState(problem), FloorContinuation()
    converged = continued_ascent(state, floors, tol, max_iter)
    margin = state.margin if order is None else state.margin[np.argsort(order)]
    return EMResult(
        theta_d=state.theta_d,
        theta_b=state.theta_b,
        components=state.covs,
        objective=np.asarray(floors.objective),
        stage=np.asarray(floors.stages),
        support=margin >= -SUPPORT_TOL,
        margin=margin,
        converged=converged,
        n_iter=len(floors.objective),
        elapsed=time.perf_counter() - start,
        floor_note=floors.note,
    )


class ModalState:
    """EM / ECME's state for :func:`continued_ascent` (module docstring): the mode ``(theta_d, theta_b)``, the
    components' covariances, the margins ``1 - y f`` and the E-step weights ``E[1/a_i | theta]`` (eq. 14, floored;
    1 at the start)."""

    def __init__(self, problem: VBProblem) -> None:
        self.problem = problem
        self.inverse = np.ones(problem.y.size)
        self.covs = [np.eye(c.k) for c in problem.components]
        self.theta_d = self.theta_b = self.margin = None

    def propose(self, eps: float):
        """The M-step (weighted least squares through the problem's structure) and each component's CM-step."""
        problem, y, D, blocked = self.problem, self.problem.y, self.problem.D, self.problem.blocked
        precisions = [spd_inverse(c) for c in self.covs]
        omega, rhs = row_terms(y, self.inverse, problem.weights)  # (class weights: each row's terms times omega_i)
        if problem.is_sparse:
            prior, new_b = sparse_prior(problem, precisions), np.zeros((0, 0))
            if problem.elimination is not None:  # crossed factors: dense Schur complement
                new_d = schur_sparse_mean(problem.elimination, omega, rhs, prior)
            else:
                new_d = SparseCholesky.factor((D.T @ sp.diags(omega) @ D + prior).tocsc()).solve(D.T @ rhs)
        else:
            prior_dd, prior_b = prior_precisions(problem, precisions)
            new_d, new_b = gaussian_mean(D, omega, rhs, prior_dd, blocked, prior_b)  # M-step
        new_covs = [component_mode(c, component_values(c, new_d, new_b)) for c in problem.components]  # CM-steps
        f = D @ new_d
        if blocked is not None:
            f = f + np.sum(blocked.values * new_b[blocked.codes], axis=1)
        new_margin = 1.0 - y * f
        hinge = smoothed_log_likelihood(new_margin, eps, problem.weights)
        return (new_d, new_b, new_covs, new_margin), hinge + log_prior(problem, new_d, new_b, new_covs)

    def accept(self, proposal, eps: float):
        new_d, new_b, self.covs, self.margin = proposal
        self.inverse = 1.0 / np.maximum(np.abs(self.margin), eps)  # E-step, eq. 14 (floored)
        moved = None
        if self.theta_d is not None:
            change = max(
                np.max(np.abs(new_d - self.theta_d), initial=0.0), np.max(np.abs(new_b - self.theta_b), initial=0.0)
            )
            moved = change, 1.0 + max(np.max(np.abs(new_d), initial=0.0), np.max(np.abs(new_b), initial=0.0))
        self.theta_d, self.theta_b = new_d, new_b
        return moved

    def snapshot(self):
        return self.theta_d, self.theta_b, self.covs, self.margin

    def restore(self, snapshot) -> None:
        self.theta_d, self.theta_b, self.covs, self.margin = snapshot

    def reweight(self, eps: float) -> None:
        self.inverse = 1.0 / np.maximum(np.abs(self.margin), eps)
