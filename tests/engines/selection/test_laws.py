"""The slope-prior block (:mod:`bayesvm.engines.selection.laws`): a new prior is a record and a law registered by one
line, and the engines run it through the same interface as the shipped priors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import integrate

import bayesvm
from bayesvm.engines.selection.laws import LAWS, law_of
from bayesvm.errors import BayesvmError
from bayesvm.priors import LaplaceZero, Lasso, SpikeSlab


def _documented_prior() -> dict:
    """The example slope prior of the engines' reference page (docs/reference/engines.md), executed as written: the
    record and its law in one module."""
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[3] / "docs" / "reference" / "engines.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    module = next(block for block in blocks if "class RidgeLaw" in block)
    namespace: dict = {}
    exec(compile(module, str(page), "exec"), namespace)
    return namespace


Ridge, RidgeLaw = (_documented_prior()[name] for name in ("Ridge", "RidgeLaw"))


@pytest.fixture
def data():
    rng = np.random.default_rng(4)
    n = 300
    X = rng.normal(size=(n, 3))
    y = np.where(X @ [1.0, -0.7, 0.0] + 0.3 + rng.normal(size=n) > 0, "yes", "no")
    return pd.DataFrame({"y": y, "x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2]})


def test_a_new_slope_prior_is_a_record_and_a_law_registered_by_one_line(data, monkeypatch):
    """The toy ridge prior fitted by the accurate selection engine is the linear model with the fixed penalty whose
    prior precision ``4 alpha`` is ``1 / variance`` (Alg. 1): EP's Gaussian slope sites are exact there."""
    monkeypatch.setitem(LAWS, Ridge, RidgeLaw)
    variance = 0.5
    ridge = bayesvm.bsvm("y ~ x1 + x2 + x3", data, prior=Ridge(variance), vb="accurate")
    fixed = bayesvm.bsvm("y ~ x1 + x2 + x3", data, penalty=1.0 / (4.0 * variance), vb="accurate")
    a, b = ridge.summary().fixed, fixed.summary().fixed
    np.testing.assert_allclose(a["mean"], b["mean"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(a["sd"], b["sd"], rtol=1e-4)
    assert "ridge: slopes ~ N(0, 0.5)" in str(ridge.summary())
    np.testing.assert_allclose(ridge.predict(data, kind="link"), fixed.predict(data, kind="link"), atol=1e-4)
    np.testing.assert_allclose(ridge.result.log_evidence, fixed.result.log_evidence, atol=1e-4)


def test_a_prior_without_a_law_is_refused_naming_the_table(data):
    with pytest.raises(BayesvmError, match="no law in bayesvm.engines.selection.laws.LAWS"):
        bayesvm.bsvm("y ~ x1 + x2 + x3", data, prior=Ridge(0.5), vb="accurate")


@pytest.mark.parametrize("prior", [LaplaceZero(rho=0.3), SpikeSlab(pi=0.3, nu=2.0), Lasso(nu=0.7)])
def test_each_laws_tilted_moments_integrate_its_site(prior):
    """``log Z``, mean and variance of ``N(beta; m, v) s(beta)`` against quadrature (the point mass added by hand)."""
    law = law_of(prior)
    m, v = np.array([0.4]), np.array([0.3])
    width = law.widths(np.ones(1), np.array([np.log(0.49)]) if law.scale_size else np.zeros(0))
    got = law.tilted(m, v, width)
    w = float(width[0])
    if isinstance(prior, SpikeSlab):
        slab, spike = prior.pi, 1.0 - prior.pi

        def density(b):
            return np.exp(-0.5 * b**2 / w) / np.sqrt(2 * np.pi * w)
    else:
        slab, spike = (prior.rho, 1.0 - prior.rho) if isinstance(prior, LaplaceZero) else (1.0, 0.0)

        def density(b):
            return np.exp(-abs(b) / w) / (2.0 * w)

    cavity = lambda b: np.exp(-0.5 * (b - 0.4) ** 2 / 0.3) / np.sqrt(2 * np.pi * 0.3)  # noqa: E731
    at_zero = spike * cavity(0.0)
    moments = [integrate.quad(lambda b, k=k: b**k * slab * density(b) * cavity(b), -20, 20)[0] for k in range(3)]
    z = moments[0] + at_zero
    mean = moments[1] / z
    np.testing.assert_allclose(got.log_z[0], np.log(z), rtol=1e-7)
    np.testing.assert_allclose(got.mean[0], mean, rtol=1e-7)
    np.testing.assert_allclose(got.var[0], moments[2] / z - mean**2, rtol=1e-6)
    np.testing.assert_allclose(got.p_include[0], moments[0] / z, rtol=1e-7)
