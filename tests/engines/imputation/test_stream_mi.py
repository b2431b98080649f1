"""Multiple imputation on partitions: the chain's model step from the partitions' sums is the in-memory step, and the
chain run a pass per step targets the in-memory chain's posterior."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesvm.engines.imputation.normal_model import draw_model, missing_patterns, sample_imputations
from bayesvm.engines.imputation.stream_mi import (
    ImputedPartition,
    StreamedImputation,
    chain_step,
    completed_rows,
    run_chain,
)
from bayesvm.formula.bars import parse_formula
from bayesvm.formula.design import build_design
from bayesvm.model import build_model
from bayesvm.priors import PriorSet

dask = pytest.importorskip("dask")


def _imputation_problem(n: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = 0.7 * a + 0.5 * rng.normal(size=n)
    y = np.where(a - b + 0.5 * rng.logistic(size=n) > 0, "yes", "no")
    data = pd.DataFrame({"y": y, "a": a, "b": b})
    data.loc[rng.uniform(size=n) < 0.3, "b"] = np.nan
    data.loc[rng.uniform(size=n) < 0.1, "a"] = np.nan
    design = build_design(parse_formula("y ~ a + b"), data, missing="impute")
    return build_model(design, "learn", PriorSet(), True).imputation_problem("mi")


def _partitions(problem, edges):
    """PartitionPasses over the problem's rows cut at ``edges`` (no cluster: dask's local scheduler)."""
    from bayesvm.outofcore import PartitionPasses

    parts = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        missing = problem.missing[lo:hi]
        z = np.where(missing, 0.0, problem.z[lo:hi])
        part = ImputedPartition(problem.base.D[lo:hi], z, missing, missing_patterns(missing), np.arange(lo, hi))
        parts.append(dask.delayed(tuple)([part, problem.base.y[lo:hi]]))
    return PartitionPasses(parts)


def _driver_side(problem) -> StreamedImputation:
    return StreamedImputation(y=problem.base.y, columns=problem.columns, alpha=problem.alpha, gamma=problem.gamma,
                              mean_variance=problem.mean_variance, df=problem.df, scale=problem.scale)  # fmt: skip


def test_the_model_step_from_partition_sums_is_the_in_memory_step():
    problem = _imputation_problem()
    rng = np.random.default_rng(1)
    z = np.where(problem.missing, rng.normal(size=problem.z.shape), problem.z)
    y = problem.base.y
    U = np.column_stack([np.ones(y.size), y])
    sigma = np.array([[1.0, 0.4], [0.4, 0.8]])

    def direct(B):
        R = z - U @ B
        return R.T @ R

    cuts = [0, 70, 71, 200, y.size]
    Utz = sum(U[lo:hi].T @ z[lo:hi] for lo, hi in zip(cuts[:-1], cuts[1:]))
    ztz = sum(z[lo:hi].T @ z[lo:hi] for lo, hi in zip(cuts[:-1], cuts[1:]))

    def from_sums(B):
        cross = B.T @ Utz
        return ztz - cross - cross.T + B.T @ (U.T @ U) @ B

    settings = (sigma, problem.mean_variance, problem.df, problem.scale)
    B1, S1 = draw_model(U.T @ U, U.T @ z, direct, *settings, np.random.default_rng(7))
    B2, S2 = draw_model(U.T @ U, Utz, from_sums, *settings, np.random.default_rng(7))
    np.testing.assert_allclose(B2, B1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(S2, S1, rtol=1e-10, atol=1e-12)


def test_a_partition_step_fills_only_its_missing_entries_and_returns_its_sums():
    problem = _imputation_problem()
    missing = problem.missing[:50]
    part = ImputedPartition(problem.base.D[:50], np.where(missing, 0.0, problem.z[:50]), missing,
                            missing_patterns(missing), np.arange(50))  # fmt: skip
    y = problem.base.y[:50]
    cells, (Utz, ztz) = chain_step(part, y, 3, np.zeros((2, 2)), np.eye(2))
    assert cells.shape == (int(missing.sum()),)
    z = part.z.copy()
    z[missing] = cells
    U = np.column_stack([np.ones(50), y])
    np.testing.assert_allclose(Utz, U.T @ z)
    np.testing.assert_allclose(ztz, z.T @ z)
    D, _ = completed_rows(part, y, cells, problem.columns, problem.alpha, problem.gamma)
    np.testing.assert_allclose(D[:, problem.columns], problem.alpha + problem.gamma * z)
    others = np.setdiff1d(np.arange(D.shape[1]), problem.columns)
    np.testing.assert_array_equal(D[:, others], problem.base.D[:50][:, others])


def test_the_chain_on_partitions_targets_the_in_memory_chains_posterior():
    problem = _imputation_problem()
    count = 800
    memory = sample_imputations(problem, count, burn=100, thin=1, seed=2)
    passes = _partitions(problem, [0, 90, 200, problem.base.y.size])
    kept, mu, sigma = run_chain(_driver_side(problem), passes, count, 100, 1, np.random.default_rng(3))
    assert len(kept) == count and mu.shape == (count, 2) and sigma.shape == (count, 2, 2)
    # posterior SDs of mu are about 1/sqrt(300) = 0.06; the chains' Monte Carlo errors about 0.005
    np.testing.assert_allclose(mu.mean(axis=0), memory.mu.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(sigma.mean(axis=0), memory.sigma.mean(axis=0), atol=0.03)
    draws = np.stack([np.concatenate(dask.compute(*handles)) for handles in kept[::4]])
    cells = memory.z[::4][:, problem.missing]  # (row-major order of the missing entries, as the partitions' cells)
    np.testing.assert_allclose(draws.mean(axis=0).mean(), cells.mean(axis=0).mean(), atol=0.03)
    assert np.corrcoef(draws.mean(axis=0), cells.mean(axis=0))[0, 1] > 0.9  # each entry's own conditional mean
