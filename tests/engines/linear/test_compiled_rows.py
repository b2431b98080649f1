"""The compiled Gibbs row pass (``bayesvm.engines.linear.compiled_rows``) against its uncompiled source and the exact
inverse-Gaussian distribution; the sampler-level comparisons with the numpy path are in ``test_gibbs.py``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bayesvm.engines.linear import compiled_rows


def _rows(n, q, K, J, seed):
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((n, q))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    codes = np.sort(rng.integers(3, 3 + J, n))  # levels 3.. (level0 = 3 below)
    values = rng.standard_normal((n, K))
    theta_d, theta_b = rng.standard_normal(q) * 0.5, rng.standard_normal((3 + J, K))
    return D, y, codes, values, theta_d, theta_b, rng.standard_normal(n), rng.random(n)


def _run(kernel, D, y, codes, values, theta_d, theta_b, normals, uniforms, J, sparse=False):
    n, q = D.shape
    row_ptr, row_cols = (np.zeros(0, dtype=np.int64),) * 2
    if sparse:
        indices = [np.flatnonzero(row) for row in D]
        row_ptr = np.concatenate([[0], np.cumsum([len(i) for i in indices])]).astype(np.int64)
        row_cols = np.concatenate(indices).astype(np.int64)
    K = values.shape[1]
    out = {
        "omega": np.empty(n),
        "gram": np.full((q, q), 7.0),  # garbage: the pass zeroes its accumulators
        "product": np.full(q, 7.0),
        "blocks": np.full((J, K, K), 7.0),
        "cross": np.full((J, K, q), 7.0),
        "rhs_b": np.full((J, K), 7.0),
    }
    out["hinge"] = kernel(
        D, row_ptr, row_cols, y, codes, values, theta_d, theta_b, normals, uniforms, 1e-12, 3, out["omega"], out["gram"],
        out["product"], out["blocks"], out["cross"], out["rhs_b"],
    )  # fmt: skip
    return out


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("K", [0, 1, 2])
def test_compiled_pass_equals_its_source_and_the_definitions(K, sparse):
    """numba's ``row_pass`` returns what its uncompiled source returns, and both equal the definitions: ``f``,
    the hinge sum, the inverse-Gaussian transform, ``D' W D``, ``D' r`` and the per-level sums; over every column,
    and over each row's nonzero columns (a mostly-zero design, as a crossed factor's indicators make)."""
    n, q, J = 700, 3, 25  # 700 rows: several blocks of BLOCK_ROWS, the last one partial
    D, y, codes, values, theta_d, theta_b, normals, uniforms = _rows(n, q, K, J, seed=K)
    if sparse:  # a column of ones, two numeric ones and a factor's 40 indicators
        rng = np.random.default_rng(K)
        indicators = np.eye(40)[rng.integers(0, 40, n)]
        D = np.column_stack([np.ones(n), D[:, :2], indicators])
        theta_d = rng.standard_normal(D.shape[1]) * 0.5
    if K == 0:
        codes = np.zeros(0, dtype=np.int64)
    compiled = _run(compiled_rows.row_pass, D, y, codes, values, theta_d, theta_b, normals, uniforms, J, sparse)
    source = _run(compiled_rows._row_pass, D, y, codes, values, theta_d, theta_b, normals, uniforms, J, sparse)
    q = D.shape[1]
    for name in compiled:
        np.testing.assert_allclose(compiled[name], source[name], rtol=1e-13, atol=1e-13, err_msg=name)
    f = D @ theta_d + (np.einsum("ik,ik->i", values, theta_b[codes]) if K else 0.0)
    mean = 1.0 / np.maximum(np.abs(1.0 - y * f), 1e-12)
    omega = np.array([compiled_rows.inverse_gaussian_scalar(m, a, b) for m, a, b in zip(mean, normals, uniforms)])
    r = y * (1.0 + omega)
    np.testing.assert_allclose(compiled["omega"], omega, rtol=1e-12)
    assert compiled["hinge"] == pytest.approx(np.maximum(1.0 - y * f, 0.0).sum(), rel=1e-12)
    np.testing.assert_allclose(compiled["gram"], D.T @ (omega[:, None] * D), rtol=1e-12)
    np.testing.assert_allclose(compiled["product"], D.T @ r, rtol=1e-12)
    if K:
        local = codes - 3
        blocks = np.zeros((J, K, K))
        np.add.at(blocks, local, omega[:, None, None] * values[:, :, None] * values[:, None, :])
        cross = np.zeros((J, K, q))
        np.add.at(cross, local, omega[:, None, None] * values[:, :, None] * D[:, None, :])
        rhs_b = np.zeros((J, K))
        np.add.at(rhs_b, local, values * r[:, None])
        np.testing.assert_allclose(compiled["blocks"], blocks, rtol=1e-12)
        np.testing.assert_allclose(compiled["cross"], cross, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(compiled["rhs_b"], rhs_b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("margin", [1e-9, 0.05, 1.0, 3.0])
def test_compiled_pass_draws_inverse_gaussian_latent_variables(margin):
    """Rows whose margin ``|1 - y f|`` is ``margin`` get ``omega ~ InverseGaussian(1 / margin, 1)``."""
    n = 60_000
    rng = np.random.default_rng(11)
    D, y = np.ones((n, 1)), np.ones(n)
    theta_d = np.array([1.0 - margin])
    out = _run(
        compiled_rows.row_pass, D, y, np.zeros(0, dtype=np.int64), np.zeros((n, 0)), theta_d, np.zeros((0, 0)),
        rng.standard_normal(n), rng.random(n), 0,
    )  # fmt: skip
    assert stats.kstest(out["omega"], stats.invgauss(mu=1.0 / margin, scale=1.0).cdf).pvalue > 1e-3


def test_environment_switch(monkeypatch):
    assert compiled_rows.available()  # numba is in the test extras
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    assert not compiled_rows.available()
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "1")
    assert compiled_rows.available()


def test_compiles_without_a_disk_cache(monkeypatch):
    """Where numba has no writable cache location (``cache=True`` raises at decoration), the function is compiled
    without a cache rather than breaking the import."""
    import numba

    real = numba.njit

    def njit(**options):
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return real(**options)

    monkeypatch.setattr(numba, "njit", njit)
    square = compiled_rows.compile_nogil(lambda x: x * x)
    assert square(3.0) == 9.0
    assert type(square._cache).__name__ == "NullCache"  # compiled, not cached
    assert type(compiled_rows.row_pass._cache).__name__ == "FunctionCache"  # the normal case: cached on disk


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("log_scale", [False, True], ids=["coefficient", "rescaling"])
def test_compiled_slice_step_equals_the_numpy_path_on_the_same_random_numbers(log_scale, monkeypatch):
    """The compiled slice step of the moves with the augmentation integrated out, its uncompiled source and the
    numpy path (``interweave.hinge_slice`` with numba switched off) make the same draw from the same seed."""
    from bayesvm.engines.linear.interweave import SLICE_STEPS, hinge_slice

    rng = np.random.default_rng(0)
    for _ in range(100):
        a, b = rng.normal(1.0, 1.0, 60), rng.normal(0.0, 1.0, 60)
        c = (-0.25, 0.0, 0.0, 0.0) if not log_scale else (-0.1, -0.3, -0.2, -1.5)
        x0, width, seed = float(rng.normal()), 0.3, int(rng.integers(2**31))
        monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
        expected = hinge_slice(a, b, c, log_scale, x0, width, np.random.default_rng(seed))
        monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "1")
        assert hinge_slice(a, b, c, log_scale, x0, width, np.random.default_rng(seed)) == pytest.approx(expected)
        draws = np.random.default_rng(seed)
        exponential, uniforms = draws.exponential(), draws.random(SLICE_STEPS + 1)
        source = compiled_rows._hinge_slice(
            a, b, np.asarray(c), log_scale, x0, width, exponential, uniforms, SLICE_STEPS
        )
        assert source == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("K", [0, 1, 2])
def test_compiled_predictor_equals_its_source_and_the_definition(K, sparse):
    n, q, J = 300, 3, 12
    D, y, codes, values, theta_d, theta_b, _, _ = _rows(n, q, K, J, seed=K)
    row_ptr = row_cols = np.zeros(0, dtype=np.int64)
    if sparse:  # a factor's 40 indicators beside the columns, each row's nonzero columns listed
        D = np.column_stack([D, np.eye(40)[np.random.default_rng(K).integers(0, 40, n)]])
        theta_d = np.random.default_rng(K).standard_normal(D.shape[1])
        row_ptr, row_cols = compiled_rows.sparse_rows(D)
        assert row_ptr.size == n + 1
    if K == 0:
        codes = np.zeros(0, dtype=np.int64)
    expected = D @ theta_d + (np.einsum("ik,ik->i", values, theta_b[codes]) if K else 0.0)
    for kernel in (compiled_rows.predictor, compiled_rows._predictor):
        f = np.full(n, 7.0)
        kernel(D, row_ptr, row_cols, codes, values, theta_d, theta_b, f)
        np.testing.assert_allclose(f, expected, rtol=1e-12, atol=1e-12)


def test_sparse_rows_only_for_wide_mostly_zero_parts():
    """Each row's nonzero columns are listed where the dense part is wide and mostly zero, and match the rows."""
    rng = np.random.default_rng(3)
    wide = np.column_stack([np.ones(500), rng.standard_normal(500), np.eye(60)[rng.integers(0, 60, 500)]])
    row_ptr, row_cols = compiled_rows.sparse_rows(wide)
    assert row_ptr.size == 501
    for i in (0, 17, 499):
        np.testing.assert_array_equal(row_cols[row_ptr[i] : row_ptr[i + 1]], np.flatnonzero(wide[i]))
    for dense in (rng.standard_normal((500, 62)), wide[:, :20]):  # dense, or too narrow to gain
        assert [a.size for a in compiled_rows.sparse_rows(dense)] == [0, 0]


