"""The fused Gibbs iteration (bayesvm.engines.linear.fused_iteration) makes the chain of the separate steps."""

import numpy as np
import pandas as pd
import pytest

from bayesvm.engines.linear import compiled_rows, fused_iteration, gibbs
from bayesvm.engines.linear.collapsed_variance import CollapsedVariance
from bayesvm.engines.linear.gibbs_rows import MARGIN_FLOOR, DenseRows, LatentDraws
from bayesvm.engines.linear.interweave import ScaleMoves
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.model.problems import sorted_by_level
from bayesvm.priors import InverseGamma, PriorSet

pytestmark = pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")


#: Relative size of a rounding difference where the chains start (sums over rows in another order: about 1e-13 of a
#: draw's magnitude), the factor the chain multiplies it by every 15 iterations on the levels of many rows (about 10),
#: and a margin for machines whose sums round differently.
START_ROUNDING, GROWTH_PER_15, MARGIN = 1e-13, 10.0, 100.0


def assert_same_chain(a, b, iterations, name=""):
    """Two chains drawn with the same random numbers make the same decisions, so they differ only by rounding that
    the chain amplifies: each column is compared on its own scale (a draw that passes near zero has no relative
    error of its own), with the tolerance that amplification over ``iterations`` gives (0 where the chain does not
    amplify rounding: levels of a few rows, whose draws hardly depend on each other).  A different decision (one
    accepted move, one other random number) moves a draw by a share of its column's spread, far above it."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape, name
    tolerance = MARGIN * START_ROUNDING * GROWTH_PER_15 ** (iterations / 15)
    assert tolerance < 1e-3, "the chain is too long to compare by rounding"
    flat_a, flat_b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    scale = np.maximum(np.abs(flat_b).max(axis=0), 1e-12)
    worst = (np.abs(flat_a - flat_b) / scale).max()
    assert worst <= tolerance, f"{name}: largest difference {worst:.2e} of a column's scale, above {tolerance:.1e}"


def _amplifying(rows_per_level, iterations):
    """Iterations over which a chain amplifies rounding: all of them on levels of many rows, none on a few rows."""
    return iterations if rows_per_level >= 10 else 0


def _problem(formula, data, penalty, priors=None):
    design = build_design(parse_formula(formula), data)
    return build_model(design, penalty, PriorSet() if priors is None else priors, standardize=True).problem()


def _grouped(seed, groups, size, sd=1.5):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), size)
    u = rng.normal(0.0, sd, groups)
    x, w = rng.standard_normal(g.size), rng.standard_normal(g.size)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(0.3 + 0.8 * x - 0.5 * w + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "x": x, "w": w, "g": g.astype(str)})


def _fused(problem) -> fused_iteration.FusedIteration:
    _, problem = sorted_by_level(problem)
    rows = DenseRows(problem.D, problem.y, problem.blocked, LatentDraws(np.random.default_rng(0), problem.y.size))
    mover = ScaleMoves(problem)
    return fused_iteration.FusedIteration(problem, rows, mover, CollapsedVariance(problem, 40), MARGIN_FLOOR)


@pytest.mark.parametrize(
    "formula,penalty,priors,groups,size",
    [
        ("y ~ x * w + (1 | g)", "learn", None, 30, 4),
        ("y ~ x + w + (1 | g)", 1.0, PriorSet(random=InverseGamma()), 30, 4),
        ("y ~ x + (1 | g)", "learn", None, 4, 30),  # levels of many rows: no level draws
    ],
    ids=["learned-penalty-half-t", "fixed-penalty-inverse-gamma", "many-rows-per-level"],
)
def test_fused_chain_is_the_chain_of_the_separate_steps(formula, penalty, priors, groups, size, monkeypatch):
    """The same chain, seed for seed, with the fused call and with the separate steps: over tuning (the collapsed
    variance step's iterations take the separate steps in both), the learned penalty's turns and the kept draws.  (The
    two differ by rounding, which the chain amplifies by about ten every 15 iterations on the levels of many rows:
    40 kept draws.)"""
    problem = _problem(formula, _grouped(seed=groups, groups=groups, size=size), penalty, priors)
    assert _fused(problem).ready
    fused = gibbs._chain(problem, 40, 40, 1, np.random.SeedSequence(5), False)
    monkeypatch.setattr(fused_iteration, "_structure_fits", lambda *args: False)
    separate = gibbs._chain(problem, 40, 40, 1, np.random.SeedSequence(5), False)
    for name in ("theta_d", "theta_b", "log_posterior"):
        assert_same_chain(fused[name], separate[name], _amplifying(size, 80), name)
    for a, b in zip(fused["components"], separate["components"]):
        assert_same_chain(a, b, _amplifying(size, 80), "components")
    assert np.std(fused["theta_d"][:, 1]) > 0  # the chain moved


@pytest.mark.parametrize(
    "formula,penalty",
    [("y ~ x + (1 + x | g)", "learn"), ("y ~ x + (1 | g) + (1 | h)", "learn"), ("y ~ x + w", "learn")],
    ids=["correlated-slope", "two-intercepts", "no-random-effects"],
)
def test_other_structures_take_the_separate_steps(formula, penalty):
    data = _grouped(seed=2, groups=12, size=5).assign(h=lambda d: (np.arange(len(d)) % 3).astype(str))
    problem = _problem(formula, data, penalty)
    assert not _fused(problem).ready
    draws = gibbs._chain(problem, 20, 20, 1, np.random.SeedSequence(1), False)
    assert np.all(np.isfinite(draws["theta_d"]))


def test_a_refused_compiled_draw_takes_the_same_fallback(monkeypatch):
    """Where the compiled ``theta | w`` refuses (a Schur complement not positive definite in floating point), the
    fused chain falls back as the separate steps do: the general draw on fresh normals, the same chain; so does the
    compiled run of whole iterations (``FusedIteration.run``), which stops at the refusing iteration."""
    problem = _problem("y ~ x * w + (1 | g)", _grouped(seed=7, groups=30, size=4), "learn")
    q, J = problem.D.shape[1], problem.blocked.n_levels

    original = fused_iteration.fused_chain

    def refusing_run(rng, schedule, *args):
        if schedule.drawn_first:  # the rest of an iteration whose theta | w the caller drew (the fallback)
            return original(rng, schedule, *args)
        rng.standard_normal(q), rng.standard_normal((J, 1))  # a refusal: its first theta | w's normals drawn
        return 0, True

    monkeypatch.setattr(fused_iteration, "fused_chain", refusing_run)
    monkeypatch.setattr(fused_iteration, "coefficient_draw", lambda *args: False)
    monkeypatch.setattr(compiled_rows, "intercept_draw", lambda *args: False)
    fused = gibbs._chain(problem, 30, 20, 1, np.random.SeedSequence(2), False)
    monkeypatch.setattr(fused_iteration, "_structure_fits", lambda *args: False)
    separate = gibbs._chain(problem, 30, 20, 1, np.random.SeedSequence(2), False)
    assert_same_chain(fused["theta_d"], separate["theta_d"], 0, "theta_d")


@pytest.mark.parametrize(
    "batch,thin,tune,groups,size",
    [(7, 1, 40, 30, 4), (64, 3, 40, 30, 4), (64, 1, 0, 30, 4), (64, 1, 40, 4, 30)],
    ids=["short-runs", "thinned", "untuned", "many-rows-per-level"],
)
def test_whole_iterations_in_one_call_are_the_per_iteration_chain(batch, thin, tune, groups, size, monkeypatch):
    """``FusedIteration.run`` (whole iterations, theta | w and the variance draws included, in one compiled call on the
    chain's generator) makes the chain of one fused call per iteration, seed for seed: runs cut short by the collapsed
    step's tuning iterations, by the end of tuning and by ``batch``, thinned draws, the learned penalty's half-t and
    its auxiliary variable, the location shift, the over-relaxed variance draws after tuning (from the first iteration:
    ``tune=0``) and levels of many rows (no level draws, the collapsed step's schedule settled at mid-tuning)."""
    problem = _problem("y ~ x * w + (1 | g)", _grouped(seed=11, groups=groups, size=size), "learn")
    iterations = []
    original = fused_iteration.fused_chain

    def counted(*args):
        completed, refused = original(*args)
        iterations.append(completed)
        return completed, refused

    monkeypatch.setattr(fused_iteration, "fused_chain", counted)
    monkeypatch.setattr(gibbs, "BATCH", batch)
    whole = gibbs._chain(problem, 40, tune, thin, np.random.SeedSequence(8), False)
    assert sum(iterations) > 0.6 * (tune + 40 * thin) and max(iterations) <= batch  # most iterations, in several runs
    monkeypatch.setattr(gibbs, "BATCH", 0)
    per_iteration = gibbs._chain(problem, 40, tune, thin, np.random.SeedSequence(8), False)
    assert whole["theta_d"].shape == per_iteration["theta_d"].shape == (40, problem.D.shape[1])
    for name in ("theta_d", "theta_b", "log_posterior"):
        assert_same_chain(whole[name], per_iteration[name], _amplifying(size, tune + 40 * thin), name)
    for a, b in zip(whole["components"], per_iteration["components"]):
        assert_same_chain(a, b, _amplifying(size, tune + 40 * thin), "components")
    assert np.std(whole["components"][0]) > 0
