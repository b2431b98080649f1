"""Out-of-core data: a dask DataFrame on a 2-worker LocalCluster gives the in-memory fit."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError, DataError
from bayesvm.kernels import RBF

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        with distributed.Client(cluster) as client:
            yield client
        cluster.close()


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    n = 900
    X = rng.normal(size=(n, 3))
    data = pd.DataFrame(X, columns=["a", "b", "c"])
    data["g"] = pd.Categorical(rng.choice(["u", "v", "w"], n))
    signal = X @ [1.0, -1.0, 0.3] + (data["g"] == "v") * 0.5 + 0.5 * rng.logistic(size=n)
    data["y"] = pd.Categorical(np.where(signal > 0, "yes", "no"))
    return data


@pytest.mark.parametrize("penalty", ["learn", 0.5])
def test_streamed_vb_equals_in_memory_vb(client, frame, penalty):
    ddf = dd.from_pandas(frame, npartitions=3)
    memory = bayesvm.bsvm("y ~ a + b + c + g", frame, penalty=penalty, tol=1e-12, vb="meanfield")
    streamed = bayesvm.bsvm("y ~ a + b + c + g", ddf, penalty=penalty, tol=1e-12)
    np.testing.assert_allclose(streamed.fixef, memory.fixef, atol=1e-5)
    np.testing.assert_allclose(streamed.fixef_cov, memory.fixef_cov, atol=1e-7)
    assert streamed.lower_bound[-1] == pytest.approx(memory.lower_bound[-1], abs=1e-5)
    assert np.all(np.diff(streamed.lower_bound) >= -1e-8 * np.abs(streamed.lower_bound[1:]))
    text = str(streamed.summary())
    assert "Number of obs: 900" in text and "out-of-core" in text
    np.testing.assert_allclose(streamed.predict(frame, kind="pseudo"), memory.predict(frame, kind="pseudo"), atol=1e-5)


def test_streamed_fit_round_trips_through_the_safe_format(client, frame, tmp_path):
    streamed = bayesvm.bsvm("y ~ a + b + c + g", dd.from_pandas(frame, npartitions=3), vb="meanfield")
    streamed.calibrate(folds=2)  # cross-fitted through dask: two streamed fold fits (five by default; suite time)
    prob = streamed.predict(frame, kind="prob")
    assert streamed.calibration_map().n == len(frame)
    memory = bayesvm.bsvm("y ~ a + b + c + g", frame, vb="meanfield")
    memory.calibrate(folds=2)
    memory = memory.predict(frame, kind="prob")
    assert np.abs(prob - memory).max() < 0.03  # other folds, the same calibration
    loaded = bayesvm.load(streamed.save(tmp_path / "streamed.bsvm"))
    np.testing.assert_array_equal(loaded.predict(frame, kind="prob"), prob)
    assert str(loaded.summary()) == str(streamed.summary())
    with pytest.raises(BayesvmError, match="held-out rows"):  # the lazy data are not in the file
        loaded.calibrate()
    assert loaded.calibrate(newdata=frame).source == "held-out"


def test_streamed_svi_equals_in_memory_svi(client, frame):
    one = dd.from_pandas(frame, npartitions=1)
    memory = bayesvm.bsvm("y ~ a + b + c + g", frame, method="svi", seed=3)
    streamed = bayesvm.bsvm("y ~ a + b + c + g", one, method="svi", seed=3)
    np.testing.assert_allclose(streamed.fixef, memory.fixef, rtol=1e-10, atol=1e-12)
    assert streamed.n_iter == memory.n_iter
    three = bayesvm.bsvm("y ~ a + b + c + g", dd.from_pandas(frame, npartitions=3), method="svi", seed=3, tol=1e-6)
    sd = np.sqrt(np.diag(memory.fixef_cov))
    assert np.max(np.abs(three.fixef - memory.fixef) / sd) < 0.5


def test_streamed_kernel_svi_equals_in_memory(client, frame):
    one = dd.from_pandas(frame, npartitions=1)
    memory = bayesvm.bsvm("y ~ a + b", frame, kernel=RBF(), method="svi", inducing=15, seed=4)
    streamed = bayesvm.bsvm("y ~ a + b", one, kernel=RBF(), method="svi", inducing=15, seed=4)
    np.testing.assert_allclose(streamed.predict(frame, kind="link"), memory.predict(frame, kind="link"), atol=1e-8)


def _grouped(seed: int = 5, n: int = 600, levels: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, levels, n)
    X = rng.normal(size=(n, 2))
    eta = X @ [1.0, -0.8] + rng.normal(0, 1, levels)[g] + np.sin(2 * X[:, 1])
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(
        y=pd.Categorical(np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")),
        g=pd.Categorical([f"g{j:02d}" for j in g]),
        clinic=rng.integers(0, 5, n),  # a numeric grouping factor
    )
    frame.loc[frame.index[-40:], "g"] = "g00"  # (the last partition holds a level the first does not)
    return frame


def test_streamed_vb_with_random_effects_equals_in_memory_vb(client):
    """Issue 23: dask data with random effects.  The levels come from every partition, the random effects
    stream as dense columns, and the sweeps are those of in-memory mean-field VB: the same optimum."""
    frame = _grouped()
    ddf = dd.from_pandas(frame, npartitions=3)
    formula = "y ~ a + b + (1 | g) + (1 | clinic)"
    memory = bayesvm.bsvm(formula, frame, vb="meanfield", tol=1e-12)
    streamed = bayesvm.bsvm(formula, ddf, tol=1e-12)
    assert streamed.converged and streamed.model.design.groups == {"g": 30, "clinic": 5}
    np.testing.assert_allclose(streamed.fixef, memory.fixef, atol=1e-5)
    np.testing.assert_allclose(streamed.ranef["g"], memory.ranef["g"], atol=1e-5)
    assert [v.mean[0, 0] for v in streamed.variance_components] == pytest.approx(
        [v.mean[0, 0] for v in memory.variance_components], rel=1e-4
    )
    assert np.all(np.diff(streamed.lower_bound) >= -1e-8 * np.abs(streamed.lower_bound[1:]))
    new = frame.head(6).assign(g=pd.Categorical(["g03", "g03", "g07", "g07", "g09", "g09"]))
    np.testing.assert_allclose(streamed.predict(new, kind="link"), memory.predict(new, kind="link"), atol=1e-5)
    assert "Groups" in str(streamed.summary())
    svi = bayesvm.bsvm(formula, ddf, method="svi", seed=2, tol=1e-6)
    sd = np.sqrt(np.diag(memory.fixef_cov))
    assert svi.converged and np.max(np.abs(svi.fixef - memory.fixef) / sd) < 0.5


def test_streamed_gp_term_with_random_effects_fits(client):
    frame = _grouped()
    fit = bayesvm.bsvm("y ~ a + gp(b, k=10) + (1 | g)", dd.from_pandas(frame, npartitions=3))
    assert fit.converged and [v.label for v in fit.variance_components] == ["penalty", "(1 | g)", "gp(b)"]
    effect = fit.gp_effect(newdata=pd.DataFrame({"b": [-2.0, 2.0]}))
    assert effect["mean"].iloc[0] > effect["mean"].iloc[1] + 1.0  # -0.8 b + sin(2 b): 2.4 at b = -2, -2.4 at 2


def test_streamed_errors_name_the_problem(client, frame):
    ddf = dd.from_pandas(frame, npartitions=2)
    with pytest.raises(BayesvmError, match="method"):
        bayesvm.bsvm("y ~ a", ddf, method="gibbs")
    text = frame.assign(h=frame["g"].astype(str))
    with pytest.raises(DataError, match="categorize"):
        bayesvm.bsvm("y ~ a + h", dd.from_pandas(text, npartitions=2))
    holes = frame.copy()
    holes.loc[[3, 500], "b"] = np.nan
    with pytest.raises(DataError, match="'b': 2"):
        bayesvm.bsvm("y ~ a + b", dd.from_pandas(holes, npartitions=2))
    dropped = bayesvm.bsvm("y ~ a + b", dd.from_pandas(holes, npartitions=2), missing="drop")
    assert dropped.model.design.n == 898 and dropped.model.design.n_dropped == {"b": 2}
    fit = bayesvm.bsvm("y ~ a", ddf)
    with pytest.raises(BayesvmError, match="pass newdata"):
        fit.predict()


SELECTION = {
    "laplace-zero": bayesvm.priors.LaplaceZero(rho=0.5),
    "spike-slab": bayesvm.priors.SpikeSlab(),
    "lasso": bayesvm.priors.Lasso(),
}


@pytest.mark.parametrize("name", list(SELECTION))
def test_streamed_selection_vb_makes_the_in_memory_plain_sweeps(client, frame, name):
    """A selection prior on dask data: one pass per sweep gives exactly the in-memory engine's plain coordinate
    ascent (``accelerate=False``), sweep for sweep, including the spike-and-slab's two starts and model moves; the
    in-memory default (SQUAREM) reaches the plain ascent's optimum."""
    from bayesvm.engines.selection.lasso_vb import fit_lasso_vb
    from bayesvm.engines.selection.spike_slab_vb import fit_spike_slab_vb
    from bayesvm.engines.selection.vb import fit_laplace_zero_vb

    prior = SELECTION[name]
    formula = "y ~ a + b + c + g" + (" + (1 | site)" if name == "laplace-zero" else "")
    frame = frame.assign(site=pd.Categorical(np.arange(len(frame)) % 12))  # (g as a fixed factor: not a group too)
    # (a tolerance of 1e-7: the spike-and-slab's plain ascent takes 263 dask passes at 1e-10, 150 here)
    streamed = bayesvm.bsvm(formula, dd.from_pandas(frame, npartitions=3), prior=prior, tol=1e-7)
    memory = bayesvm.bsvm(formula, frame, prior=prior, tol=1e-10, vb="meanfield")  # (in memory Laplace-zero: EP)
    engine = {"laplace-zero": fit_laplace_zero_vb, "spike-slab": fit_spike_slab_vb, "lasso": fit_lasso_vb}[name]
    plain = engine(memory.model.selection_problem(), tol=1e-7, max_iter=2000, accelerate=False)
    result = streamed.result
    assert result.n_iter == plain.n_iter and len(result.lower_bound) == len(plain.lower_bound)
    np.testing.assert_allclose(result.lower_bound, plain.lower_bound, rtol=1e-9)
    np.testing.assert_allclose(result.mean, plain.mean, atol=1e-8)
    np.testing.assert_allclose(result.include, plain.include, atol=1e-8)
    assert np.all(np.diff(result.lower_bound) >= -1e-8 * np.abs(result.lower_bound[1:]))
    # the plain ascent run to 1e-10 (in memory: cheap) reaches the default's optimum
    converged = engine(memory.model.selection_problem(), tol=1e-10, max_iter=5000, accelerate=False)
    # (the sites have no effect in these data: the bound is flat along their variance, where the two ascents, each
    # converged to 1e-10, stop 2.4e-4 apart)
    apart = 5e-4 if name == "laplace-zero" else 1e-4
    np.testing.assert_allclose(converged.mean, memory.result.mean, atol=apart)
    np.testing.assert_allclose(converged.include, memory.result.include, atol=apart)
    np.testing.assert_allclose(streamed.fixef, memory.fixef, atol=5e-3)  # (stopped at 1e-7)
    assert "out-of-core" in str(streamed.summary())