@pytest.mark.parametrize("kernel", ["compiled", "python", "numpy"])
def testoverrelaxed_line_keeps_the_line_density(kernel, monkeypatch):
    """The over-relaxed slice update of a direction move (``compiled_rows.overrelaxed_line``, compiled, its Python
    source, and that source with numpy's passes over the rows as where numba is not installed) keeps the concave line density ``-2 sum (a_i - t b_i)_+ + c0 t^2 + c3 t``: draws from the density (inverse
    CDF on a fine grid) stay so distributed after a step, the step is an involution given its level (from ``x`` to
    ``x'`` and back), and it moves to the far side of the slice (the draws' lag-1 correlation is negative)."""
    step = compiled_rows.overrelaxed_line
    if kernel != "compiled":
        step = getattr(step, "py_func", step)
    if kernel == "numpy":
        end = compiled_rows._slice_end
        monkeypatch.setattr(compiled_rows, "_slice_end", getattr(end, "py_func", end))
        monkeypatch.setattr(compiled_rows, "_line_sums", compiled_rows._line_sums_numpy)
        monkeypatch.setattr(compiled_rows, "_line_start_sums", compiled_rows._line_start_sums_numpy)
        monkeypatch.setattr(
            compiled_rows, "_piece_root", getattr(compiled_rows._piece_root, "py_func", compiled_rows._piece_root)
        )
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.5, 1.0, 40), rng.normal(0.3, 1.0, 40)
    c0, c3 = -0.05, 0.2

    def log_density(t):
        t = np.asarray(t, dtype=float)[..., None]
        return -2.0 * np.maximum(a - t * b, 0.0).sum(axis=-1) + c0 * t[..., 0] ** 2 + c3 * t[..., 0]

    grid = np.linspace(-30.0, 30.0, 600_001)
    weights = np.exp(log_density(grid) - log_density(grid).max())
    cdf = np.cumsum(weights) / weights.sum()
    assert cdf[0] < 1e-12 and 1.0 - cdf[-2] < 1e-12  # the grid holds the mass
    x = np.interp(rng.random(4_000), cdf, grid)
    moved = np.empty_like(x)
    for i, x0 in enumerate(x):  # the density at x0 + t: a_i - x0 b_i, c3 + 2 c0 x0 (and a constant)
        exponential = rng.exponential()
        t = step(a - x0 * b, b, c0, c3 + 2.0 * c0 * x0, exponential, 1.0, 50)[0]
        moved[i] = x0 + t
        # from x0 + t with the same level (its exponential shifted by the density difference) back to x0
        shift = float(log_density(x0 + t) - log_density(x0))
        back = step(a - (x0 + t) * b, b, c0, c3 + 2.0 * c0 * (x0 + t), exponential + shift, 0.1, 50)[0]
        assert back == pytest.approx(-t, abs=1e-8 * (1.0 + abs(t)))
    assert stats.kstest(moved, lambda v: np.interp(v, grid, cdf)).pvalue > 1e-3
    assert np.corrcoef(x, moved)[0, 1] < -0.3


