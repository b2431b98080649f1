"""The hyperparameters' batched maps (covariances, Jacobians, log priors of many draws at once) equal the one-draw
maps draw by draw, for half-t, inverse-gamma and inverse-Wishart components together."""

import numpy as np

from bayesvm.engines.linear.hyperparameters import Hyperparameters
from bayesvm.model.problems import VarianceComponent
from bayesvm.priors import HalfT, InverseGamma


def test_batched_maps_equal_the_one_draw_maps():
    components = (
        VarianceComponent("a", np.zeros((5, 1), int), False, 5, prior=HalfT()),
        VarianceComponent(
            "b", np.zeros((1, 3), int), True, 7, prior_df=4.0, prior_scale=np.diag([1.0, 2.0, 0.5]) + 0.1
        ),
        VarianceComponent("c", np.zeros((1, 1), int), True, 9, prior=InverseGamma(0.5, 0.2)),
    )
    hyper = Hyperparameters(components)
    phi = np.random.default_rng(0).normal(size=(40, hyper.size))
    np.testing.assert_allclose(hyper.log_priors(phi), [hyper.log_prior(t) for t in phi], rtol=1e-13)
    np.testing.assert_allclose(hyper.log_jacobians(phi), [hyper.log_jacobian(t) for t in phi], rtol=1e-13)
    for j, batched in enumerate(hyper.covariances_of_draws(phi)):
        np.testing.assert_allclose(batched, np.stack([hyper.covariances(t)[j] for t in phi]), rtol=1e-13)
    moved = phi.copy()
    moved[:, 1] += 0.5  # (a changed draw changes its prior: the comparison can fail)
    assert not np.allclose(hyper.log_priors(moved), hyper.log_priors(phi))
