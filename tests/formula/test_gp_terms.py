"""``gp()`` formula terms: parsing, the inducing-point basis and the design checks."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from bayesvm.errors import DataError, DesignError, FormulaError
from bayesvm.formula.bars import parse_formula
from bayesvm.formula.design import build_design
from bayesvm.formula.gp_terms import DEFAULT_BASIS, GpSpec, build_gp_term


def test_parse_splits_gp_terms_from_the_fixed_part_and_the_bars():
    parsed = parse_formula("y ~ x + gp(age, `bmi.z`, k=10, lengthscale=0.5, kernel='matern52') + (1 | g)")
    assert parsed.fixed == "x"
    assert [str(bar) for bar in parsed.bars] == ["(1 | g)"]
    assert parsed.gp_terms == (GpSpec(("age", "bmi.z"), k=10, lengthscale=0.5, kernel="matern52"),)
    assert parsed.gp_terms[0].label == "gp(age, bmi.z)"
    only = parse_formula("y ~ gp(age, kernel=rbf)")
    assert only.fixed == "1" and only.gp_terms == (GpSpec(("age",)),)


@pytest.mark.parametrize(
    "formula, words",
    [
        ("y ~ x:gp(age)", "must be added with '+'"),
        ("y ~ gp(age) * x", "must be followed by '+'"),
        ("y ~ gp(age, m=3)", "unknown option 'm'"),
        ("y ~ gp(age, k=1)", "integer from 2"),
        ("y ~ gp(age, lengthscale=-1)", "positive number"),
        ("y ~ gp(age, kernel='cubic')", "kernel must be one of"),
        ("y ~ gp(log(age))", "inputs must be column names"),
        ("y ~ gp()", "empty argument"),
        ("y ~ gp(age, age)", "names a column twice"),
        ("y ~ gp(age) + gp(age)", "same gp() term twice"),
        ("y ~ gp(k=3, age)", "come before the options"),
        ("y ~ I(gp(age))", "top-level term"),
    ],
)
def test_malformed_gp_terms_are_refused_by_name(formula, words):
    with pytest.raises(FormulaError, match=re.escape(words)):
        parse_formula(formula)


def _nystrom(term, inputs):
    kernel = term.kernel()
    z = (inputs - term.center) / term.scale
    K_xu = kernel.matrix(z, term.locations)
    K_uu = kernel.matrix(term.locations) + 1e-6 * np.eye(term.n_basis)
    return K_xu @ np.linalg.solve(K_uu, K_xu.T)


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
def test_basis_reproduces_the_nystrom_covariance_centred_on_the_training_rows(kernel):
    rng = np.random.default_rng(0)
    values = rng.normal(50.0, 10.0, (200, 2))
    term = build_gp_term(GpSpec(("a", "b"), k=15, kernel=kernel), values)
    assert term.n_basis == 15
    basis = term.basis(values)
    np.testing.assert_allclose(basis.mean(axis=0), 0.0, atol=1e-12)  # centred: g sums to zero over the data
    uncentred = basis + term.offset
    np.testing.assert_allclose(uncentred @ uncentred.T, _nystrom(term, values), atol=1e-8)
    new = rng.normal(50.0, 10.0, (7, 2))
    np.testing.assert_allclose(term.basis(new) + term.offset, term.basis(new) + term.offset)
    np.testing.assert_allclose(term.basis(values[:7]), basis[:7])


def test_one_input_uses_quantile_locations_and_few_distinct_values_use_them_all():
    values = np.linspace(0.0, 1.0, 500)[:, None] ** 2
    term = build_gp_term(GpSpec(("x",)), values)
    assert term.n_basis == DEFAULT_BASIS
    located = term.center + term.scale * term.locations[:, 0]
    np.testing.assert_allclose(located, np.quantile(values[:, 0], np.linspace(0, 1, DEFAULT_BASIS)), atol=1e-12)
    few = build_gp_term(GpSpec(("x",)), np.repeat([1.0, 2.0, 3.0], 10)[:, None])
    assert few.n_basis == 3


def _frame(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame(
        {
            "y": rng.integers(0, 2, n),
            "age": rng.uniform(20, 80, n),
            "sex": rng.choice(["f", "m"], n),
            "g": rng.integers(0, 6, n),
        }
    )


def test_design_holds_the_basis_and_rebuilds_it_for_new_rows():
    data = _frame()
    design = build_design(parse_formula("y ~ sex + gp(age, k=6) + (1 | g)"), data)
    assert design.x_names == ("(Intercept)", "sex[T.m]") and len(design.gp_terms) == 1
    assert design.gp_bases[0].shape == (60, 6)
    new = design.rematerialize(data.iloc[[3, 1]])
    np.testing.assert_allclose(new.gp_bases[0], design.gp_bases[0][[3, 1]])
    with pytest.raises(FormulaError, match="column 'age' used in the formula is not in newdata"):
        design.rematerialize(data.drop(columns="age"))


def test_design_refuses_categorical_constant_and_imputed_gp_inputs_by_name():
    data = _frame()
    with pytest.raises(DesignError, match="gp\\(sex\\): input 'sex' is object, not numeric"):
        build_design(parse_formula("y ~ gp(sex)"), data)
    with pytest.raises(DesignError, match="input \\['c'\\] is constant"):
        build_design(parse_formula("y ~ gp(age, c)"), data.assign(c=1.0))
    holes = data.assign(age=data["age"].where(data.index % 7 != 0))
    with pytest.raises(DataError, match="'age' has missing values .* input of a gp\\(\\) term"):
        build_design(parse_formula("y ~ gp(age)"), holes, missing="impute")
    dropped = build_design(parse_formula("y ~ gp(age)"), holes, missing="drop")
    assert dropped.n == 51 and dropped.n_dropped == {"age": 9}
    with pytest.raises(DataError, match="'age'"):
        build_design(parse_formula("y ~ gp(age)"), holes)
