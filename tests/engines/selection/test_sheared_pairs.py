"""Sheared pair updates of the selection samplers (:mod:`bayesvm.engines.selection.sheared_pairs`) against exact
answers.

* the shift is the tuning draws' difference of means between a slope's two states, per unit of the slope;
* chains whose only model moves are sheared pair updates (line moves within a model) keep the exact posterior
  probabilities of the four models of an intercept and two correlated slopes (grid quadrature), with Laplace and
  Gaussian slab priors, and with a vague intercept prior (the Metropolis-Hastings route);
* the same check catches an update whose evidence is off by a constant.
"""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines.selection import sheared_pairs
from bayesvm.engines.selection.directions import LineMoves
from bayesvm.engines.selection.sheared_pairs import ShearedPairs

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def test_the_shift_is_the_difference_of_the_states_means():
    rng = np.random.default_rng(0)
    y, X = np.ones(5), rng.standard_normal((5, 3))
    moves = ShearedPairs(y, X, np.array([0]), np.array([1.0]), np.array([1, 2]), tune=100)
    gammas, coefs = [], []
    for step in range(100):
        on = step % 3 != 0  # slope 1 in two thirds of the time; slope 2 always in
        coef = np.array([0.5 + (0.0 if on else 0.4), 2.0 if on else 0.0, -1.0 + (0.0 if on else 0.6)])
        coef = coef + 0.01 * rng.standard_normal(3)
        gamma = np.array([on, True])
        coef[1] *= on
        gammas.append(gamma)
        coefs.append(coef)
        moves.observe(step, coef, gamma, np.ones(2))
    # slope 2 was never out in the first half: a probe holds it out over 8 iterations from half way; those
    # iterations are kept out of the regular means (here nothing forced it out, so the probe recorded nothing)
    assert set(moves._probe_at) == set(range(50, 58)) and moves.probe_count[1] == 0
    kept = [step for step in range(100 // 4, 100) if step not in moves._probe_at]
    c, g = np.array(coefs)[kept], np.array(gammas)[kept]
    on = g[:, 0]
    expected = -(c[on].mean(axis=0) - c[~on].mean(axis=0)) / c[on, 1].mean()
    expected[1] = 0.0
    np.testing.assert_allclose(moves.shift[:, 0], expected, rtol=1e-10)
    assert list(moves.sheared) == [0]  # slope 2 never left the model: no sheared update
    assert np.all(moves.shift[:, 1] == 0.0)


def test_a_slope_its_chain_never_included_gets_its_shift_from_a_probe():
    """Slope 1 is never in during the first half of tuning; the probe's recorded iterations (in, with slope 2 and the
    intercept where they go when it enters) give its in-state mean."""
    rng = np.random.default_rng(0)
    y, X = np.ones(5), rng.standard_normal((5, 3))
    moves = ShearedPairs(y, X, np.array([0]), np.array([1.0]), np.array([1, 2]), tune=100)
    for step in range(100):
        probe = moves._probe_at.get(step)
        on = probe is not None and probe[0] == 0  # as run() would force it
        if on:
            moves.probe_stayed[0] += 1  # (as run() counts when the sampler's steps had left it in)
        other = step % 2 == 0  # slope 2 in half of the time
        coef = np.array([0.5 - 0.3 * on, 1.5 * on, (-1.0 + 0.6 * on) * other])
        moves.observe(step, coef, np.array([on, other]), np.ones(2))
    assert moves.probed[0] == 1 and moves.probe_count[0] == 4  # the last 4 of its 8 iterations
    assert 0 in moves.sheared
    # intercept: -(0.2 - 0.5) / 1.5; slope 2: in-state mean -0.4 * (its share in the recorded steps) against -0.5
    recorded = [s for s, (j, _, r) in moves._probe_at.items() if j == 0 and r]
    slope2_in = np.mean([(-1.0 + 0.6) * (s % 2 == 0) for s in recorded])
    regular = [s for s in range(25, 100) if s not in moves._probe_at]
    slope2_out = np.mean([-1.0 * (s % 2 == 0) for s in regular])
    np.testing.assert_allclose(moves.shift[0, 0], -(0.2 - 0.5) / 1.5, rtol=1e-12)
    np.testing.assert_allclose(moves.shift[2, 0], -(slope2_in - slope2_out) / 1.5, rtol=1e-12)


def test_a_probe_iteration_forces_the_state_and_other_iterations_do_not():
    X, y = _problem()
    step = _Step(np.zeros(2), np.array([1.3, 0.8]), np.log([1e-6, 0.5]))  # slope 1 almost never in by its prior
    step.gamma[:] = 0
    moves = ShearedPairs(y, X, np.array([0]), np.array([0.5]), np.array([1, 2]), tune=0)
    moves._probe_at = {3: (0, True, True)}
    rng, coef = np.random.default_rng(1), np.zeros(3)
    for iteration in range(6):
        coef = moves.run(step, coef, rng, iteration=iteration)
        assert step.gamma[0] == (iteration == 3) and (coef[1] != 0.0) == (iteration == 3)
        step.gamma[0], coef[1] = 0, 0.0  # (the next regular update would drop it again)
    assert moves.switches[0] == 0  # a forced state is not a switch of the chain
    assert moves.probe_stayed[0] == 0  # (it was out before the forced update)


def test_a_probe_the_sampler_never_kept_gives_no_sheared_update():
    """A slope that the chain's own steps dropped at every probe iteration has no posterior mass in the forced state
    worth a sheared update: its shift stays unset."""
    rng = np.random.default_rng(0)
    y, X = np.ones(5), rng.standard_normal((5, 3))
    moves = ShearedPairs(y, X, np.array([0]), np.array([1.0]), np.array([1, 2]), tune=100)
    for step in range(100):
        probe = moves._probe_at.get(step)
        on = probe is not None and probe[0] == 0
        coef = np.array([0.5 - 0.3 * on, 1.5 * on, -1.0 * (step % 2 == 0)])
        moves.observe(step, coef, np.array([on, step % 2 == 0]), np.ones(2))
    assert moves.probe_count[0] == 4 and moves.probe_stayed[0] == 0
    assert 0 not in moves.sheared and np.all(moves.shift[:, 0] == 0.0)


class _Step:
    """The step interface for two penalised slopes with fixed priors (Laplace or Gaussian slab)."""

    def __init__(self, precision, inv_scale, log_odds):
        self.gamma = np.array([1, 1], dtype=np.int8)
        self.priors = (np.asarray(precision, float), np.asarray(inv_scale, float), np.asarray(log_odds, float))

    def pair_priors(self):
        return self.priors

    def apply_pairs(self, include, value):
        moved = include >= 0
        self.gamma[moved] = include[moved]

    def apply_line(self, coef):
        pass


def _problem(n: int = 30):
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal(n)
    X = np.column_stack([np.ones(n), x1, x1 + 0.3 * rng.standard_normal(n)])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-1.5 * x1)), 1.0, -1.0)
    return X, y


