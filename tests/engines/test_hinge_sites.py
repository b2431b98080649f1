"""EP's algebra for one hinge site (:mod:`bayesvm.engines.hinge_sites`): the tilted moments against quadrature,
and the compiled pass over the rows against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines import hinge_sites
from bayesvm.engines.hinge_sites import tilted_moments
from bayesvm.engines.linear import compiled_rows
from bayesvm.linalg import row_threads

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)


def test_tilted_moments_match_quadrature():
    rng = np.random.default_rng(0)
    y = rng.choice([-1.0, 1.0], 20)
    m = rng.normal(0, 2, 20)
    v = np.exp(rng.normal(-1, 1.5, 20))
    log_z, mean, var = tilted_moments(y, m, v)
    for i in range(20):
        f = np.linspace(m[i] - 12 * np.sqrt(v[i]), m[i] + 12 * np.sqrt(v[i]), 200001)
        dens = (
            np.exp(-0.5 * (f - m[i]) ** 2 / v[i]) / np.sqrt(2 * np.pi * v[i]) * np.exp(-2 * np.maximum(0, 1 - y[i] * f))
        )
        z = np.trapezoid(dens, f)
        mu = np.trapezoid(f * dens, f) / z
        np.testing.assert_allclose(
            [log_z[i], mean[i], var[i]],
            [np.log(z), mu, np.trapezoid((f - mu) ** 2 * dens, f) / z],
            rtol=1e-6,
            atol=1e-9,
        )


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("split_from", [4096, 100], ids=["one-call", "row-halves"])
def test_compiled_tilted_moments_equal_numpy(monkeypatch, split_from):
    """The compiled pass over the rows (hinge_sites._tilted_rows, and its Python source; in one call or two threaded halves)
    gives numpy's moments, in the tails too: cavities far on either side of the margin, tiny and huge variances."""
    monkeypatch.setattr(row_threads, "COMPILED_SPLIT_ROWS", split_from)
    rng = np.random.default_rng(4)
    n = 4000
    y = rng.choice([-1.0, 1.0], n)
    m = np.concatenate([rng.normal(0, 2, n - 6), [-60.0, 60.0, -8.0, 8.0, 1.0, -1.0]])
    v = np.concatenate([np.exp(rng.normal(-1, 3, n - 6)), [0.01, 0.01, 1e-6, 1e-6, 1e4, 1e4]])
    compiled = tilted_moments(y, m, v)
    python = [np.empty(n), np.empty(n), np.empty(n)]
    hinge_sites._tilted_rows(y, m, v, *python)  # (its Python source, calling the compiled log Phi)
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    expected = tilted_moments(y, m, v)
    for got, source, want, rtol in zip(compiled, python, expected, [1e-10, 1e-10, 1e-7]):
        assert np.all(np.isfinite(got))
        # (a truncated piece's variance v (1 - beta lam - lam^2) cancels about 8 digits where the cavity is wide,
        # beta near -100: the two log Phi, equal to 1e-12, then agree to about 1e-9 there)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)
        np.testing.assert_array_equal(source, got)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("split_from", [4096, 100], ids=["one-call", "row-halves"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "class-weights"])
def test_compiled_site_update_equals_the_numpy_steps(monkeypatch, split_from, weighted):
    """One EP update of every site by the compiled pass (hinge_sites._site_rows, and its Python source) gives what
    cavities -> weighted_tilted_moments -> damped_sites give, improper cavities (the site kept) and class weights
    included: the compiled tilted moments of each row are the same operations, so the sites are equal to the bit."""
    monkeypatch.setattr(row_threads, "COMPILED_SPLIT_ROWS", split_from)
    rng = np.random.default_rng(5)
    n = 3000
    y = rng.choice([-1.0, 1.0], n)
    var_f = np.exp(rng.normal(-1, 1.5, n))
    mean_f = rng.normal(0, 2, n)
    tau = np.abs(rng.normal(0, 1, n)) / var_f * rng.choice([0.5, 1.5], n, p=[0.9, 0.1])  # a tenth improper
    nu = rng.normal(0, 1, n)
    weights = np.where(y > 0, 2.5, 0.6) if weighted else None
    got = hinge_sites.updated_sites(y, mean_f, var_f, tau, nu, weights, 0.7)
    python = [np.empty(n), np.empty(n)]
    omega = weights if weighted else y
    hinge_sites._site_rows(y, mean_f, var_f, tau, nu, omega, weighted, 0.7, *python)
    ok, m, v = hinge_sites.cavities(mean_f, var_f, tau, nu)
    assert 0 < np.sum(~ok) < n
    _, t_mean, t_var = hinge_sites.weighted_tilted_moments(y, m, v, weights)
    steps = hinge_sites.damped_sites(tau, nu, ok, m, v, t_mean, t_var, 0.7)
    for g, source, want in zip(got, python, steps):
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(source, want)
    np.testing.assert_array_equal(got[0][~ok], tau[~ok])
