"""The formula's syntax bounds (bayesvm.formula.restricted): term counts from the syntax alone."""

from __future__ import annotations

import pytest

from bayesvm.errors import FormulaError
from bayesvm.formula.restricted import MAX_TERMS, check_formula_part, expanded_terms


def test_a_wide_sum_of_terms_is_counted_term_by_term_however_long():
    """A formula naming thousands of columns (or ``y ~ .`` on a wide frame) is a sum as deep as it is long: counted
    by walking it, not by recursion (which Python stops near 1,000 levels)."""
    wide = " + ".join(f"x{i}" for i in range(3000))
    assert expanded_terms(wide) == 3000
    check_formula_part(wide)
    assert expanded_terms("(a + b + c)**2 + d - e") == 8


def test_powers_and_products_that_explode_are_still_refused():
    assert expanded_terms("(a + b + c + d)**3") == 14
    with pytest.raises(FormulaError, match="expands to about"):
        check_formula_part("*".join(f"x{i}" for i in range(12)))
    assert expanded_terms(" * ".join(f"x{i}" for i in range(12))) > MAX_TERMS


@pytest.mark.parametrize("part, said", [("x + as.factor(g)", "R's as.factor(x) is C(x) here"),
                                        ("as.numeric(x)", "R's as.numeric(x): the column itself here")])  # fmt: skip
def test_r_calls_no_python_parser_reads_are_named_with_what_says_the_same(part, said):
    with pytest.raises(
        FormulaError, match=r"cannot parse formula part .*" + said.replace("(", r"\(").replace(")", r"\)")
    ):
        check_formula_part(part)