def _exact_model_probabilities(X, y, intercept_precision, precision, inv_scale, log_odds) -> np.ndarray:
    """``P(gamma)`` for (out, out), (in, out), (out, in), (in, in) by grid quadrature of each model's evidence."""
    grids = [np.linspace(-4, 3, 141), np.linspace(-4, 9, 131), np.linspace(-9, 5, 141)]
    cells = [g[1] - g[0] for g in grids]

    def log_slope(value, k):
        if precision[k] > 0:
            return 0.5 * np.log(precision[k] / (2 * np.pi)) - 0.5 * precision[k] * value**2
        return np.log(0.5 * inv_scale[k]) - inv_scale[k] * np.abs(value)

    out = []
    for gamma in ((0, 0), (1, 0), (0, 1), (1, 1)):
        axes = [grids[0]] + [grids[k + 1] if gamma[k] else np.zeros(1) for k in range(2)]
        b0, b1, b2 = np.meshgrid(*axes, indexing="ij")
        log_post = -0.5 * intercept_precision * b0**2 + sum(
            log_slope(b, k) + log_odds[k] for k, b in enumerate((b1, b2)) if gamma[k]
        )
        for i in range(y.size):
            log_post = log_post - 2.0 * np.maximum(0.0, 1.0 - y[i] * (b0 + b1 * X[i, 1] + b2 * X[i, 2]))
        volume = cells[0] * np.prod([cells[k + 1] for k in range(2) if gamma[k]])
        top = log_post.max()
        out.append(top + np.log(np.sum(np.exp(log_post - top)) * volume))
    out = np.array(out)
    return np.exp(out - np.logaddexp.reduce(out))


