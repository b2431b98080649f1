"""Importance-sampled per-level integrals (:mod:`bayesvm.engines.linear.sampled_levels`) against the closed form for one
coefficient per level and against two-dimensional quadrature for two; the compiled and numpy paths against each
other."""

import numpy as np
import pytest

from bayesvm.engines.linear import compiled_rows, sampled_levels
from bayesvm.engines.linear.node_evidence import group_log_integrals
from bayesvm.engines.linear.sampled_levels import inner_normals, sampled_log_integrals

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def _levels(S=6, J=9, K=2, seed=0, outside=True):
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(J), rng.integers(1, 6, J))
    if outside:
        codes = np.concatenate([codes, [-1, -1]])  # rows without the factor
    n = codes.size
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    values = np.column_stack([np.ones(n)] + [rng.standard_normal(n) for _ in range(K - 1)])
    eta = 0.5 * rng.standard_normal((S, n))
    return rng, y, values, codes, eta


def _proposal(rng, S, J, K, scale=0.6):
    mean = 0.3 * rng.standard_normal((S, J, K))
    A = scale * rng.standard_normal((J, K, K))
    chol = np.linalg.cholesky(A @ np.swapaxes(A, 1, 2) + 0.3 * np.eye(K))
    return mean, chol


@pytest.fixture(params=["compiled", "numpy"])
def path(request, monkeypatch):
    if request.param == "compiled" and not compiled_rows.available():
        pytest.skip("numba is not installed")
    if request.param == "numpy":
        monkeypatch.setattr(sampled_levels.compiled_rows, "available", lambda: False)
    return request.param


def test_one_coefficient_matches_the_closed_form(path):
    """With one coefficient per level ``I_j`` has a closed form (:mod:`bayesvm.engines.hinge_levels`); the sampled sum
    agrees within its own reported noise, from a proposal near the prior (not the conditional)."""
    rng, y, values, codes, eta = _levels(K=1, outside=False)
    S, J = eta.shape[0], codes.max() + 1
    sigma2 = 1.7
    mean = 0.2 * rng.standard_normal((S, J, 1))  # near the prior, not the conditional
    chol = np.full((J, 1, 1), 0.9 * np.sqrt(sigma2))
    weights = rng.uniform(0.5, 2.0, y.size)
    sampled = sampled_log_integrals(
        y, eta, values, codes, mean, chol, np.array([[1 / sigma2]]), weights, inner=4096, seed=3
    )
    exact = group_log_integrals(y, eta, values[:, 0], codes, np.full(S, sigma2), J, weights)
    assert np.all(sampled.noise < 0.02)
    np.testing.assert_array_less(np.abs(sampled.log_integrals - exact), 4 * np.sqrt(sampled.noise) + 1e-3)


def test_two_coefficients_match_quadrature(path):
    """``(1 + x | g)``: one level's two-dimensional integral on a fine grid, with a correlated prior."""
    rng = np.random.default_rng(4)
    n = 5
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    values = np.column_stack([np.ones(n), rng.standard_normal(n)])
    codes = np.zeros(n, dtype=int)
    eta = 0.4 * rng.standard_normal((2, n))
    cov = np.array([[2.0, -0.6], [-0.6, 0.8]])
    precision = np.linalg.inv(cov)
    grid = np.linspace(-9, 9, 721)
    u1, u2 = np.meshgrid(grid, grid, indexing="ij")
    log_prior = -0.5 * (precision[0, 0] * u1**2 + 2 * precision[0, 1] * u1 * u2 + precision[1, 1] * u2**2)
    log_prior -= np.log(2 * np.pi) + 0.5 * np.linalg.slogdet(cov)[1]
    exact = []
    for s in range(2):
        f = eta[s][:, None, None] + values[:, 0, None, None] * u1 + values[:, 1, None, None] * u2
        log_lik = -2.0 * np.sum(np.maximum(0.0, 1.0 - y[:, None, None] * f), axis=0)
        exact.append(np.log(np.sum(np.exp(log_lik + log_prior)) * (grid[1] - grid[0]) ** 2))
    mean, chol = _proposal(rng, 2, 1, 2)
    sampled = sampled_log_integrals(y, eta, values, codes, mean, chol, precision, inner=8192, seed=1)
    np.testing.assert_array_less(np.abs(sampled.log_integrals - exact), 4 * np.sqrt(sampled.noise) + 1e-3)


