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
from ..stochastic import StepSize, WindowRule, natural_vector, validate_learning_rate
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
    n, p = batches.n, problem.D.shape[1]
    components = [initial_component(c) for c in problem.components]  # Alg. 2's start (module docstring)

    def prior_precision(components) -> np.ndarray:
        """``diag(lambda) + blockdiag(E[Sigma_c^{-1}])``: the fixed priors and every variance component's."""
        return prior_precisions(problem, [post.expected_precision() for post in components])[0]

    precision, eta = prior_precision(components), np.zeros(p)
    theta = gaussian_from_natural(precision, eta)
    steps, stop = StepSize(rule, warmup, delay=STEP_DELAY), WindowRule(tol)
    D_check, y_check = batches.monitor_rows(monitor, rng)
    estimates: list[float] = []
    checks: list[float] = []

    def classes(signed):
        return row_classes(signed, problem.weights is not None)

    def local(Ds, signed):
        """``E f_i``, ``E(1 - y_i f_i)^2`` and the optimal ``chi_i`` of the rows under the current ``q(theta)``."""
        mean_f, var_f = theta.predictor(Ds, None, None)  # BLAS products (not an einsum over i, j, k)
        e = (1.0 - classes(signed)[0] * mean_f) ** 2 + var_f
        return mean_f, e, update_chi(e)

    def bound(Ds, signed, scale, rows=None):
        mean_f, e, chi = local(Ds, signed) if rows is None else rows
        ys, weights = classes(signed)
        seconds = [second_moments(c, theta) for c in problem.components]
        whole = lower_bound(problem, ys, theta, mean_f, e, chi, components, seconds, weights)
        return whole + (scale - 1.0) * data_lower_bound(ys, mean_f, e, chi, weights)

    started = False  # before the first step, E[1/a_i] = 1 (Alg. 2's start), not the optimum under the prior q(theta)

    def target(Ds, signed, rows=None):
        w = 1.0 / np.sqrt((local(Ds, signed) if rows is None else rows)[2]) if started else np.ones(signed.size)
        ys, weights = classes(signed)
        w, rhs = row_terms(ys, w, weights)
        scale = n / signed.size
        return prior_precision(components) + scale * (Ds * w[:, None]).T @ Ds, scale * Ds.T @ rhs

    if rule == "adaptive":
        primes = []
        for _ in range(warmup):
            P_hat, eta_hat = target(*batches.next())
            primes.append(natural_vector(P_hat, eta_hat) - natural_vector(precision, eta))
        steps.prime(primes)
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        Ds, ys = batches.next()
        rows = local(Ds, ys)  # under the q(theta) before the step: the bound's estimate and the target share it
        estimates.append(bound(Ds, ys, n / ys.size, rows))
        P_hat, eta_hat = target(Ds, ys, rows)
        rho = steps(natural_vector(P_hat, eta_hat) - natural_vector(precision, eta))
        precision = (1.0 - rho) * precision + rho * P_hat
        eta = (1.0 - rho) * eta + rho * eta_hat
        theta, started = gaussian_from_natural(precision, eta), True
        # each q(Sigma_c) given q(theta): exact (Alg. 2 step 4); the prior part of the precision follows it
        old = prior_precision(components)
        components = [
            update_component(c, second_moments(c, theta), post) for c, post in zip(problem.components, components)
        ]
        precision = precision + prior_precision(components) - old
        theta = gaussian_from_natural(precision, eta)
        if it % window == 0:
            checks.append(bound(D_check, y_check, n / y_check.size))
            if stop.done(checks):
                converged = True
                break
    if not converged:
        stop.message = f"stopped at max_iter = {max_iter} steps before the window rule was met"
    chi = local(problem.D, problem.y)[2] if problem.D.shape[0] == batches.n else np.zeros(0)
    return SVIResult(
        theta=theta, components=components, chi=chi, lower_bound=np.array(estimates), converged=converged,
        n_iter=it, elapsed=time.perf_counter() - t0, stopping=stop.message, batch_size=batches.size,
        monitor_bounds=np.array(checks),
    )  # fmt: skip
