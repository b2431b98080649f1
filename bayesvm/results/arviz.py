"""Conversion to ArviZ, behind one small shim for ArviZ 0.x and 1.x.

ArviZ 0.x (Python 3.11) stores groups in an ``InferenceData``; ArviZ 1.x (Python >= 3.12)
uses ``xarray.DataTree``.  Both are built here from the same ``xarray.Dataset`` per group,
so only :func:`make_container` knows the difference.

Groups: ``posterior`` (draws from q, or MCMC draws), ``observed_data`` (y as -1/+1),
``log_likelihood`` (each observation's normalised pseudo-likelihood, for ``az.loo`` /
``az.waic``), ``sample_stats`` (MCMC: ``lp``, the log pseudo-posterior per draw) and
``lower_bound`` (VB: the lower bound per sweep).
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from ..arguments import as_count
from ..engines.selection.laws import law_of
from ..errors import BayesvmError
from ..memory import check_memory
from ..model import gp_index
from ..model.problems import PENALTY_SOURCE


def gp_variable(term) -> str:
    """ArviZ name of a ``gp()`` term's coefficients, e.g. ``gp_age_bmi`` (its amplitude is ``sd_gp_age_bmi``)."""
    return "gp_" + "_".join(term.spec.variables)


def import_arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz

    return arviz


def arviz_major_version() -> int:
    return int(import_arviz().__version__.split(".")[0])


def as_datatree(groups: dict[str, xr.Dataset]) -> xr.DataTree:
    """ArviZ 1.x container: a ``DataTree`` with one child per group."""
    return xr.DataTree.from_dict({f"/{name}": ds for name, ds in groups.items()})


def as_inference_data(groups: dict[str, xr.Dataset]):
    """ArviZ 0.x container."""
    return import_arviz().InferenceData(warn_on_custom_groups=False, **groups)


def group_names(container) -> set[str]:
    """Names of the groups of an ``InferenceData`` (ArviZ 0.x) or ``DataTree`` (ArviZ 1.x)."""
    if isinstance(container, xr.DataTree):
        return set(container.children)
    return set(container.groups())


def make_container(groups: dict[str, xr.Dataset]):
    """``InferenceData`` under ArviZ 0.x, ``DataTree`` under 1.x."""
    return as_datatree(groups) if arviz_major_version() >= 1 else as_inference_data(groups)


