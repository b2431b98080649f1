"""The routes of the imputation families (:mod:`bayesvm.engines.registry`): imputed predictor columns.

- Multiple imputation (``imputation="mi"``): one fit per completed data set, pooled
  (:mod:`bayesvm.engines.imputation.multiple`): mean-field or accurate VB (the default's choice:
  :func:`bayesvm.engines.defaults.default_mi_vb`), or SVI.
- The joint model (``imputation="joint"``; Luts & Ormerod 2014, section 3.3): VB (Alg. 4).
- Gibbs for either (Appendix C, the imputed values drawn with the coefficients).
- A selection prior with imputed columns: the selection sampler with imputation segments, or a selection fit per
  completed data set, pooled (:func:`bayesvm.engines.imputation.multiple.fit_mi_selection_vb`).
- Out-of-core data: multiple imputation with a streamed fit per completed data set
  (:mod:`bayesvm.engines.imputation.stream_mi`).

The fit's problem holds the rows at the imputed means.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ConvergenceWarning, ImputationWarning
from ...model import MAX_DENSE_COLUMNS, all_dense
from ..defaults import default_mi_vb
from ..linear.routes import (
    STREAMED_MEANFIELD,
    engine_run,
    sampler_settings,
    streamed_rows,
    svi_settings,
    whole_levels,
)
from ..linear.routes import supports_streamed as streamed_support
from ..linear.routes import supports_svi as stochastic_refusal
from ..runs import bound_decreased, sweeps_stopped
from ..selection.routes import floored_sites_warning
from ..selection.routes import supports as selection_refusal


def absent_method(method: str) -> str:
    """Why imputed predictors are not fitted by ``method``."""
    why = ": a posterior mode carries no uncertainty to pool over imputations" if method == "em" else ""
    return f"missing='impute' is fitted by method='vb' (Alg. 4) or 'gibbs' (Appendix C), not {method!r}{why}"


def supports(model, request) -> str | None:
    """The combinations of imputed predictors with an engine that no route fits (the imputation model is
    ``request.control.imputation``, resolved)."""
    imputation, method, vb = request.control.imputation, request.method, request.vb
    if request.control.draws == "auto":
        return (
            "draws='auto' runs the linear, mixed-model and selection Gibbs samplers; the imputation samplers take a "
            "number of draws (their warnings say how many more to run)"
        )
    if vb == "accurate" and (imputation != "mi" or method != "vb"):
        return (
            "vb='accurate' with missing='impute' fits each completed data set of multiple imputation "
            "(imputation='mi', method='vb'): the joint model's imputations depend on the coefficients' mean-field "
            "factors"
        )
    if model.prior is not None and imputation != "mi":
        return (
            "a selection prior with missing='impute' uses multiple imputation (imputation='mi', what 'auto' chooses "
            "there): the joint model's imputation step conditions on every coefficient, which this version's "
            "selection samplers do not provide"
        )
    if model.sparse and (imputation != "mi" or vb == "accurate" or model.prior is not None):
        return (
            f"this model's random effects are too many for a dense layout (more than {MAX_DENSE_COLUMNS} columns "
            "outside the largest grouping factor), so it is fitted on the sparse path, where missing='impute' is "
            "multiple imputation (imputation='mi', what 'auto' chooses there) with mean-field VB or Gibbs: the joint "
            "model's imputation step needs the full posterior covariance of the imputed columns' coefficients with "
            "every other coefficient, and the accurate and selection fits need dense precisions"
        )
    return None


def supports_svi(model, request) -> str | None:
    """SVI with imputed predictors is multiple imputation (module docstring), of stochastic mean-field fits."""
    if request.control.imputation == "joint":
        return (
            "method='svi' with missing='impute' uses multiple imputation (imputation='mi'): the joint model's "
            "imputations are coordinate updates over every row, which minibatches do not visit together"
        )
    return stochastic_refusal(model, request)


def supports_selection(model, request) -> str | None:
    """A selection prior with imputed predictors: multiple imputation, and a slope to act on."""
    return supports(model, request) or selection_refusal(model, request)


def supports_selection_svi(model, request) -> str | None:
    """A selection prior with imputed predictors fitted by SVI: multiple imputation, and a slope to act on."""
    return supports_svi(model, request) or selection_refusal(model, request)


def _fit(problem, result, design, **kwargs):
    """The run of an imputation fit: its problem is the base problem at the imputed design ``design``."""
    return engine_run(result, replace(problem.base, D=design), **kwargs)


def run_multiple_vb(model, request):
    """Multiple imputation pooled over mean-field or accurate VB fits (the default's choice; it falls back to
    mean-field VB where EP fails everywhere on a completed data set, and says so)."""
    from ..hyper_grid import AccurateFitError
    from .multiple import fit_mi_vb

    control = request.control
    problem = model.imputation_problem("mi")
    engine, why = (request.vb, None) if request.vb is not None else default_mi_vb(problem.base)
    settings = {"imputations": control.imputations, "seed": request.seed, "tol": control.tol,
                "max_iter": control.max_iter}  # fmt: skip
    try:
        result = fit_mi_vb(problem, engine=engine, **settings)
    except AccurateFitError as exc:
        if request.vb is not None:
            raise
        engine, why = "meanfield", f"{exc} on a completed data set; fell back"
        result = fit_mi_vb(problem, **settings)
    warned = _pooled_warnings(result, engine == "accurate", control)
    return _fit(problem, result, problem.design(result.imputation.z_mean), vb_note=why, warned=warned)


def _pooled_warnings(result, accurate: bool, control) -> list[tuple[str, type[Warning]]]:
    """What a pooled VB fit calls for: a completed data set whose fit did not converge."""
    if result.converged:
        return []
    where = " on at least one completed data set"
    if accurate:
        return [(f"accurate VB (EP) did not converge{where}", ConvergenceWarning)]
    return [sweeps_stopped("VB", control.max_iter, control.tol, where)]


def run_gibbs(model, request):
    """The imputation sampler (Appendix C): the imputed values drawn with the coefficients."""
    from .joint_model import sample_impute_gibbs

    problem = model.imputation_problem(request.control.imputation)
    result = sample_impute_gibbs(problem, **sampler_settings(request))
    return _fit(problem, result, problem.design(result.imputation.z_mean))


def run_joint_vb(model, request):
    """The joint model by VB (Alg. 4), with the warning where it pushes an imputed predictor's coefficient away from
    what the complete rows give."""
    from .joint_model import fit_impute_vb
    from .joint_pull import joint_pull_message

    control = request.control
    problem = model.imputation_problem("joint")
    result = fit_impute_vb(problem, tol=control.tol, max_iter=control.max_iter)
    warned = []
    if not result.converged:
        warned.append(sweeps_stopped("VB", control.max_iter, control.tol))
    if result.decreases:
        warned.append(bound_decreased(result.decreases))
    pulled = joint_pull_message(model, problem.base, result.theta)
    if pulled is not None:
        warned.append((pulled, ImputationWarning))
    return _fit(problem, result, result.design, warned=warned)


def run_multiple_svi(model, request):
    """Multiple imputation pooled over SVI fits."""
    from .multiple import fit_mi_vb

    tol, max_iter, options = svi_settings(request)
    model = all_dense(model, "method='svi' keeps one dense q")
    problem = model.imputation_problem("mi")
    result = fit_mi_vb(problem, imputations=request.control.imputations, seed=request.seed, tol=tol,
                       max_iter=max_iter, engine="svi", svi_options=options)  # fmt: skip
    return _fit(problem, result, problem.design(result.imputation.z_mean), warned=_svi_pooled(result), model=model)


def _svi_pooled(result) -> list[tuple[str, type[Warning]]]:
    if result.converged:
        return []
    return [("SVI stopped before converging on at least one completed data set", ConvergenceWarning)]


def run_selection_gibbs(model, request):
    """A selection prior with multiple imputation by the selection sampler with imputation segments."""
    from ..selection.gibbs import sample_selection
    from .segments import ImputedSegments

    problem = model.imputation_problem(request.control.imputation)
    result = sample_selection(model.selection_problem(), imputation=ImputedSegments(problem),
                              **sampler_settings(request))  # fmt: skip
    return _fit(problem, result, problem.design(result.imputation.z_mean))


def run_selection_vb(model, request):
    """A selection prior with multiple imputation: a selection VB fit (EP with ``vb="accurate"``) per completed data
    set, pooled."""
    from .multiple import fit_mi_selection_vb

    control = request.control
    problem = model.imputation_problem(control.imputation)
    accurate = request.vb == "accurate"
    result = fit_mi_selection_vb(problem, model.selection_problem(), imputations=control.imputations,
                                 seed=request.seed, tol=control.tol, max_iter=control.max_iter,
                                 engine="accurate" if accurate else "vb")  # fmt: skip
    warned = (floored_sites_warning(model, result.fits) if accurate else []) + _pooled_warnings(
        result, accurate, control
    )
    return _fit(problem, result, problem.design(result.imputation.z_mean), warned=warned)


def run_selection_svi(model, request):
    """A selection prior with multiple imputation, each completed data set fitted by SVI."""
    from .multiple import fit_mi_selection_vb

    tol, max_iter, options = svi_settings(request)
    model = all_dense(model, "method='svi' keeps one dense q")
    problem = model.imputation_problem("mi")
    result = fit_mi_selection_vb(problem, model.selection_problem(), imputations=request.control.imputations,
                                 seed=request.seed, tol=tol, max_iter=max_iter, engine="svi",
                                 svi_options=options)  # fmt: skip
    return _fit(problem, result, problem.design(result.imputation.z_mean), warned=_svi_pooled(result), model=model)


# ----- out-of-core data (request.rows: the partitions of a dask frame) -------------------------------------------
def absent_streamed(method: str) -> str:
    """Why out-of-core imputed predictors are not fitted by ``method``."""
    return (
        "out-of-core data with missing='impute' are fitted by method='vb' (multiple imputation: a streamed mean-field "
        f"or accurate fit per completed data set), not {method!r}"
    )


def absent_streamed_joint(method: str) -> str:
    """Why the joint imputation model does not run on out-of-core data."""
    return (
        "out-of-core data impute by multiple imputation (imputation='mi', what 'auto' chooses there): the joint model "
        "(imputation='joint') updates every row's imputations against q(theta) at each sweep and runs on in-memory data"
    )


def absent_streamed_selection(method: str) -> str:
    """Why a selection prior with imputed predictors does not run on out-of-core data."""
    return (
        "a selection prior with missing='impute' runs on in-memory data; out-of-core data impute for the normal-prior "
        "and learned-penalty models (multiple imputation, method='vb')"
    )


def supports_streamed(model, request) -> str | None:
    """Out-of-core multiple imputation fits what streamed VB fits (:func:`bayesvm.engines.linear.routes.supports_streamed`)."""
    return streamed_support(model, request)


def run_streamed_vb(model, request):
    """Multiple imputation of out-of-core rows (:mod:`bayesvm.engines.imputation.stream_mi`): the imputation chain one
    pass per step, its draws kept beside the partitions, then a streamed fit per completed data set, pooled: mean-field
    VB (the default out of core) or, with ``vb="accurate"``, the accurate fit."""
    import numpy as np

    from ..linear.stream_ep import fit_streamed_accurate
    from ..linear.stream_vb import fit_streamed_vb
    from .stream_mi import StreamedImputation, fit_streamed_mi, imputation_rows

    control, accurate, rows = request.control, request.vb == "accurate", request.rows
    problem = model.problem()
    mean, sd, alpha, gamma = model.imputation_scaling()
    passes = rows.passes(imputation_rows(streamed_rows(model), mean, sd), whole_levels(model) if accurate else ())
    if accurate:

        def fit_completed(completed):
            return fit_streamed_accurate(problem, completed, rows.design.n, given=request.nodes)
    else:

        def fit_completed(completed):
            return fit_streamed_vb(problem, completed.sweep, tol=control.tol, max_iter=control.max_iter)

    layout = model.design.imputation
    df, scale = model.priors.imputation.resolve(len(layout.variables))
    imputation = StreamedImputation(y=model.design.y, columns=np.asarray(layout.x_columns), alpha=alpha, gamma=gamma,
                                    mean_variance=model.priors.imputation.mean_variance, df=df, scale=scale)  # fmt: skip
    result = fit_streamed_mi(problem, imputation, passes, fit_completed, "accurate" if accurate else "meanfield",
                             imputations=control.imputations, seed=request.seed)  # fmt: skip
    note = None if request.vb is not None else STREAMED_MEANFIELD
    return engine_run(result, problem, note, warned=_pooled_warnings(result, accurate, control))
