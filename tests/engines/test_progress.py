"""The progress counter of long engine runs: nothing without ``show`` or before its delay, a bar after it, one
count per node of the accurate fit and per fold of the calibration, and the same numbers with or without it."""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import numpy as np

import bayesvm
from bayesvm.engines import progress
from bayesvm.engines.linear import ep
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from tests.conftest import simulate_grouped


def test_no_bar_without_show_and_a_bar_after_the_delay(monkeypatch, capsys):
    with progress.counter(False, "quiet", "nodes") as tick:
        assert tick is None
    with progress.counter(True, "quick", "nodes") as tick:  # over before the delay: nothing printed
        tick()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "SHOW_AFTER_SECONDS", 0.0)
    with progress.counter(True, "accurate VB", "nodes") as tick:
        for _ in range(3):
            tick()
    assert "accurate VB" in capsys.readouterr().err


def _counting(monkeypatch, module):
    """Replace ``module.counter`` by one that records, per call, whether a bar was asked for and every tick."""
    calls: list[dict] = []

    def counter(show, description, unit, total=None):
        call = {"show": show, "ticks": 0, "total": total}
        calls.append(call)

        def tick():
            call["ticks"] += 1

        return nullcontext(tick if show else None)

    monkeypatch.setattr(module, "counter", counter)
    return calls


def test_the_accurate_fit_counts_each_node_once_and_gives_the_same_fit(monkeypatch):
    data = simulate_grouped(n_groups=15, per_group=8, seed=3)
    problem = build_model(
        build_design(parse_formula("y ~ x1 + x2 + (1 | g)"), data), "learn", PriorSet(), True
    ).problem()
    quiet = ep.fit_accurate(problem)
    calls = _counting(monkeypatch, ep)
    shown = ep.fit_accurate(problem, progress=True)
    (call,) = calls
    # every node EP was run at, the converged and the failed: at least the nodes the result keeps
    assert call["show"] and call["ticks"] >= len(shown.weights) > 10
    np.testing.assert_array_equal(shown.weights, quiet.weights)
    np.testing.assert_array_equal(shown.nodes, quiet.nodes)


def test_the_calibration_counts_its_folds(monkeypatch):
    from bayesvm.results import crossfit

    data = simulate_grouped(n_groups=10, per_group=8, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", data, vb="meanfield")
        quiet = bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", data, vb="meanfield", progress=False)
        control = bayesvm.bsvm("y ~ x1 + x2 + (1 | g)", data, vb="meanfield", control=bayesvm.Control(progress=False))
        calls = _counting(monkeypatch, crossfit)
        fit.calibrate()
        quiet.calibrate()
        control.calibrate()
    folds = crossfit.DEFAULT_FOLDS
    assert calls == [{"show": True, "ticks": folds, "total": folds}] + [{"show": False, "ticks": 0, "total": folds}] * 2