def test_streamed_selection_svi_equals_in_memory_svi(client, frame):
    prior = bayesvm.priors.SpikeSlab()
    one = dd.from_pandas(frame, npartitions=1)
    memory = bayesvm.bsvm("y ~ a + b + c", frame, prior=prior, method="svi", seed=3)
    streamed = bayesvm.bsvm("y ~ a + b + c", one, prior=prior, method="svi", seed=3)
    np.testing.assert_allclose(streamed.fixef, memory.fixef, rtol=1e-10, atol=1e-12)
    assert streamed.n_iter == memory.n_iter


def test_streamed_refusals_give_the_reason(client, frame):
    ddf = dd.from_pandas(frame, npartitions=2)
    with pytest.raises(BayesvmError, match="stochastic mean-field VB"):
        bayesvm.bsvm("y ~ a + b", ddf, vb="accurate", method="svi")
    with pytest.raises(BayesvmError, match="its accurate fit .EP with a site per slope. runs on in-memory data"):
        bayesvm.bsvm("y ~ a + b", ddf, vb="accurate", prior=bayesvm.priors.LaplaceZero())
    with pytest.raises(BayesvmError, match="replaces the penalty"):
        bayesvm.bsvm("y ~ a + b", ddf, prior=bayesvm.priors.SpikeSlab(), penalty=0.5)


