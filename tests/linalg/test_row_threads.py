"""The row threads (bayesvm.linalg.row_threads): where loops split, where they run inline, and that a split loop
gives the one-call results."""

import threading

import numpy as np
import pytest

from bayesvm.linalg import compiled, row_pattern, row_threads
from bayesvm.linalg.dense import gaussian_posterior
from tests.linalg.test_row_pattern import _nested_design


def test_row_halves_split_on_the_main_thread_and_run_inline_in_a_row_thread():
    """Two halves from COMPILED_SPLIT_ROWS rows, the first in the calling thread and the second on a row thread; one
    call below it and inside a row thread (both of the pool's threads could otherwise wait on halves that no thread is
    left to run)."""
    calls: list[tuple[slice, str]] = []

    def work(rows: slice) -> None:
        calls.append((rows, threading.current_thread().name))

    row_threads.in_row_halves(row_threads.COMPILED_SPLIT_ROWS, work)
    assert sorted((c[0].start, c[0].stop) for c in calls) == [(0, 2048), (2048, 4096)]
    names = dict((c[0].start, c[1]) for c in calls)
    assert names[0] == threading.current_thread().name and names[2048].startswith(row_threads.ROW_THREAD_PREFIX)
    calls.clear()
    row_threads.in_row_halves(100, work)
    assert calls == [(slice(0, 100), threading.current_thread().name)]
    calls.clear()
    nested = [row_threads.row_pool().submit(row_threads.in_row_halves, 10_000, work) for _ in range(2)]
    for job in nested:
        job.result(timeout=30)
    assert sorted((c[0].start, c[0].stop) for c in calls) == [(0, 10_000), (0, 10_000)]


def test_balanced_cut_splits_the_work_not_the_items():
    cost = np.r_[np.full(10, 100.0), np.full(90, 1.0)]  # ten heavy items first: half the work is 5 of them
    cut, split = row_threads.balanced_cut(cost * 1e4)
    assert cut == 5 and split  # items 0..4 hold 500 of 1,090, items 0..5 600: 5 is the closer to half
    assert row_threads.balanced_cut(cost)[1] is False  # 1,090 multiply-adds: not worth a thread
    assert row_threads.balanced_cut(np.zeros(0)) == (0, False)
    assert row_threads.balanced_cut(np.r_[1e9, np.ones(3)])[1] is False  # one item holds the work: nothing to split
    calls = []
    row_threads.in_two_parts(lambda part, items: calls.append((part, items)), 4, 4, True)  # a cut at the end: one part
    assert calls == [(0, slice(0, 4))]


class _CountingPool:
    def __init__(self, pool):
        self.pool, self.handed = pool, 0

    def submit(self, *args):
        self.handed += 1
        return self.pool.submit(*args)


@pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
@pytest.mark.parametrize("K, unassigned", [(1, 0), (2, 9)], ids=["intercept", "slope-unassigned"])
def test_pattern_loops_in_two_parts_equal_one_call(monkeypatch, K, unassigned):
    """The row pattern's sums, Schur complement, level covariances and predictor (bayesvm.linalg.row_pattern) split
    into two parts of equal work on the row threads give what one call gives (to rounding: part 1's sums are
    added at the end), and the split happens."""
    rng = np.random.default_rng(11 + K)
    D, blocked = _nested_design(rng, n=900, K=K, unassigned=unassigned)
    n, q = D.shape
    w = rng.gamma(2.0, 1.0, n)
    r = rng.choice([-1.0, 1.0], n) * (1.0 + w)
    prior_dd, prior_b = np.diag(rng.uniform(0.5, 2.0, q)), np.eye(K) * 1.7

    def fit():  # a new pattern: it keeps where it splits (RowPattern.row_parts, level_parts) once computed
        pattern = row_pattern.row_pattern(D, blocked.codes, blocked.n_levels)
        posterior = gaussian_posterior(D, w, r, prior_dd, blocked, prior_b, pattern)
        return posterior, posterior.predictor(D, blocked.codes, blocked.values, pattern)

    monkeypatch.setattr(row_threads, "COMPILED_SPLIT_WORK", 10**15)
    whole, (mean, var) = fit()
    counting = _CountingPool(row_threads.row_pool())
    monkeypatch.setattr(row_threads, "row_pool", lambda: counting)
    monkeypatch.setattr(row_threads, "COMPILED_SPLIT_WORK", 0)
    parts, (parts_mean, parts_var) = fit()
    assert counting.handed == 4  # sums, Schur complement, level covariances, predictor
    for name in ["mean_d", "cov_d", "mean_b", "cov_b", "block_inv"]:
        np.testing.assert_allclose(getattr(parts, name), getattr(whole, name), rtol=1e-11, atol=1e-13, err_msg=name)
    np.testing.assert_allclose(parts_mean, mean, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(parts_var, var, rtol=1e-11, atol=1e-13)
