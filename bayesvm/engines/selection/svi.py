"""Stochastic VI for the selection priors (Laplace-zero, spike-and-slab, lasso): Wenzel et al. (2017, section 4.5)
applied to the rows' message of :mod:`bayesvm.engines.selection.message`.

Every factor of a selection VB engine other than ``q(a)`` sees the rows only through ``(G, r)``,
``G = X' W X``, ``r = X' Y (1 + w)``.  A step takes a minibatch ``S`` of ``s`` rows, sets their ``chi_i`` to the
optimum ``E (1 - y_i f_i)^2`` under the current factors (the engine's ``row_moments``), forms the unbiased estimate
``(n/s) (X_S' W_S X_S, X_S' Y_S (1 + w_S))``, moves the running message towards it by ``rho_t``,

    G <- (1 - rho_t) G + rho_t G_hat,    r <- (1 - rho_t) r + rho_t r_hat,

and runs the engine's coordinate updates once given the running message (its ``update``: the same code as a batch
sweep).  The step sizes and the stopping rule are those of :mod:`bayesvm.engines.linear.svi` (Robbins-Monro
``(t + tau)^-kappa`` with the delay ``tau =`` :data:`~bayesvm.engines.linear.svi.STEP_DELAY`; a moving window of the
bound on a fixed monitor set).

Why this is SVI.  ``q(theta)`` (Laplace-zero, lasso) and ``q(theta_F)`` (spike-and-slab) are Gaussian with natural
parameters ``(prior precision + G, r)`` minus the other slopes' terms, so averaging the message is the natural-
gradient step of Hoffman et al. (2013) on them, as :mod:`bayesvm.engines.linear.svi` averages the precision and
re-adds the prior.  The other factors (``q(gamma)``, ``q(beta_k, gamma_k)``, ``q(b)``, ``q(tau)``, ``q(sigma^2)``,
``q(kappa)``, ``q(Sigma)``) take their exact coordinate update given the current Gaussian factor, as linear SVI's
``q(sigma_u^2)`` does.  At a fixed point the running message equals its expectation over minibatches, the full-data
message at the current ``q``, so the fixed points are those of the batch coordinate ascent
(``tests/engines/selection/test_svi.py`` checks that SVI reaches the batch optimum).

The start is the batch start: every ``E[1/a_i] = 1`` (the first minibatch's message at ``w = 1``) and the engine's
initial factors.  Memory and time per step are ``O(s q + q^3 + m q)``, independent of ``n``.

Spike-and-slab: the inclusion probabilities are held at 1 (every slope in its slab) until the window rule is first
met, then released: the stochastic form of the batch fit's joint start.  Released from the first step, each
``q(beta_k, gamma_k)`` is set from the first few minibatches' noisy message and the slope-by-slope updates lock in:
on the Fair affairs data (statsmodels; 4,450 training rows) SVI so ended in a model 27 nats below the batch optimum
on the full bound from 3 of 3 seeds; with the hold, 15 of 20 runs (10 seeds, minibatches of 100 and 500 rows) end in
the batch optimum and the rest in local optima 27-33 nats lower.  The batch fit's single-slope model moves need
full passes over the rows and are not made; ``stopping`` says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...linalg.dense import blas_threads
from ...model.problems import SelectionProblem
from ..augmentation import data_lower_bound, inverse_a_mean, update_chi
from ..batches import engine_batches, row_classes
from ..linear.svi import STEP_DELAY
from ..stochastic import StepSize, WindowRule, natural_vector, stochastic_ascent, validate_learning_rate
from .laws import law_of
from .message import minibatch_message
from .vb import SelectionVBResult

#: Said in ``stopping`` of a spike-and-slab SVI fit (module docstring).
NO_MOVES = "no single-slope model moves (the batch fit's; they need full passes over the rows)"


@dataclass
class SelectionSVIResult(SelectionVBResult):
    """:class:`~bayesvm.engines.selection.vb.SelectionVBResult` plus the stochastic run's record; ``lower_bound``
    holds the minibatch estimates of the bound (noisy: they are not a monotone trace)."""

    stopping: str = ""
    batch_size: int = 0
    monitor_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0))


def fit_selection_svi(
    problem: SelectionProblem,
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
) -> SelectionSVIResult:
    """SVI of the selection prior's mean-field family (module docstring); arguments as
    :func:`bayesvm.engines.linear.svi.fit_linear_svi` (``batches(rng)``: the minibatches of out-of-core data,
    whose rows ``problem`` does not hold)."""
    with blas_threads(problem.q):
        return _fit(problem, batch_size, max_iter, tol, window, monitor, learning_rate, warmup, seed, batches)


def _fit(problem, batch_size, max_iter, tol, window, monitor, learning_rate, warmup, seed, batches=None):
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rule = validate_learning_rate(learning_rate)
    batches = engine_batches(problem.X, problem.y, problem.weights, batch_size, rng, batches)
    monitor_rows = batches.monitor_rows(monitor, rng)
    state = SelectionStochasticState(problem, batches.n, monitor_rows, batches.next())
    steps, stop = StepSize(rule, warmup, delay=STEP_DELAY), WindowRule(tol)
    run = stochastic_ascent(state, batches.next, steps, stop, max_iter=max_iter, window=window)
    stopping = run.stopping
    if state.searches:
        held = (
            f"every slope held in its slab for the first {state.held_for} steps" if state.held_for
            else "slopes never released"
        )  # fmt: skip
        stopping += f"; {held}; {NO_MOVES}"
    return SelectionSVIResult(
        mean=state.factors.mean, cov=state.factors.cov, selected=problem.selected, lower_bound=run.estimates,
        converged=run.converged, n_iter=run.n_iter, decreases=[], elapsed=time.perf_counter() - t0,
        **state.ascent.fields(state.factors), stopping=stopping, batch_size=batches.size, monitor_bounds=run.checks,
    )  # fmt: skip


class SelectionStochasticState:
    """The selection prior's SVI state for :func:`bayesvm.engines.stochastic.stochastic_ascent` (module docstring):
    the natural parameters ``(gram, r)`` of the slopes' message and the prior's factors given them, for ``n`` rows in
    all.  The start is the message of ``first`` (a minibatch at ``E[1/a] = 1``).  Under a prior that searches models
    every slope is held in its slab until the stopping rule is first met (:meth:`settled` releases them)."""

    def __init__(self, problem, n: int, monitor_rows, first) -> None:
        self.problem, self.n, self.monitor_rows = problem, n, monitor_rows
        self.ascent = law_of(problem.prior).ascent(problem)
        rest = self.ascent.initial_state()[1:]
        self.gram, self.r = self.message(None, *first)  # the batch start's message, E[1/a] = 1, estimated
        self.factors = self.ascent.update(self.gram, self.r, *rest)
        self.searches = law_of(problem.prior).model_search
        self.hold = {"clamp": np.ones(problem.m, dtype=bool)} if self.searches else {}
        self.held_for = 0

    def classes(self, signed):
        return row_classes(signed, self.problem.weights is not None)

    def bound(self, X, signed) -> float:
        """The whole bound with the data term estimated from the rows ``X`` (each ``chi_i`` at its optimum)."""
        y, weights = self.classes(signed)
        f_mean, expected_sq = self.ascent.row_moments(self.factors, X, y)
        data = data_lower_bound(y, f_mean, expected_sq, update_chi(expected_sq), weights)
        return self.factors.prior_bound + (self.n / y.size) * data

    def message(self, factors, X, signed) -> tuple[np.ndarray, np.ndarray]:
        """The minibatch's message at ``chi`` optimal under ``factors`` (``w = 1`` before the first update)."""
        y, weights = self.classes(signed)
        w = (
            np.ones(y.size)
            if factors is None
            else inverse_a_mean(update_chi(self.ascent.row_moments(factors, X, y)[1]))
        )
        return minibatch_message(X, y, w, self.n / y.size, weights)

    def natural(self) -> np.ndarray:
        return natural_vector(self.gram, self.r)

    def estimate(self, batch):
        return self.bound(*batch), self.message(self.factors, *batch)

    def move(self, rho: float, target, step: int) -> None:
        gram_hat, r_hat = target
        self.gram = (1.0 - rho) * self.gram + rho * gram_hat
        self.r = (1.0 - rho) * self.r + rho * r_hat
        self.factors = self.ascent.update(self.gram, self.r, *self.factors.rest, **self.hold)

    def monitor(self, step: int) -> float:
        return self.bound(*self.monitor_rows)

    def settled(self, step: int) -> bool:
        if not self.hold:
            return True
        self.hold, self.held_for = {}, step  # the slopes released (module docstring)
        return False