def test_the_accurate_fit_out_of_core_keeps_its_sites_on_the_workers_and_equals_the_in_memory_fit(client):
    """EP's sites stay beside the partitions (a level's rows shuffled into one partition for the exact level
    integrals): the nodes, their importance-sampled weights and the moments are the in-memory accurate fit's (its
    PSIS check off: out of core there is none); without ``vb`` the streamed fit is mean-field and says why."""
    frame = _grouped(seed=7, n=500, levels=25)
    ddf = dd.from_pandas(frame, npartitions=3)
    formula = "y ~ a + b + (1 | g)"
    memory = bayesvm.bsvm(formula, frame, vb="accurate", penalty=None, checks=bayesvm.Checks(vb_check="ignore"))
    streamed = bayesvm.bsvm(formula, ddf, vb="accurate", penalty=None)
    assert streamed.converged and streamed.result.node_weights.method == "importance"
    np.testing.assert_allclose(streamed.result.nodes, memory.result.nodes, atol=1e-6)
    np.testing.assert_allclose(streamed.result.weights, memory.result.weights, atol=1e-6)
    np.testing.assert_allclose(streamed.fixef, memory.fixef, atol=1e-6)
    np.testing.assert_allclose(np.sqrt(np.diag(streamed.fixef_cov)), np.sqrt(np.diag(memory.fixef_cov)), rtol=1e-5)
    assert streamed.variance_components[0].mean[0, 0] == pytest.approx(memory.variance_components[0].mean[0, 0], 1e-6)
    text = str(streamed.summary())
    assert "accurate VB" in text and "no PSIS check for out-of-core data" in text
    assert "the separation checks (classes split by the fixed effects" in text
    default = bayesvm.bsvm(formula, ddf, penalty=None)
    text = str(default.summary())
    assert default.result.posterior_form != "mixture" and "vb='accurate' gives the accurate fit" in text
    assert "compare with vb='accurate' (or method='gibbs' on a sample in memory)" in text


