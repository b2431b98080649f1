"""Property: over column dtypes x missingness x formula shapes, only clear errors escape, the input is never
changed, and a fit survives any failed predict."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bayesvm
from bayesvm.errors import BayesvmError

DTYPES = ["float", "Float64", "Int64", "int", "numeric text", "object floats", "category", "string", "boolean", "text"]
FORMULAS = [
    "y ~ a", "y ~ a + b", "y ~ a * b", "y ~ C(b)", "y ~ a + (1 | g)", "y ~ np.log(a)", "y ~ center(a) + I(b * 2)",
    "y ~ 0 + a", "y ~ a + (b || g)", "y ~ poly(a, 2)",
]  # fmt: skip
RESPONSES = ["int", "bool", "text", "boolean", "signs", "one class"]


def _column(kind: str, values: np.ndarray, missing: np.ndarray) -> pd.Series:
    numbers = pd.Series(np.round(values, 3))
    if kind == "float":
        out = numbers
    elif kind == "Float64":
        out = numbers.astype("Float64")
    elif kind in ("Int64", "int"):
        out = numbers.round().astype("Int64" if kind == "Int64" else "int64")
    elif kind == "numeric text":
        out = numbers.astype(str)
    elif kind == "object floats":
        out = numbers.astype(object)
    elif kind in ("category", "string", "text"):
        out = pd.Series(np.where(values > 0, "hi", "lo"))
        out = out.astype({"category": "category", "string": "string", "text": object}[kind])
    else:
        out = pd.Series(values > 0, dtype="boolean")
    if missing.any() and kind != "int":
        out = out.copy()
        out[missing] = None
    return out


def _response(kind: str, signs: np.ndarray) -> pd.Series:
    if kind == "int":
        return pd.Series(signs.astype(int))
    if kind == "bool":
        return pd.Series(signs)
    if kind == "text":
        return pd.Series(np.where(signs, "yes", "no"))
    if kind == "boolean":
        return pd.Series(signs, dtype="boolean")
    if kind == "signs":
        return pd.Series(np.where(signs, 1, -1))
    return pd.Series(np.ones(len(signs), dtype=int))


@st.composite
def cases(draw):
    n = draw(st.integers(6, 30))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, n)) + np.array([[1.5], [0.0]])
    frame = pd.DataFrame(
        {
            "a": _column(
                draw(st.sampled_from(DTYPES)), np.abs(a) + 0.1, rng.random(n) < draw(st.sampled_from([0, 0, 0.2]))
            ),
            "b": _column(draw(st.sampled_from(DTYPES)), b, rng.random(n) < draw(st.sampled_from([0, 0.3]))),
            "g": rng.integers(0, 3, n).astype(str),
        }
    )
    signs = rng.random(n) < 0.5
    signs[:2] = [True, False]
    frame["y"] = _response(draw(st.sampled_from(RESPONSES)), signs)
    formula = draw(st.sampled_from(FORMULAS))
    missing = draw(st.sampled_from(["error", "drop", "impute"]))
    corrupt = draw(st.sampled_from(["text", "drop column", "missing", "new level", "huge", "none"]))
    return frame, formula, missing, corrupt


def _corrupted(frame: pd.DataFrame, how: str) -> pd.DataFrame:
    if how == "text":
        return frame.assign(a="abc")
    if how == "drop column":
        return frame.drop(columns="a")
    if how == "missing":
        return frame.assign(a=np.nan)
    if how == "new level":
        return frame.assign(g="unseen", b="unseen")
    if how == "huge":
        return frame.assign(a=1e200)
    return frame


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_only_clear_errors_escape_inputs_stay_unchanged_fits_survive_failed_predicts(case):
    frame, formula, missing, corrupt = case
    before = frame.copy(deep=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fit = bayesvm.bsvm(formula, frame, method="em", penalty=0.5, missing=missing, max_iter=200)
        except BayesvmError:
            pd.testing.assert_frame_equal(frame, before)
            return
        pd.testing.assert_frame_equal(frame, before)
        expected = fit.predict(frame.dropna(), kind="link") if len(frame.dropna()) else None
        newdata = _corrupted(frame, corrupt)
        snapshot = newdata.copy(deep=True)
        try:
            fit.predict(newdata, kind="prob")
        except BayesvmError:
            pass
        pd.testing.assert_frame_equal(newdata, snapshot)
        if expected is not None:
            np.testing.assert_array_equal(fit.predict(frame.dropna(), kind="link"), expected)
