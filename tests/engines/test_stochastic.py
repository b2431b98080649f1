"""The stochastic engines' driver (:func:`bayesvm.engines.stochastic.stochastic_ascent`) on a toy state whose target
is known: a Gaussian mean estimated from noisy minibatch targets."""

import numpy as np
import pytest

from bayesvm.engines.stochastic import StepSize, WindowRule, natural_vector, stochastic_ascent


class NoisyMean:
    """q = N(eta / precision, 1 / precision) with precision fixed at 1; each minibatch's target is the true mean plus
    noise of SD ``noise``; the 'bound' is minus the squared distance of q's mean from the truth (the monitor set sees
    the truth exactly).  ``phases``: how many times the stopping rule must be met before the run may end."""

    def __init__(self, truth: float, noise: float, phases: int = 1) -> None:
        self.truth, self.noise, self.phases = truth, noise, phases
        self.precision, self.eta = np.eye(1), np.zeros(1)
        self.moves, self.monitored, self.released = [], [], []

    def natural(self):
        return natural_vector(self.precision, self.eta)

    def estimate(self, batch):
        value = float(batch[1][0])
        return -((self.eta[0] - self.truth) ** 2), (np.eye(1), np.array([value]))

    def move(self, rho, target, step):
        self.moves.append((step, rho))
        self.eta = (1.0 - rho) * self.eta + rho * target[1]

    def monitor(self, step):
        self.monitored.append(step)
        return -((self.eta[0] - self.truth) ** 2) - 1.0

    def settled(self, step):
        self.phases -= 1
        if self.phases > 0:
            self.released.append(step)
            return False
        return True


def _batches(state, rng):
    def next_batch():
        return np.zeros((1, 1)), np.array([state.truth + state.noise * rng.standard_normal()])

    return next_batch


def test_the_driver_converges_to_the_target_and_owns_the_traces():
    state = NoisyMean(truth=2.0, noise=0.5)
    rng = np.random.default_rng(0)
    run = stochastic_ascent(state, _batches(state, rng), StepSize("robbins-monro", 10, delay=20.0), WindowRule(1e-3),
                            max_iter=20000, window=25)  # fmt: skip
    assert run.converged and run.stopping.startswith("moving window")
    assert run.estimates.size == run.n_iter == len(state.moves)
    assert state.monitored == list(range(25, run.n_iter + 1, 25)) and run.checks.size == len(state.monitored)
    assert [step for step, _ in state.moves] == list(range(1, run.n_iter + 1))
    assert abs(state.eta[0] - 2.0) < 0.1
    rhos = [rho for _, rho in state.moves]
    assert rhos[0] == pytest.approx(21.0**-0.51) and all(a > b for a, b in zip(rhos, rhos[1:]))


def test_a_phase_change_restarts_the_checks_and_max_iter_is_reported():
    state = NoisyMean(truth=-1.0, noise=0.2, phases=2)
    run = stochastic_ascent(state, _batches(state, np.random.default_rng(1)), StepSize(0.5, 10), WindowRule(1e-3),
                            max_iter=5000, window=10)  # fmt: skip
    assert run.converged and len(state.released) == 1
    released = state.released[0]
    assert run.checks.size == (run.n_iter - released) // 10  # only the checks after the release
    short = NoisyMean(truth=3.0, noise=1.0)
    cut = stochastic_ascent(short, _batches(short, np.random.default_rng(2)), StepSize(0.1, 10), WindowRule(1e-12),
                            max_iter=40, window=10)  # fmt: skip
    assert not cut.converged and cut.n_iter == 40 and cut.stopping.startswith("stopped at max_iter = 40 steps")


def test_the_adaptive_rate_is_primed_on_warmup_minibatches_at_the_initial_q():
    state = NoisyMean(truth=1.0, noise=0.3)
    drawn = []
    rng = np.random.default_rng(3)
    inner = _batches(state, rng)

    def counted():
        drawn.append(len(state.moves))
        return inner()

    run = stochastic_ascent(state, counted, StepSize("adaptive", 7), WindowRule(1e-3), max_iter=3000, window=20)
    assert drawn[:7] == [0] * 7  # seven minibatches before the first move
    assert len(drawn) == 7 + run.n_iter and 0.0 < state.moves[0][1] <= 1.0