def test_a_grouping_factor_of_thousands_of_levels_streams_by_level_and_equals_in_memory_vb(client):
    """More levels than one dense q takes (2,000 coefficients): the factor streams as per-level sums, eliminated
    on the driver as in memory, and gives the in-memory mean-field optimum."""
    rng = np.random.default_rng(0)
    n, levels = 8000, 2500
    g = rng.integers(0, levels, n)
    a, b = rng.normal(size=n), rng.normal(size=n)
    eta = 0.5 + a - 0.5 * b + rng.normal(size=levels)[g]
    frame = pd.DataFrame(
        {
            "y": pd.Categorical(np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no")),
            "a": a,
            "b": b,
            "g": pd.Categorical([f"p{k:05d}" for k in g]),
        }
    )
    formula = "y ~ a + b + (1 | g)"
    # both until the lower bound stops changing in double precision (each in SQUAREM cycles: the streamed ones on the
    # row sums, tests/engines/linear/test_stream_vb.py)
    streamed = bayesvm.bsvm(formula, dd.from_pandas(frame, npartitions=3), tol=1e-16, max_iter=5000)
    memory = bayesvm.bsvm(formula, frame, vb="meanfield", tol=1e-16, max_iter=5000)
    assert streamed.converged and streamed.model.design.groups == {"g": len(np.unique(g))}
    np.testing.assert_allclose(streamed.fixef, memory.fixef, atol=1e-7)
    np.testing.assert_allclose(streamed.ranef["g"], memory.ranef["g"], atol=1e-6)
    np.testing.assert_allclose(streamed.ranef_sd["g"], memory.ranef_sd["g"], rtol=1e-6)
    assert streamed.variance_components[0].mean[0, 0] == pytest.approx(
        memory.variance_components[0].mean[0, 0], rel=1e-6
    )
    assert np.all(np.diff(streamed.lower_bound) >= -1e-8 * np.abs(streamed.lower_bound[1:]))
    new = frame.head(4).assign(g=pd.Categorical(["p00003", "p00003", "unseen", "p02000"]))
    np.testing.assert_allclose(streamed.predict(new, kind="link"), memory.predict(new, kind="link"), atol=1e-5)


def test_two_large_crossed_factors_out_of_core_are_refused_naming_the_dense_one(client):
    rng = np.random.default_rng(1)
    n = 6000
    frame = pd.DataFrame(
        {
            "y": pd.Categorical(rng.choice(["yes", "no"], n)),
            "a": rng.normal(size=n),
            "g": pd.Categorical([f"g{k:05d}" for k in rng.integers(0, 2600, n)]),
            "h": pd.Categorical([f"h{k:05d}" for k in rng.integers(0, 2200, n)]),
        }
    )
    with pytest.raises(BayesvmError, match=r"largest grouping factor 'g' level by level.*'h' \(2,\d{3}\)"):
        bayesvm.bsvm("y ~ a + (1 | g) + (1 | h)", dd.from_pandas(frame, npartitions=2))


@pytest.mark.parametrize("kind", ["class", "prob", "link", "pseudo"])
def test_predicting_a_dask_frame_gives_a_dask_series_equal_to_the_pandas_prediction(client, frame, kind):
    fit = bayesvm.bsvm("y ~ a + b + c + g", frame, vb="meanfield")
    ddf = dd.from_pandas(frame, npartitions=3)
    lazy = fit.predict(ddf, kind=kind)
    assert isinstance(lazy, dd.Series)
    pd.testing.assert_series_equal(lazy.compute(), fit.predict(frame, kind=kind))
    if kind == "class":
        balanced = fit.predict(ddf, threshold=0.3).compute()
        pd.testing.assert_series_equal(balanced, fit.predict(frame, threshold=0.3))
        interval = fit.predict_interval(ddf, level=0.9)
        assert isinstance(interval, dd.DataFrame)
        pd.testing.assert_frame_equal(interval.compute(), fit.predict_interval(frame, level=0.9))


def test_a_kernel_fit_predicts_a_dask_frame_as_it_predicts_pandas(client, frame):
    fit = bayesvm.bsvm("y ~ a + b", frame.iloc[:300], kernel=RBF(), inducing=15, seed=1)
    ddf = dd.from_pandas(frame, npartitions=2)
    pd.testing.assert_series_equal(fit.predict(ddf, threshold=0.4).compute(), fit.predict(frame, threshold=0.4))
    pd.testing.assert_series_equal(fit.predict(ddf, kind="link").compute(), fit.predict(frame, kind="link"))


def test_a_first_partition_of_missing_values_only_takes_the_prototype_from_the_next(client):
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"x": rng.normal(size=400), "g": pd.Categorical(rng.integers(0, 15, 400).astype(str))})
    frame["y"] = (frame["x"] + rng.logistic(size=400) > 0).astype(int)
    frame.loc[:49, "x"] = np.nan  # (the first of 8 partitions)
    ddf = dd.from_pandas(frame, npartitions=8)
    streamed = bayesvm.bsvm("y ~ x + (1 | g)", ddf, missing="drop", tol=1e-12)
    memory = bayesvm.bsvm("y ~ x + (1 | g)", frame.dropna(), vb="meanfield", tol=1e-12)
    np.testing.assert_allclose(streamed.fixef, memory.fixef, atol=1e-5)
    with pytest.raises(DataError, match=r"missing or non-finite values in 'x': 50"):
        bayesvm.bsvm("y ~ x + (1 | g)", ddf)
    with pytest.raises(DataError, match="fewer than 2 rows complete"):
        bayesvm.bsvm("y ~ x + (1 | g)", dd.from_pandas(frame.assign(x=np.nan), npartitions=2), missing="drop")


