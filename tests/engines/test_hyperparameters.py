"""The hyperparameters' maps over many draws at once: covariances from the log-Cholesky parameters, and log priors
that are scipy's densities of those covariances plus the Jacobian, for half-t, inverse-gamma and inverse-Wishart
components together; the one-draw maps are the same maps of a single draw."""

import numpy as np
from scipy import stats

from bayesvm.engines.hyperparameters import Hyperparameters
from bayesvm.model.problems import VarianceComponent
from bayesvm.priors import HalfT, InverseGamma


def test_batched_maps_are_the_densities_of_the_covariances():
    scale = np.diag([1.0, 2.0, 0.5]) + 0.1
    components = (
        VarianceComponent("a", np.zeros((5, 1), int), False, 5, prior=HalfT(3.0, 2.5)),
        VarianceComponent("b", np.zeros((1, 3), int), True, 7, prior_df=4.0, prior_scale=scale),
        VarianceComponent("c", np.zeros((1, 1), int), True, 9, prior=InverseGamma(0.5, 0.2)),
    )
    hyper = Hyperparameters(components)
    phi = np.random.default_rng(0).normal(size=(40, hyper.size))
    half_t, wishart, gamma = hyper.covariances_of_draws(phi)
    L = np.zeros((40, 3, 3))
    L[:, [0, 1, 2], [0, 1, 2]] = np.exp(phi[:, 1:4])
    L[:, [1, 2, 2], [0, 0, 1]] = phi[:, 4:7]
    np.testing.assert_allclose(wishart, L @ np.swapaxes(L, 1, 2), rtol=1e-13)
    np.testing.assert_allclose(half_t[:, 0, 0], np.exp(phi[:, 0]), rtol=1e-13)
    sd = np.sqrt(half_t[:, 0, 0])  # half-t on the SD: p(sigma^2) = p(sigma) / (2 sigma)
    expected = stats.t(3.0, scale=2.5).logpdf(sd) + np.log(2.0) - np.log(2.0 * sd)
    expected += [stats.invwishart(4.0, scale).logpdf(w) for w in wishart]
    expected += stats.invgamma(0.5, scale=0.2).logpdf(gamma[:, 0, 0])
    np.testing.assert_allclose(hyper.log_priors(phi) - hyper.log_jacobians(phi), expected, rtol=1e-10)
    np.testing.assert_allclose([hyper.log_prior(t) for t in phi], hyper.log_priors(phi), rtol=1e-13)
    moved = phi.copy()
    moved[:, 1] += 0.5  # (a changed draw changes its prior: the comparison can fail)
    assert not np.allclose(hyper.log_priors(moved) - hyper.log_jacobians(moved), expected)
