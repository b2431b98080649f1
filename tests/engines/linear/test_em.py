"""EM / ECME posterior modes: the classical SVM for a fixed penalty, monotone objective."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.svm import SVC

import bayesvm
from bayesvm.engines.linear.em import BREAKDOWN_RTOL, MARGIN_FLOORS, fit_em
from bayesvm.formula import build_design, parse_formula
from bayesvm.model import build_model
from bayesvm.priors import PriorSet
from tests.conftest import simulate_grouped
from tests.engines.linear.test_vb import schur_and_sparse


def _overlapping(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((200, 3))
    y = np.where(X @ [1.0, -1.0, 0.5] + 0.4 * rng.standard_normal(200) + 0.2 > 0, 1, -1)
    return X, y


def _acath():
    frame = bayesvm.datasets.load_acath().dropna(subset=["tvdlm"]).head(600)
    X = np.column_stack([frame["age"], frame["sex"], np.log1p(frame["cad.dur"])])
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, np.where(frame["tvdlm"] == 1, 1, -1)


@pytest.mark.parametrize("dataset", ["overlapping", "acath"])
@pytest.mark.parametrize("alpha", [0.5, 0.1])
def test_mode_equals_linear_svc(dataset, alpha):
    X, y = _overlapping(0) if dataset == "overlapping" else _acath()
    data = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    fit = bayesvm.bsvm("y ~ a + b + c", data, method="em", penalty=alpha, standardize=False)
    svc = SVC(kernel="linear", C=1.0 / (2.0 * alpha), tol=1e-10).fit(X, y)
    ours = fit.fixef.to_numpy()
    np.testing.assert_allclose(ours, np.concatenate([svc.intercept_, svc.coef_[0]]), atol=1e-5)
    # support vectors: SVC's dual-active rows (margin and inside), up to points exactly on the margin
    theirs = set(svc.support_)
    mine = set(fit.support)
    assert len(theirs ^ mine) <= 2, sorted(theirs ^ mine)

    # the SVM objective sum hinge + alpha ||beta||^2: ours is at least as low as libsvm's
    def svm_objective(coef):
        return np.maximum(0.0, 1.0 - y * (coef[0] + X @ coef[1:])).sum() + alpha * coef[1:] @ coef[1:]

    assert svm_objective(ours) <= svm_objective(np.concatenate([svc.intercept_, svc.coef_[0]])) + 1e-9
    # EM is MM for the smoothed objective of each continuation stage: monotone within a stage
    for stage in np.unique(fit.result.stage):
        path = fit.objective[fit.result.stage == stage]
        assert np.all(np.diff(path) >= -1e-9 * abs(path[-1])), stage
    np.testing.assert_array_equal(fit.predict(data) == 1, svc.decision_function(X) > 0)
    assert fit.result.floor_note == ""  # (every floor reached)


def test_ecme_learns_the_penalty_and_stays_monotone():
    X, y = _overlapping(2)
    data = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    design = build_design(parse_formula("y ~ a + b + c"), data)
    problem = build_model(design, "learn", PriorSet(), True).problem()
    result = fit_em(problem)
    assert result.converged
    for stage in np.unique(result.stage):
        path = result.objective[result.stage == stage]
        assert np.all(np.diff(path) >= -1e-9 * abs(path[-1])), stage
    # the CM step: sigma_u^2 is the conditional mode given the slopes
    slopes = result.theta_d[1:]
    a, b = 0.01, 0.01
    np.testing.assert_allclose(result.components[0][0, 0], (b + 0.5 * slopes @ slopes) / (a + 1.5 + 1.0), rtol=1e-8)


def test_separable_data_mode_is_the_hard_margin_limit():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(1, 3, 20), rng.uniform(-3, -1, 20)])
    data = pd.DataFrame({"x": x, "y": np.where(x > 0, 1, -1)})
    fit = bayesvm.bsvm("y ~ x", data, method="em", penalty=1e-3, standardize=False)
    svc = SVC(kernel="linear", C=1.0 / (2e-3), tol=1e-10).fit(x[:, None], data["y"])
    np.testing.assert_allclose(fit.fixef.to_numpy(), [svc.intercept_[0], svc.coef_[0, 0]], atol=1e-5)
    assert np.all(np.isfinite(fit.objective))


@pytest.mark.parametrize("path", ["sparse", "sparse-general"])
def test_sparse_path_mode_equals_the_schur_path(path, monkeypatch):
    """ECME on crossed factors: both sparse solvers follow the Schur path's iterates (the same deterministic map)."""
    data = simulate_grouped(n_groups=25, per_group=6, p=2, seed=3)
    data["h"] = [f"h{k}" for k in np.random.default_rng(0).integers(0, 12, len(data))]
    design = build_design(parse_formula("y ~ x1 + x2 + (1 | g) + (1 | h)"), data)
    problems = schur_and_sparse(design, 1.0, True, path, monkeypatch, priors=PriorSet.paper())
    schur, sparse = (fit_em(problems[name], max_iter=300) for name in ("schur", path))
    np.testing.assert_allclose(sparse.objective, schur.objective, rtol=1e-8)
    np.testing.assert_allclose(sparse.margin, schur.margin, atol=1e-6)
    for a, b in zip(sparse.components, schur.components):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_continuation_stops_where_the_ascent_breaks_down():
    """Correlated random slopes on coded predictors hold most rows on the margin; at small floors the weighted solves
    lose precision and the MM ascent stops being monotone (before: 20,000 iterations of jitter, "NOT converged" on every
    one of 8 simulated sets).  The continuation stops there, the fit is the mode at the last finished floor, and the
    summary says so."""
    rng = np.random.default_rng(1)
    n, J = 400, 20
    g, a, u = rng.integers(0, J, n), rng.integers(0, 3, n), rng.integers(0, 2, n)
    eta = 0.5 * (a == 1) + rng.normal(0, 1, J)[g] + rng.normal(0, 1, J)[g] * u
    data = pd.DataFrame({
        "y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), "a": np.array(["lo", "mid", "hi"])[a], "u": u, "g": g,
    })  # fmt: skip
    fit = bayesvm.bsvm("y ~ a + u + (1 + u | g)", data, method="em")
    result = fit.result
    assert result.converged and result.n_iter < 5000
    broken = result.stage[-1]
    assert f"the margin floor stopped at {MARGIN_FLOORS[broken - 1]:.0e}" in result.floor_note
    path = result.objective[result.stage == broken]
    assert path[-1] < path[:-1].max() - BREAKDOWN_RTOL * abs(path[:-1].max())  # the drop that stopped it
    for stage in range(broken):  # every finished stage ascended
        finished = result.objective[result.stage == stage]
        assert np.all(np.diff(finished) >= -BREAKDOWN_RTOL * abs(finished[-1])), stage
    # the fit is the last finished stage's mode: its margins give its rows on the margin
    assert f"{int(np.sum(result.margin >= -1e-6)):,} rows on or inside the margin" in result.floor_note
    summary = str(fit.summary())
    assert "OK       convergence: converged; the margin floor stopped" in summary
    kept = result.objective[result.stage == broken - 1][-1]  # the criterion is the kept mode's objective
    assert f"log posterior at the mode {kept:.2f}" in summary


