"""Formulas that try to run code or exhaust memory: each is refused with a FormulaError/BayesvmError naming the term,
quickly, and no marker file appears.  The tricks follow what formulaic's parser and Python's tokenizer treat
specially: backticks inside and outside string literals (every quote style, escapes, raw and triple-quoted strings),
braces, keyword arguments a transform would accept from Python (``out=``, ``hash_func=``, formulaic's own ``_state``
and ``_context``), look-alike characters that Python folds into ASCII names, dunder names reached through quoting,
and calls hidden in a bar's left-hand side or a gp() term."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError
from bayesvm.formula.interpreter import check_term, term_variables

N = 50
FAST = {"vb": "meanfield", "max_iter": 20}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(3)
    data = pd.DataFrame(
        {
            "x1": rng.normal(size=N),
            "x2": rng.normal(size=N),
            "f": rng.choice(list("abc"), N),
            "g": rng.choice(list("pqrs"), N),
        }
    )
    data["y"] = (data.x1 + rng.normal(size=N) > 0).astype(int)
    return data


def _payloads(marker) -> list[str]:
    """Expressions that would create ``marker`` if any Python evaluated them."""
    touch = f"touch {marker}"
    return [
        f"__import__('os').system('{touch}')",
        f"np.lib._npyio_impl.os.system('{touch}')",
        f"open('{marker}', 'w')",
        f"getattr(__import__('os'), 'system')('{touch}')",
        f"(lambda: __import__('os').system('{touch}'))()",
        f"[__import__('os').system('{touch}') for _ in [1]][0]",
        f"np.save('{marker}', x1)",
        f"eval(\"__import__('os').system('{touch}')\")",
        f"exec(\"__import__('os').system('{touch}')\")",
        f"x1.__class__.__base__.__subclasses__()[0]('{touch}')",
        f"__builtins__['__import__']('os').system('{touch}')",
        f"globals()['__builtins__'].__import__('os').system('{touch}')",
        f"(x := __import__('os').system('{touch}'))",
        f"__ｉｍｐｏｒｔ__('os').system('{touch}')",  # full-width letters: Python folds them into __import__
        f"ｅｖａｌ(\"__import__('os').system('{touch}')\")",
    ]


def _formulas(marker) -> dict[str, str]:
    cases = {}
    for i, payload in enumerate(_payloads(marker)):
        cases[f"term {i}"] = f"y ~ x1 + I({payload})"
        cases[f"braces {i}"] = f"y ~ x1 + {{{payload}}}"
        cases[f"transform argument {i}"] = f"y ~ x1 + center({payload}, x1)"
        cases[f"contrasts {i}"] = f"y ~ x1 + C(f, {payload})"
        cases[f"levels {i}"] = f"y ~ x1 + C(f, levels={payload})"
        cases[f"bar {i}"] = f"y ~ x1 + (1 + I({payload}) | g)"
    touch = f"touch {marker}"
    cases.update(
        {
            # backticks inside string literals, which formulaic's sanitiser skips and a regex would not
            "backticks in double quotes": f'y ~ x1 + I("``x1`"[np.lib._npyio_impl.os.system("{touch}")] + "``x1`")',
            "backticks in single quotes": f"y ~ x1 + I('``x1`'[np.lib._npyio_impl.os.system('{touch}')] + '``x1`')",
            "backticks in a bar": f'y ~ x1 + (I("``x1`"[np.lib._npyio_impl.os.system("{touch}")] + "``x1`") | g)',
            "backticks in triple quotes": f"y ~ x1 + I('''``x1`'''[__import__('os').system('{touch}')])",
            "escaped quote before a backtick": f"y ~ x1 + I('\\'`x1`'[__import__('os').system('{touch}')])",
            "raw string": f'y ~ x1 + I(r\'`x1\\\'[__import__("os").system("{touch}")]\')',
            "f-string": f"y ~ x1 + I(f\"{{__import__('os').system('{touch}')}}\")",
            "quoted dunder name": f"y ~ x1 + I(`__import__`('os').system('{touch}'))",
            "quoted name as callee": f"y ~ x1 + `__import__('os').system('{touch}')`",
            "numpy keyword out": "y ~ x1 + np.log(x2 ** 2, out=x2)",
            "hash function": "y ~ x1 + hashed(f, 5, hash_func=print)",
            "formulaic state keyword": "y ~ x1 + center(x1, _state={'center': 0})",
            "formulaic context keyword": "y ~ x1 + Q('x1', _context=None)",
            "keyword unpacking": "y ~ x1 + center(**{'data': x1})",
            "argument unpacking": "y ~ x1 + np.log(*[x2])",
            "a column named like code": f"y ~ x1 + Q(\"__import__('os').system('{touch}')\")",
            "gp kernel": f"y ~ x1 + gp(x2, kernel=__import__('os').system('{touch}'))",
            "group of code": f"y ~ x1 + (1 | __import__('os').system('{touch}'))",
        }
    )
    return cases


CASES = list(_formulas("MARKER"))


@pytest.mark.parametrize("case", CASES)
def test_formula_code_is_refused_and_never_runs(frame, case, tmp_path):
    marker = tmp_path / "ran"
    formula = _formulas(marker)[case]
    before = frame.copy(deep=True)
    started = time.perf_counter()
    with pytest.raises(BayesvmError):
        bayesvm.bsvm(formula, frame, **FAST)
    assert time.perf_counter() - started < 10
    assert not marker.exists(), case
    pd.testing.assert_frame_equal(frame, before)


def test_required_variables_never_evaluate_text(tmp_path):
    """formulaic's own required_variables evaluates a call's callee; the package's reading of a term only parses."""
    marker = tmp_path / "ran"
    for text in (f"(__import__('os').system('touch {marker}'))(x)", f"center(x)(__import__('os').system('{marker}'))"):
        with pytest.raises(BayesvmError):
            term_variables(text)
    assert not marker.exists()
    used = term_variables("np.log(`my col`) + poly(cs, 2) + C(g, contr.sum) + Q('z z')")
    assert sorted(used) == ["cs", "g", "my col", "z z"]


