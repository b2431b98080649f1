"""What the stochastic engines share (Wenzel et al. 2017, section 4.5; the kernel, linear and selection SVI): the
step-size rules, the stopping rule on a monitor set, and the natural parameters as one vector.

Step sizes (``learning_rate``):

* ``"robbins-monro"`` (default): ``rho_t = (t + delay)^(-0.51)``.  Measured on simulated linear and banana kernel
  problems it reaches the full-batch optimum within 0.1 posterior SD in 5000 steps of 100 rows, where ``t^(-0.75)``
  is still tens of SDs away: the fixed point of the local parameters and ``q`` needs many effective sweeps
  (``sum rho_t``), which a faster decay starves.
* ``"adaptive"``: the adaptive rate of Ranganath, Wang, Blei & Xing (2013): with the noisy natural gradient ``g_t``
  (target minus current natural parameters), moving averages ``gbar <- (1 - 1/tau) gbar + g/tau``,
  ``hbar <- (1 - 1/tau) hbar + g'g/tau``, the step ``rho = gbar'gbar / hbar`` and memory ``tau <- tau (1 - rho) + 1``;
  ``gbar``, ``hbar`` and ``tau`` start from ``warmup`` minibatches evaluated at the initial ``q`` (their recommended
  warm start), which keeps the first steps small when the gradients are noisy.
* a number in (0, 1]: a constant step.

Stopping rule (:class:`WindowRule`): minibatch estimates of the bound are too noisy to stop on, so each engine
evaluates the bound on a fixed monitor set every ``window`` steps, and stops when the mean of the last three checks
differs from the mean of the three before by less than ``tol`` relative.

One driver (:func:`stochastic_ascent`) runs every stochastic engine: each step draws a minibatch, records the bound's
estimate on it, moves q's natural parameters ``lambda <- (1 - rho) lambda + rho lambda_hat`` towards the minibatch's
target ``lambda_hat`` (Hoffman et al. 2013, eq. 19; Wenzel et al. 2017, Alg. 1) and lets the engine update the rest
(:class:`StochasticState`); the driver owns the step sizes, the monitor checks, the stopping rule and the traces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import BayesvmError

LEARNING_RATES = ("adaptive", "robbins-monro")


def validate_learning_rate(rate: object) -> str | float:
    if isinstance(rate, str):
        if rate not in LEARNING_RATES:
            raise BayesvmError(f"learning_rate must be one of {LEARNING_RATES} or a number in (0, 1], got {rate!r}")
        return rate
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise BayesvmError(
            f"learning_rate must be one of {LEARNING_RATES} or a number in (0, 1], got {rate!r}"
        ) from None
    if not 0.0 < value <= 1.0:
        raise BayesvmError(f"a constant learning_rate must lie in (0, 1], got {rate!r}")
    return value


class StepSize:
    """The step-size rules of the module docstring."""

    #: Robbins-Monro exponent: close to 1/2, the slowest decay that still averages the noise out; the
    #: fixed point of chi and q needs many effective sweeps (sum of rho), which a faster decay starves.
    kappa = 0.51

    def __init__(self, rule: str | float, warmup: int, delay: float = 0.0):
        self.rule, self.warmup, self.t, self.delay = rule, warmup, 0, float(delay)
        self.gbar: np.ndarray | None = None
        self.hbar = 0.0
        self.tau = float(max(warmup, 1))

    def prime(self, gradients: list[np.ndarray]) -> None:
        if self.rule == "adaptive" and gradients:
            self.gbar = np.mean(gradients, axis=0)
            self.hbar = float(np.mean([g @ g for g in gradients]))

    def __call__(self, g: np.ndarray) -> float:
        self.t += 1
        if self.rule == "robbins-monro":
            return float((self.t + self.delay) ** -self.kappa)
        if not isinstance(self.rule, str):
            return float(self.rule)
        if self.gbar is None:
            self.gbar, self.hbar = g.copy(), float(g @ g)
        inv = 1.0 / self.tau
        self.gbar = (1.0 - inv) * self.gbar + inv * g
        self.hbar = (1.0 - inv) * self.hbar + inv * float(g @ g)
        rho = float(np.clip(self.gbar @ self.gbar / self.hbar, 1e-6, 1.0)) if self.hbar > 0 else 1.0
        self.tau = self.tau * (1.0 - rho) + 1.0
        return rho


@dataclass
class WindowRule:
    """The moving-window stopping rule of the module docstring."""

    tol: float
    span: int = 3
    message: str = ""

    def done(self, checks: list[float]) -> bool:
        k = self.span
        if len(checks) < 2 * k:
            return False
        last, before = np.mean(checks[-k:]), np.mean(checks[-2 * k : -k])
        change = (last - before) / abs(last)
        if abs(change) <= self.tol:
            self.message = (
                f"moving window: mean of the last {k} monitor-set bounds changed by {change:.2e} relative "
                f"to the {k} before (tol = {self.tol:g})"
            )
            return True
        return False


def natural_vector(precision: np.ndarray, eta: np.ndarray) -> np.ndarray:
    upper = np.triu_indices(eta.size)
    return np.concatenate([eta, precision[upper]])


class StochasticState(Protocol):
    """One stochastic engine's state as :func:`stochastic_ascent` asks it."""

    def natural(self) -> np.ndarray:
        """q's natural parameters as one vector (:func:`natural_vector`)."""
        ...

    def estimate(self, batch: tuple[np.ndarray, np.ndarray]) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
        """For a minibatch ``(rows, signed responses)``: the whole bound estimated from it under the current q, and
        the natural parameters ``(precision, eta)`` q would take from it alone (the noisy target)."""
        ...

    def move(self, rho: float, target: tuple[np.ndarray, np.ndarray], step: int) -> None:
        """q's natural parameters a step ``rho`` towards ``target``, then the engine's own updates at ``step``."""
        ...

    def monitor(self, step: int) -> float:
        """The whole bound on the monitor rows (the stopping rule's input)."""
        ...

    def settled(self, step: int) -> bool:
        """Whether the stopping rule being met ends the run; False: the engine moved to its next phase, and the
        monitor checks start again."""
        ...


