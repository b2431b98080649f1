"""Conversion to ArviZ, behind one small shim for ArviZ 0.x and 1.x.

ArviZ 0.x (Python 3.11) stores groups in an ``InferenceData``; ArviZ 1.x (Python >= 3.12)
uses ``xarray.DataTree``.  Both are built here from the same ``xarray.Dataset`` per group,
so only :func:`make_container` knows the difference.

Groups: ``posterior`` (draws from q, or MCMC draws), ``observed_data`` (y as -1/+1) and
``lower_bound`` (the VB lower bound per sweep).
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr
from scipy import stats


def _import_arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz

    return arviz


def arviz_major_version() -> int:
    return int(_import_arviz().__version__.split(".")[0])


def as_datatree(groups: dict[str, xr.Dataset]) -> xr.DataTree:
    """ArviZ 1.x container: a ``DataTree`` with one child per group."""
    return xr.DataTree.from_dict({f"/{name}": ds for name, ds in groups.items()})


def as_inference_data(groups: dict[str, xr.Dataset]):
    """ArviZ 0.x container."""
    return _import_arviz().InferenceData(warn_on_custom_groups=False, **groups)


def make_container(groups: dict[str, xr.Dataset]):
    """``InferenceData`` under ArviZ 0.x, ``DataTree`` under 1.x."""
    return as_datatree(groups) if arviz_major_version() >= 1 else as_inference_data(groups)


def _posterior_dataset(fit, draws: int, seed: int | None) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    model, design = fit.model, fit.model.design
    theta_d, theta_b = fit.result.theta.sample(rng, draws)
    p = design.p
    beta = theta_d[:, :p] @ model.fixed_transform().T
    data_vars = {"beta": (("chain", "draw", "coef"), beta[None])}
    coords: dict[str, object] = {"chain": [0], "draw": np.arange(draws), "coef": list(design.x_names)}
    dense_offsets, blocked_offsets = model.dense_offsets(), model.blocked_offsets()
    by_group: dict[str, list[tuple[object, np.ndarray]]] = {}
    for t, term in enumerate(design.re_terms):
        if t in blocked_offsets:
            values = theta_b[:, :, blocked_offsets[t] + np.arange(term.k)]
        else:
            idx = dense_offsets[t] + np.arange(term.n_levels * term.k)
            values = theta_d[:, idx].reshape(draws, term.n_levels, term.k)
        by_group.setdefault(term.group, []).append((term, values))
    for group, parts in by_group.items():
        terms = [name for term, _ in parts for name in term.term_names]
        coords[group] = list(parts[0][0].levels)
        coords[f"{group}_term"] = terms
        values = np.concatenate([v for _, v in parts], axis=2)
        data_vars[f"u_{group}"] = (("chain", "draw", group, f"{group}_term"), values[None])
    for comp, post in zip(fit.problem.components, fit.result.components):
        if comp.source < 0:
            var = stats.invgamma(a=post.shape, scale=post.scale[0, 0]).rvs(size=draws, random_state=rng)
            data_vars["sigma_penalty"] = (("chain", "draw"), np.sqrt(var)[None])
            continue
        term = design.re_terms[comp.source]
        if comp.is_wishart:
            sigma = stats.invwishart(df=post.shape, scale=post.scale).rvs(size=draws, random_state=rng)
            sds = np.sqrt(np.diagonal(sigma, axis1=1, axis2=2))
            cor = sigma / (sds[:, :, None] * sds[:, None, :])
            for j, name in enumerate(term.term_names):
                data_vars[f"sd_{term.group}__{name}"] = (("chain", "draw"), sds[None, :, j])
            dim = f"{term.group}_cor_term"
            coords[dim] = list(term.term_names)
            coords[dim + "_"] = list(term.term_names)
            data_vars[f"cor_{term.group}"] = (("chain", "draw", dim, dim + "_"), cor[None])
        else:
            var = stats.invgamma(a=post.shape, scale=post.scale[0, 0]).rvs(size=draws, random_state=rng)
            data_vars[f"sd_{term.group}__{term.term_names[0]}"] = (("chain", "draw"), np.sqrt(var)[None])
    return xr.Dataset(data_vars, coords=coords, attrs={"inference_library": "bayesvm", "method": fit.method})


def fit_to_datasets(fit, draws: int = 1000, seed: int | None = 0) -> dict[str, xr.Dataset]:
    """The groups as plain ``xarray.Dataset`` objects."""
    if draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws}")
    design = fit.model.design
    observed = xr.Dataset(
        {design.response.name: (("obs",), design.y)},
        coords={"obs": np.asarray(design.row_index)},
        attrs={"positive_class": str(design.response.positive), "negative_class": str(design.response.negative)},
    )
    bound = xr.Dataset(
        {"lower_bound": (("iteration",), fit.lower_bound)}, coords={"iteration": np.arange(1, fit.lower_bound.size + 1)}
    )
    return {"posterior": _posterior_dataset(fit, draws, seed), "observed_data": observed, "lower_bound": bound}


def fit_to_inference_data(fit, draws: int = 1000, seed: int | None = 0):
    """ArviZ object for ``fit`` (see module docstring)."""
    return make_container(fit_to_datasets(fit, draws=draws, seed=seed))
