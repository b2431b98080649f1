"""Stochastic VI for the linear Bayesian SVM (Wenzel et al. 2017, section 4.5).

The model and the mean-field family are those of :mod:`bayesvm.engines.linear.vb` (Alg. 1-2):
``q(beta, u) = N(mu, Sigma)``, ``q(a_i) = GIG(1/2, 1, chi_i)`` and, with a learned penalty or random-effect
terms, ``q(sigma_u^2) = IG(A_q, B_q)`` / ``q(Sigma) = IW`` per component.  Random effects are global
parameters here (every coefficient in one dense ``q``), so the stochastic natural gradient is that of the
batch VB objective and SVI converges to the batch VB optimum; a minibatch informs only the levels it meets.  A step takes a minibatch ``S`` of ``s`` rows, sets their ``chi_i`` to
the optimum ``E(1 - y_i x_i'beta)^2`` and moves the natural parameters of ``q(beta)`` towards the
minibatch target (their eq. 14 with the sums scaled by ``n/s``)

    Lambda_hat = diag(prior precision) + (n/s) X_S' W_S X_S,    eta_hat = (n/s) X_S' y_S(1 + w_S),

by a step ``rho_t`` (the rules of :mod:`bayesvm.engines.stochastic`; the Robbins-Monro rule with the delay
``rho_t = (t + tau)^-kappa``, ``tau =`` :data:`STEP_DELAY`, of Hoffman et al. 2013: with ``rho_1 = 1`` the
first minibatch alone set ``q``, its levels' random effects ``n/s`` times over-informed and the rest at the
prior, and the variance components then took tens of thousands of steps to recover from that start).

The start is Alg. 2's: ``E[1/a_i] = 1`` and every variance component at ``E[precision] = I``
(:func:`~bayesvm.engines.components.initial_component`), as in batch VB, so the first targets use ``w = 1``.  The
``q(a_i)`` optimal under the prior ``q(theta)`` is no start: the intercept's vague prior (variance
``sigma_beta^2 = 10^8``) gives every row ``chi_i ~ 10^8``, ``w_i ~ 10^-4``, so the first step put the intercept in
the thousands (toenail: 6,196), the learned penalty and the random-effect variance then ran to ``10^-6`` and ``10^6``
to fit around it, and the run ended there (intercept 775 where batch VB gives 2.15): a state that coordinate ascent
too leaves only slowly.  ``q(sigma_u^2)`` is a function of
``q(beta)`` alone, so it gets its exact coordinate update after every step (Alg. 2 step 4; each component alike).  Memory and
time per step are ``O(s p + p^3)``, independent of ``n``: the data can be streamed (``batches``).
The stopping rule is the moving window of :mod:`bayesvm.engines.stochastic` on a fixed monitor set.

Class weights ``omega_i`` (:mod:`bayesvm.model.class_weights`) multiply each row's terms of the target and of the
bound, as in batch VB (:func:`~bayesvm.engines.augmentation.row_terms`); the minibatches carry each row's response as
``y_i omega_i`` (its sign the class, its size the weight), so in-memory batches need no second array.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...errors import BayesvmError
from ...linalg.dense import gaussian_from_natural, runs_with_blas_threads
from ...model.problems import VBProblem
from ..augmentation import data_lower_bound, row_terms, update_chi
from ..batches import engine_batches, row_classes
from ..components import initial_component, prior_precisions, second_moments, update_component
from ..stochastic import StepSize, WindowRule, natural_vector, stochastic_ascent, validate_learning_rate
from .vb import VBResult, lower_bound

#: Delay ``tau`` of the Robbins-Monro step ``(t + tau)^-kappa`` (module docstring).
STEP_DELAY = 20.0


@dataclass
class SVIResult(VBResult):
    """:class:`~bayesvm.engines.linear.vb.VBResult` plus the stochastic run's record."""

    stopping: str = ""
    batch_size: int = 0
    monitor_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0))


@runs_with_blas_threads(lambda problem, **_: problem.D.shape[1])
def fit_linear_svi(
    problem: VBProblem,
    *,
    batch_size: int = 100,
    max_iter: int = 100000,
    tol: float = 1e-4,
    window: int = 50,
    monitor: int = 1000,
    learning_rate: str | float = "robbins-monro",
    warmup: int = 10,
    seed: int | None = None,
    batches=None,
) -> SVIResult:
    """Linear SVI (Wenzel et al. 2017, section 4.5); random-effect terms are columns of ``problem.D`` with their
    variance components (no blocked factor), updated like the learned penalty.

    ``batches`` (optional): ``batches(rng) ->`` :class:`~bayesvm.engines.batches.PartitionBatches` over the
    partitions of out-of-core data (standardised design rows); otherwise the rows of ``problem.D``.
    """
    if problem.blocked is not None:
        raise BayesvmError(
            "linear SVI keeps every coefficient in one dense q: put the random effects in D, not blocked"
        )
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rule = validate_learning_rate(learning_rate)
    batches = engine_batches(problem.D, problem.y, problem.weights, batch_size, rng, batches)  # (module docstring)
    state = LinearStochasticState(problem, batches.n, batches.monitor_rows(monitor, rng))
    steps, stop = StepSize(rule, warmup, delay=STEP_DELAY), WindowRule(tol)
    run = stochastic_ascent(state, batches.next, steps, stop, max_iter=max_iter, window=window)
    chi = state.local(problem.D, problem.y)[2] if problem.D.shape[0] == batches.n else np.zeros(0)
    return SVIResult(
        theta=state.theta, components=state.components, chi=chi, lower_bound=run.estimates, converged=run.converged,
        n_iter=run.n_iter, elapsed=time.perf_counter() - t0, stopping=run.stopping, batch_size=batches.size,
        monitor_bounds=run.checks,
    )  # fmt: skip


