"""Stochastic VI for the inducing-point kernel SVM (Wenzel et al. 2017, Alg. 1, sections 4.2-4.3).

Each step takes a minibatch ``S`` of ``s`` rows, sets their local ``chi_i`` to the optimum
``E(1 - y_i f_i)^2`` under the current ``q(v)`` (step 7), and moves the natural parameters of
``q(v)`` (whitened; see :mod:`bayesvm.engines.kernel.vb`) towards the minibatch target
``(I + (n/s) A_S W_S A_S', (n/s) A_S y_S(1 + w_S))`` by a step ``rho_t`` (steps 9-14).

Step sizes (``learning_rate``) and the stopping rule: :mod:`bayesvm.engines.stochastic`.

Hyperparameters (section 4.3, eq. 12): every ``hyper_every`` steps after the warm-up, one Adam step
(Kingma & Ba 2015, the usual optimiser for stochastic ML-II in sparse GPs) on the log hyperparameters
along the minibatch estimate of the bound's gradient with ``q(u)`` and the batch's ``chi`` fixed (their
A.3); the same ``q(u)`` is then re-expressed in the new whitened coordinates.  Holding the whitened
``q(v)`` fixed instead moves ``f`` at the inducing points with every step, which holds the lengthscales back.

The monitor set (reported by ``summary()``): a fixed random subset of ``monitor`` rows (drawn once); every
``window`` steps the bound is evaluated on it (data terms scaled to ``n``, local ``chi`` at their optimum), a
deterministic function of ``q``.  The per-step minibatch estimates are kept as ``lower_bound``, the checks as
``monitor_bounds``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from ...linalg.dense import runs_with_blas_threads
from ..augmentation import data_lower_bound, update_chi
from ..batches import engine_batches, row_classes
from ..stochastic import StepSize, WindowRule, natural_vector, stochastic_ascent, validate_learning_rate
from .vb import (
    KernelProblem,
    KernelVBResult,
    Whitened,
    absolute_jitter,
    gaussian_kl_whitened,
    hyper_objective,
    margin_moments,
    natural_target,
    projection,
)


class Adam:
    """Adam ascent steps on a parameter vector."""

    def __init__(self, size: int, rate: float):
        self.m, self.v, self.t, self.rate = np.zeros(size), np.zeros(size), 0, rate

    def step(self, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad * grad
        m_hat, v_hat = self.m / (1 - 0.9**self.t), self.v / (1 - 0.999**self.t)
        return self.rate * m_hat / (np.sqrt(v_hat) + 1e-8)


def _whitened_natural(Lm: np.ndarray, mean_u: np.ndarray, cov_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Natural parameters of ``q(v)``, ``v = L_m^-1 u``, for ``q(u) = N(mean_u, cov_u)``: ``Lambda = L_m' cov_u^-1 L_m``."""
    chol = linalg.cholesky(cov_u, lower=True)
    B = linalg.solve_triangular(chol, Lm, lower=True)  # cov_u^-1/2 L_m
    precision = B.T @ B
    eta = Lm.T @ linalg.cho_solve((chol, True), mean_u)  # Lambda m with m = L_m^-1 mean_u
    return 0.5 * (precision + precision.T), eta


@runs_with_blas_threads(lambda problem, locations, **_: len(locations))
def fit_svi(
    problem: KernelProblem,
    locations: np.ndarray,
    *,
    batch_size: int = 100,
    max_iter: int = 20000,
    tol: float = 1e-4,
    window: int = 50,
    monitor: int = 1000,
    learning_rate: str | float = "robbins-monro",
    warmup: int = 10,
    learn: bool = True,
    hyper_every: int = 10,
    hyper_rate: float = 0.02,
    seed: int | None = None,
    jitter: float | None = None,
    batches=None,
    callback=None,
) -> KernelVBResult:
    """Inducing-point SVI (Wenzel et al. 2017, Alg. 1) with the step sizes and stopping rule above.

    ``callback(step, seconds, snapshot)`` (optional) is called at every monitor check with the current
    ``q`` as a :class:`KernelVBResult`.  ``batches`` (optional): ``batches(rng) ->`` :class:`~bayesvm.engines.batches.PartitionBatches` over the
    partitions of out-of-core data instead of the rows of ``problem``; ``problem.X`` (then a sample of the
    rows) only sets the jitter scale.  With class weights (``problem.weights``) each row's terms are times its
    weight (:mod:`bayesvm.engines.kernel.vb`); the in-memory minibatches carry each response as ``y_i omega_i``
    (its sign the class, its size the weight).
    """
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rule = validate_learning_rate(learning_rate)
    batches = engine_batches(problem.X, problem.y, problem.weights, batch_size, rng, batches)  # (docstring)
    jitter = absolute_jitter(problem.kernel, problem.X) if jitter is None else jitter
    sizes = problem.kernel.log_params().size
    schedule = HyperSchedule(Adam(sizes, hyper_rate), hyper_every, warmup) if learn and sizes > 0 else None
    state = KernelStochasticState(
        problem, np.array(locations, dtype=float), jitter, batches.n, batches.monitor_rows(monitor, rng), schedule,
        callback=callback, started=t0,
    )  # fmt: skip
    run = stochastic_ascent(state, batches.next, StepSize(rule, warmup), WindowRule(tol), max_iter=max_iter,
                            window=window)  # fmt: skip
    return KernelVBResult(
        kernel=state.kernel, locations=state.Z, jitter=jitter, mean=state.q.mean.copy(), cov=state.q.cov.copy(),
        chi=None, lower_bound=run.estimates, converged=run.converged, n_iter=run.n_iter,
        elapsed=time.perf_counter() - t0, engine="svi", hyper_trace=np.array(state.trace), stopping=run.stopping,
        batch_size=batches.size, monitor_bounds=run.checks,
    )  # fmt: skip


