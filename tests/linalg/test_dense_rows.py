"""The compiled dense predictor with a blocked factor (bayesvm.linalg.dense_rows) equals numpy's."""

import numpy as np
import pytest

from bayesvm.linalg import compiled, dense_rows
from bayesvm.linalg.dense import ROW_CHUNK, BlockedFactor, gaussian_posterior

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _posterior(rng, n, q, J, K, unassigned, scale=1.0):
    D = rng.standard_normal((n, q)) * scale
    D[:, 0] = 1.0
    codes = rng.integers(0, J, n).astype(np.int64)
    codes[:unassigned] = -1
    values = np.column_stack([np.ones(n)] + [rng.standard_normal(n) for _ in range(K - 1)])
    blocked = BlockedFactor(codes=codes, values=values, n_levels=J)
    w = rng.gamma(2.0, 1.0, n)
    r = rng.choice([-1.0, 1.0], n) * (1.0 + w)
    posterior = gaussian_posterior(D, w, r, np.diag(rng.uniform(0.5, 2.0, q)), blocked, np.eye(K) * 1.7)
    return D, blocked, posterior


@pytest.mark.parametrize(
    "n, K, unassigned, layout",
    [(300, 1, 0, "C"), (300, 2, 7, "C"), (2 * ROW_CHUNK + 50, 1, 3, "C"), (300, 2, 0, "F")],
    ids=["intercept", "slope-unassigned", "halves-of-chunks", "fortran-order"],
)
def test_compiled_predictor_equals_numpy(monkeypatch, n, K, unassigned, layout):
    rng = np.random.default_rng(n + K + unassigned)
    D, blocked, posterior = _posterior(rng, n, 6, 25, K, unassigned)
    D = np.asarray(D, order=layout)
    compiled_mean, compiled_var = posterior.predictor(D, blocked.codes, blocked.values)
    monkeypatch.setenv(compiled.ENVIRONMENT_SWITCH, "0")
    mean, var = posterior.predictor(D, blocked.codes, blocked.values)
    np.testing.assert_allclose(compiled_mean, mean, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(compiled_var, var, rtol=1e-10, atol=1e-14)


def test_residual_form_keeps_small_variances_accurate(monkeypatch):
    """A level's gains absorb most of a row (here an intercept of scale 1e4 beside small columns): the variance of
    ``f`` is far below ``d' S^-1 d``, and the compiled loop, which forms ``S^-1 r`` rather than expanding the
    quadratic, keeps its digits."""
    rng = np.random.default_rng(3)
    D, blocked, posterior = _posterior(rng, 400, 4, 10, 1, 0, scale=1e-3)
    D[:, 0] = 1e4
    blocked = BlockedFactor(codes=blocked.codes, values=np.full((400, 1), 1e4), n_levels=10)
    w = rng.gamma(2.0, 1.0, 400)
    posterior = gaussian_posterior(D, w, np.ones(400), np.eye(4) * 1e-6, blocked, np.eye(1) * 1e-6)
    _, compiled_var = posterior.predictor(D, blocked.codes, blocked.values)
    monkeypatch.setenv(compiled.ENVIRONMENT_SWITCH, "0")
    _, var = posterior.predictor(D, blocked.codes, blocked.values)
    assert np.all(compiled_var > 0)
    np.testing.assert_allclose(compiled_var, var, rtol=1e-6)


def test_uncompiled_kernel_equals_the_compiled_one():
    rng = np.random.default_rng(11)
    D, blocked, posterior = _posterior(rng, 200, 5, 12, 2, 5)
    gains = posterior.gains.dense()
    spread = (gains.reshape(-1, 5) @ posterior.cov_d).reshape(gains.shape)
    out = [(np.empty(200), np.empty(200)), (np.empty(200), np.empty(200))]
    for kernel, (mean, var) in zip([dense_rows._level_rows_predictor, dense_rows.level_rows_predictor], out):
        kernel(
            D, D @ posterior.cov_d, blocked.codes, blocked.values, posterior.mean_d, posterior.mean_b, gains, spread,
            posterior.block_inv, mean, var,
        )  # fmt: skip
    for left, right in zip(*out):
        np.testing.assert_allclose(left, right, rtol=1e-13, atol=1e-14)


def test_rows_that_do_not_fit_are_refused():
    """The compiled loop reads without bounds checks: a level beyond the posterior's, rows of another width or
    another number of random-effect columns are refused before it runs."""
    rng = np.random.default_rng(5)
    D, blocked, posterior = _posterior(rng, 100, 4, 8, 1, 0)
    beyond = blocked.codes.copy()
    beyond[0] = 8
    for rows, codes, values in [
        (D, beyond, blocked.values),
        (D[:, :3], blocked.codes, blocked.values),
        (D, blocked.codes, np.ones((100, 2))),
    ]:
        with pytest.raises(ValueError, match="do not fit"):
            posterior.predictor(np.ascontiguousarray(rows), codes, values)
