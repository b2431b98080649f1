import warnings

import numpy as np
import pytest
import xarray as xr

import bayesvm
from bayesvm.results.arviz import as_datatree, as_inference_data, fit_to_datasets


@pytest.fixture(scope="module")
def fit(toenail):
    return bayesvm.bsvm("outcome ~ visit * treatment + (1 + visit | patientID)", toenail)


def test_inference_data_groups_and_coordinates(fit):
    idata = fit.to_inference_data(draws=400, seed=3)
    assert set(idata.groups()) == {"posterior", "observed_data", "log_likelihood", "lower_bound"}
    post = idata.posterior
    assert list(post["coef"].values) == list(fit.fixef.index)
    assert post["u_patientID"].shape == (1, 400, 294, 2)
    assert list(post["patientID_term"].values) == ["(Intercept)", "visit"]
    np.testing.assert_array_equal(idata.lower_bound["lower_bound"].values, fit.lower_bound)
    assert idata.observed_data.attrs["positive_class"] == "moderate or severe"


def test_draws_match_the_variational_posterior(fit):
    post = fit.to_inference_data(draws=4000, seed=1).posterior
    beta = post["beta"].values[0]
    sd = np.sqrt(np.diag(fit.fixef_cov.to_numpy()))
    assert np.all(np.abs(beta.mean(axis=0) - fit.fixef.to_numpy()) < 4 * sd / np.sqrt(4000))
    np.testing.assert_allclose(beta.std(axis=0), sd, rtol=0.06)
    u = post["u_patientID"].values[0]
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
    idata = as_inference_data(groups)
    assert isinstance(tree, xr.DataTree)
    assert set(tree.children) == set(idata.groups())
    xr.testing.assert_identical(tree["posterior"].to_dataset(), idata.posterior)