BOUNDED = {
    # case: (formula, words the message must contain)
    "tower of powers": ("y ~ I(9**9**9)", ["9 ** 9 ** 9", "power"]),
    "huge integer": ("y ~ I(10**10**10)", ["power"]),
    "huge literal": ("y ~ I(x1 * " + "9" * 400 + ")", ["bits"]),
    "polynomial degree": ("y ~ poly(x1, 10**7)", ["degree", "10,000,000"]),
    "polynomial past the data": ("y ~ poly(x1, 60)", ["degree 60", "distinct"]),
    "spline df": ("y ~ bs(x1, df=10**8)", ["df", "100,000,000"]),
    "spline df past the data": ("y ~ cr(x1, df=80)", ["df=80", "distinct"]),
    "spline knots": ("y ~ bs(x1, knots=[" + ",".join(["0.1"] * 500) + "])", ["knots"]),
    "text repetition": ("y ~ I('a' * 10**10)", ["arithmetic on text"]),
    "list repetition": ("y ~ I([1] * 10**9)", ["arithmetic on a list"]),
    "text column arithmetic": ("y ~ I(f * 10**10)", ["not numeric"]),
    "hashed levels": ("y ~ hashed(f, levels=10**12)", ["levels", "1,000,000,000,000"]),
    "lag": ("y ~ lag(x1, 10**12)", ["k"]),
    "long list": ("y ~ C(f, levels=[" + ",".join(["'a'"] * 20_000) + "])", ["characters", "at most"]),
    "deep nesting": ("y ~ I(" + "-" * 5000 + "x1)", ["nested"]),
}


@pytest.mark.parametrize("case", list(BOUNDED))
def test_requests_beyond_the_data_are_refused_before_they_run(frame, case):
    formula, words = BOUNDED[case]
    started = time.perf_counter()
    with pytest.raises(BayesvmError) as info:
        bayesvm.bsvm(formula, frame, **FAST)
    assert time.perf_counter() - started < 10
    for word in words:
        assert word in str(info.value), (case, str(info.value))


def test_an_interaction_too_wide_for_memory_is_refused_before_it_is_built():
    """``C(a):C(b)`` with 2,000 x 2,001 levels: fewer main-effect columns than the fixed part's bound, but formulaic
    would build four million interaction columns."""
    rows = 9_000
    rng = np.random.default_rng(0)
    data = pd.DataFrame(
        {
            "a": [f"a{i % 2000}" for i in range(rows)],
            "b": [f"b{(i * 7) % 2001}" for i in range(rows)],
            "y": rng.integers(0, 2, rows),
        }
    )
    started = time.perf_counter()
    with pytest.raises(BayesvmError, match=r"C\(a\):C\(b\).*columns"):
        bayesvm.bsvm("y ~ C(a):C(b)", data, **FAST)
    assert time.perf_counter() - started < 60


@pytest.mark.parametrize(
    "term",
    ["log(x)", "np.log1p(`my col` ** 2)", "C(g, contr.sum)", "C(g, Treatment('b'))", "poly(x, 3)", "bs(x, df=4)",
     "hashed(g, 10)", "I(x > 0 & y < 1)", "Q('my col')", "center(x) + scale(x, ddof=0)", "np.where(x > 0, x, 0)"],
)  # fmt: skip
def test_the_grammar_accepts_what_formulas_use(term):
    check_term(term)


def test_the_command_line_refuses_code_in_a_formula(frame, tmp_path):
    marker = tmp_path / "ran"
    csv = tmp_path / "data.csv"
    frame.to_csv(csv, index=False)
    formula = f'y ~ x1 + I("``x1`"[np.lib._npyio_impl.os.system("touch {marker}")] + "``x1`")'
    done = subprocess.run(
        [sys.executable, "-m", "bayesvm", "fit", formula, str(csv), "--vb", "meanfield"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Subscript" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "formula, words",
    [
        ("y ~ (x1 + x2 + f + g + x1:x2 + f:g + x1:f + x2:g + x1:g + x2:f)^10", ["terms"]),
        ("y ~ (x1 + x2)**1000000", ["exponent 1,000,000"]),
        ("y ~ x1*x2*f*g*x1*x2*f*g*x1*x2*f*g", ["terms"]),
    ],
)
def test_formulas_that_expand_combinatorially_are_refused_before_formulaic_expands_them(frame, formula, words):
    started = time.perf_counter()
    with pytest.raises(BayesvmError) as info:
        bayesvm.bsvm(formula, frame, **FAST)
    assert time.perf_counter() - started < 10
    for word in words:
        assert word in str(info.value)