def _sampled_model_probabilities(X, y, intercept_precision, step_priors, shift, seeds=4, iterations=2000):
    counts = np.zeros(4)
    for seed in range(seeds):
        step = _Step(*step_priors)
        lines = LineMoves(y, X, np.array([0]), np.array([intercept_precision]), np.array([1, 2]), tune=0, lines=1)
        lines.factor = np.linalg.cholesky(np.array([[1.0, 0.3, 0.2], [0.3, 1.0, 0.8], [0.2, 0.8, 1.0]]))
        moves = ShearedPairs(y, X, np.array([0]), np.array([intercept_precision]), np.array([1, 2]), tune=0)
        moves.shift, moves.sheared, moves.widths = shift, np.array([0, 1]), np.full(2, 2.0)
        rng, coef = np.random.default_rng(seed), np.array([0.0, 1.0, 0.5])
        for i in range(iterations):
            coef = lines.run(step, coef, rng, X.T @ X)
            coef = moves.run(step, coef, rng)
            assert np.all(coef[1:][step.gamma == 0] == 0.0)
            if i >= 200:
                counts[step.gamma[0] + 2 * step.gamma[1]] += 1
    return counts / counts.sum()


#: rows: intercept, slope 1, slope 2; columns: slope 1's and slope 2's shifts (they take over each other's signal)
SHIFT = np.array([[0.1, -0.2], [0.0, 0.8], [0.9, 0.0]])

CASES = {
    "laplace": ((np.zeros(2), np.array([1.3, 0.8]), np.log([0.4 / 0.6, 0.5 / 0.5])), 0.5),
    "slab": ((np.array([0.4, 0.7]), np.zeros(2), np.log([0.4 / 0.6, 0.3 / 0.7])), 0.5),
    "laplace-vague-intercept": ((np.zeros(2), np.array([1.3, 0.8]), np.log([0.4 / 0.6, 0.5 / 0.5])), 1e-8),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sheared_updates_keep_the_exact_model_probabilities(case):
    (precision, inv_scale, log_odds), intercept_precision = CASES[case]
    X, y = _problem()
    exact = _exact_model_probabilities(X, y, intercept_precision, precision, inv_scale, log_odds)
    sampled = _sampled_model_probabilities(X, y, intercept_precision, (precision, inv_scale, log_odds), SHIFT)
    se = np.sqrt(exact * (1 - exact) / 1000)  # (4 chains of 1,800 autocorrelated draws)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))


@pytest.mark.slow  # (7 s: the power of the check above, not a check of the sampler; suite time)
def test_an_update_with_the_wrong_evidence_is_caught(monkeypatch):
    """The same check fails when the included model's evidence is off by a factor e (numpy path)."""
    from bayesvm.engines.linear import compiled_rows

    monkeypatch.setattr(compiled_rows, "available", lambda: False)
    original = sheared_pairs._logsumexp
    monkeypatch.setattr(sheared_pairs, "_logsumexp", lambda values: original(values) + 1.0)
    (precision, inv_scale, log_odds), intercept_precision = CASES["laplace"]
    X, y = _problem()
    exact = _exact_model_probabilities(X, y, intercept_precision, precision, inv_scale, log_odds)
    sampled = _sampled_model_probabilities(X, y, intercept_precision, (precision, inv_scale, log_odds), SHIFT)
    se = np.sqrt(exact * (1 - exact) / 1000)
    assert not np.all(np.abs(sampled - exact) < 4 * se + 0.01)


def test_the_compiled_update_makes_the_numpy_updates_draws(monkeypatch):
    """With numba, the update's draw is compiled (``compiled_pairs.line_pair``); on the same uniforms it makes the
    numpy path's draws up to rounding."""
    from bayesvm.engines.linear import compiled_rows

    if not compiled_rows.available():
        pytest.skip("numba is not installed")
    (precision, inv_scale, log_odds), intercept_precision = CASES["laplace"]
    X, y = _problem()
    runs = []
    for compiled in (True, False):
        monkeypatch.setattr(compiled_rows, "available", lambda compiled=compiled: compiled)
        step = _Step(precision, inv_scale, log_odds)
        moves = ShearedPairs(y, X, np.array([0]), np.array([intercept_precision]), np.array([1, 2]), tune=0)
        moves.shift, moves.sheared, moves.widths = SHIFT, np.array([0, 1]), np.full(2, 2.0)
        rng, coef, kept = np.random.default_rng(7), np.array([0.0, 1.0, 0.5]), []
        for _ in range(200):
            kept.append(moves.run(step, coef, rng).copy())
        runs.append(np.array(kept))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-8, atol=1e-10)
    assert 0 < np.mean(runs[0][:, 2] != 0.0) < 1  # the second slope moved in and out
