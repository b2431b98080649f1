import pytest

from bayesvm.errors import FormulaError
from bayesvm.formula.bars import Bar, parse_formula


@pytest.mark.parametrize(
    "formula, fixed, bars",
    [
        ("y ~ visit*treat + (1|patient)", "visit*treat", [Bar("1", ("patient",))]),
        ("y ~ x + (1 + x | g)", "x", [Bar("1 + x", ("g",))]),
        ("y ~ x + (x | g)", "x", [Bar("x", ("g",))]),
        ("y ~ x + (1 + x || g)", "x", [Bar("1 + x", ("g",), correlated=False)]),
        ("y ~ (0 + x | g) + x", "x", [Bar("0 + x", ("g",))]),
        ("y ~ x + (1 | a/b)", "x", [Bar("1", ("a",)), Bar("1", ("a", "b"))]),
        ("y ~ x + (1 | a) + (1 | b)", "x", [Bar("1", ("a",)), Bar("1", ("b",))]),
        ("y ~ x + (1 | a:b)", "x", [Bar("1", ("a", "b"))]),
        ("y ~ (1 | g)", "1", [Bar("1", ("g",))]),
        ("y ~ np.log(x) + C(f) + (1|g)", "np.log(x) + C(f)", [Bar("1", ("g",))]),
        ("y ~ x - 1 + (1|g)", "x - 1", [Bar("1", ("g",))]),
        ("y ~ x", "x", []),
    ],
)
def test_bar_syntax(formula, fixed, bars):
    parsed = parse_formula(formula)
    assert parsed.response == "y"
    assert parsed.fixed == fixed
    assert list(parsed.bars) == bars


def test_parentheses_inside_back_quoted_names_are_part_of_the_name():
    parsed = parse_formula("y ~ `dose (mg` + `x)` + (1 | `site (a)`)")
    assert parsed.fixed == "`dose (mg` + `x)`"
    assert list(parsed.bars) == [Bar("1", ("site (a)",))]
    with pytest.raises(FormulaError, match="unbalanced"):
        parse_formula("y ~ `dose (mg` + (1 | g")


def test_nested_three_levels():
    bars = parse_formula("y ~ 1 + (1 | a/b/c)").bars
    assert [b.group for b in bars] == [("a",), ("a", "b"), ("a", "b", "c")]
    assert bars[2].group_name == "a:b:c"


@pytest.mark.parametrize(
    "formula, fragment",
    [
        ("y ~ (1|)", "no grouping factor"),
        ("y ~ (|g)", "no terms before the bar"),
        ("y ~ (1|g", "unbalanced"),
        ("y ~ x)", "unbalanced"),
        ("y t", "'~'"),
        ("~ x", "no response"),
        ("y ~ ", "nothing on the right"),
        ("y ~ x | g", "only allowed inside"),
        ("y ~ (1 | g + h)", "grouping factor"),
        ("y ~ x + (1|g) z", "followed by"),
        ("y ~ x ~ z", "exactly one"),
    ],
)
def test_syntax_errors_are_formula_errors(formula, fragment):
    with pytest.raises(FormulaError, match=fragment.replace("(", r"\(").replace("|", r"\|")):
        parse_formula(formula)


def test_formula_error_is_value_error():
    with pytest.raises(ValueError):
        parse_formula("y t")


@pytest.mark.parametrize("lhs", ["cbind(incidence, size - incidence)", "incidence/size"])
def test_an_aggregated_binomial_response_says_to_expand_the_rows(lhs):
    with pytest.raises(FormulaError, match=r"single column name \(one binary outcome per row.*np.repeat"):
        parse_formula(f"{lhs} ~ period + (1 | herd)")
    with pytest.raises(FormulaError, match=r"single column name$"):
        parse_formula("np.log(y) ~ x")


def test_a_column_name_with_a_space_written_bare_is_told_to_take_backticks():
    columns = ["y", "x val", "dose-mg", "z"]
    with pytest.raises(FormulaError, match=r"column name\(s\) \['x val'\] must be written in backticks.*`x val`"):
        parse_formula("y ~ x val + z", columns)
    parsed = parse_formula("y ~ `x val` + `dose-mg`", columns)  # quoted: parsed, no hint needed
    assert parsed.response == "y"
    with pytest.raises(FormulaError) as caught:  # no columns known: formulaic's message alone
        parse_formula("y ~ x val + z")
    assert "backticks" not in str(caught.value)


def test_a_back_quoted_name_may_hold_a_tilde_or_a_bar():
    parsed = parse_formula("y ~ `a~b` + `c|d` + (1 | g)")
    assert parsed.response == "y" and "`a~b`" in parsed.fixed and "`c|d`" in parsed.fixed
    assert parsed.bars == (Bar("1", ("g",)),)
    with pytest.raises(FormulaError, match="exactly one '~'"):
        parse_formula("y ~ x ~ z")
    with pytest.raises(FormulaError, match="only allowed inside a parenthesised"):
        parse_formula("y ~ x | g")
