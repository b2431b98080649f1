"""``y ~ .`` and ``- term`` in the fixed part (bayesvm.formula.bars.expand_dot)."""

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import FormulaError
from tests.conftest import simulate_grouped


@pytest.fixture(scope="module")
def data():
    frame = simulate_grouped(n_groups=10, per_group=8, p=2, seed=4).drop(columns="h")
    frame["cad.dur"] = np.linspace(0, 1, len(frame))  # a name that needs back-quotes
    return frame


def _fit(formula, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bayesvm.bsvm(formula, data, vb="meanfield")


def test_dot_is_every_other_column_as_in_r(data):
    dot = _fit("y ~ .", data)
    written = _fit("y ~ x1 + x2 + g + `cad.dur`", data)
    assert dot.model.design.x_names == written.model.design.x_names
    np.testing.assert_allclose(dot.fixef, written.fixef)
    assert dot.formula == "y ~ ."


def test_dot_leaves_out_grouping_factors_and_minus_removes_terms(data):
    fit = _fit("y ~ . - `cad.dur` + (1 + x1 | g)", data)
    assert set(fit.fixef.index) == {"(Intercept)", "x1", "x2"}  # x1 stays: the mean of the random slopes
    assert "g" in fit.ranef
    np.testing.assert_allclose(fit.predict(data, kind="link"), _fit("y ~ x1 + x2 + (1 + x1 | g)", data).predict(
        data, kind="link"))  # fmt: skip


def test_dot_fits_cross_fit_and_predict(data):
    fit = _fit("y ~ . - g", data)
    assert set(fit.call.data.columns) == {"x1", "x2", "g", "cad.dur", "y"}
    prob = fit.predict(data, kind="prob")
    assert prob.shape == (len(data),) and np.all((prob > 0.5) == (fit.predict(data, kind="link") > 0))


def test_dot_with_nothing_left_is_a_clear_error():
    frame = pd.DataFrame({"y": [0, 1] * 10, "g": list("abcde") * 4})
    with pytest.raises(FormulaError, match="no other column"):
        bayesvm.bsvm("y ~ . + (1 | g)", frame)


def test_decimal_points_and_dotted_names_are_not_dots(data):
    fit = _fit("y ~ I(0.5 * x1) + `cad.dur`", data)
    assert len(fit.fixef) == 3


def test_r_style_dotted_names_need_no_backticks(data):
    """R's data sets name columns ``Cl.thickness``; as in R, a dotted name that is a column is that column, in a
    bare term, inside a transform or a call, and in a bar."""
    frame = data.rename(columns={"x1": "x.one"})
    quoted = _fit("y ~ `cad.dur` + np.log1p(`x.one` ** 2) + (1 + `x.one` | g)", frame)
    plain = _fit("y ~ cad.dur + np.log1p(x.one ** 2) + (1 + x.one | g)", frame)
    np.testing.assert_allclose(plain.fixef, quoted.fixef)
    np.testing.assert_allclose(plain.predict(frame, kind="link"), quoted.predict(frame, kind="link"))
    assert frame.columns.tolist() == data.rename(columns={"x1": "x.one"}).columns.tolist()  # input unchanged


def test_dotted_name_that_is_no_column_is_a_clear_error(data):
    with pytest.raises(FormulaError, match=r"'cad.duration'.*did you mean.*cad\.dur"):
        _fit("y ~ x1 + cad.duration", data)
    with pytest.raises(FormulaError, match="attribute 'x1.T'"):  # an attribute of a column is still refused
        _fit("y ~ np.log(x1.T)", data)