class LinearStochasticState:
    """The linear engine's state for :func:`bayesvm.engines.stochastic.stochastic_ascent` (module docstring): ``q(theta)``
    by its natural parameters ``(precision, eta)`` and each variance component's ``q``, for ``n`` rows in all;
    ``monitor_rows`` are the monitor set's ``(rows, signed responses)``."""

    def __init__(self, problem: VBProblem, n: int, monitor_rows: tuple[np.ndarray, np.ndarray]) -> None:
        self.problem, self.n, self.monitor_rows = problem, n, monitor_rows
        self.components = [initial_component(c) for c in problem.components]  # Alg. 2's start (module docstring)
        self.precision, self.eta = self.prior_precision(), np.zeros(problem.D.shape[1])
        self.theta = gaussian_from_natural(self.precision, self.eta)
        # before the first step, E[1/a_i] = 1 (Alg. 2's start), not the optimum under the prior q(theta)
        self.started = False

    def prior_precision(self) -> np.ndarray:
        """``diag(lambda) + blockdiag(E[Sigma_c^{-1}])``: the fixed priors and every variance component's."""
        return prior_precisions(self.problem, [post.expected_precision() for post in self.components])[0]

    def classes(self, signed):
        return row_classes(signed, self.problem.weights is not None)

    def local(self, Ds, signed):
        """``E f_i``, ``E(1 - y_i f_i)^2`` and the optimal ``chi_i`` of the rows under the current ``q(theta)``."""
        mean_f, var_f = self.theta.predictor(Ds, None, None)  # BLAS products (not an einsum over i, j, k)
        e = (1.0 - self.classes(signed)[0] * mean_f) ** 2 + var_f
        return mean_f, e, update_chi(e)

    def bound(self, Ds, signed, rows=None) -> float:
        """The whole bound (Alg. 2's) with the data term estimated from the rows ``Ds`` (scaled by ``n`` over their
        number)."""
        mean_f, e, chi = self.local(Ds, signed) if rows is None else rows
        ys, weights = self.classes(signed)
        seconds = [second_moments(c, self.theta) for c in self.problem.components]
        whole = lower_bound(self.problem, ys, self.theta, mean_f, e, chi, self.components, seconds, weights)
        return whole + (self.n / signed.size - 1.0) * data_lower_bound(ys, mean_f, e, chi, weights)

    def natural(self) -> np.ndarray:
        return natural_vector(self.precision, self.eta)

    def estimate(self, batch):
        """The bound's estimate and the target of the module docstring (eq. 14, sums scaled by ``n/s``), both under
        the ``q(theta)`` before the step."""
        Ds, signed = batch
        rows = self.local(Ds, signed)
        w = 1.0 / np.sqrt(rows[2]) if self.started else np.ones(signed.size)
        ys, weights = self.classes(signed)
        w, rhs = row_terms(ys, w, weights)
        scale = self.n / signed.size
        target = self.prior_precision() + scale * (Ds * w[:, None]).T @ Ds, scale * Ds.T @ rhs
        return self.bound(Ds, signed, rows), target

    def move(self, rho: float, target, step: int) -> None:
        """The natural step, then each ``q(Sigma_c)`` given ``q(theta)``: exact (Alg. 2 step 4); the prior part of the
        precision follows it."""
        precision_hat, eta_hat = target
        self.precision = (1.0 - rho) * self.precision + rho * precision_hat
        self.eta = (1.0 - rho) * self.eta + rho * eta_hat
        self.theta, self.started = gaussian_from_natural(self.precision, self.eta), True
        old = self.prior_precision()
        self.components = [
            update_component(c, second_moments(c, self.theta), post)
            for c, post in zip(self.problem.components, self.components)
        ]
        self.precision = self.precision + self.prior_precision() - old
        self.theta = gaussian_from_natural(self.precision, self.eta)

    def monitor(self, step: int) -> float:
        return self.bound(*self.monitor_rows)

    def settled(self, step: int) -> bool:
        return True
