"""Property-based robustness: random small data sets and random formulas from the grammar.

Every fit either raises a bayesvm error (a ValueError subclass) with a message, or returns
finite results with a never-decreasing lower bound, predictions of the right length and
coding, and leaves the input frame unchanged.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import bayesvm

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)

FIXED = ["1", "x1", "x1 + x2", "x1 * f", "f + x2", "0 + x1 + x2", "np.log(x3)"]
RANDOM = ["", "(1 | g)", "(1 + x1 | g)", "(1 + x1 || g)", "(1 | g) + (1 | h)", "(0 + x2 | g)", "(1 | h/g)"]
SCALES = [1.0, 1e-8, 1e8]


@st.composite
def data_sets(draw):
    n = draw(st.integers(min_value=2, max_value=40))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "x1": rng.standard_normal(n) * draw(st.sampled_from(SCALES)),
            "x2": rng.standard_normal(n) * draw(st.sampled_from(SCALES)),
            "x3": rng.exponential(size=n),
            "f": rng.choice(["a", "b", "c"], n),
            "g": [f"g{k}" for k in rng.integers(0, draw(st.integers(1, n)), n)],  # many singletons possible
            "h": [f"h{k}" for k in rng.integers(0, 3, n)],
        }
    )
    kind = draw(st.sampled_from(["random", "separable", "imbalanced", "constant_x", "duplicated", "one_class"]))
    if kind == "separable":
        y = frame["x1"] > frame["x1"].median()
    elif kind == "imbalanced":
        y = rng.random(n) < 0.05
    elif kind == "one_class":
        y = np.zeros(n, dtype=bool)
    else:
        y = rng.random(n) < 0.5
    if kind == "constant_x":
        frame["x2"] = 3.0
    if kind == "duplicated":
        frame = pd.concat([frame, frame], ignore_index=True)
        y = np.concatenate([y, y])
    negative, positive = draw(st.sampled_from([("no", "yes"), (0, 1), (False, True), (-1, 1)]))
    frame["y"] = np.where(y, positive, negative)
    return frame


#: A data set and a model from the grammar (fixed part, random part, penalty).
MODELS = {
    "data": data_sets(),
    "fixed": st.sampled_from(FIXED),
    "random": st.sampled_from(RANDOM),
    "penalty": st.sampled_from(["learn", None, 0.5]),
}


def _check_predictions(fit, data: pd.DataFrame, cross_fit: bool = True) -> None:
    """Predictions of the right length and coding, probabilities in [0, 1], class == (prob > 0.5).

    ``cross_fit=False`` learns the probability map from the rows themselves as held-out rows (the same
    probability path without the five fold fits, for the slow engines)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not cross_fit:
            fit.calibrate(newdata=data)
        predicted = fit.predict(data)
        prob = fit.predict(data, kind="prob")
    assert len(predicted) == len(data) and np.all((prob >= 0) & (prob <= 1))
    assert set(np.asarray(predicted).tolist()) <= set(data["y"].tolist())
    assert np.all((prob > 0.5) == (predicted == fit.model.design.response.positive))


def _fit_or_refused(data: pd.DataFrame, **kwargs):
    """The fit, or None when bayesvm refused the data with a message (the frame is unchanged either way)."""
    before = data.copy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = bayesvm.bsvm(data=data, **kwargs)
    except bayesvm.BayesvmError as exc:
        event(f"refused: {type(exc).__name__}")
        assert str(exc)
        fit = None
    pd.testing.assert_frame_equal(data, before)
    return fit


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MODELS)
def test_fit_is_an_error_or_finite_and_monotone(data, fixed, random, penalty):
    formula = "y ~ " + fixed + (" + " + random if random else "")
    before = data.copy()
    fit = _fit_or_refused(data, formula=formula, penalty=penalty, max_iter=200, vb="meanfield")
    if fit is None:
        return
    event("fitted")
    assert fit.n_iter >= 1 and fit.n_iter <= 200
    assert np.all(np.isfinite(fit.fixef)) and np.all(np.isfinite(fit.lower_bound))
    assert np.diff(fit.lower_bound).min(initial=0.0) >= -1e-8 * abs(fit.lower_bound[-1])
    for frame in fit.ranef.values():
        assert np.all(np.isfinite(frame.to_numpy()))
    # cross-fitting (five more fits) on about a third of the examples, a held-out map on the others
    _check_predictions(fit, data, cross_fit=len(data) % 3 == 0)
    pd.testing.assert_frame_equal(data, before)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MODELS)
def test_default_accurate_fit_is_an_error_or_finite(data, fixed, random, penalty):
    """The default variational fit (accurate VB: EP integrated over the variance components)."""
    formula = "y ~ " + fixed + (" + " + random if random else "")
    before = data.copy()
    fit = _fit_or_refused(data, formula=formula, penalty=penalty)
    if fit is None:
        return
    event(f"fitted: {fit.posterior.kind}")
    assert np.all(np.isfinite(fit.fixef)) and np.all(np.isfinite(fit.fixef_cov.to_numpy()))
    for component in fit.variance_components:
        assert np.all(np.isfinite(component.mean)) and np.all(np.linalg.eigvalsh(component.mean) > 0)
    for frame in fit.ranef.values():
        assert np.all(np.isfinite(frame.to_numpy()))
    _check_predictions(fit, data, cross_fit=False)  # cross-fitting is exercised by the mean-field test above
    pd.testing.assert_frame_equal(data, before)


SELECTION = [
    ("vb", bayesvm.priors.LaplaceZero(0.1)),
    ("gibbs", bayesvm.priors.SpikeSlab(0.2, 10.0)),
    ("em", bayesvm.priors.Lasso()),
    ("em", bayesvm.priors.Lasso(nu=0.1)),
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=data_sets(), fixed=st.sampled_from(FIXED), engine=st.sampled_from(SELECTION))
def test_selection_fit_is_an_error_or_finite(data, fixed, engine):
    method, prior = engine
    before = data.copy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = bayesvm.bsvm(
                "y ~ " + fixed, data, method=method, prior=prior, max_iter=300, draws=20, tune=20, chains=1, seed=0
            )
    except bayesvm.BayesvmError as exc:
        event(f"refused: {type(exc).__name__}")
        assert str(exc)
        pd.testing.assert_frame_equal(data, before)
        return
    event("fitted")
    pd.testing.assert_frame_equal(data, before)
    assert np.all(np.isfinite(fit.fixef))
    if method == "vb" and np.size(fit.lower_bound):  # (Laplace-zero with few slopes defaults to EP: no bound)
        assert np.diff(fit.lower_bound).min(initial=0.0) >= -1e-8 * abs(fit.lower_bound[-1])
    table = fit.inclusion
    assert table["p_include"].between(0, 1).all() and table["p_positive"].between(0, 1).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit.calibrate(newdata=data)  # selection fits refit slowly: a map from the rows, not five fold fits
        predicted = fit.predict(data)
        prob = fit.predict(data, kind="prob")
    assert len(predicted) == len(data) and np.all((prob >= 0) & (prob <= 1))
    assert np.all((prob > 0.5) == (predicted == fit.model.design.response.positive))
