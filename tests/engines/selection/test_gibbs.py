"""The selection samplers' numerics (:mod:`bayesvm.engines.selection.gibbs`)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.priors import LaplaceZero


def test_laplace_zero_gibbs_survives_a_scale_in_its_heavy_tail():
    """Separable classes (one column separates them) leave the learned Laplace scale a heavy upper tail; the chain
    wandered to ``sigma^2 ~ 1e34``, where numpy's ``wald`` returned NaN for the mixing variables of slopes near 0
    and the chain stopped with a raw ``ValueError`` (:mod:`bayesvm.engines.inverse_gaussian`)."""
    rng = np.random.default_rng(3)
    centers = rng.normal(0, 3, (2, 2))
    labels = rng.integers(0, 2, 150)
    X = np.hstack([centers[labels] + rng.standard_normal((150, 2)), np.random.default_rng(0).standard_normal((150, 6))])
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(8)]).assign(y=labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ .", frame, prior=LaplaceZero(0.05), method="gibbs", progress=False, seed=1)
    assert np.all(np.isfinite(fit.fixef)) and fit.inclusion["p_include"].between(0, 1).all()
