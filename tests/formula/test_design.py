import numpy as np
import pandas as pd
import pytest

from bayesvm.errors import DataError, DesignError, FormulaError
from bayesvm.formula import build_design, parse_formula


@pytest.fixture
def frame():
    return pd.DataFrame(
        {
            "y": ["no", "yes", "no", "yes", "no", "yes"],
            "x": [0.5, 1.0, -1.0, 2.0, 0.0, 1.5],
            "f": ["a", "b", "a", "b", "c", "c"],
            "g": ["2", "10", "2", "1", "10", "1"],
            "h": ["u", "u", "v", "v", "u", "v"],
        }
    )


def design(formula, data, **kw):
    return build_design(parse_formula(formula), data, **kw)


def test_random_intercept_z(frame):
    d = design("y ~ x + (1 | g)", frame)
    (term,) = d.re_terms
    assert list(term.levels) == ["1", "2", "10"]  # numeric order
    Z = d.Z().toarray()
    expected = np.array([[0, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0]], dtype=float)
    np.testing.assert_array_equal(Z, expected)
    assert d.z_names == ["(Intercept)|g[1]", "(Intercept)|g[2]", "(Intercept)|g[10]"]


def test_correlated_slope_is_level_major(frame):
    d = design("y ~ x + (1 + x | g)", frame)
    (term,) = d.re_terms
    assert term.k == 2 and term.correlated
    Z = d.Z().toarray()
    assert Z.shape == (6, 6)
    # row 0 has g = "2" (level index 1): columns 2 (intercept) and 3 (x)
    np.testing.assert_array_equal(Z[0], [0, 0, 1, 0.5, 0, 0])
    assert d.z_names[:2] == ["(Intercept)|g[1]", "x|g[1]"]


def test_independent_terms_split(frame):
    d = design("y ~ x + (1 + x || g)", frame)
    assert [t.term_names for t in d.re_terms] == [("(Intercept)",), ("x",)]
    assert not any(t.correlated for t in d.re_terms)
    assert d.Z().shape == (6, 6)


def test_slope_only(frame):
    d = design("y ~ x + (0 + x | g)", frame)
    (term,) = d.re_terms
    assert term.term_names == ("x",)
    np.testing.assert_allclose(d.Z().toarray().sum(axis=1), frame["x"].to_numpy())


def test_nested_and_interaction_groups(frame):
    d = design("y ~ 1 + (1 | h/g)", frame)
    assert [t.group for t in d.re_terms] == ["h", "h:g"]
    assert list(d.re_terms[1].levels) == sorted({f"{h}:{g}" for h, g in zip(frame.h, frame.g)})
    d2 = design("y ~ 1 + (1 | h:g)", frame)
    assert d2.re_terms[0].group == "h:g"
    assert d2.Z().shape == (6, d2.re_terms[0].n_levels)


def test_crossed(frame):
    d = design("y ~ x + (1 | g) + (1 | h)", frame)
    assert d.groups == {"g": 3, "h": 2}
    assert d.Z().shape == (6, 5)
    np.testing.assert_array_equal(d.Z().toarray().sum(axis=1), 2)


def test_response_codings(frame):
    assert design("y ~ x", frame).response.positive == "yes"
    assert design("y ~ x", frame, positive="no").response.positive == "no"
    for values, pos in [([0, 1, 0, 1, 0, 1], 1), ([-1, 1, -1, 1, -1, 1], 1), ([False, True] * 3, True)]:
        d = design("y ~ x", frame.assign(y=values))
        assert d.response.positive == pos
        np.testing.assert_array_equal(d.y, np.where(np.array(values) == pos, 1.0, -1.0))
    cat = pd.Categorical(frame.y, categories=["yes", "no"])
    assert design("y ~ x", frame.assign(y=cat)).response.positive == "no"


def test_newdata_rebuild_and_unseen_levels(frame):
    d = design("y ~ x + f + (1 | g)", frame)
    new = d.rematerialize(frame.iloc[[0, 3]].assign(g=["10", "99"]))
    np.testing.assert_array_equal(new.X, d.X[[0, 3]])
    np.testing.assert_array_equal(new.codes[0], [2, -1])
    with pytest.raises(DesignError, match=r"column 'f'.*\['zz'\]"):
        d.rematerialize(frame.assign(f=["a", "zz", "a", "b", "c", "c"]))
    with pytest.raises(FormulaError, match="'x'"):
        d.rematerialize(frame.drop(columns="x"))
    pop = d.rematerialize(frame.drop(columns="g"), include_random=False)
    assert (pop.codes[0] == -1).all()