def posterior_dataset(fit, draws: int, seed: int | None) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    model, design = fit.model, fit.model.design
    theta_d, theta_b, comps = fit.posterior.draws(rng, draws)
    chains, n_draws = theta_d.shape[:2]
    dims = ("chain", "draw")
    p = design.p
    beta = theta_d[..., :p] @ model.fixed_transform().T
    data_vars = {"beta": (dims + ("coef",), beta)}
    coords: dict[str, object] = {"chain": np.arange(chains), "draw": np.arange(n_draws), "coef": list(design.x_names)}
    dense_offsets, blocked_offsets = model.dense_offsets(), model.blocked_offsets()
    by_group: dict[str, list[tuple[object, np.ndarray]]] = {}
    for t, term in enumerate(design.re_terms):
        if t in blocked_offsets:
            values = theta_b[..., blocked_offsets[t] + np.arange(term.k)]
        else:
            idx = dense_offsets[t] + np.arange(term.n_levels * term.k)
            values = theta_d[..., idx].reshape(chains, n_draws, term.n_levels, term.k)
        by_group.setdefault(term.group, []).append((term, values))
    for group, parts in by_group.items():
        coords[group] = list(parts[0][0].levels)
        coords[f"{group}_term"] = [name for term, _ in parts for name in term.term_names]
        values = np.concatenate([v for _, v in parts], axis=-1)
        data_vars[f"u_{group}"] = (dims + (group, f"{group}_term"), values)
    for term, start in zip(design.gp_terms, model.gp_offsets()):
        name = gp_variable(term)
        coords[f"{name}_basis"] = np.arange(1, term.n_basis + 1)
        data_vars[name] = (dims + (f"{name}_basis",), theta_d[..., start : start + term.n_basis])
    for comp, cov in zip(fit.problem.components, comps):
        if comp.source == PENALTY_SOURCE:  # the learned penalty: slopes ~ N(0, sd^2), alpha = 1 / (4 sd^2)
            data_vars[PENALTY_SD] = (dims, np.sqrt(cov[..., 0, 0]))
            continue
        if gp_index(comp.source) is not None:  # a gp() term's amplitude
            data_vars[f"sd_{gp_variable(design.gp_terms[gp_index(comp.source)])}"] = (dims, np.sqrt(cov[..., 0, 0]))
            continue
        term = design.re_terms[comp.source]
        sds = np.sqrt(np.diagonal(cov, axis1=-2, axis2=-1))
        name, dim = f"sd_{term.group}", f"{term.group}_term"
        names = list(term.term_names)
        if name in data_vars:  # a second term of the same grouping factor, e.g. (1 | g) + (0 + x | g)
            previous = data_vars[name][1]
            sds = np.concatenate([previous, sds], axis=-1)
            names = coords[f"{dim}_sd"] + names
        coords[f"{dim}_sd"] = names
        data_vars[name] = (dims + (f"{dim}_sd",), sds)
        if comp.is_wishart:
            cor = cov / (sds[..., -len(term.term_names) :, None] * sds[..., None, -len(term.term_names) :])
            cor_dim = f"{term.group}_cor_term"
            coords[cor_dim] = list(term.term_names)
            coords[cor_dim + "_"] = list(term.term_names)
            data_vars[f"cor_{term.group}"] = (dims + (cor_dim, cor_dim + "_"), cor)
    _selection_variables(fit, data_vars, coords)
    _imputation_variables(fit, data_vars, coords)
    if not fit.posterior.holds_draws:
        data_vars, coords = _as_chains(data_vars, coords)
    dataset = xr.Dataset(data_vars, coords=coords, attrs={"inference_library": "bayesvm", "method": fit.method})
    for variable, text in DESCRIPTIONS.items():
        if variable in dataset:
            dataset[variable].attrs["description"] = text
    for variable in dataset.data_vars:
        if variable.startswith("sd_gp_"):
            dataset[variable].attrs["description"] = f"amplitude (SD) of the Gaussian-process term {variable[3:]!r}"
        elif variable.startswith("gp_"):
            dataset[variable].attrs["description"] = (
                f"whitened inducing-point coefficients of {variable!r} (g = basis @ coefficients; not interpretable "
                f"one by one: exclude with var_names=['~{variable}'])"
            )
        elif variable.startswith("sd_"):
            dataset[variable].attrs["description"] = f"SD of the random effects of {variable[3:]!r}, per term"
        elif variable.startswith("u_"):
            dataset[variable].attrs["description"] = (
                f"random effects of {variable[2:]!r} per level (exclude from plots with var_names=['~{variable}'])"
            )
    return dataset


#: Name of the learned penalty's SD (slopes ~ N(0, sd^2); the SVM penalty is alpha = 1 / (4 sd^2)).
PENALTY_SD = "slope_prior_sd"
DESCRIPTIONS = {
    "beta": "fixed effects, original scale of the predictors, on the SVM decision scale f (not log-odds)",
    PENALTY_SD: "learned penalty: slopes ~ N(0, slope_prior_sd^2); the SVM penalty alpha = 1 / (4 slope_prior_sd^2)",
}
#: Independent draws from a variational posterior are exported as this many chains, so that ArviZ's
#: R-hat and ESS (which need two or more chains) report the Monte Carlo error of the draws.
VB_CHAINS = 4


