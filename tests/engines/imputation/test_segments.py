"""Multiple imputation inside the selection sampler (``bayesvm.engines.imputation.segments``): the stored iterations,
a new completed data set exactly at each segment's start, and the pooled imputation draws."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from bayesvm.engines.imputation.joint_model import MI_KEEP, MI_SETTLE
from bayesvm.engines.imputation.segments import ImputedSegments
from bayesvm.model.problems import ImputationProblem

RNG = np.random.default_rng(4)
N, V = 80, 2
Y = np.where(RNG.random(N) < 0.5, 1.0, -1.0)
MISSING = RNG.random((N, V)) < 0.2
Z = np.where(MISSING, 0.0, RNG.normal(size=(N, V)) + 0.5 * Y[:, None])


def _segments() -> ImputedSegments:
    problem = ImputationProblem(
        base=SimpleNamespace(y=Y, D=np.column_stack([np.ones(N), Z])), columns=np.array([1, 2]), alpha=np.zeros(V),
        gamma=np.ones(V), z=Z, missing=MISSING, mean_variance=1e8, df=V + 1.0, scale=0.01 * np.eye(V),
    )  # fmt: skip
    return ImputedSegments(problem)


def test_a_chain_stores_its_draws_after_each_segment_settles():
    tune, draws, thin = 30, 50, 2
    stored = _segments().storage(tune, draws, thin)
    kept = np.flatnonzero(stored >= 0)
    assert kept.size == draws and np.array_equal(stored[kept], np.arange(draws))
    assert kept.min() >= tune
    position = kept % (MI_SETTLE + MI_KEEP * thin)
    assert position.min() >= MI_SETTLE and np.all((position - MI_SETTLE) % thin == 0)


def test_a_new_completed_data_set_starts_each_segment_and_keeps_the_observed_values():
    segments, thin = _segments(), 1
    stored = segments.storage(10, 45, thin)
    chain = segments.start(Y, stored.size, thin, np.random.default_rng(0))
    starts = []
    for step in range(stored.size):
        design = chain.design_at(step)
        if design is not None:
            starts.append(step)
            imputed = design[:, [1, 2]]
            assert np.array_equal(imputed[~MISSING], Z[~MISSING])  # observed values kept, missing ones drawn
            assert np.all(imputed[MISSING] != 0.0)
    assert starts == list(range(0, stored.size, MI_SETTLE + MI_KEEP * thin))


def test_pooled_draws_have_no_spread_where_a_value_was_observed():
    segments = _segments()
    chain = segments.start(Y, 200, 1, np.random.default_rng(1))
    runs = []
    for _ in range(2):
        out = segments.chain_arrays(3)
        for i, step in enumerate((0, 40, 80)):
            chain.design_at(step)
            segments.keep(out, i, chain.record())
        runs.append(out)
    pooled = segments.pooled(runs)
    draws = pooled["imputation"]
    assert pooled["imputation_mode"] == "mi" and draws.mu.shape == (2, 3, V)
    assert np.all(draws.z_var[~MISSING] == 0.0) and np.all(draws.z_var[MISSING] > 0.0)
