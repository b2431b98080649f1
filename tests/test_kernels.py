"""Kernels: matrices, and every gradient product against central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.errors import BayesvmError
from bayesvm.kernels import RBF, Constant, Linear, Matern52, Sum

RNG = np.random.default_rng(3)
X1 = RNG.normal(size=(7, 3))
X2 = RNG.normal(size=(5, 3))
G = RNG.normal(size=(7, 5))
KERNELS = [
    RBF(lengthscale=0.8, variance=1.7),
    RBF(lengthscale=np.array([0.5, 1.1, 2.0]), variance=0.9),
    Matern52(lengthscale=1.3, variance=2.2),
    Matern52(lengthscale=np.array([0.7, 1.0, 1.4])),
    Linear(variance=0.6),
    Constant(variance=0.4),
    Sum((RBF(1.0), Linear(0.3)), weights=(0.7, 0.2), learn_weights=True),
    0.5 * RBF(1.2, learn=("lengthscale",)) + Matern52(0.9, learn=False) + Constant(),
]


def _fd(f, x, h=1e-6):
    return np.array([(f(x + e) - f(x - e)) / (2 * h) for e in np.eye(x.size) * h])


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.describe()[:40])
def test_hyperparameter_products_match_finite_differences(kernel):
    x0 = kernel.log_params()
    assert x0.size == len(kernel.parameter_labels())
    fd = _fd(lambda x: np.sum(G * kernel.with_log_params(x).matrix(X1, X2)), x0)
    np.testing.assert_allclose(kernel.vjp(X1, X2, G), fd, rtol=1e-6, atol=1e-8)
    g = RNG.normal(size=len(X1))
    fd_diag = _fd(lambda x: g @ kernel.with_log_params(x).diag(X1), x0)
    np.testing.assert_allclose(kernel.diag_vjp(X1, g), fd_diag, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.describe()[:40])
def test_input_products_match_finite_differences(kernel):
    fd = _fd(lambda z: np.sum(G * kernel.matrix(X1, z.reshape(X2.shape))), X2.ravel()).reshape(X2.shape)
    np.testing.assert_allclose(kernel.vjp_x2(X1, X2, G), fd, rtol=1e-6, atol=1e-8)
    g = RNG.normal(size=len(X1))
    fd_diag = _fd(lambda z: g @ kernel.diag(z.reshape(X1.shape)), X1.ravel()).reshape(X1.shape)
    np.testing.assert_allclose(kernel.diag_vjp_x(X1, g), fd_diag, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.describe()[:40])
def test_matrix_is_symmetric_psd_with_matching_diagonal(kernel):
    K = kernel.matrix(X1)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(K), kernel.diag(X1), rtol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-10


def test_log_parameters_round_trip_and_learn_selection():
    k = RBF(lengthscale=np.array([1.0, 2.0]), variance=3.0, learn=("lengthscale",))
    assert k.parameter_labels() == ["lengthscale[0]", "lengthscale[1]"]
    k2 = k.with_log_params(np.log([4.0, 5.0]))
    np.testing.assert_allclose(k2.lengthscale, [4.0, 5.0])
    assert k2.variance == 3.0
    assert RBF(learn=False).log_params().size == 0


def test_median_lengthscale_default():
    X = np.random.default_rng(0).normal(size=(200, 2))
    k = RBF().resolved(X, np.random.default_rng(0))
    assert 1.0 < k.lengthscale < 3.0  # median distance of 2-d standard normals is about 1.67


def test_bad_kernel_arguments_raise_clear_errors():
    with pytest.raises(BayesvmError, match="lengthscale must be positive"):
        RBF(lengthscale=-1.0)
    with pytest.raises(BayesvmError, match="unknown hyperparameter"):
        RBF(learn=("width",))
    with pytest.raises(BayesvmError, match="3 lengthscales for 2 input columns"):
        RBF(lengthscale=np.ones(3)).resolved(np.zeros((4, 2)), np.random.default_rng(0))
    with pytest.raises(BayesvmError, match="weights for"):
        Sum((RBF(1.0),), weights=(1.0, 2.0))


def test_a_kernel_by_name_is_that_kernel_and_an_unknown_name_lists_the_names():
    import pandas as pd

    import bayesvm
    from bayesvm.kernels import kernel_from

    assert isinstance(kernel_from("RBF"), RBF) and isinstance(kernel_from(" matern52"), Matern52)
    assert kernel_from(Linear(0.5)).variance == 0.5
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"x": rng.normal(size=80), "w": rng.normal(size=80)})
    data["y"] = np.where(data.x**2 + 0.3 * rng.normal(size=80) > 1.0, "out", "in")
    named = bayesvm.bsvm("y ~ x + w", data, kernel="rbf", seed=1)
    built = bayesvm.bsvm("y ~ x + w", data, kernel=RBF(), seed=1)
    np.testing.assert_allclose(named.predict(data, kind="link"), built.predict(data, kind="link"), rtol=1e-12)
    with pytest.raises(ValueError, match="'rbf', 'matern52', 'linear'.*got 'poly'"):
        bayesvm.bsvm("y ~ x + w", data, kernel="poly")