def _as_chains(data_vars: dict, coords: dict) -> tuple[dict, dict]:
    """``(1, draws, ...)`` -> ``(VB_CHAINS, draws // VB_CHAINS, ...)``: independent draws from q, split into
    chains (ArviZ warns on one chain; the draws are exchangeable, so the split changes nothing else)."""
    draws = len(coords["draw"])
    if len(coords["chain"]) != 1 or draws < 2 * VB_CHAINS:
        return data_vars, coords
    per = draws // VB_CHAINS
    out = {}
    for name, (dims, values) in data_vars.items():
        values = np.asarray(values)[:, : per * VB_CHAINS]
        out[name] = (dims, values.reshape((VB_CHAINS, per) + values.shape[2:]))
    coords = dict(coords, chain=np.arange(VB_CHAINS), draw=np.arange(per))
    return out, coords


def _selection_variables(fit, data_vars: dict, coords: dict) -> None:
    """Gibbs under a selection prior: the indicators ``include`` (per slope), each draw's ``P(gamma_k = 1 | the
    rest)`` as ``include_probability`` where the sampler kept it (its mean is the Rao-Blackwellised inclusion
    probability of ``fit.inclusion``) and the prior's scale."""
    result, prior = fit.result, fit.model.prior
    if prior is None or np.ndim(result.include) != 3:  # (VB's q(gamma) is not a chain)
        return
    dims = ("chain", "draw")
    names = [fit.model.design.x_names[j] for j in result.selected]
    coords["slope"] = names
    if prior.point_mass:
        data_vars["include"] = (dims + ("slope",), result.include.astype(np.int8))
        if getattr(result, "include_probability", None) is not None:
            data_vars["include_probability"] = (dims + ("slope",), result.include_probability)
    scale_name = law_of(prior).scale_name
    if scale_name is not None:
        data_vars[scale_name] = (dims, result.scale)


def _imputation_variables(fit, data_vars: dict, coords: dict) -> None:
    """Gibbs with ``missing="impute"``: the imputation model's mean and correlation draws, original scale."""
    draws = fit.result.imputation
    if draws is None:
        return
    m, s, _, _ = fit.model.imputation_scaling()
    names = list(fit.model.design.imputation.variables)
    coords["impute_var"] = names
    coords["impute_var_"] = names
    dims = ("chain", "draw")
    data_vars["impute_mu"] = (dims + ("impute_var",), m + s * draws.mu)
    sd = np.sqrt(np.diagonal(draws.sigma, axis1=-2, axis2=-1))
    data_vars["impute_sd"] = (dims + ("impute_var",), s * sd)
    data_vars["impute_cor"] = (
        dims + ("impute_var", "impute_var_"),
        draws.sigma / (sd[..., :, None] * sd[..., None, :]),
    )


def _log_likelihood_dataset(fit, posterior: xr.Dataset) -> xr.Dataset:
    """Each observation's log normalised pseudo-likelihood ``log p(y_i | f_i)`` per draw of the coefficients."""
    design = fit.model.design
    beta = posterior["beta"].values
    f = np.tensordot(beta, design.X, axes=([2], [1]))  # (chain, draw, n), original scale
    for term in design.re_terms:
        u = posterior[f"u_{term.group}"].sel({f"{term.group}_term": list(term.term_names)}).values
        f = f + np.einsum("nk,cdnk->cdn", term.values, u[:, :, term.codes, :])
    for term, basis in zip(design.gp_terms, design.gp_bases):
        f = f + np.tensordot(posterior[gp_variable(term)].values, basis, axes=([2], [1]))
    return _row_log_likelihood(fit, f)