def test_out_of_core_checks_count_each_factors_levels_and_its_levels_of_one_class(client):
    """The pass that reads the data counts every level's rows and classes: the level checks and a factor whose levels
    each hold one class are found as in memory (a warning naming the factor, and in summary())."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"x": rng.normal(size=300), "g": pd.Categorical(np.repeat(list("abcdef"), 50))})
    frame["y"] = frame["g"].isin(["a", "b", "c"]).astype(int)
    frame["clinic"] = pd.Categorical(np.tile(["k1", "k2", "k3"], 100))
    ddf = dd.from_pandas(frame, npartitions=3)
    with pytest.warns(bayesvm.IdentifiabilityWarning, match="6 of the 6 levels of 'g' hold one class only"):
        fit = bayesvm.bsvm("y ~ x + (1 | g)", ddf)
    assert "determined by its prior" in str(fit.summary())
    assert [f.check for f in fit.diagnostics.findings] == ["re_separation"]
    with pytest.warns(bayesvm.IdentifiabilityWarning, match="'clinic' has only 3 levels"):
        bayesvm.bsvm("y ~ x + (1 | clinic)", ddf)
    memory = bayesvm.bsvm("y ~ x + (1 | clinic)", frame, vb="meanfield")
    streamed = bayesvm.bsvm("y ~ x + (1 | clinic)", ddf, checks=bayesvm.Checks(nlevels="ignore"))
    assert [f.check for f in memory.diagnostics.findings if f.check == "nlevels"] == ["nlevels"]
    assert not any(f.action == "warn" for f in streamed.diagnostics.findings)


def test_a_constant_column_out_of_core_is_named_as_aliased_with_the_intercept(client, frame):
    ddf = dd.from_pandas(frame.assign(const=2.5), npartitions=3)
    with pytest.warns(bayesvm.IdentifiabilityWarning, match=r"the column\(s\) 'const' are constant over every row"):
        fit = bayesvm.bsvm("y ~ a + b + const", ddf)
    assert [f.check for f in fit.diagnostics.findings] == ["rank"]
    quiet = bayesvm.bsvm("y ~ a + b", ddf)
    assert not quiet.diagnostics.findings


def _with_holes(seed: int = 11, n: int = 800, levels: int = 20) -> pd.DataFrame:
    """A random intercept, a numeric predictor and a factor with missing values, and a few rows without a response."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, levels, n)
    a = rng.normal(size=n)
    b = 0.6 * a + 0.8 * rng.normal(size=n)
    kind = rng.choice(["p", "q", "r"], n, p=[0.5, 0.3, 0.2])
    f = 0.2 + a - 0.7 * b + 0.6 * (kind == "q") + rng.normal(0, 0.7, levels)[g]
    data = pd.DataFrame({"y": np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-2 * f)), "yes", "no"), "a": a, "b": b,
                         "kind": pd.Categorical(kind), "g": pd.Categorical(g.astype(str))})  # fmt: skip
    data.loc[rng.uniform(size=n) < 0.2, "b"] = np.nan
    data.loc[rng.uniform(size=n) < 0.1, "kind"] = np.nan
    data.loc[rng.uniform(size=n) < 0.02, "y"] = np.nan
    data["y"] = pd.Categorical(data["y"])
    return data


