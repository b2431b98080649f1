"""One grouping factor of one column: the structure settles separation on [X, Z] exactly as the linear programme does
(the same isolated rows and kind on every case it settles), hands back the cases it cannot certify, and lets the
check run on data too large for the programme."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import bayesvm
from bayesvm.checks import levels
from bayesvm.checks.level_overlap import one_factor_separation
from bayesvm.checks.separation import detect_separation
from bayesvm.formula import build_design, parse_formula


def _case(rng):
    n, J, p = int(rng.integers(30, 300)), int(rng.integers(3, 50)), int(rng.integers(1, 4))
    X = np.column_stack([np.ones(n), rng.normal(size=(n, p - 1))])
    if rng.random() < 0.3:
        X = np.column_stack([X, (rng.random(n) < 0.2).astype(float)])
    codes = rng.integers(0, J, n)
    if rng.random() < 0.3:
        codes[rng.random(n) < 0.1] = -1
    values = np.ones(n) if rng.random() < 0.6 else rng.normal(size=n) * (rng.random(n) > 0.1)
    eta = (
        X @ rng.normal(size=X.shape[1]) * rng.choice([0.5, 3.0])
        + np.where(codes >= 0, values, 0.0) * rng.normal(0.0, rng.choice([0.5, 2.0, 5.0]), J)[np.maximum(codes, 0)]
    )
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-eta)), 1.0, -1.0)
    names = [f"x{j}" for j in range(X.shape[1])] + [f"1 | g[{j}]" for j in range(J)]
    seen = codes >= 0
    Z = sp.csr_matrix((values[seen], (np.flatnonzero(seen), codes[seen])), shape=(n, J))
    return X, codes, values, y, names, sp.hstack([sp.csr_matrix(X), Z], format="csr")


def test_the_structure_gives_the_programmes_answer_wherever_it_settles():
    rng = np.random.default_rng(0)
    settled = 0
    for _ in range(120):
        X, codes, values, y, names, C = _case(rng)
        found = one_factor_separation(X, codes, values, y, names)
        if found is None:
            continue
        settled += 1
        programme = detect_separation(C, y, names, exact_columns=0)
        assert found.kind == programme.kind
        np.testing.assert_array_equal(found.isolated, programme.isolated)
        if found.kind == "quasi-complete":
            assert set(found.columns) <= set(programme.columns)  # (the one-class levels' own columns)
    assert settled > 50  # (most cases; the rest go to the programme)


def test_a_fixed_column_that_separates_the_rest_hands_the_case_back():
    rng = np.random.default_rng(1)
    n = 120
    b = (rng.random(n) < 0.5).astype(float)
    y = np.where(b > 0, 1.0, np.where(rng.random(n) < 0.5, 1.0, -1.0))  # b = 1 only in class 1
    X = np.column_stack([np.ones(n), b])
    codes = rng.integers(0, 10, n)
    names = ["(Intercept)", "b"] + [f"1 | g[{j}]" for j in range(10)]
    assert one_factor_separation(X, codes, np.ones(n), y, names) is None


def test_complete_separation_by_the_levels_names_every_column():
    codes = np.repeat(np.arange(6), 5)
    y = np.where(codes % 2 == 0, 1.0, -1.0)
    X = np.column_stack([np.ones(30), np.linspace(-1, 1, 30)])
    names = ["(Intercept)", "x"] + [f"1 | g[{j}]" for j in range(6)]
    found = one_factor_separation(X, codes, np.ones(30), y, names)
    assert found.kind == "complete" and found.isolated.all() and found.columns == tuple(names)


@pytest.mark.parametrize("n", [30_000])
def test_the_random_effect_check_runs_beyond_the_programmes_size(n):
    rng = np.random.default_rng(2)
    g = rng.integers(0, n // 10, n)
    x = rng.normal(size=n)
    eta = 0.5 + x + rng.normal(0.0, 1.0, n // 10)[g]
    data = pd.DataFrame({"y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), "x": x, "g": g.astype(str)})
    design = build_design(parse_formula("y ~ x + (1 | g)"), data)
    [finding] = levels.random_effect_separation(design.X, design.x_names, design, None)
    assert "not tested" not in finding.message and "alone separate the classes" in finding.message
    rows, positive = design.level_counts(design.re_terms[0])
    one_class = (rows > 0) & ((positive == 0) | (positive == rows))
    assert f"for {int(rows[one_class].sum()):,} of {n:,} rows" in finding.message


def test_past_both_tests_the_levels_of_one_class_are_still_counted(monkeypatch):
    rng = np.random.default_rng(3)
    n = 600
    g = rng.integers(0, 60, n)
    x = rng.normal(size=n)
    eta = 0.5 + x + rng.normal(0.0, 2.0, 60)[g]
    data = pd.DataFrame({"y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), "x": x, "g": g.astype(str)})
    design = build_design(parse_formula("y ~ x + (1 | g)"), data)
    monkeypatch.setattr(levels, "RE_SEPARATION_STRUCTURED_MAX_ROWS", 100)
    monkeypatch.setattr(levels, "RE_SEPARATION_MAX_ROWS", 100)
    found = levels.random_effect_separation(design.X, design.x_names, design, None, bayesvm.Checks())
    assert "not tested" in found[0].message
    assert any("hold one class only" in f.message for f in found[1:])
