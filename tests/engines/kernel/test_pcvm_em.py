"""PCVM_EM (top-down pruning by generalised EM): monotone objective, stationary MAP, truncation, sparsity."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines.kernel.pcvm import fit_pcvm_laplace
from bayesvm.engines.kernel.pcvm_em import em_gradient, em_objective, fit_pcvm_em
from bayesvm.kernels import RBF

RNG = np.random.default_rng(8)
N = 120
X = RNG.normal(size=(N, 2))
Y = np.where(X[:, 0] ** 2 + X[:, 1] - 0.5 + 0.4 * RNG.normal(size=N) > 0, 1.0, -1.0)
PHI = np.column_stack([np.ones(N), RBF(lengthscale=0.8, learn=False).matrix(X, X) * Y[None, :]])


@pytest.mark.parametrize("c, d", [(0.0, 0.0), (0.5, 0.01)])
def test_gradient_matches_finite_differences(c, d):
    cols = [0, 3, 10, 40]
    w = np.array([0.3, 0.8, 0.1, 1.5])
    h = 1e-6
    fd = [(em_objective(w + e, PHI[:, cols], Y, c, d) - em_objective(w - e, PHI[:, cols], Y, c, d)) / (2 * h)
          for e in np.eye(4) * h]  # fmt: skip
    np.testing.assert_allclose(em_gradient(w, PHI[:, cols], Y, c, d), fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("c, d", [(0.0, 0.0), (0.5, 0.01)])
def test_em_never_decreases_its_objective_and_stops_at_a_stationary_map(c, d):
    result = fit_pcvm_em(PHI, Y, c=c, d=d, tol=1e-8, max_iter=20000)
    assert result.converged
    same_support = result.support[1:] == result.support[:-1]
    steps = np.diff(result.objective)[same_support]
    assert same_support.sum() > 50
    assert np.all(steps >= -1e-8 * np.abs(result.objective[1:][same_support])), steps.min()
    P = PHI[:, np.concatenate([[0], 1 + result.active])]
    grad = em_gradient(result.mean, P, Y, c, d)
    start = em_gradient(np.concatenate([[0.0], np.ones(N)]), PHI, Y, c, d)
    assert np.max(np.abs(grad)) < 1e-5 * np.max(np.abs(start)), (np.abs(grad).max(), np.abs(start).max())
    # top-down pruning: far fewer vectors than rows, every surviving weight inside the truncation
    assert 1 <= result.active.size <= N // 4
    assert np.all(result.mean[1:] > 0)
    # the curvature covariance is a covariance
    assert np.all(np.linalg.eigvalsh(result.cov) > 0)


def test_em_and_laplace_selection_classify_alike():
    em = fit_pcvm_em(PHI, Y)
    lap = fit_pcvm_laplace(PHI, Y)
    f_em = PHI[:, np.concatenate([[0], 1 + em.active])] @ em.mean
    f_lap = PHI[:, np.concatenate([[0], 1 + lap.active])] @ lap.mean
    assert np.mean(np.sign(f_em) != np.sign(f_lap)) < 0.1
    assert abs(np.mean(np.sign(f_em) != Y) - np.mean(np.sign(f_lap) != Y)) < 0.05