def test_noise_falls_with_the_inner_draws(path):
    rng, y, values, codes, eta = _levels()
    mean, chol = _proposal(rng, eta.shape[0], codes.max() + 1, 2)
    few, many = (
        sampled_log_integrals(y, eta, values, codes, mean, chol, np.eye(2), inner=m, seed=2).noise for m in (64, 1024)
    )
    # (1 / M in expectation; the delta-method estimate from few draws misses part of the weights' tail)
    assert np.all(many < 0.3 * few)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_compiled_path_equals_numpy(monkeypatch):
    """The compiled loop (:func:`sampled_levels._compiled_level_sums`) and the padded numpy path take the same normals
    and agree to rounding, with class weights and rows outside the factor."""
    rng, y, values, codes, eta = _levels(S=5, J=11, K=3, seed=6)
    mean, chol = _proposal(rng, 5, 11, 3)
    precision = np.array([[1.0, 0.3, 0.0], [0.3, 2.0, -0.2], [0.0, -0.2, 0.7]])
    weights = rng.uniform(0.5, 2.0, y.size)
    compiled = sampled_log_integrals(y, eta, values, codes, mean, chol, precision, weights, inner=40, seed=9)
    monkeypatch.setattr(sampled_levels.compiled_rows, "available", lambda: False)
    numpy = sampled_log_integrals(y, eta, values, codes, mean, chol, precision, weights, inner=40, seed=9)
    np.testing.assert_allclose(compiled.log_integrals, numpy.log_integrals, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(compiled.noise, numpy.noise, rtol=1e-9, atol=1e-12)


def test_inner_normals_do_not_depend_on_chunking(monkeypatch):
    whole = inner_normals(5, 0, 6, (3, 4, 2))
    monkeypatch.setattr(sampled_levels, "CACHED_NORMALS", 0)
    parts = np.concatenate([inner_normals(5, 0, 2, (3, 4, 2)), inner_normals(5, 2, 6, (3, 4, 2))])
    np.testing.assert_array_equal(whole, parts)
    assert not whole.flags.writeable  # the cached set is shared between the nodes


def test_the_cache_keeps_every_chunk_a_fit_cycles_through(monkeypatch):
    """A node's estimate runs through its chunks of outer draws in turn, and every node the same ones: all of them stay
    cached (each node gets the very arrays the first drew) while they fit in :data:`CACHED_NORMALS`.  Beyond it a new
    chunk of the same fit is drawn afresh and the kept ones stay (a cycle would evict each just before its use), while
    another fit's chunks (another seed or shape) make room for the new fit's."""
    monkeypatch.setattr(sampled_levels, "_NORMALS", type(sampled_levels._NORMALS)())
    monkeypatch.setattr(sampled_levels, "CACHED_NORMALS", 8 * 24 * 2)  # eight chunks of two outer draws
    chunks = [(first, first + 2) for first in range(0, 16, 2)]
    first_node = [inner_normals(7, a, b, (3, 4, 2)) for a, b in chunks]
    second_node = [inner_normals(7, a, b, (3, 4, 2)) for a, b in chunks]
    assert all(x is y for x, y in zip(first_node, second_node))
    ninth = inner_normals(7, 16, 18, (3, 4, 2))  # no room: drawn, not kept
    assert inner_normals(7, 16, 18, (3, 4, 2)) is not ninth
    np.testing.assert_array_equal(inner_normals(7, 16, 18, (3, 4, 2)), ninth)
    assert all(inner_normals(7, a, b, (3, 4, 2)) is kept for (a, b), kept in zip(chunks, first_node))
    other_fit = inner_normals(8, 0, 2, (3, 4, 2))  # another seed: the oldest chunk of the first fit goes
    assert inner_normals(8, 0, 2, (3, 4, 2)) is other_fit
    assert inner_normals(7, 0, 2, (3, 4, 2)) is not first_node[0]
    assert sum(kept.size for kept in sampled_levels._NORMALS.values()) <= sampled_levels.CACHED_NORMALS


def test_a_covariance_per_outer_draw(path):
    """``prior_precision`` of shape ``(S, K, K)``: each outer draw uses its own, as if computed alone."""
    rng, y, values, codes, eta = _levels(S=4)
    mean, chol = _proposal(rng, 4, codes.max() + 1, 2)
    precisions = np.stack([np.array([[1.0 + s, 0.2], [0.2, 0.5 + s]]) for s in range(4)])
    together = sampled_log_integrals(y, eta, values, codes, mean, chol, precisions, inner=32, seed=4)
    for s in range(4):
        alone = sampled_log_integrals(y, eta, values, codes, mean, chol, precisions[s], inner=32, seed=4)
        np.testing.assert_allclose(together.log_integrals[s], alone.log_integrals[s], rtol=1e-12)


def test_the_cache_serves_fits_in_several_threads(monkeypatch):
    """Fits in threads of one process share the cache: chunks asked and released concurrently are always the
    stream's own normals (no error from a cache changed during another thread's look-up)."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(sampled_levels, "_NORMALS", type(sampled_levels._NORMALS)())
    monkeypatch.setattr(sampled_levels, "CACHED_NORMALS", 5 * 24 * 2)
    expected = {first: inner_normals(3, first, first + 2, (3, 4, 2)).copy() for first in range(0, 16, 2)}

    def work(worker: int) -> bool:
        ok = True
        for turn in range(200):
            first = 2 * ((worker + turn) % 8)
            ok &= np.array_equal(inner_normals(3, first, first + 2, (3, 4, 2)), expected[first])
            if turn % 17 == worker:
                sampled_levels.forget_normals()
        return ok

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(4)))
