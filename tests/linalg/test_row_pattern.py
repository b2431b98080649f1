"""The dense path's sums over each row's and each level's nonzero columns (bayesvm.linalg.row_pattern) equal the
sums over every column."""

import numpy as np
import pytest

from bayesvm.linalg import compiled, row_pattern
from bayesvm.linalg.dense import BlockedFactor, gaussian_posterior
from bayesvm.linalg.level_gains import PatternGains

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _nested_design(rng, n=600, outer=40, inner=150, K=1, unassigned=0):
    """Fixed effects beside the indicators of an outer factor, and an inner factor nested in it (the blocked one):
    guImmun's ``(1 | mom) + (1 | comm)`` in miniature.  ``unassigned`` rows get no inner level (code -1)."""
    inner_code = rng.integers(0, inner, n)
    outer_of_inner = rng.integers(0, outer, inner)
    fixed = np.column_stack([np.ones(n), rng.standard_normal((n, 3)), rng.random(n) < 0.3])
    indicators = np.zeros((n, outer))
    indicators[np.arange(n), outer_of_inner[inner_code]] = 1.0
    D = np.ascontiguousarray(np.column_stack([fixed, indicators]))
    values = np.column_stack([np.ones(n)] + [rng.standard_normal(n) for _ in range(K - 1)])
    codes = inner_code.astype(np.int64)
    codes[:unassigned] = -1
    return D, BlockedFactor(codes=codes, values=values, n_levels=inner)


@pytest.mark.parametrize("K, unassigned", [(1, 0), (2, 0), (1, 25)], ids=["intercept", "slope", "unassigned-rows"])
def test_posterior_over_the_pattern_equals_the_dense_one(K, unassigned):
    rng = np.random.default_rng(K + unassigned)
    D, blocked = _nested_design(rng, K=K, unassigned=unassigned)
    pattern = row_pattern.row_pattern(D, blocked.codes, blocked.n_levels)
    assert pattern is not None and pattern.width < D.shape[1] // 2
    n, q = D.shape
    w = rng.gamma(2.0, 1.0, n)
    r = rng.choice([-1.0, 1.0], n) * (1.0 + w)
    prior_dd = np.diag(rng.uniform(0.5, 2.0, q))
    prior_b = np.eye(K) * 1.7
    dense = gaussian_posterior(D, w, r, prior_dd, blocked, prior_b)
    sparse = gaussian_posterior(D, w, r, prior_dd, blocked, prior_b, pattern)
    for name in ["mean_d", "cov_d", "mean_b", "cov_b", "block_inv"]:
        np.testing.assert_allclose(getattr(sparse, name), getattr(dense, name), rtol=1e-9, atol=1e-12, err_msg=name)
    assert isinstance(sparse.gain, PatternGains) and isinstance(dense.gain, np.ndarray)  # kept over the levels' columns
    np.testing.assert_allclose(sparse.gains.dense(), dense.gain, rtol=1e-9, atol=1e-12)
    assert sparse.logdet_precision == pytest.approx(dense.logdet_precision, rel=1e-12)
    mean, var = dense.predictor(D, blocked.codes, blocked.values)
    pattern_mean, pattern_var = sparse.predictor(D, blocked.codes, blocked.values, pattern)
    np.testing.assert_allclose(pattern_mean, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pattern_var, var, rtol=1e-9, atol=1e-12)


def test_pattern_without_a_blocked_factor():
    rng = np.random.default_rng(5)
    D, _ = _nested_design(rng)
    pattern = row_pattern.row_pattern(D, None)
    assert pattern is not None and pattern.level_ptr.size == 0
    n, q = D.shape
    w = rng.gamma(2.0, 1.0, n)
    r = rng.choice([-1.0, 1.0], n) * (1.0 + w)
    prior_dd = np.eye(q)
    dense = gaussian_posterior(D, w, r, prior_dd, None, None)
    sparse = gaussian_posterior(D, w, r, prior_dd, None, None, pattern)
    np.testing.assert_allclose(sparse.mean_d, dense.mean_d, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.cov_d, dense.cov_d, rtol=1e-9, atol=1e-12)
    for left, right in zip(sparse.predictor(D, None, None, pattern), dense.predictor(D, None, None)):
        np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-12)


