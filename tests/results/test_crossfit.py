"""Cross-fitting's alignment of fold fits onto the full fit's scale (bayesvm.results.crossfit)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayesvm.results.crossfit import ALIGN_MIN_ROWS, align_decision_values


def test_alignment_is_the_identity_between_equal_fits():
    rng = np.random.default_rng(0)
    values = rng.normal(0.3, 1.2, 500)
    aligned, scale = align_decision_values(values[:100], values, values)
    np.testing.assert_allclose(aligned, values[:100], atol=0.02)
    np.testing.assert_allclose(scale, 1.0)


def test_alignment_undoes_a_squeeze_towards_the_margin():
    """A fold fit squeezed towards |f| = 1 (f = 1 + 0.5 (f_full - 1)) is carried back onto the full fit's scale,
    each side with its own factor, and its variances with the squeeze's inverse square."""
    rng = np.random.default_rng(1)
    full = np.r_[rng.normal(1.0, 0.3, 4000), rng.normal(-1.0, 0.2, 3000)]
    full = full[np.abs(full) > 0.05]
    squeezed = np.sign(full) * (1.0 + 0.5 * (np.abs(full) - 1.0))
    held_full = np.r_[rng.normal(1.0, 0.3, 300), rng.normal(-1.0, 0.2, 300)]
    held_full = held_full[np.abs(held_full) > 0.3]
    held = np.sign(held_full) * (1.0 + 0.5 * (np.abs(held_full) - 1.0))
    aligned, scale = align_decision_values(held, squeezed, full)
    np.testing.assert_allclose(aligned, held_full, atol=0.03)
    np.testing.assert_allclose(scale, 2.0, rtol=0.05)


def test_alignment_leaves_a_thin_side_alone():
    rng = np.random.default_rng(2)
    source = np.r_[rng.normal(1, 0.3, 500), -rng.uniform(0.1, 2, ALIGN_MIN_ROWS - 1)]
    target = 2.0 * source
    values = np.array([0.8, -0.5, -1.5])
    aligned, scale = align_decision_values(values, source, target)
    assert aligned[0] > 1.2 and scale[0] > 1.5  # the positive side is rescaled
    np.testing.assert_array_equal(aligned[1:], values[1:])  # too few negative rows: unchanged
    np.testing.assert_array_equal(scale[1:], 1.0)


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=30),
    shift=st.floats(-1.0, 1.0),
    stretch=st.floats(0.05, 20.0),
    seed=st.integers(0, 2**16),
)
def test_alignment_never_moves_a_value_across_the_boundary(values, shift, stretch, seed):
    rng = np.random.default_rng(seed)
    source = rng.normal(shift, 1.0, 400)
    target = stretch * rng.normal(-shift, 1.0, 400)
    values = np.asarray(values)
    aligned, scale = align_decision_values(values, source, target)
    np.testing.assert_array_equal(aligned > 0, values > 0)
    assert np.all(np.isfinite(aligned)) and np.all((scale >= 0.25) & (scale <= 4.0))


def test_cross_fitted_predictions_keep_each_folds_ranking():
    import bayesvm
    from bayesvm.results.crossfit import cross_fitted_predictions
    from tests.conftest import simulate_logistic

    data, formula = simulate_logistic(400, 3, seed=5)
    fit = bayesvm.bsvm(formula, data, vb="meanfield", seed=1)
    frame = cross_fitted_predictions(fit, folds=4, seed=1)
    assert {"mean", "var", "new_var", "y", "fold", "unaligned_mean"} <= set(frame.columns)
    for _, fold in frame.groupby("fold"):
        order = np.argsort(fold["unaligned_mean"].to_numpy())
        assert np.all(np.diff(fold["mean"].to_numpy()[order]) >= -1e-12)
        np.testing.assert_array_equal(fold["mean"] > 0, fold["unaligned_mean"] > 0)
    assert "alignment" not in frame.attrs


