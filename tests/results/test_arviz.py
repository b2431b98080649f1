import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import bayesvm
from bayesvm.results.arviz import (
    arviz_major_version,
    as_datatree,
    as_inference_data,
    fit_to_datasets,
    group_names,
    make_container,
)


@pytest.fixture(scope="module")
def fit(toenail):
    return bayesvm.bsvm("outcome ~ visit * treatment + (1 + visit | patientID)", toenail, vb="meanfield")


def test_inference_data_groups_and_coordinates(fit):
    idata = fit.to_inference_data(draws=400, seed=3)
    assert group_names(idata) == {"posterior", "observed_data", "log_likelihood", "lower_bound"}
    post = idata.posterior
    assert list(post["coef"].values) == list(fit.fixef.index)
    assert post["u_patientID"].shape == (4, 100, 294, 2)  # independent draws from q, split into 4 chains
    assert list(post["patientID_term"].values) == ["(Intercept)", "visit"]
    assert post["sd_patientID"].shape == (4, 100, 2) and post["cor_patientID"].shape == (4, 100, 2, 2)
    assert list(post["patientID_term_sd"].values) == ["(Intercept)", "visit"]
    assert "decision scale" in post["beta"].attrs["description"]
    np.testing.assert_array_equal(idata.lower_bound["lower_bound"].values, fit.lower_bound)
    assert idata.observed_data.attrs["positive_class"] == "moderate or severe"


def test_draws_match_the_variational_posterior(fit):
    post = fit.to_inference_data(draws=4000, seed=1).posterior
    beta = post["beta"].values.reshape(-1, post["beta"].shape[-1])
    sd = np.sqrt(np.diag(fit.fixef_cov.to_numpy()))
    assert np.all(np.abs(beta.mean(axis=0) - fit.fixef.to_numpy()) < 4 * sd / np.sqrt(4000))
    np.testing.assert_allclose(beta.std(axis=0), sd, rtol=0.06)
    u = post["u_patientID"].values.reshape((-1,) + post["u_patientID"].shape[2:])
    np.testing.assert_allclose(u.mean(axis=0), fit.ranef["patientID"].to_numpy(), atol=0.1)
    np.testing.assert_allclose(u.std(axis=0), fit.ranef_sd["patientID"].to_numpy(), rtol=0.15)


def test_arviz_summary_runs(fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    table = az.summary(fit.to_inference_data(draws=200), var_names=["beta"], kind="stats")
    assert len(table) == 4 and table["sd"].gt(0).all()


def test_both_containers_hold_the_same_groups(fit):
    groups = fit_to_datasets(fit, draws=50)
    tree = as_datatree(groups)
    assert isinstance(tree, xr.DataTree)
    assert group_names(tree) == set(groups)
    xr.testing.assert_identical(tree["posterior"].to_dataset(), groups["posterior"])
    container = make_container(groups)
    if arviz_major_version() >= 1:
        assert isinstance(container, xr.DataTree)
    else:
        idata = as_inference_data(groups)
        assert group_names(idata) == set(groups)
        xr.testing.assert_identical(idata.posterior, groups["posterior"])


@pytest.fixture(scope="module")
def gibbs_fit(toenail):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        return bayesvm.bsvm(
            "outcome ~ visit * treatment + (1 | patientID)",
            toenail,
            penalty=None,
            method="gibbs",
            draws=300,
            tune=200,
            chains=2,
            seed=3,
            progress=False,
        )


def _az():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def test_gibbs_inference_data_has_sample_stats_and_log_likelihood(gibbs_fit):
    idata = gibbs_fit.to_inference_data()
    assert {"posterior", "sample_stats", "log_likelihood", "observed_data"} <= group_names(idata)
    assert idata.posterior["beta"].shape == (2, 300, 4)
    np.testing.assert_array_equal(idata.sample_stats["lp"].values, gibbs_fit.result.log_posterior)
    # log_likelihood = log of the normalised pseudo-likelihood at each draw
    from bayesvm.results.prediction import pseudo_probability

    beta = idata.posterior["beta"].values[0, 5]
    u = idata.posterior["u_patientID"].values[0, 5, :, 0]
    design = gibbs_fit.model.design
    f = design.X @ beta + u[design.re_terms[0].codes]
    expected = np.log(np.where(design.y > 0, pseudo_probability(f), 1 - pseudo_probability(f)))
    np.testing.assert_allclose(idata.log_likelihood["outcome"].values[0, 5], expected, rtol=1e-10, atol=1e-12)
    az = _az()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata)
        assert np.isfinite(getattr(loo, "elpd_loo", getattr(loo, "elpd", np.nan)))
        if hasattr(az, "waic"):  # ArviZ 1.x dropped WAIC in favour of PSIS-LOO
            assert np.isfinite(az.waic(idata).elpd_waic)


def test_netcdf_round_trip_gives_the_same_summary(gibbs_fit, tmp_path):
    az = _az()
    idata = gibbs_fit.to_inference_data()
    path = tmp_path / "fit.nc"
    idata.to_netcdf(str(path))
    loaded = az.from_netcdf(str(path))
    pd.testing.assert_frame_equal(az.summary(idata, var_names=["beta"]), az.summary(loaded, var_names=["beta"]))


def test_plots_run(gibbs_fit):
    import matplotlib

    matplotlib.use("Agg")
    az = _az()
    idata = gibbs_fit.to_inference_data(log_likelihood=False)
    assert az.plot_trace(idata, var_names=["beta", "sd_patientID"]) is not None
    assert az.plot_forest(idata, var_names=["beta"]) is not None
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("method", ["vb", "gibbs", "em"])
def test_save_and_load_round_trip(toenail, gibbs_fit, method, tmp_path):
    if method == "gibbs":
        fit = gibbs_fit
    elif method == "em":
        fit = bayesvm.bsvm("outcome ~ visit * treatment", toenail, method=method, penalty=0.5)
    else:
        fit = bayesvm.bsvm("outcome ~ visit * treatment + (1 | patientID)", toenail, penalty=None)
    new = toenail.sample(20, random_state=1)
    fit.calibrate(newdata=toenail.sample(200, random_state=2))  # held-out rows: no fold refits in this test
    path = fit.save(tmp_path / "fit.bsvm")
    loaded = bayesvm.load(path)
    np.testing.assert_array_equal(loaded.predict(new, kind="prob"), fit.predict(new, kind="prob"))
    assert str(loaded.summary()) == str(fit.summary())


def test_load_rejects_other_files(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"not a fit")
    with pytest.raises(ValueError, match="not a saved bayesvm fit"):
        bayesvm.load(path)


def test_variational_export_raises_no_shape_warning(fit, caplog):
    """ArviZ warns (through logging) on a single chain; independent draws from q come as 4 chains."""
    import logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    idata = fit.to_inference_data(draws=400)
    with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = az.summary(idata, var_names=["beta", "sd_patientID", "slope_prior_sd"])
    messages = [r.getMessage() for r in caplog.records] + [str(w.message) for w in caught]
    assert not [m for m in messages if "shape" in m.lower() or "chain" in m.lower()], messages
    assert table["r_hat"].max() < 1.05  # independent draws: R-hat near 1
    assert {"sd_patientID[(Intercept)]", "sd_patientID[visit]"} <= set(table.index)