@dataclass(frozen=True)
class HyperSchedule:
    """When and how the kernel's hyperparameters move during SVI: an Adam step (:class:`Adam`) every ``every`` steps
    after the first ``after``."""

    adam: Adam
    every: int
    after: int


class KernelStochasticState:
    """Inducing-point SVI's state for :func:`bayesvm.engines.stochastic.stochastic_ascent` (Wenzel et al. 2017,
    Alg. 1): the whitened ``q(v)`` of the inducing values at locations ``Z`` by its natural parameters, the kernel
    (its hyperparameters moved by ``schedule``, None: held) and their trace; ``n`` rows in all, ``monitor_rows`` the
    monitor set; ``callback(step, seconds, snapshot)`` at every monitor check (seconds since ``started``)."""

    def __init__(self, problem, Z, jitter, n, monitor_rows, schedule: HyperSchedule | None, *, callback=None,
                 started: float = 0.0) -> None:  # fmt: skip
        self.problem, self.Z, self.jitter, self.n, self.monitor_rows = problem, Z, jitter, n, monitor_rows
        self.kernel, self.schedule, self.callback, self.started = problem.kernel, schedule, callback, started
        self.q = Whitened.prior(len(Z))
        self.Lm, _ = projection(self.kernel, Z, Z[:1], jitter)
        self.trace = [self.kernel.log_params()]
        self.checks: list[float] = []  # (the monitor bounds so far, for the callback's snapshot)
        self.last = None  # the last minibatch's (rows, classes, weights, chi, scale), for the hyperparameters' step

    def classes(self, signed):
        return row_classes(signed, self.problem.weights is not None)

    def natural(self) -> np.ndarray:
        return natural_vector(self.q.precision, self.q.eta)

    def estimate(self, batch):
        """The bound's estimate on the minibatch (its data term scaled by ``n/s``, minus the whitened KL) and its
        natural target (eq. 14 of Wenzel et al. in the whitened parameters), at ``chi`` optimal under the current q."""
        Xs, signed = batch
        ys, ws = self.classes(signed)
        A = linalg.solve_triangular(self.Lm, self.kernel.matrix(self.Z, Xs), lower=True)
        mean_f, e = margin_moments(ys, A, self.kernel.diag(Xs), self.q)
        chi = update_chi(e)
        scale = self.n / ys.size
        estimate = scale * data_lower_bound(ys, mean_f, e, chi, ws) - gaussian_kl_whitened(self.q.mean, self.q.cov_chol)
        self.last = (Xs, ys, ws, chi, scale)
        return estimate, natural_target(ys, A, chi, scale, ws)

    def move(self, rho: float, target, step: int) -> None:
        """The natural step; every ``schedule.every`` steps after ``schedule.after`` an Adam step of the kernel's
        hyperparameters by eq. (12) with ``q(u)`` held fixed (Wenzel's A.3), the same ``q(u)`` then re-expressed
        whitened."""
        precision_hat, eta_hat = target
        q = self.q
        q.precision = (1.0 - rho) * q.precision + rho * precision_hat
        q.eta = (1.0 - rho) * q.eta + rho * eta_hat
        q.refresh()
        schedule = self.schedule
        if schedule is None or step <= schedule.after or step % schedule.every:
            return
        Xs, ys, ws, chi, scale = self.last
        Z, jitter = self.Z, self.jitter
        grad = hyper_objective(self.kernel, Z, Xs, ys, jitter, q, chi, scale=scale, fixed="u", weights=ws)[1]
        mean_u, cov_u = self.Lm @ q.mean, self.Lm @ q.cov @ self.Lm.T
        self.kernel = self.kernel.with_log_params(self.kernel.log_params() + schedule.adam.step(grad))
        self.Lm, _ = projection(self.kernel, Z, Z[:1], jitter)
        q.precision, q.eta = _whitened_natural(self.Lm, mean_u, cov_u)
        q.refresh()
        self.trace.append(self.kernel.log_params())

    def monitor(self, step: int) -> float:
        X_check, y_check = self.monitor_rows
        A = linalg.solve_triangular(self.Lm, self.kernel.matrix(self.Z, X_check), lower=True)
        y_seen, w_seen = self.classes(y_check)
        mean_f, e = margin_moments(y_seen, A, self.kernel.diag(X_check), self.q)
        data = data_lower_bound(y_seen, mean_f, e, update_chi(e), w_seen) * self.n / y_seen.size
        self.checks.append(data - gaussian_kl_whitened(self.q.mean, self.q.cov_chol))
        if self.callback is not None:  # e.g. a benchmark's held-out error along the run
            seconds = time.perf_counter() - self.started
            self.callback(step, seconds, KernelVBResult(
                kernel=self.kernel, locations=self.Z, jitter=self.jitter, mean=self.q.mean.copy(),
                cov=self.q.cov.copy(), chi=None, lower_bound=np.array(self.checks), converged=False, n_iter=step,
                elapsed=seconds, engine="svi"))  # fmt: skip
        return self.checks[-1]

    def settled(self, step: int) -> bool:
        return True