def test_a_fold_left_unaligned_is_named_in_the_map(monkeypatch):
    """A fit that cannot predict its own training rows leaves its fold unaligned, and the map's description says
    which (the probabilities are still learned, from the fold's own scale)."""
    import bayesvm
    import bayesvm.results.crossfit as crossfit
    from tests.conftest import simulate_logistic

    data, formula = simulate_logistic(300, 2, seed=6)
    fit = bayesvm.bsvm(formula, data, vb="meanfield", seed=1)
    calls = {"folds": 0}
    real = crossfit._training_decision_values

    def failing_second(some_fit, rows):
        if some_fit is fit:
            return real(some_fit, rows)
        calls["folds"] += 1
        return None if calls["folds"] % 3 == 2 else real(some_fit, rows)  # every second fold fit of three fails

    monkeypatch.setattr(crossfit, "_training_decision_values", failing_second)
    frame = crossfit.cross_fitted_predictions(fit, folds=3, seed=1)
    assert frame.attrs["alignment"].startswith("fold(s) [2] not carried onto the full fit's scale")
    held = frame["fold"] == 1
    np.testing.assert_array_equal(frame.loc[held, "mean"], frame.loc[held, "unaligned_mean"])
    assert not np.array_equal(frame.loc[~held, "mean"], frame.loc[~held, "unaligned_mean"])
    assert (
        "fold(s) [2] not carried onto the full fit's scale"
        in fit.calibrate(folds=3, seed=1, method="crossfit").describe()
    )


def test_fold_fits_of_a_gibbs_fit_cap_the_sampler_settings_the_default_tune_included():
    """A Gibbs fit's fold refits run at most FOLD_GIBBS; ``tune=None`` (the engine's default, 1,000 or 2,000) is
    capped like a given value, not read as a number."""
    from bayesvm.results.crossfit import FOLD_GIBBS, FitCall, _fold_options

    auto = FitCall("bsvm", "y ~ x", None, {"method": "gibbs", "tune": None, "draws": "auto", "chains": 4})
    assert _fold_options(auto, fold=0, seed=1)["draws"] == FOLD_GIBBS["draws"]  # draws="auto" (was int("auto"))
    for tune, expected in ((None, FOLD_GIBBS["tune"]), (200, 200), (5000, FOLD_GIBBS["tune"])):
        call = FitCall("bsvm", "y ~ x", None, {"method": "gibbs", "tune": tune, "draws": 1000, "chains": 4})
        options = _fold_options(call, fold=2, seed=7)
        assert options["tune"] == expected
        assert options["draws"] == FOLD_GIBBS["draws"] and options["chains"] == FOLD_GIBBS["chains"]
        assert options["seed"] == 9


