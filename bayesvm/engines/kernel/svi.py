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

import numpy as np
from scipy import linalg

from ...linalg.dense import runs_with_blas_threads
from ..augmentation import data_lower_bound, update_chi
from ..batches import engine_batches, row_classes
from ..stochastic import StepSize, WindowRule, natural_vector, validate_learning_rate
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
    kernel = problem.kernel
    Z = np.array(locations, dtype=float)
    rule = validate_learning_rate(learning_rate)
    batches = engine_batches(problem.X, problem.y, problem.weights, batch_size, rng, batches)  # (docstring)
    weighted = problem.weights is not None

    def classes(signed):
        return row_classes(signed, weighted)

    n = batches.n
    jitter = absolute_jitter(kernel, problem.X) if jitter is None else jitter
    learning = learn and kernel.log_params().size > 0
    q = Whitened.prior(len(Z))
    Lm, _ = projection(kernel, Z, Z[:1], jitter)
    steps = StepSize(rule, warmup)
    adam = Adam(kernel.log_params().size, hyper_rate)
    stop = WindowRule(tol)
    estimates: list[float] = []
    checks: list[float] = []
    X_check, y_check = batches.monitor_rows(monitor, rng)
    trace = [kernel.log_params()]

    def minibatch():
        Xs, signed = batches.next()
        ys, ws = classes(signed)
        A = linalg.solve_triangular(Lm, kernel.matrix(Z, Xs), lower=True)
        mean_f, e = margin_moments(ys, A, kernel.diag(Xs), q)
        chi = update_chi(e)
        scale = n / ys.size
        estimate = scale * data_lower_bound(ys, mean_f, e, chi, ws) - gaussian_kl_whitened(q.mean, q.cov_chol)
        return Xs, ys, ws, A, chi, scale, estimate

    if rule == "adaptive":  # warm start of the adaptive rate at the initial q
        primes = []
        for _ in range(warmup):
            Xs, ys, ws, A, chi, scale, _ = minibatch()
            target = natural_target(ys, A, chi, scale, ws)
            primes.append(natural_vector(*target) - natural_vector(q.precision, q.eta))
        steps.prime(primes)
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        Xs, ys, ws, A, chi, scale, estimate = minibatch()
        estimates.append(estimate)
        precision_hat, eta_hat = natural_target(ys, A, chi, scale, ws)
        rho = steps(natural_vector(precision_hat, eta_hat) - natural_vector(q.precision, q.eta))
        q.precision = (1.0 - rho) * q.precision + rho * precision_hat
        q.eta = (1.0 - rho) * q.eta + rho * eta_hat
        q.refresh()
        if learning and it > warmup and it % hyper_every == 0:
            # eq. (12) with q(u) held fixed (Wenzel's A.3): step h, then re-express the same q(u) whitened
            grad = hyper_objective(kernel, Z, Xs, ys, jitter, q, chi, scale=scale, fixed="u", weights=ws)[1]
            mean_u, cov_u = Lm @ q.mean, Lm @ q.cov @ Lm.T
            kernel = kernel.with_log_params(kernel.log_params() + adam.step(grad))
            Lm, _ = projection(kernel, Z, Z[:1], jitter)
            q.precision, q.eta = _whitened_natural(Lm, mean_u, cov_u)
            q.refresh()
            trace.append(kernel.log_params())
        if it % window == 0:
            A = linalg.solve_triangular(Lm, kernel.matrix(Z, X_check), lower=True)
            y_seen, w_seen = classes(y_check)
            mean_f, e = margin_moments(y_seen, A, kernel.diag(X_check), q)
            data = data_lower_bound(y_seen, mean_f, e, update_chi(e), w_seen) * n / y_seen.size
            checks.append(data - gaussian_kl_whitened(q.mean, q.cov_chol))
            if callback is not None:  # e.g. a benchmark's held-out error along the run
                callback(it, time.perf_counter() - t0, KernelVBResult(
                    kernel=kernel, locations=Z, jitter=jitter, mean=q.mean.copy(), cov=q.cov.copy(), chi=None,
                    lower_bound=np.array(checks), converged=False, n_iter=it, elapsed=time.perf_counter() - t0,
                    engine="svi"))  # fmt: skip
            if stop.done(checks):
                converged = True
                break
    if not converged:
        stop.message = f"stopped at max_iter = {max_iter} steps before the window rule was met"
    return KernelVBResult(
        kernel=kernel, locations=Z, jitter=jitter, mean=q.mean.copy(), cov=q.cov.copy(), chi=None,
        lower_bound=np.array(estimates), converged=converged, n_iter=it, elapsed=time.perf_counter() - t0,
        engine="svi", hyper_trace=np.array(trace), stopping=stop.message, batch_size=batches.size,
        monitor_bounds=np.array(checks),
    )  # fmt: skip
