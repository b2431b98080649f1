"""The mean-field and the accurate fits' posteriors predict with the rows' and levels' nonzero columns
(bayesvm.linalg.row_pattern) exactly as over every column, on training rows and on new ones."""

import io
import json
import zipfile

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.linalg import compiled
from bayesvm.linalg.level_gains import PatternGains
from bayesvm.results import posterior

from .test_storage import _posterior_states, _rewrite


def _two_sites():
    """People nested in sites (the sites' indicators in the dense part, the people eliminated), and the same people's
    first 60 rows moved to another site: their rows miss the column of the site their training rows touched."""
    rng = np.random.default_rng(4)
    n, sites, people = 360, 40, 120
    person = rng.integers(0, people, n)
    site_of = rng.integers(0, sites, people)
    x = rng.standard_normal(n)
    group = rng.integers(0, 3, n)
    eta = 0.7 * x + 0.5 * (group == 1) + rng.normal(0, 1, people)[person] + rng.normal(0, 0.7, sites)[site_of[person]]
    data = pd.DataFrame({
        "y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), "x": x, "g": np.array(["a", "b", "c"])[group],
        "site": "s" + pd.Series(site_of[person]).astype(str), "person": "p" + pd.Series(person).astype(str),
    })  # fmt: skip
    new = data.iloc[:60].assign(
        site=lambda frame: frame["site"].map(
            dict(zip(sorted(set(data["site"])), sorted(set(data["site"]))[1:] + ["s0"]))
        )
    )
    return data, new


@pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
def test_mean_field_prediction_over_the_pattern_equals_the_dense_one(monkeypatch):
    data, new = _two_sites()
    fit = bayesvm.bsvm("y ~ x + g + (1 | site) + (1 | person)", data, seed=0, vb="meanfield", penalty=1.0)
    assert isinstance(fit.result.theta.gain, PatternGains)
    patterns = []
    original = posterior.row_pattern
    monkeypatch.setattr(posterior, "row_pattern", lambda *args: patterns.append(original(*args)) or patterns[-1])
    with_pattern = [fit.predict_interval(frame) for frame in (data, new)]
    assert patterns and all(p is not None and p.level_ptr.size for p in patterns)
    monkeypatch.setattr(posterior, "row_pattern", lambda *args: None)
    for left, frame in zip(with_pattern, (data, new)):
        np.testing.assert_allclose(left.to_numpy(), fit.predict_interval(frame).to_numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
def test_mixture_prediction_over_the_pattern_equals_the_dense_one(monkeypatch, tmp_path):
    data, new = _two_sites()
    fit = bayesvm.bsvm("y ~ x + g + (1 | site) + (1 | person)", data, seed=0, vb="accurate", penalty=1.0)
    assert fit.result.__class__.__name__ == "IntegratedResult"
    patterns = []
    original = posterior.row_pattern
    monkeypatch.setattr(posterior, "row_pattern", lambda *args: patterns.append(original(*args)) or patterns[-1])
    with_pattern = [fit.predict_interval(frame) for frame in (data, new)]
    assert patterns and all(p is not None and p.level_ptr.size for p in patterns)  # (the sums ran over patterns)
    monkeypatch.setattr(posterior, "row_pattern", lambda *args: None)
    dense = [fit.predict_interval(frame) for frame in (data, new)]
    for left, right in zip(with_pattern, dense):
        np.testing.assert_allclose(left.to_numpy(), right.to_numpy(), rtol=1e-9, atol=1e-12)
    # the nodes keep their gains over the levels' columns, sharing one pair of index arrays, and a saved fit keeps it
    thetas = fit.result.thetas
    assert all(isinstance(t.gain, PatternGains) and t.gain.level_ptr is thetas[0].gain.level_ptr for t in thetas)
    monkeypatch.undo()
    path = tmp_path / "fit.bsvm"
    fit.save(path)
    loaded = bayesvm.load(path)
    kept = loaded.result.thetas
    assert all(isinstance(t.gain, PatternGains) and t.gain.level_cols is kept[0].gain.level_cols for t in kept)
    np.testing.assert_array_equal(loaded.predict_interval(new).to_numpy(), fit.predict_interval(new).to_numpy())
    # a file whose gains point outside the dense part (the compiled predictor reads them unchecked) is refused
    with zipfile.ZipFile(path) as archive:
        graph = json.loads(archive.read("graph.json"))
    (index,) = {state["gain"]["state"]["level_cols"].get("index") for state in _posterior_states(graph)} - {None}

    def out_of_range(entries):
        columns = np.load(io.BytesIO(entries[f"arrays/{index}.npy"]))
        buffer = io.BytesIO()
        np.save(buffer, columns + 10_000)
        entries[f"arrays/{index}.npy"] = buffer.getvalue()

    with pytest.raises(ValueError, match="not on a valid layout"):
        bayesvm.load(_rewrite(path, tmp_path / "evil.bsvm", out_of_range))


@pytest.mark.filterwarnings("ignore::bayesvm.ConvergenceWarning")
@pytest.mark.parametrize("chunk", [posterior.VALUES_AT_ONCE, 500], ids=["one-chunk", "many-chunks"])
@pytest.mark.parametrize("formula", ["y ~ x + g + (1 | person)", "y ~ x + (1 + x | person)", "y ~ x + g"])
def test_sampled_link_from_covariances_equals_the_draws(formula, chunk, monkeypatch):
    """A Gibbs fit's mean and variance of ``f`` from the draws' covariances (on many rows) equal those of each draw's
    ``f`` (the path taken for few rows): training rows, and new rows with unseen people (code -1)."""
    monkeypatch.setattr(posterior, "VALUES_AT_ONCE", chunk)  # (500: levels and rows in chunks of a few)
    data, _ = _two_sites()
    fit = bayesvm.bsvm(formula, data, method="gibbs", draws=150, tune=50, chains=2, cores=1, seed=2, progress=False)
    sampled = fit.posterior
    new = data.iloc[:80].assign(person=lambda frame: np.where(np.arange(80) % 3 == 0, "unseen", frame["person"]))
    for frame in (data, new):
        D, codes, values = fit._rows(frame, True)[0]
        blocked = sampled.result.theta_b.size > 0
        assert frame is data or not blocked or np.any(codes < 0)
        mean, var = sampled._link_from_covariances(D, codes if blocked else None, values, *sampled._flat())
        f = np.concatenate(sampled._per_row(D, codes, values, lambda draws: draws), axis=1)
        np.testing.assert_allclose(mean, f.mean(axis=0), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(var, f.var(axis=0, ddof=1), rtol=1e-9, atol=1e-12)
    # the fit's own link on its training rows takes the covariance path (many rows, few levels and columns)
    D, codes, values = fit._rows(data, True)[0]
    expected = np.concatenate(sampled._per_row(D, codes, values, lambda draws: draws.mean(axis=0)))
    monkeypatch.setattr(type(sampled), "_per_row", lambda *args: pytest.fail("f formed draw by draw"))
    np.testing.assert_allclose(np.asarray(fit.predict(kind="link")), expected, rtol=1e-10, atol=1e-12)


def _crossed(seed: int = 3, n: int = 600, levels: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b, x = rng.integers(0, levels, n), rng.integers(0, levels, n), rng.standard_normal(n)
    eta = 0.3 + 0.8 * x + rng.normal(0, 1, levels)[a] + rng.normal(0, 0.7, levels)[b]
    return pd.DataFrame({
        "y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), "x": x,
        "a": "a" + pd.Series(a).astype(str), "b": "b" + pd.Series(b).astype(str),
    })  # fmt: skip


def test_a_sparse_fit_predicts_its_training_rows_from_its_pattern_as_by_solves(monkeypatch):
    """Two crossed factors on the sparse path: the training rows' variances of ``f`` from the precision's pattern
    (no solves) equal those of the same rows passed as new data (solves), and the mean of ``f`` alone (classes,
    ``kind="link"``, the fit's own one-class check) equals the mean the variances come with."""
    from bayesvm import model

    monkeypatch.setattr(model, "SPARSE_FROM_COLUMNS", 10)  # two factors of 60 levels take the sparse path
    monkeypatch.setattr(model, "MAX_DENSE_WORK", 0.0)
    data = _crossed()
    fit = bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", data, vb="meanfield", seed=1)
    assert fit.problem.is_sparse
    by_solves = fit.predict_interval(data)
    theta = type(fit.posterior.theta)
    monkeypatch.setattr(theta, "solve", lambda *args: pytest.fail("the training rows need no solve"))
    from_pattern = fit.predict_interval()
    link = fit.predict(data, kind="link")  # (the mean alone needs none either)
    monkeypatch.undo()
    np.testing.assert_allclose(from_pattern["sd"], by_solves["sd"], rtol=1e-10)
    np.testing.assert_allclose(fit.predict(kind="link"), by_solves["mean"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(link, by_solves["mean"], rtol=1e-12, atol=1e-12)
    population = fit.predict_interval(include_random=False)  # not the training design: solves
    np.testing.assert_allclose(population["sd"], fit.predict_interval(data, include_random=False)["sd"], rtol=1e-10)


@pytest.mark.parametrize("method", ["vb", "gibbs", "em"])
def test_the_mean_of_f_alone_equals_the_mean_its_variance_comes_with(method):
    """``predict(kind="link")`` and the classes take ``f`` at the coefficients' posterior mean (``f`` is linear in
    them); it equals the mean of :meth:`link` for each view, new levels and population-level rows included."""
    data = _crossed(n=300, levels=12)
    options = {"gibbs": {"chains": 2, "draws": 200, "tune": 100}}.get(method, {})
    fit = bayesvm.bsvm("y ~ x + (1 | a)", data, method=method, seed=2, **options)
    new = data.iloc[:40].assign(a=["new"] * 20 + list(data["a"].iloc[20:40]))
    for rows, include in ((None, True), (new, True), (new, False)):
        expected = fit.predict_interval(rows, include_random=include)["mean"]
        np.testing.assert_allclose(fit.predict(rows, kind="link", include_random=include), expected, atol=1e-10)
        classes = fit.predict(rows, include_random=include)
        assert (classes == fit.model.design.response.decode(np.where(expected > 0, 1.0, -1.0))).all()


def test_the_pseudo_likelihood_of_a_gaussian_q_reuses_the_rows_moments(monkeypatch):
    """Mean-field VB's ``q(f)`` is the normal of ``link``'s moments: ``kind="pseudo"`` averages over it without a
    second pass over the rows, and gives what the view's own ``probability`` gives."""
    data = _crossed(n=300, levels=12)
    fit = bayesvm.bsvm("y ~ x + (1 | a)", data, vb="meanfield", seed=2)
    expected = fit.posterior.probability(fit.problem.D, fit.problem.blocked.codes, fit.problem.blocked.values)
    monkeypatch.setattr(type(fit.posterior), "probability", lambda *args: pytest.fail("a second pass"))
    np.testing.assert_allclose(fit.predict(kind="pseudo"), expected, rtol=1e-12)