def test_missing_predictors_out_of_core_are_imputed_beside_their_partitions_as_in_memory(client):
    data = _with_holes()
    formula = "y ~ a + b + kind + (1 | g)"
    control = bayesvm.Control(imputation="mi", imputations=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(formula, dd.from_pandas(data, npartitions=4), missing="impute", seed=1,
                           control=bayesvm.Control(imputations=10))  # fmt: skip
        memory = bayesvm.bsvm(formula, data, missing="impute", vb="meanfield", seed=1, control=control)
    # the imputation model's scale, placeholders and counts are the in-memory ones
    ours, theirs = fit.model.design.imputation, memory.model.design.imputation
    assert ours.variables == theirs.variables and ours.placeholders == theirs.placeholders
    np.testing.assert_allclose(ours.observed_mean, theirs.observed_mean, rtol=1e-12)
    np.testing.assert_allclose(ours.observed_sd, theirs.observed_sd, rtol=1e-12)
    assert ours.n_missing == theirs.n_missing and ours.incomplete_rows == theirs.incomplete_rows
    assert fit.model.design.n_dropped == memory.model.design.n_dropped == {"y": int(data["y"].isna().sum())}
    # the pooled posterior is the in-memory one within Monte Carlo error (10 imputations: the pooled means move by up
    # to half a posterior SD between seeds; imputations that ignored the class would move b's by several)
    ours, theirs = fit.summary().fixed, memory.summary().fixed
    assert np.all(np.abs(ours["mean"] - theirs["mean"]) < 0.75 * theirs["sd"])
    np.testing.assert_allclose(ours["sd"], theirs["sd"], rtol=0.5)  # (the between-imputation part: 10 draws of it)
    # ... and the pooled draws carry the spread between the completed data sets (engine scale; b and kind imputed)
    pooled = fit.result.theta_d.reshape(-1, fit.result.theta_d.shape[-1]).std(axis=0)
    within = np.mean([np.sqrt(np.diag(f.theta.cov_d)) for f in fit.result.fits], axis=0)
    assert np.all(pooled[2:5] > 1.05 * within[2:5])
    report, expected = fit.imputation_report(), memory.imputation_report()
    assert sorted(zip(report.rows["row"], report.rows["variable"])) == sorted(
        zip(expected.rows["row"], expected.rows["variable"])
    )
    np.testing.assert_allclose(report.variables["imputed_mean"], expected.variables["imputed_mean"], atol=0.1)
    text = str(fit.summary())
    assert "multiple imputation" in text and "Imputed: b" in text and "vb='accurate' gives the accurate fit" in text
    holes = data.dropna(subset=["y"]).head(40)
    predicted = fit.predict(dd.from_pandas(holes, npartitions=2), kind="link").compute()
    np.testing.assert_allclose(predicted.to_numpy(), fit.predict(holes, kind="link"), rtol=1e-12)
    assert np.isfinite(predicted).all()


def test_the_accurate_fit_imputes_out_of_core_with_an_accurate_fit_per_completed_data_set(client):
    data = _with_holes(n=300).drop(columns="g")
    control = bayesvm.Control(imputation="mi", imputations=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ a + b", dd.from_pandas(data, npartitions=2), missing="impute", vb="accurate",
                           penalty=None, seed=2, control=control)  # fmt: skip
        memory = bayesvm.bsvm("y ~ a + b", data, missing="impute", vb="accurate", penalty=None, seed=2, control=control)
    assert fit.result.engine == "accurate" and len(fit.result.fits) == 2
    assert "accurate VB" in str(fit.summary())
    ours, theirs = fit.summary().fixed, memory.summary().fixed
    assert np.all(np.abs(ours["mean"] - theirs["mean"]) < 0.6 * theirs["sd"])


def test_out_of_core_imputation_refusals_name_the_reason(client):
    data = _with_holes(n=200)
    ddf = dd.from_pandas(data, npartitions=2)
    with pytest.raises(BayesvmError, match="the joint model .imputation='joint'. .* runs on in-memory data"):
        bayesvm.bsvm("y ~ a + b", ddf, missing="impute", control=bayesvm.Control(imputation="joint"))
    with pytest.raises(BayesvmError, match="selection prior with missing='impute' runs on in-memory data"):
        bayesvm.bsvm("y ~ a + b", ddf, missing="impute", prior=bayesvm.priors.LaplaceZero())
    with pytest.raises(BayesvmError, match="fitted by method='vb' .multiple imputation"):
        bayesvm.bsvm("y ~ a + b", ddf, missing="impute", method="svi")
    holes = data.assign(g=data["g"].astype(object))
    holes.loc[[3, 7], "g"] = np.nan
    holes["g"] = pd.Categorical(holes["g"])
    with pytest.raises(DataError, match="grouping variable 'g' has 2 missing value.s. .rows .3, 7.."):
        bayesvm.bsvm("y ~ a + (1 | g)", dd.from_pandas(holes, npartitions=2), missing="impute")
    with pytest.raises(ValueError, match="'b' has missing values and appears in the term 'a:b'"):
        bayesvm.bsvm("y ~ a * b", ddf, missing="impute")
    with pytest.raises(DataError, match="'b' has no observed value to impute from"):  # (no row is complete in b)
        bayesvm.bsvm("y ~ a + b", dd.from_pandas(data.assign(b=np.nan), npartitions=2), missing="impute")


def test_the_arviz_export_of_out_of_core_data_leaves_out_the_rows_log_likelihood_and_says_so(client, frame):
    fit = bayesvm.bsvm("y ~ a + b", dd.from_pandas(frame, npartitions=2))
    with pytest.warns(UserWarning, match="no log_likelihood group for out-of-core data"):
        idata = fit.to_inference_data(draws=200)
    assert "log_likelihood" not in idata.groups() and "posterior" in idata.groups()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit.to_inference_data(draws=200, log_likelihood=False)


def test_a_term_the_fixed_effects_can_express_is_found_out_of_core_as_in_memory(client):
    """``y ~ x + C(g) + (1 | g)`` out of core: the pass over the partitions sums the span check's cross-products, so
    the term whose every effect the fixed part can express is refused (lme4's nobs_vs_nlev action) and named on
    request as in memory; the same factor beside another fixed factor is not named."""
    from bayesvm.checks import Checks, IdentifiabilityError

    rng = np.random.default_rng(1)
    n = 600
    frame = pd.DataFrame({"x": rng.standard_normal(n), "g": pd.Categorical(rng.integers(0, 12, n).astype(str)),
                          "h": pd.Categorical(rng.integers(0, 12, n).astype(str))})  # fmt: skip
    frame["y"] = (rng.random(n) < 1 / (1 + np.exp(-frame["x"]))).astype(int)
    ddf = dd.from_pandas(frame, npartitions=3)
    with pytest.raises(IdentifiabilityError, match="the fixed effects can express every one of its effects"):
        bayesvm.bsvm("y ~ x + C(g) + (1 | g)", ddf)
    with pytest.warns(bayesvm.IdentifiabilityWarning, match="remove 'g' from the fixed part"):
        fit = bayesvm.bsvm("y ~ x + C(g) + (1 | g)", ddf, checks=Checks(nobs_vs_nlev="warn"), max_iter=5)
    assert "nobs_vs_nlev" in [f.check for f in fit.diagnostics.findings]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bayesvm.bsvm("y ~ x + C(h) + (1 | g)", ddf, max_iter=5)
    assert not any("can express" in str(w.message) for w in caught)