def test_uncompiled_kernels_equal_the_compiled_ones():
    """The kernels' Python sources (what the compiled functions are built from) give the same sums."""
    rng = np.random.default_rng(7)
    D, blocked = _nested_design(rng, n=120, outer=35, inner=30, K=2, unassigned=3)
    pattern = row_pattern.row_pattern(D, blocked.codes, blocked.n_levels)
    n, q = D.shape
    J, K = blocked.n_levels, blocked.K
    w, r = rng.gamma(2.0, 1.0, n), rng.standard_normal(n)

    def sums(kernel):
        nnz = pattern.level_cols.size
        out = [np.empty((q, q)), np.empty(q), np.empty((J, K, K)), np.empty((nnz, K)), np.empty((J, K))]
        kernel(
            D, pattern.row_ptr, pattern.row_cols, pattern.row_entries, blocked.codes, blocked.values, w, r, *out, 0, n
        )
        return out

    for left, right in zip(sums(row_pattern._pattern_sums), sums(row_pattern.pattern_sums)):
        np.testing.assert_allclose(left, right, rtol=1e-12, atol=1e-13)
    gain = rng.standard_normal((J, K, q))
    gains = PatternGains.from_dense(gain, pattern)
    schur = [np.eye(q), np.eye(q)]
    row_pattern._pattern_schur(gains.values, gains.values, pattern.level_ptr, pattern.level_cols, schur[0], 0, J)
    row_pattern.pattern_schur(gains.values, gains.values, pattern.level_ptr, pattern.level_cols, schur[1], 0, J)
    np.testing.assert_allclose(schur[0], schur[1], rtol=1e-12, atol=1e-12)
    cov_d = np.cov(rng.standard_normal((q, 3 * q)))
    block_inv = np.broadcast_to(np.eye(K), (J, K, K)).copy()
    covs = [np.empty((J, K, K)), np.empty((J, K, K))]
    for kernel, out in zip([row_pattern._pattern_level_covariances, row_pattern.pattern_level_covariances], covs):
        kernel(gains.values, pattern.level_ptr, pattern.level_cols, cov_d, block_inv, out, 0, J)
    np.testing.assert_allclose(covs[0], covs[1], rtol=1e-12, atol=1e-12)
    predicted = [(np.empty(n), np.empty(n)), (np.empty(n), np.empty(n))]
    mean_d, mean_b = rng.standard_normal(q), rng.standard_normal((J, K))
    for kernel, (mean, var) in zip([row_pattern._pattern_predictor, row_pattern.pattern_predictor], predicted):
        kernel(
            D, pattern.row_ptr, pattern.row_cols, blocked.codes, blocked.values, pattern.level_ptr, pattern.level_cols,
            mean_d, cov_d, mean_b, gains.values, block_inv, mean, var, np.empty(pattern.width), 0, n,
        )  # fmt: skip
    for left, right in zip(*predicted):
        np.testing.assert_allclose(left, right, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["narrow", "dense", "crossed"])
def test_pattern_only_where_it_pays(case):
    """None where the part is narrow or mostly nonzero, or where each level's rows touch most columns (a crossed
    factor whose levels each meet every level of the other)."""
    rng = np.random.default_rng(3)
    n = 400
    if case == "narrow":
        D, codes, J = rng.standard_normal((n, 8)), rng.integers(0, 20, n), 20
    elif case == "dense":
        D, codes, J = rng.standard_normal((n, 60)), rng.integers(0, 20, n), 20
    else:  # subjects x items: each subject answers every item
        subjects, items = 10, 40
        codes, item = np.repeat(np.arange(subjects), items), np.tile(np.arange(items), subjects)
        D = np.zeros((subjects * items, items + 1))
        D[:, 0] = 1.0
        D[np.arange(D.shape[0]), 1 + item] = 1.0
        J = subjects
    assert row_pattern.row_pattern(D, codes.astype(np.int64), J) is None


def test_new_rows_need_the_gains_support():
    """A fitted posterior's gains cover its training rows' columns; new rows of the same level can miss some (a dummy
    that is 0 in them).  With the gains' support added the predictive variance equals the dense one; without it a
    term of ``r_i = d_i - G_j' z_i`` would be dropped."""
    rng = np.random.default_rng(1)
    D, blocked = _nested_design(rng)
    n, q = D.shape
    w = rng.gamma(2.0, 1.0, n)
    posterior = gaussian_posterior(D, w, rng.choice([-1.0, 1.0], n) * (1.0 + w), np.eye(q), blocked, np.eye(1))
    new = D[:50].copy()
    new[:, 4] = 0.0
    codes, values = blocked.codes[:50], blocked.values[:50]
    support = posterior.gains.support()
    pattern = row_pattern.row_pattern(new, codes, blocked.n_levels, support)
    mean, var = posterior.predictor(new, codes, values)
    pattern_mean, pattern_var = posterior.predictor(new, codes, values, pattern)
    np.testing.assert_allclose(pattern_mean, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pattern_var, var, rtol=1e-9, atol=1e-12)
    rows_only = row_pattern.row_pattern(new, codes, blocked.n_levels)
    assert np.max(np.abs(posterior.predictor(new, codes, values, rows_only)[1] - var)) > 1e-4


def test_rows_that_do_not_fit_the_posterior_are_refused():
    """The compiled predictor reads without bounds checks: rows of another width, a level the posterior does not have
    or another number of random-effect columns are refused before it runs."""
    rng = np.random.default_rng(9)
    D, blocked = _nested_design(rng)
    n, q = D.shape
    w = rng.gamma(2.0, 1.0, n)
    posterior = gaussian_posterior(D, w, np.ones(n) * 2.0, np.eye(q), blocked, np.eye(1))
    codes, values = blocked.codes, blocked.values
    narrow = np.ascontiguousarray(D[:, :-1])
    beyond = codes.copy()
    beyond[0] = blocked.n_levels
    cases = [
        (narrow, codes, values, row_pattern.row_pattern(narrow, codes, blocked.n_levels)),
        (D, beyond, values, row_pattern.row_pattern(D, beyond, blocked.n_levels + 1)),
        (D, codes, np.ones((n, 2)), row_pattern.row_pattern(D, codes, blocked.n_levels)),
    ]
    for rows, level_codes, level_values, pattern in cases:
        assert pattern is not None
        with pytest.raises(ValueError, match="do not fit"):
            posterior.predictor(rows, level_codes, level_values, pattern)