def test_fold_fits_impute_the_full_fits_variables_when_their_training_rows_miss_none():
    """One missing value (in a nullable integer column): the fold that holds that row out trains on complete rows.
    Its fit still imputes the variable (as the full fit does), so it predicts the held-out row, every fold fit
    succeeds and no fold is left out of the calibration (before: the fold failed and the map was learned without
    it, with a warning)."""
    import warnings

    import pandas as pd

    import bayesvm
    from bayesvm.results.crossfit import cross_fitted_predictions

    rng = np.random.default_rng(0)
    n = 200
    data = pd.DataFrame(
        {"x": rng.normal(size=n), "count": pd.array(rng.integers(0, 5, n), dtype="Int64"), "z": rng.normal(size=n)}
    )
    data["y"] = np.where(data["x"] + 0.5 * data["count"].astype(float) + rng.logistic(size=n) > 1.0, "yes", "no")
    data.loc[3, "count"] = pd.NA
    fit = bayesvm.bsvm("y ~ x + count + z", data, missing="impute", vb="meanfield", seed=1)
    assert "count" in fit.model.design.imputation.variables
    frame = cross_fitted_predictions(fit, folds=4, seed=1)
    assert len(frame) == n and np.all(np.isfinite(frame["mean"])) and np.all(np.isfinite(frame["var"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probabilities = fit.predict(data, kind="prob")
    assert not [w for w in caught if "cross-fitting" in str(w.message)], [str(w.message) for w in caught]
    assert np.all(np.isfinite(probabilities))


def test_a_fold_fit_given_imputation_variables_keeps_the_fit_of_complete_data():
    """``FoldDesign.impute_also`` on complete data: the imputation model has nothing to impute, and the coefficients are the
    complete-data imputation fit's (the same engine; the variable is only added to the normal model)."""
    import bayesvm
    from bayesvm.formula.design import FoldDesign
    from tests.conftest import simulate_logistic

    data, formula = simulate_logistic(200, 2, seed=3)
    column = [c for c in data.columns if c.startswith("x")][0]
    plain = bayesvm.bsvm(formula, data, missing="impute", vb="meanfield", seed=1)
    forced = bayesvm.bsvm(
        formula, data, missing="impute", vb="meanfield", seed=1, _fold_design=FoldDesign(impute_also=(column,))
    )
    assert plain.model.design.imputation is None
    assert column in forced.model.design.imputation.variables
    np.testing.assert_allclose(forced.fixef.to_numpy(), plain.fixef.to_numpy(), atol=0.05)


@pytest.mark.parametrize(
    "formula, kind",
    [("y ~ x + a", "linear"), ("y ~ bs(x, df=4)", "linear"), ("y ~ x + a", "kernel"), ("y ~ x + a", "pcvm")],
)
def test_fold_fits_build_the_full_fits_columns(formula, kind):
    """A factor level on one row, and a ``bs()`` basis whose boundary knots are the training range: the fold that
    holds out that row (or the extreme ``x``) used to fail to predict it, and every probability fell back to the
    prior's unit map.  Fold fits now build their columns with the full fit's spec, so every fold predicts its
    held-out rows and the map is learned from all of them."""
    import warnings

    import pandas as pd

    import bayesvm

    rng = np.random.default_rng(3)
    n = 200
    data = pd.DataFrame({"x": rng.normal(size=n), "a": rng.choice(list("pqr"), n)})
    data.loc[7, "a"] = "rare"
    data["y"] = (np.sin(2 * data["x"]) + (data["a"] == "q") + rng.logistic(size=n) > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-row level separates its row
        if kind == "linear":
            fit = bayesvm.bsvm(formula, data, vb="meanfield", seed=1)
        elif kind == "kernel":
            fit = bayesvm.bsvm(formula, data, kernel=bayesvm.kernels.RBF(), inducing=20, seed=1)
        else:
            fit = bayesvm.pcvm(formula, data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        description = fit.calibrate(folds=4, seed=1, method="crossfit").describe()
    assert not [w for w in caught if "cross-fitting" in str(w.message)], [str(w.message) for w in caught]
    assert "4-fold cross-fitted" in description and "prior only" not in description
    if kind == "linear":
        assert list(fit.model.design.x_names) == list(fit.fixef.index)


def test_fold_fits_in_worker_processes_equal_the_serial_ones(monkeypatch):
    """Fold fits side by side in worker processes (a full fit of at least FOLD_PROCESSES_FROM_SECONDS) give the serial
    ones' moments; a Gibbs fit's folds run their chains serially inside the workers (which may not start processes of
    their own); a fold that fails in a worker is named."""
    import bayesvm
    import bayesvm.results.crossfit as crossfit
    from tests.conftest import simulate_logistic

    data, formula = simulate_logistic(300, 3, seed=8)
    fits = [
        bayesvm.bsvm(formula, data, vb="meanfield", seed=1),
        bayesvm.bsvm(formula, data, method="gibbs", draws=40, tune=20, chains=2, cores=2, seed=1, progress=False),
    ]
    started = []
    real_run = crossfit.run_in_processes
    monkeypatch.setattr(
        crossfit, "run_in_processes", lambda *args, **kwargs: started.append(args[1]) or real_run(*args, **kwargs)
    )
    for fit in fits:
        monkeypatch.setattr(crossfit, "fold_processes", lambda fit, folds: 1)  # (not by how long the fit took)
        serial = crossfit.cross_fitted_predictions(fit, folds=3, seed=1)
        monkeypatch.setattr(crossfit, "fold_processes", lambda fit, folds: 2)
        parallel = crossfit.cross_fitted_predictions(fit, folds=3, seed=1)
        monkeypatch.undo()
        monkeypatch.setattr(
            crossfit, "run_in_processes", lambda *args, **kwargs: started.append(args[1]) or real_run(*args, **kwargs)
        )
        for column in ["mean", "var", "new_var", "unaligned_mean"]:
            np.testing.assert_allclose(parallel[column], serial[column], rtol=1e-9, atol=1e-12, err_msg=column)
    assert started == [2, 2]
    refit = crossfit.REFITTERS["bsvm"]

    def second_fold_fails(formula, rows, **options):
        if options["seed"] == 2:  # the fit's seed 1, fold k = 1
            raise ValueError("no variance left")
        return refit(formula, rows, **options)

    monkeypatch.setitem(crossfit.REFITTERS, "bsvm", second_fold_fails)
    monkeypatch.setattr(crossfit, "fold_processes", lambda fit, folds: 2)
    with pytest.raises(
        crossfit.CrossFitError, match=r"folds other than 2 of 3 failed \(ValueError: no variance left\)"
    ):
        crossfit.cross_fitted_predictions(fits[0], folds=3, seed=1)


def test_fold_processes_only_for_fits_that_take_time(monkeypatch):
    import bayesvm.results.crossfit as crossfit

    class Quick:
        class result:
            elapsed = 0.2

    class Slow:
        class result:
            elapsed = 30.0

    monkeypatch.setattr("bayesvm.arguments.default_cores", lambda chains: min(chains, 2))
    assert crossfit.fold_processes(Quick(), 5) == 1 and crossfit.fold_processes(Slow(), 5) == 2
    assert crossfit.fold_processes(object(), 5) == 1  # (no record of the time: as a quick fit)


def test_an_accurate_fits_folds_refit_the_coefficients_at_its_heaviest_variance_nodes(monkeypatch, toenail):
    """Each fold of an accurate fit is fitted at the full fit's nodes holding 99.9% of the weight, with their weights
    (no search, no weighting of its own); the probabilities of the map learned from those folds are those of folds
    that integrate over their own variance parameters, to within 0.02."""
    import warnings

    import bayesvm
    import bayesvm.engines.linear.ep as ep
    import bayesvm.results.crossfit as crossfit
    from bayesvm.engines.hyper_grid import GIVEN_MASS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail)
    nodes = crossfit.variance_nodes(fit)
    heaviest = np.sort(fit.result.weights)[::-1][: nodes.weights.size]
    assert heaviest.sum() >= GIVEN_MASS and heaviest[:-1].sum() < GIVEN_MASS
    np.testing.assert_allclose(nodes.weights, heaviest / heaviest.sum())
    assert nodes.weights.size < fit.result.weights.size and nodes.components == ("penalty", "(1 | patientID)")
    given = []
    real = ep.fit_accurate
    monkeypatch.setattr(ep, "fit_accurate", lambda problem, **k: given.append(k.get("given")) or real(problem, **k))
    monkeypatch.setattr(crossfit, "fold_processes", lambda fit, folds: 1)
    fit.calibrate(folds=3, seed=1)
    at_nodes = fit.predict(toenail, kind="prob").to_numpy()
    assert len(given) == 3 and all(g is not None and np.array_equal(g.nodes, nodes.nodes) for g in given)
    monkeypatch.setattr(crossfit, "variance_nodes", lambda fit: None)
    fit.calibrate(folds=3, seed=1)
    integrated = fit.predict(toenail, kind="prob").to_numpy()
    assert given[3:] == [None, None, None]
    assert np.max(np.abs(at_nodes - integrated)) < 0.02