@pytest.mark.parametrize(
    "formula, mutate, error, fragment",
    [
        ("y ~ w", None, FormulaError, "'w'"),
        ("y ~ x + (1 | gg)", None, FormulaError, "'gg'"),
        ("y ~ X", None, FormulaError, r"column 'X' .* did you mean \['x'\]"),
        ("y ~ x", lambda f: f.assign(y="no"), DataError, "two classes"),
        ("y ~ x", lambda f: f.assign(y=["a", "b", "c", "a", "b", "c"]), DataError, "found 3"),
        (
            "y ~ x",
            lambda f: f.assign(y=["no", "yes ", "no", "Yes", "no", "yes"]),
            DataError,
            r"found 4.*'Yes' and 'yes' and 'yes ' differ only in spaces or case.*data\['y'\]\.str\.strip",
        ),
        (
            "y ~ x",
            lambda f: f.assign(y=["no", None, "no", "yes", "no", "yes"]),
            DataError,
            "response 'y' has 1 missing.*use missing='drop'",
        ),
        (
            "y ~ x",
            lambda f: f.assign(x=[0.5, np.nan, np.inf, 1, 2, 3]),
            DataError,
            "'x': 2.*missing='impute' to impute missing predictors",
        ),
        ("y ~ x + (1|g)", lambda f: f.assign(g=["1", None, "2", "2", "1", "1"]), DataError, "'g': 1"),
        ("y ~ x", lambda f: f.iloc[:0], DataError, "no rows"),
        ("y ~ np.log(x)", None, DesignError, "np.log\\(x\\)"),
    ],
)
def test_bad_input_names_the_culprit_and_leaves_data_alone(frame, formula, mutate, error, fragment):
    data = mutate(frame) if mutate else frame
    before = data.copy()
    with pytest.raises(error, match=fragment):
        design(formula, data)
    pd.testing.assert_frame_equal(data, before)


def test_missing_drop_reports(frame):
    data = frame.assign(x=[0.5, np.nan, -1, 2, 0, 1.5])
    before = data.copy()
    d = design("y ~ x", data, missing="drop")
    assert d.n == 5 and d.n_dropped == {"x": 1}
    pd.testing.assert_frame_equal(data, before)


