"""``bayesvm.Control`` and the smaller ``bsvm()`` signature."""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest

import bayesvm
from bayesvm.control import CONTROL_FIELDS, Control, resolve_control
from bayesvm.errors import BayesvmError


def test_bsvm_names_the_model_and_leaves_engine_settings_to_control():
    """The model's choices (formula, data, response coding, prior, class weights, engine family, checks) are named;
    iterations, draws and the like live in Control."""
    params = inspect.signature(bayesvm.bsvm).parameters.values()
    named = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert len(named) <= 16, [p.name for p in named]
    assert not set(CONTROL_FIELDS) & {p.name for p in named}


def test_keywords_and_control_give_the_same_fit():
    data = bayesvm.datasets.load_toenail().head(300)
    settings = dict(draws=60, tune=60, chains=2, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains
        by_keyword = bayesvm.bsvm("outcome ~ visit + treatment", data, method="gibbs", seed=3, **settings)
        by_control = bayesvm.bsvm(
            "outcome ~ visit + treatment", data, method="gibbs", seed=3, control=Control(**settings)
        )
    np.testing.assert_array_equal(by_keyword.result.theta_d, by_control.result.theta_d)
    assert by_keyword.result.theta_d.shape == (2, 60, 3)


def test_a_misspelt_setting_is_named_with_the_nearest_field():
    with pytest.raises(BayesvmError, match=r"'draw' \(did you mean 'draws'\?\)"):
        resolve_control(None, {"draw": 10})


@pytest.mark.parametrize(
    "name, said",
    [("weights", "class_weight= weighs"), ("family", "not a GLM family"), ("subset", "data[mask]"),
     ("na_action", "missing='drop'"), ("nAGQ", "vb='accurate'"), ("C", "C = 1 / (2 alpha)")],
)  # fmt: skip
def test_arguments_of_glmer_and_scikit_learn_are_answered_with_what_says_the_same(name, said):
    with pytest.raises(BayesvmError, match=rf"'{name}' \(.*{re.escape(said)}") as info:
        resolve_control(None, {name: 1})
    assert "did you mean" not in str(info.value)


def test_a_setting_given_twice_is_refused_but_the_same_value_is_not():
    with pytest.raises(BayesvmError, match="given both"):
        resolve_control(Control(draws=10), {"draws": 20})
    assert resolve_control(Control(draws=10), {"draws": 10}).draws == 10
    assert resolve_control(Control(tune=5), {"draws": 20}) == Control(tune=5, draws=20)


def test_control_must_be_a_control():
    with pytest.raises(BayesvmError, match="bayesvm.Control"):
        resolve_control({"draws": 10}, {})


def test_bad_values_in_control_are_checked_by_bsvm():
    data = bayesvm.datasets.load_toenail().head(100)
    with pytest.raises(BayesvmError, match="draws"):
        bayesvm.bsvm("outcome ~ visit", data, method="gibbs", control=Control(draws=-1))


def test_default_cores_one_process_per_chain_where_workers_fork(monkeypatch):
    import multiprocessing
    import os

    from bayesvm.arguments import default_cores

    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "fork")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert default_cores(4) == min(4, cpus) and default_cores(1) == 1
    for method in ("spawn", "forkserver"):  # a spawned worker re-imports the user's script
        monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False, m=method: m)
        assert default_cores(4) == 1


def _fit_in_a_pool_worker(seed: int) -> float:
    import numpy as np
    import pandas as pd

    import bayesvm

    rng = np.random.default_rng(seed)
    data = pd.DataFrame({"x": rng.standard_normal(60)})
    data["y"] = (data["x"] + rng.logistic(size=60) > 0).astype(int)
    fit = bayesvm.bsvm("y ~ x", data, method="gibbs", draws=30, tune=10, chains=2, seed=seed, progress=False)
    return float(fit.fixef["x"])


def test_default_cores_in_a_daemonic_pool_worker():
    """A multiprocessing.Pool worker (as in a parallel cross-validation) may not start processes: the default runs
    its chains in it, one after the other."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return
    with multiprocessing.get_context("fork").Pool(1) as pool:
        slope = pool.apply(_fit_in_a_pool_worker, (3,))
    assert slope == _fit_in_a_pool_worker(3)


def test_default_cores_give_the_draws_of_one_core():
    import numpy as np
    import pandas as pd

    import bayesvm

    rng = np.random.default_rng(2)
    data = pd.DataFrame({"x": rng.standard_normal(80), "g": rng.integers(0, 6, 80)})
    data["y"] = (data["x"] + rng.logistic(size=80) > 0).astype(int)
    kw = dict(method="gibbs", draws=40, tune=20, chains=2, seed=5, progress=False)
    default = bayesvm.bsvm("y ~ x + (1 | g)", data, **kw)
    serial = bayesvm.bsvm("y ~ x + (1 | g)", data, cores=1, **kw)
    np.testing.assert_array_equal(default.result.theta_d, serial.result.theta_d)


class _Stop(Exception):
    """Raised by a stand-in sampler once it has recorded its arguments."""


@pytest.mark.parametrize(
    ("prior", "given", "expected"),
    [
        (None, None, 1000),
        (bayesvm.priors.Lasso(), None, 1000),  # no indicators: no sheared updates to tune
        (bayesvm.priors.SpikeSlab(), None, 2000),
        (bayesvm.priors.LaplaceZero(), None, 2000),
        (bayesvm.priors.SpikeSlab(), 300, 300),
        (None, 0, 0),
    ],
)
def test_default_tune_is_longer_for_the_selection_sampler(monkeypatch, prior, given, expected):
    from bayesvm.engines.linear import gibbs
    from bayesvm.engines.selection import gibbs as selection_gibbs

    seen = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(gibbs, "sample_gibbs", record)
    monkeypatch.setattr(selection_gibbs, "sample_selection", record)
    data = bayesvm.datasets.load_toenail().head(100)
    options = {} if given is None else {"tune": given}
    with pytest.raises(_Stop):
        bayesvm.bsvm("outcome ~ visit + treatment", data, method="gibbs", prior=prior, progress=False, **options)
    assert seen["tune"] == expected


def test_the_default_tune_is_what_the_fit_reports():
    data = bayesvm.datasets.load_toenail().head(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains
        fit = bayesvm.bsvm("outcome ~ visit", data, method="gibbs", draws=20, chains=1, seed=1, progress=False)
    assert fit.result.tune == 1000
    assert "after 1000" in str(fit.summary())