def test_line_pieces_give_the_slice_ends_exactly():
    """``_slice_end`` solves the quadratic piece at its current point until a root lies on its own piece: the end
    agrees with bisection on the density to rounding, with a flat prior (``c0 = 0``, a linear piece) too; the numpy
    sums equal the loop's."""
    rng = np.random.default_rng(5)
    a, b = rng.normal(0.5, 1.0, 300), rng.normal(0.2, 1.0, 300)
    for t in (-2.0, 0.0, 0.7):
        assert compiled_rows._line_sums_numpy(a, b, t) == pytest.approx(compiled_rows._line_sums(a, b, t), rel=1e-12)
        assert compiled_rows._line_start_sums_numpy(a, b, abs(t)) == pytest.approx(
            compiled_rows._line_start_sums(a, b, abs(t)), rel=1e-12
        )
    for c0, c3 in ((-0.3, 0.1), (0.0, 0.4)):

        def g(t, c0=c0, c3=c3):
            return -2.0 * np.maximum(a - t * b, 0.0).sum() + c0 * t * t + c3 * t

        level = g(0.0) - 1.3
        for sign in (1.0, -1.0):
            start = sign * 0.01
            end = compiled_rows._slice_end(a, b, c0, c3, level, start, *compiled_rows._line_sums(a, b, start), 50)
            inside, outside = 0.0, sign * 100.0
            for _ in range(200):
                middle = 0.5 * (inside + outside)
                inside, outside = (middle, outside) if g(middle) > level else (inside, middle)
            assert end == pytest.approx(inside, abs=1e-9), (c0, sign)


def test_reassociated_hinge_sums_agree_with_numpy():
    """The hinge sums compiled with REASSOCIATE (in SIMD lanes, another order of addition) equal numpy's to rounding,
    at three points in one pass too; rows of every sign and exact zeros at the kink."""
    rng = np.random.default_rng(11)
    a, b = rng.normal(0.0, 2.0, 1_001), rng.normal(0.0, 1.0, 1_001)
    b[:50] = 0.0
    a[50:60] = 0.7 * b[50:60]  # on the kink at d = 0.7
    expected = [float(np.maximum(a - d * b, 0.0).sum()) for d in (0.7, -1.3, 2.5)]
    assert compiled_rows._hinge_sum(a, b, 0.7) == pytest.approx(expected[0], rel=1e-13)
    assert compiled_rows._hinge_sums3(a, b, 0.7, -1.3, 2.5) == pytest.approx(expected, rel=1e-13)