def test_columns_named_like_formulaic_transforms(frame):
    data = frame.assign(cs=[1.0, 2.0, 0.5, 3.0, 1.5, 0.0], poly=[0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    d = design("y ~ cs + poly + x", data)
    np.testing.assert_array_equal(d.X[:, d.x_names.index("cs")], data["cs"])
    np.testing.assert_array_equal(d.X[:, d.x_names.index("poly")], data["poly"])


@pytest.mark.parametrize("missing", ["drop", "impute"])
def test_rows_without_a_response_are_dropped_and_counted_never_imputed(frame, missing):
    """As lme4's na.omit and bambi: missing='drop' and missing='impute' fit the rows where the response is observed
    (the response is never imputed); the input frame is unchanged."""
    data = frame.assign(y=["no", None, "no", "yes", "no", "yes"], x=[0.5, 1.0, np.nan, 2.0, 0.0, 1.5])
    before = data.copy()
    d = design("y ~ x", data, missing=missing)
    if missing == "drop":
        assert d.n == 4 and d.n_dropped == {"y": 1, "x": 1} and list(d.row_index) == [0, 3, 4, 5]
    else:  # x's missing value (row 2) is imputed, row 1 (no response) is dropped
        assert d.n == 5 and d.n_dropped == {"y": 1} and list(d.row_index) == [0, 2, 3, 4, 5]
        assert d.imputation is not None and d.imputation.n_missing == {"x": 1}
    np.testing.assert_array_equal(d.y, [-1, -1, 1, -1, 1] if missing == "impute" else [-1, 1, -1, 1])
    pd.testing.assert_frame_equal(data, before)


def test_a_name_with_an_operator_written_bare_is_told_to_take_backticks():
    """``dose-mg`` unquoted reads as ``dose - mg``: the missing ``dose`` is named, with the column to quote."""
    data = pd.DataFrame({"dose-mg": [0.1, 0.5, 0.9, 1.3], "y": [0, 1, 0, 1]})
    with pytest.raises(FormulaError, match=r"'dose'.*\['dose-mg'\].*backticks, e\.g\. `dose-mg`"):
        build_design(parse_formula("y ~ dose-mg", data.columns), data)
    assert build_design(parse_formula("y ~ `dose-mg`", data.columns), data).x_names == ("(Intercept)", "dose-mg")


def test_a_back_quoted_predictor_with_missing_values_is_imputed_as_its_column():
    rng = np.random.default_rng(4)
    data = pd.DataFrame({"y": np.tile(["a", "b"], 30), "x": rng.normal(size=60), "dose mg": rng.normal(size=60)})
    data.loc[[2, 7], "dose mg"] = np.nan
    design = build_design(parse_formula("y ~ x + `dose mg`"), data, missing="impute")
    assert design.imputation.variables[0] == "dose mg" and design.imputation.n_missing == {"dose mg": 2}


@pytest.mark.parametrize(
    "bars, first, second",
    [("(1 | g) + (1 | g)", "(1 | g)", "(1 | g)"), ("(1 | g) + (1 + x | g)", "(1 | g)", "(1 + x | g)")],
)
def test_a_column_that_two_terms_give_one_grouping_factor_is_refused_naming_both(frame, bars, first, second):
    """Two coefficients per level entering the predictor only through their sum: only the sum of the variances is
    identified, so the fit would report the prior's split of it."""
    with pytest.raises(FormulaError, match="identify only the sum") as caught:
        build_design(parse_formula(f"y ~ x + {bars}"), frame)
    assert f"{first} and {second}" in str(caught.value) and "'(Intercept)'" in str(caught.value)


@pytest.mark.parametrize("bars", ["(x || g)", "(1 | g) + (0 + x | g)", "(1 | g) + (1 | h)"])
def test_terms_with_distinct_columns_or_factors_are_kept(frame, bars):
    design = build_design(parse_formula(f"y ~ x + {bars}"), frame.assign(h=np.arange(len(frame)) % 3))
    assert len(design.re_terms) == 2


def test_a_float_grouping_column_names_the_levels_of_the_integer_one(frame):
    """A column of integers with a missing value is read as float: its levels are the same as the integer column's
    (``3.0`` is level ``3``), for training and for new data; a fit holding float-written levels still finds them."""
    from bayesvm.formula.groups import group_labels, level_codes

    data = pd.DataFrame({"g": [3, 10, -2, 3]})
    as_float = data.assign(g=data["g"].astype(float))
    assert list(group_labels(as_float, ("g",))) == list(group_labels(data, ("g",))) == ["3", "10", "-2", "3"]
    assert list(group_labels(pd.DataFrame({"g": [2.5, np.nan]}), ("g",))) == ["2.5", "nan"]
    written_as_floats = pd.Index(["-2.0", "3.0", "10.0"])
    np.testing.assert_array_equal(level_codes(written_as_floats, group_labels(data, ("g",))), [1, 2, 0, 1])
    np.testing.assert_array_equal(level_codes(pd.Index(["007", "7"]), pd.Index(["7", "8"])), [1, -1])
    d = design("y ~ x + (1 | g)", frame.assign(g=frame["g"].astype(float)))
    assert list(d.re_terms[0].levels) == ["1", "2", "10"]
    new = d.rematerialize(frame.iloc[:2], include_random=True)
    np.testing.assert_array_equal(new.codes[0], [1, 2])


@pytest.mark.parametrize(
    "formula, where",
    [
        ("y ~ y", "the fixed effects"),
        ("y ~ x + C(y)", "the fixed effects"),
        ("y ~ x + (1 | y)", "a grouping factor"),
        ("y ~ x + (0 + y | g)", "a random-effect term"),
    ],
)
def test_the_response_on_the_right_is_refused_naming_where(frame, formula, where):
    """R's model.matrix drops a response repeated on the right with a warning; here it is an error naming the place."""
    with pytest.raises(FormulaError, match=f"response 'y' also appears on the right .*in {where}"):
        design(formula, frame)
    assert "y" not in " ".join(design("y ~ .", frame[["y", "x", "f"]]).x_names)  # '.' leaves the response out


def test_numbers_stored_as_text_hint_writes_the_name_as_a_formula_does(frame):
    """The hint ``C(name)`` backticks a name that is not a plain identifier, as the formula must."""
    spaced = frame.rename(columns={"g": "big g"})
    with pytest.raises(DesignError, match=r"write C\(`big g`\) in the formula"):
        design("y ~ `big g`", spaced)
    with pytest.raises(DesignError, match=r"write C\(g\) in the formula"):
        design("y ~ g", frame)


def test_infinite_values_are_named_apart_from_missing_ones(frame):
    """An infinity is refused with the missing values, and named apart: pandas' dropna() keeps it and imputation
    refuses it, so the message says to replace it."""
    data = frame.assign(x=[0.5, np.inf, -np.inf, 2.0, np.nan, 1.5])
    with pytest.raises(DataError, match=r"'x': 3 .*Of these, 'x': 2 are infinite.*replace\(\[np\.inf, -np\.inf\]"):
        design("y ~ x", data)
    with pytest.raises(DataError) as only_missing:
        design("y ~ x", frame.assign(x=[0.5, 1.0, np.nan, 2.0, 0.0, 1.5]))
    assert "infinite" not in str(only_missing.value)