class _ToyAscent:
    """A state for ``continued_ascent`` whose proposals approach 1 geometrically (``x <- x + (1 - x) / 2``) with an
    objective ``-(1 - x)^2``, each new floor moving it back by 0.001; ``drop_at``: the iteration whose objective
    falls (a breakdown)."""

    def __init__(self, drop_at=None):
        self.x, self.previous, self.iteration, self.drop_at = 0.0, None, 0, drop_at
        self.reweighted, self.restored = [], None

    def propose(self, eps):
        self.iteration += 1
        new = self.x + 0.5 * (1.0 - self.x)
        value = -((1.0 - new) ** 2) - (1.0 if self.iteration == self.drop_at else 0.0)
        return new, value

    def accept(self, proposal, eps):
        moved = None if self.previous is None else (abs(proposal - self.previous), 1.0 + abs(proposal))
        self.x = self.previous = proposal
        return moved

    def snapshot(self):
        return self.x

    def restore(self, snapshot):
        self.x, self.restored = snapshot, snapshot
        self.margin = np.zeros(3)  # (three rows on the margin)

    def reweight(self, eps):  # (a new floor moves the mode a little: the next stage takes several iterations)
        self.reweighted.append(eps)
        self.x -= 1e-3


def test_the_continuation_driver_walks_every_floor_and_goes_back_on_a_breakdown():
    """``continued_ascent``: each stage ends when the change falls below ``tol`` times the scale, the next floor's
    weights are set, and the run ends at the last floor; an objective that drops after a finished stage returns the
    state to that stage's end and says so; ``max_iter`` ends it unfinished."""
    from bayesvm.engines.linear.em import MARGIN_FLOORS, FloorContinuation, continued_ascent

    toy, floors = _ToyAscent(), FloorContinuation()
    assert continued_ascent(toy, floors, 1e-6, 10_000)
    assert floors.stage == len(MARGIN_FLOORS) - 1 and toy.reweighted == list(MARGIN_FLOORS[1:])
    assert len(floors.objective) == len(floors.stages) and floors.note == ""
    broken, floors = _ToyAscent(drop_at=25), FloorContinuation()
    assert continued_ascent(broken, floors, 1e-6, 10_000)
    assert broken.restored is not None and "rows on or inside the margin" in floors.note
    assert "3 rows" in floors.note
    assert not continued_ascent(_ToyAscent(), FloorContinuation(), 1e-6, 5)