def _row_log_likelihood(fit, f: np.ndarray) -> xr.Dataset:
    """``log p(y_i | f_i)`` at draws ``f`` (chain, draw, n) of the decision values at the training rows: the fit's
    own (:meth:`bayesvm.results.base.Fit.log_likelihood`).

    For the SVMs a pseudo-likelihood: ``p(+1 | f) = e^{-2(1-f)_+} / (e^{-2(1-f)_+} + e^{-2(1+f)_+})`` normalises the
    hinge loss over the two classes, but the model was fitted with the unnormalised ``e^{-2(1 - y f)_+}``, so
    LOO / WAIC computed from it compare models on this scale only, not as true predictive densities.
    """
    design = fit.model.design
    chains, draws = f.shape[:2]
    loglik = fit.log_likelihood(design.y, f)
    return xr.Dataset(
        {design.response.name: (("chain", "draw", "obs"), loglik)},
        coords={"chain": np.arange(chains), "draw": np.arange(draws), "obs": np.asarray(design.row_index)},
        attrs={"note": fit.likelihood_note},
    )


def _check_export_memory(fit, draws: int, log_likelihood: bool) -> None:
    """Refuse, before drawing, an export whose arrays would not fit in memory (the log-likelihood is rows x draws)."""
    total = int(np.prod(fit.result.theta_d.shape[:2])) if fit.posterior.holds_draws else draws
    design = fit.model.design
    width = design.p + sum(term.n_levels * term.k for term in design.re_terms)
    width += sum(term.n_basis for term in design.gp_terms)
    needed = 8.0 * total * (width + (design.n if log_likelihood else 0)) * 2
    check_memory(
        needed,
        f"the ArviZ export ({total:,} draws of {width:,} coefficients"
        + (f" and {design.n:,} rows' log-likelihood)" if log_likelihood else ")"),
        "export fewer draws (draws=...), or leave out the log-likelihood (log_likelihood=False)",
    )


def linear_groups(fit, draws: int, seed: int | None, log_likelihood: bool) -> dict[str, xr.Dataset]:
    """``posterior`` (coefficients, random effects, variance components, selection and imputation draws) and
    ``log_likelihood`` of a linear or mixed fit (:class:`bayesvm.results.fit.BSVMFit`); out-of-core data leave out the
    log-likelihood (rows x draws, and the rows are not in memory) and say so."""
    design = fit.model.design
    if log_likelihood and design.X.shape[0] != design.n:
        warnings.warn(
            f"to_inference_data(): no log_likelihood group for out-of-core data (each of the {design.n:,} rows at every "
            "draw, and the rows are not in memory); pass log_likelihood=False to export the rest without this warning, "
            "or fit a sample of the rows in memory for az.loo",
            UserWarning,
            stacklevel=4,
        )
        log_likelihood = False
    _check_export_memory(fit, draws, log_likelihood)
    posterior = posterior_dataset(fit, draws, seed)
    groups = {"posterior": posterior}
    if log_likelihood:
        groups["log_likelihood"] = _log_likelihood_dataset(fit, posterior)
    return groups