@dataclass(frozen=True)
class StochasticRun:
    """What :func:`stochastic_ascent` records: the minibatch estimates of the bound (noisy, not monotone), the monitor
    checks since the last phase began, whether the stopping rule ended the run, the steps taken and why it stopped."""

    estimates: np.ndarray
    checks: np.ndarray
    converged: bool
    n_iter: int
    stopping: str


def stochastic_ascent(
    state: StochasticState,
    next_batch: Callable[[], tuple[np.ndarray, np.ndarray]],
    steps: StepSize,
    stop: WindowRule,
    *,
    max_iter: int,
    window: int,
) -> StochasticRun:
    """Run ``state`` (module docstring) for at most ``max_iter`` steps of minibatches ``next_batch()``; the adaptive
    step size is first primed on ``steps.warmup`` minibatches at the initial q (Ranganath et al. 2013's warm start)."""
    if steps.rule == "adaptive":
        primes = []
        for _ in range(steps.warmup):
            target = state.estimate(next_batch())[1]
            primes.append(natural_vector(*target) - state.natural())
        steps.prime(primes)
    estimates: list[float] = []
    checks: list[float] = []
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        estimate, target = state.estimate(next_batch())
        estimates.append(estimate)
        state.move(steps(natural_vector(*target) - state.natural()), target, it)
        if it % window == 0:
            checks.append(state.monitor(it))
            if stop.done(checks):
                if state.settled(it):
                    converged = True
                    break
                checks = []
    if not converged:
        stop.message = f"stopped at max_iter = {max_iter} steps before the window rule was met"
    return StochasticRun(np.array(estimates), np.array(checks), converged, it, stop.message)
