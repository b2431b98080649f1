"""Streamed mean-field VB (:mod:`bayesvm.engines.linear.stream_vb`) against the in-memory sweeps, on partitions held in
memory: the plain passes are the in-memory plain sweeps, and the SQUAREM cycles reach the in-memory optimum in fewer
passes with a bound that never decreases."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines.linear.stream_vb import fit_streamed_vb, partition_level_sums, partition_sums
from bayesvm.engines.linear.vb import fit_vb
from bayesvm.linalg.dense import BlockedFactor
from bayesvm.model.problems import VarianceComponent, VBProblem
from bayesvm.priors import InverseGamma


def _problem(n: int, levels: int, seed: int = 0) -> VBProblem:
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    eta = X @ [0.3, 1.0, -0.5]
    if levels:
        g = np.sort(rng.integers(0, levels, n))  # sorted, as a registry export: levels span partition edges
        eta = eta + rng.normal(0.0, 1.0, levels)[g]
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-eta)), 1.0, -1.0)
    if not levels:
        return VBProblem(y=y, D=X, fixed_precision=np.full(3, 1e-2), components=())
    blocked = BlockedFactor(codes=g, values=np.ones((n, 1)), n_levels=levels)
    comp = VarianceComponent("u", np.zeros((1, 1), dtype=int), True, levels, prior=InverseGamma(0.01, 0.01))
    return VBProblem(y=y, D=X, fixed_precision=np.full(3, 1e-8), components=(comp,), blocked=blocked)


def _partitions(problem: VBProblem, count: int = 3):
    """``map_partitions`` over ``count`` blocks of rows held in memory."""
    pieces = np.array_split(np.arange(problem.n), count)
    blocked = problem.blocked

    def rows(idx):
        if blocked is None:
            return problem.D[idx]
        return problem.D[idx], blocked.codes[idx], blocked.values[idx]

    return lambda func, *args: [func(rows(idx), problem.y[idx], *args) for idx in pieces]


@pytest.mark.parametrize("levels", [0, 300])
def test_plain_passes_are_the_in_memory_plain_sweeps(levels):
    problem = _problem(3000, levels)
    streamed = fit_streamed_vb(problem, _partitions(problem), tol=1e-16, max_iter=200, accelerate=False)
    plain = fit_vb(problem, tol=-1.0, max_iter=streamed.n_iter, accelerate=False)  # (exactly as many sweeps)
    assert plain.n_iter == streamed.n_iter
    np.testing.assert_allclose(streamed.theta.mean_d, plain.theta.mean_d, rtol=0, atol=1e-12)
    if levels:
        np.testing.assert_allclose(streamed.theta.mean_b, plain.theta.mean_b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(streamed.lower_bound, plain.lower_bound, rtol=1e-13)


@pytest.mark.parametrize("levels", [0, 300])
def test_squarem_cycles_reach_the_in_memory_optimum_in_fewer_passes(levels):
    problem = _problem(3000, levels)
    mapped = _partitions(problem)
    fast = fit_streamed_vb(problem, mapped, tol=1e-16, max_iter=2000)
    slow = fit_streamed_vb(problem, mapped, tol=1e-16, max_iter=2000, accelerate=False)
    memory = fit_vb(problem, tol=1e-16, max_iter=2000)
    assert fast.converged and fast.n_iter < slow.n_iter
    assert np.all(np.diff(fast.lower_bound) >= -1e-10 * np.abs(fast.lower_bound[1:]))
    np.testing.assert_allclose(fast.theta.mean_d, memory.theta.mean_d, rtol=0, atol=1e-7)
    if levels:
        np.testing.assert_allclose(fast.theta.mean_b, memory.theta.mean_b, rtol=0, atol=1e-7)
        assert fast.components[0].scale[0, 0] == pytest.approx(memory.components[0].scale[0, 0], rel=1e-7)
    assert fast.lower_bound[-1] == pytest.approx(memory.lower_bound[-1], rel=1e-12)


def test_partition_sums_of_every_row_are_the_whole_sums():
    """(the helpers the passes map: a partition of every row gives the sums over all rows)"""
    problem = _problem(500, 0)
    whole = partition_sums(problem.D, problem.y, np.zeros(3), np.eye(3) * 0.1)
    parts = [partition_sums(problem.D[i], problem.y[i], np.zeros(3), np.eye(3) * 0.1)
             for i in np.array_split(np.arange(500), 4)]  # fmt: skip
    np.testing.assert_allclose(sum(p[0] for p in parts), whole[0], rtol=1e-12)
    grouped = _problem(500, 40)
    b = grouped.blocked
    one = partition_level_sums((grouped.D, b.codes, b.values), grouped.y, None, 40)
    assert one[3] == 500 and one[4].size == np.unique(b.codes).size