def kernel_groups(fit, draws: int, seed: int | None, log_likelihood: bool) -> dict[str, xr.Dataset]:
    """``posterior`` of a kernel fit (:class:`bayesvm.results.kernel_fit.KernelFit`): draws of the decision values
    ``f`` at the training rows; ``constant_data``: the kernel's hyperparameters (point estimates, ML-II, not
    integrated); ``log_likelihood`` at each draw.

    ``f = B w + e`` (:meth:`features` of the engine output): ``w`` are the Gibbs draws of the weights, or draws from
    their Gaussian ``q`` (VB, EP, the PCVM's Laplace / EP fits; an EM mode is one draw of one chain); ``e`` is the
    prior variance the inducing points leave unexplained, drawn independently per row (so each row's marginal is
    exactly ``q(f_i)``, as in ``predict_interval()``; it is 0 at the training rows of batch fits and PCVMs).
    """
    result, design = fit.result, fit.model.design
    if fit.problem.X.shape[0] != design.n:
        raise BayesvmError("the ArviZ export needs the training rows in memory; this fit streamed out-of-core data")
    rng = np.random.default_rng(seed)
    B, residual = result.features(fit.problem.X)
    if result.weight_draws is not None:
        weights = np.asarray(result.weight_draws, dtype=float)
    elif fit.posterior.point:
        weights = np.asarray(result.mean, dtype=float)[None, None]
    else:
        weights = gaussian_draws(result.mean, result.cov, rng, draws)[None]
    chains, n_draws = weights.shape[:2]
    check_memory(
        8.0 * chains * n_draws * design.n * (3 if log_likelihood else 2),
        f"the ArviZ export ({chains * n_draws:,} draws of f at {design.n:,} rows)",
        "export fewer draws (draws=...), or leave out the log-likelihood (log_likelihood=False)",
    )
    f = weights @ B.T
    if not fit.posterior.point and np.any(residual > 0):
        f += np.sqrt(residual) * rng.standard_normal(f.shape)
    coords = {"chain": np.arange(chains), "draw": np.arange(n_draws), "obs": np.asarray(design.row_index)}
    data_vars = {"f": (("chain", "draw", "obs"), f)}
    if not fit.posterior.holds_draws:
        data_vars, coords = _as_chains(data_vars, coords)
    posterior = xr.Dataset(data_vars, coords=coords, attrs={"inference_library": "bayesvm", "method": fit.method})
    posterior["f"].attrs["description"] = "decision value f at the training rows (SVM decision scale, not log-odds)"
    groups = {"posterior": posterior}
    labels = list(fit.hyperparameters.index)
    if labels:
        groups["constant_data"] = xr.Dataset(
            {"hyperparameter": (("parameter",), fit.hyperparameters.to_numpy(float))}, coords={"parameter": labels}
        )
    if log_likelihood:
        groups["log_likelihood"] = _row_log_likelihood(fit, posterior["f"].values)
    return groups


def gaussian_draws(mean: np.ndarray, cov: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` draws from ``N(mean, cov)`` (``cov`` positive semi-definite: through its eigendecomposition, so a
    direction without spread stays at the mean)."""
    values, vectors = np.linalg.eigh(np.asarray(cov, dtype=float))
    root = vectors * np.sqrt(np.clip(values, 0.0, None))
    return np.asarray(mean, dtype=float) + rng.standard_normal((size, values.size)) @ root.T


def shared_groups(fit, posterior: xr.Dataset) -> dict[str, xr.Dataset]:
    """The groups every fit has: ``observed_data``, ``sample_stats`` (``lp`` per draw, where the engine records
    one) and ``lower_bound`` (the VB engines' bound per sweep)."""
    design = fit.model.design
    groups = {
        "observed_data": xr.Dataset(
            {design.response.name: (("obs",), design.y)},
            coords={"obs": np.asarray(design.row_index)},
            attrs={"positive_class": str(design.response.positive), "negative_class": str(design.response.negative)},
        )
    }
    log_post = fit.result.log_posterior
    if log_post is not None:
        groups["sample_stats"] = xr.Dataset(
            {"lp": (("chain", "draw"), log_post)},
            coords={"chain": posterior["chain"].values, "draw": posterior["draw"].values},
        )
    if fit.lower_bound.size:
        groups["lower_bound"] = xr.Dataset(
            {"lower_bound": (("iteration",), fit.lower_bound)},
            coords={"iteration": np.arange(1, fit.lower_bound.size + 1)},
        )
    return groups


def fit_to_datasets(fit, draws: int = 1000, seed: int | None = 0, log_likelihood: bool = True) -> dict[str, xr.Dataset]:
    """The groups of ``fit.to_inference_data()`` as plain ``xarray.Dataset`` objects.

    VB fits get ``draws`` draws from q; Gibbs fits use their stored draws (``draws`` ignored).
    """
    groups = fit.inference_groups(as_count(draws, "draws"), seed, log_likelihood)
    return {**groups, **shared_groups(fit, groups["posterior"])}
