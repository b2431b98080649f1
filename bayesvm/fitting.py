"""``bsvm()``: formula -> design -> model -> engine -> fit (DESIGN section 2)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd

from .arguments import as_count, as_flag, as_seed, check_iterations, data_name, default_cores
from .checks import (
    Checks,
    Diagnostics,
    check_identifiability,
    one_class_findings,
    singular_findings,
    with_penalty_prior,
)
from .combinations import (
    check_checks,
    check_class_weight,
    check_imputation_arguments,
    check_prior_method,
    check_probes,
)
from .control import Control, check_settings_apply, default_tune, resolve_control
from .engines.defaults import default_imputation
from .engines.selection.laws import law_of
from .errors import BayesvmError, ConvergenceWarning, DataError, IdentifiabilityWarning
from .formula.bars import parse_formula
from .formula.design import build_design, kept_response
from .formula.frames import as_frame
from .formula.response import check_not_continuous, sorted_levels
from .kernels import Kernel
from .model import build_model
from .outofcore import is_dask_frame
from .outofcore_fitting import fit_streamed
from .priors import HalfT, PriorSet, SelectionPrior
from .results.crossfit import record_call, register_refit
from .results.fit import BSVMFit
from .results.multiclass import MulticlassFit
from .results.vb_check import check_at_fit_end


def bsvm(
    formula: str,
    data: pd.DataFrame,
    method: str = "vb",
    penalty: float | str | None = "learn",
    positive: object | None = None,
    missing: str = "error",
    standardize: bool = True,
    priors: PriorSet | None = None,
    *,
    prior: SelectionPrior | None = None,
    unpenalized: list[str] | None = None,
    kernel: Kernel | str | None = None,
    vb: str | None = None,
    class_weight: object = None,
    seed: int | None = None,
    control: Control | None = None,
    checks: Checks | None = None,
    **engine_options: object,
) -> BSVMFit:
    """Fit a Bayesian support vector machine with an lme4-style formula.

    Parameters
    ----------
    formula
        ``"y ~ fixed terms + (expr | group)"``: formulaic syntax (``*``, ``C()``, ``np.log()``), lme4's bars, ``gp()``.
    data
        A pandas frame (never modified) or a dask frame (fitted out of core: the guide's *Large data*).
    method
        ``"vb"`` (default): variational Bayes, the accurate fit or the papers' mean-field VB as ``vb`` chooses;
        ``"gibbs"``: Gibbs sampling (Luts & Ormerod 2014, Appendix A; Polson & Scott 2011, section 4); ``"em"``: the
        posterior mode by EM/ECME (Polson & Scott, section 3; with ``penalty=alpha``, no random effects and
        ``standardize=False`` the classical linear SVM with ``C = 1 / (2 alpha)``); ``"svi"``: stochastic VB.
    penalty
        ``"learn"`` (default: the slopes share ``sigma_u^2 ~ IG(A_u, B_u)``, Example 1), ``alpha > 0`` (slopes
        ``~ N(0, 1/(4 alpha))``: the SVM objective ``sum hinge + alpha ||beta||^2``, Alg. 1) or ``None`` /
        ``"none"`` (vague ``N(0, sigma_beta^2)``).  The intercept is never penalised.
    positive
        The response value coded +1 (default: the second class in categorical or sorted order); more than two classes
        are fitted one-vs-rest (a :class:`bayesvm.MulticlassFit`), or that class against the rest.
    missing
        ``"error"`` (default), ``"drop"`` (complete cases) or ``"impute"`` (predictors missing completely at random, by
        the paper's joint model, section 3.3, or multiple imputation: the guide's *Missing data*; rows missing the
        response dropped and counted in ``summary()``).
    standardize
        Centre and scale numeric fixed-effect columns internally (results on the original scale), else as given.
    priors
        Hyperparameters (:class:`bayesvm.priors.PriorSet`; without it, its defaults, the penalty's half-t where the
        fixed effects separate the classes).
    prior
        A selection or shrinkage prior on the penalised slopes instead of ``penalty``: :class:`~bayesvm.priors.Lasso`,
        :class:`~bayesvm.priors.LaplaceZero` (Alg. 3) or :class:`~bayesvm.priors.SpikeSlab`; ``fit.inclusion`` gives
        inclusion probabilities, coefficients are model averages (the guide's *Variable selection*).
    unpenalized
        Formula terms (as formulaic names them, e.g. ``["age", "sex"]``) kept out of the penalty or prior.
    kernel
        A kernel of :mod:`bayesvm.kernels` (or its name: ``"rbf"``, ``"matern52"``, ``"linear"``): the nonlinear
        Bayesian SVM of Wenzel et al. (2017), ``f ~ GP(0, k)`` on the fixed-effect columns, hyperparameters marked
        ``learn`` learned by the lower bound; returns a :class:`~bayesvm.results.kernel_fit.KernelFit`.
    vb
        ``"accurate"``: EP for the coefficients at values of the variance parameters, integrated over them (means,
        SDs and variance components close to a long Gibbs run; up to six variance hyperparameters);
        ``"meanfield"``: the papers' factorisation (Alg. 1-3; fast, SDs too narrow, variances shrunk); ``None``
        (default): the accurate fit where it applies and the data's size allows, else mean-field VB, and
        ``summary()`` says which and why (:func:`bayesvm.engines.defaults.default_vb`; *Choosing a method*).
    class_weight
        As scikit-learn's: ``None`` (every row 1), ``"balanced"`` (class ``k`` weighs ``n / (2 n_k)``) or a mapping
        from class to weight; each row's hinge loss is weighed, ``prod_i exp(-2 omega_i max(0, 1 - y_i f_i))``,
        and ``predict(kind="prob")`` stays the data's probability.
    seed
        Seeds the Gibbs chains, k-means and minibatches of kernel fits, SVI and the probes; ``None``: fresh entropy.
    control
        Engine settings (:class:`bayesvm.Control`: tolerance, Gibbs ``draws`` / ``chains``, ``imputation``, ...).
    checks
        What to do when an identifiability check (separation, aliased columns, level counts) or the end-of-fit PSIS
        check of a VB fit fails (:class:`bayesvm.Checks`, as lme4's ``glmerControl``); every finding is in
        ``fit.diagnostics`` and ``summary()`` (the guide's *The checks*).
    **engine_options
        ``control``'s fields as keywords (``draws=4000``; not both ways); ``_fold_design`` and ``_fold_nodes`` are
        cross-fitting's, internal (:mod:`bayesvm.results.crossfit`) and not recorded in the fit's call.
    """
    fold = engine_options.pop("_fold_design", None)  # internal: a cross-fitting fold fit (docstring)
    fold_nodes = engine_options.pop("_fold_nodes", None)
    control = resolve_control(control, engine_options)
    options = {  # the call as given, for cross-fitting (bayesvm.results.crossfit); engine settings as keywords
        "formula": formula, "data": data, "method": method, "penalty": penalty, "positive": positive, "vb": vb,
        "missing": missing, "standardize": standardize, "priors": priors, "prior": prior, "unpenalized": unpenalized,
        "kernel": kernel, "class_weight": class_weight, "seed": seed, "checks": checks, **control.as_options(),
    }  # fmt: skip
    _check_arguments(method, vb, priors, class_weight, control, streamed=is_dask_frame(data))
    if isinstance(penalty, str) and penalty.lower() == "none":  # as the command line spells it
        penalty = options["penalty"] = None
    classes = None if is_dask_frame(data) else several_classes(formula, data)
    if classes is not None:  # a response of more than two classes: one fit per class against the rest
        return _one_vs_rest(classes, options)
    seed, standardize = as_seed(seed), as_flag(standardize, "standardize")
    options["seed"] = seed
    run = settled_control(control, method=method, kernel=kernel, prior=prior)
    outside_probes = kernel is not None or prior is not None or missing == "impute" or is_dask_frame(data)
    check_probes(run.probes, method, vb, outside_probes)
    if is_dask_frame(data):
        return _recorded(options, fit_streamed(
            formula, data, method=method, positive=positive, missing=missing, standardize=standardize, penalty=penalty,
            priors=priors, seed=seed, prior=prior, vb=vb, kernel=kernel, control=run, nodes=fold_nodes, checks=checks,
        ))  # fmt: skip
    if kernel is not None:
        from .kernel_fitting import fit_kernel  # (kernels load their engines only when asked for)

        return _recorded(options, fit_kernel(
            formula, data, method=method, positive=positive, missing=missing, standardize=standardize, seed=seed,
            kernel=kernel, penalty=penalty, prior=prior, vb=vb, control=run, fold=fold, class_weight=class_weight,
        ))  # fmt: skip
    model, diagnostics, checks, request = _checked_model(
        formula, data, method=method, penalty=penalty, positive=positive, missing=missing, standardize=standardize,
        priors=priors, prior=prior, unpenalized=unpenalized, vb=vb, class_weight=class_weight, checks=checks, fold=fold,
        seed=seed, control=run, nodes=fold_nodes,
    )  # fmt: skip
    return _checked_after_fit(_fit_linear(model, data, request), diagnostics, checks, options)


def _checked_model(formula, data, *, method, penalty, positive, missing, standardize, priors, prior, unpenalized, vb,
                   class_weight, checks, fold, seed, control, nodes):  # fmt: skip
    """formula -> design -> model, the engine table's refusal of the model (:func:`bayesvm.engines.registry.route_for`
    of what the call asks, :func:`_request`) before the checks' passes over the rows, and the identifiability checks
    before any engine runs (a finding the user asked to stop on raises); returns ``(model, diagnostics, checks,
    request)`` with the default priors and checks filled in (``nodes``: a fold fit's variance-parameter nodes)."""
    from .engines.registry import route_for

    check_iterations(control.max_iter, control.tol)

    # posterior modes need a boundary-avoiding variance prior (as blme uses): the default half-t has positive density
    # at sigma = 0, where the joint mode of the random effects and their variance collapses
    default_priors = priors is None
    priors = (PriorSet.paper() if method == "em" else PriorSet()) if priors is None else priors
    checks = check_checks(checks)
    if prior is not None:
        check_prior_method(prior, method, penalty, vb)
    design = build_design(
        parse_formula(formula, getattr(data, "columns", None)), data, positive=positive, missing=missing,
        rank=checks.rank, fold=fold,
        keep_wide=() if (penalty is not None or prior is not None) and not unpenalized else None,
    )  # fmt: skip
    model = build_model(
        design, penalty, priors, standardize, prior=prior, unpenalized=unpenalized, class_weight=class_weight
    )
    route_for(model, _request(model, method, vb, seed, control, nodes))  # (refused before the checks run)
    diagnostics = check_identifiability(model, checks)
    if default_priors and method != "em" and penalty == "learn" and prior is None and _separated(diagnostics):
        model = build_model(design, penalty, replace(priors, penalty=SEPARATED_PENALTY_PRIOR), standardize,
                            unpenalized=unpenalized, class_weight=class_weight)  # fmt: skip
        diagnostics = Diagnostics(tuple(
            with_penalty_prior(f, priors.penalty, SEPARATED_PENALTY_PRIOR, SEPARATED_PRIOR_NOTE)
            for f in diagnostics.findings
        ))  # fmt: skip
    diagnostics.enforce(stacklevel=3)  # (the warning names the user's call: enforce, this, bsvm, the caller)
    return model, diagnostics, checks, _request(model, method, vb, seed, control, nodes)


#: The learned penalty's prior where the fixed effects separate the classes and the user set no priors: a half-t on
#: the slopes' SD (the random effects' default, brms's).  Along a separating direction the likelihood stays flat as
#: the slopes grow, so the posterior of their variance has the prior's tail: the paper's IG(0.01, 0.01) has no finite
#: mean there (the slopes' posterior means run away and their signs stop separating held-out rows), the half-t a
#: finite one.
SEPARATED_PENALTY_PRIOR = HalfT()
SEPARATED_PRIOR_NOTE = (
    "the default where the classes are separated; the paper's IG(0.01, 0.01) on sigma_u^2, which "
    "bsvm(..., priors=bayesvm.priors.PriorSet()) keeps, has no finite posterior mean along that direction"
)


def _separated(diagnostics) -> bool:
    """Whether the fixed effects separate the classes (a separation finding the fit goes on with)."""
    return any(f.check == "separation" and f.action in ("warn", "ignore") for f in diagnostics.findings)


def _check_arguments(method: str, vb, priors, class_weight, control: Control, *, streamed: bool) -> None:
    """The arguments that every route refuses alike (each error names the argument and what to give instead)."""
    from .engines.registry import methods

    if method not in methods():
        raise BayesvmError(f"unknown method {method!r}; choose one of {methods()}")
    check_settings_apply(control, method, vb)
    check_class_weight(class_weight, method, streamed=streamed)
    if priors is not None and not isinstance(priors, PriorSet):
        raise BayesvmError(
            f"priors must be a bayesvm.priors.PriorSet (or None for the defaults), got {type(priors).__name__}"
        )
    if vb not in (None, "meanfield", "accurate"):
        raise BayesvmError(f"vb must be None, 'meanfield' or 'accurate', got {vb!r}")


def settled_control(control: Control, *, method: str, kernel, prior) -> Control:
    """``control`` with every field checked and each ``None`` replaced by the engine's default: counts as integers,
    flags as booleans, ``cores`` by :func:`bayesvm.arguments.default_cores`, ``tune`` by the sampler's
    (:func:`bayesvm.control.default_tune`), ``max_iter`` and ``tol`` by the iterative engine's (kernel fits choose
    their own)."""
    chains = as_count(control.chains, "chains")
    selection = method == "gibbs" and kernel is None and getattr(prior, "point_mass", False)  # the sheared updates
    draws = control.draws
    max_iter, tol = control.max_iter, control.tol
    max_iter = None if max_iter is None else as_count(max_iter, "max_iter")
    if max_iter is None and kernel is None:  # a slope prior's law says its VB's sweeps
        sweeps = law_of(prior).vb_sweeps if isinstance(prior, SelectionPrior) else 500
        max_iter = {"em": 20000, "svi": 100000}.get(method, sweeps)
    if tol is None and kernel is None:
        tol = {"em": 1e-10, "svi": 1e-4}.get(method, 1e-8)
    return replace(
        control, chains=chains, thin=as_count(control.thin, "thin"), progress=as_flag(control.progress, "progress"),
        cores=default_cores(chains) if control.cores is None else as_count(control.cores, "cores"),
        draws="auto" if isinstance(draws, str) and draws == "auto" else as_count(draws, "draws"),
        tune=as_count(default_tune(control.tune, selection=selection), "tune", low=0), max_iter=max_iter, tol=tol,
        batch_size=as_count(control.batch_size, "batch_size"),
        imputations=as_count(control.imputations, "imputations", low=2),
    )  # fmt: skip


def _checked_after_fit(fit, diagnostics: Diagnostics, checks: Checks, options: dict) -> BSVMFit:
    """The fit to return, built once from the engine's: the checks that read the fitted model (variance components at
    their boundary, decisions that call one class, the samplers' mixing, the VB fit's PSIS check, which may correct
    the accurate fit's fixed effects) run on the engine's fit, and their findings, the PSIS check and the record of
    the call (:func:`_record`) go into the one returned."""
    if checks.singular != "ignore":
        singular = singular_findings(fit.variance_components, "warn")
        Diagnostics(tuple(singular)).enforce(stacklevel=3)
        diagnostics = diagnostics.with_findings(singular)
    one_class = one_class_findings(fit, checks.one_class)
    Diagnostics(tuple(one_class)).enforce(stacklevel=3)
    fit = replace(fit, diagnostics=diagnostics.with_findings(one_class))  # (the PSIS check reads the findings)
    if fit.method == "gibbs":  # (after the identifiability findings, which can be why the chains cannot settle)
        _warn_mcmc(fit)
    fit, kept = check_at_fit_end(fit, checks.vb_check)
    return replace(fit, end_of_fit_check=kept, call=_record(options, fit))


register_refit("bsvm", bsvm)  # cross-fitting (results/crossfit.py) refits through it


#: The negative class of each one-vs-rest fit.
REST = "(rest)"


def several_classes(formula: object, data: object) -> tuple[str, tuple] | None:
    """``(response, classes)`` where the response has more than two classes, else ``None`` (the two-class fit,
    which reports anything wrong with the formula or the response itself)."""
    if not isinstance(formula, str) or "~" not in formula:
        return None
    try:
        frame = as_frame(data, "data")
        response = parse_formula(formula, frame.columns).response
    except BayesvmError:
        return None
    if response not in frame.columns:
        return None
    levels = sorted_levels(frame[response])
    return (response, tuple(levels)) if len(levels) > 2 else None


def _one_vs_rest(classes: tuple[str, tuple], options: dict) -> MulticlassFit:
    """One fit per class against the rest (:mod:`bayesvm.results.multiclass`); ``positive=`` names one class and
    fits that class against the rest alone."""
    response, levels = classes
    check_not_continuous(as_frame(options["data"], "data")[response], response)
    class_weight = options["class_weight"]
    if class_weight is not None and not (isinstance(class_weight, str) and class_weight == "balanced"):
        raise BayesvmError(
            "with more than two classes (one fit per class against the rest) class_weight can be None or "
            "'balanced' (each fit's class and rest weighed alike)"
        )
    options = dict(options)
    formula, data, positive = options.pop("formula"), as_frame(options.pop("data"), "data"), options.pop("positive")
    column = data[response]
    levels = _classes_kept(formula, data, response, levels, options["missing"])

    def against_rest(label):  # the class as text against "(rest)", so that summary() names both
        frame = data.copy()
        frame[response] = pd.Series(np.where(column == label, str(label), REST), index=data.index).where(
            column.notna(), None
        )
        return bsvm(formula, frame, positive=str(label), **options)

    if positive is not None:
        chosen = [level for level in levels if level == positive or str(level) == str(positive)]
        if not chosen:
            raise DataError(
                f"positive={positive!r} is not a class of response {response!r}; classes are {list(levels)}"
            )
        return against_rest(chosen[0])
    fits = []
    for label in levels:  # each fit's warnings said again, naming its class (the user's filters then apply)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fits.append(against_rest(label))
        for said in caught:
            warnings.warn(f"class {str(label)!r} against the rest: {said.message}", said.category, stacklevel=3)
    return MulticlassFit(response=response, classes=levels, fits=tuple(fits))


def _classes_kept(formula: str, data: pd.DataFrame, response: str, levels: tuple, missing: str) -> tuple:
    """The classes of ``levels`` with rows left after ``missing`` drops rows (a class whose every row misses a
    predictor has no fit against the rest: named in one warning); fewer than two left is refused."""
    if missing == "error":
        return levels
    present = set(sorted_levels(kept_response(formula, data, missing)))
    gone = [level for level in levels if level not in present]
    if not gone:
        return levels
    kept = tuple(level for level in levels if level in present)
    said = ", ".join(repr(str(level)) for level in gone)
    if len(kept) < 2:
        raise DataError(
            f"response {response!r}: with missing={missing!r} only {len(kept)} class(es) keep rows ({list(kept)}); "
            f"every row of {said} misses a value the formula uses"
        )
    warnings.warn(
        f"response {response!r}: every row of class(es) {said} misses a value the formula uses, so with "
        f"missing={missing!r} they have no fit against the rest and are never predicted; missing='impute' keeps them",
        IdentifiabilityWarning,
        stacklevel=4,
    )
    return kept


def _record(options: dict, fit):
    """The record of the call that made ``fit`` (:class:`bayesvm.results.crossfit.FitCall`), for cross-fitting."""
    design = fit.model.design
    return record_call("bsvm", options["formula"], options["data"], options, design.row_index, design.parsed.fixed)


def _recorded(options: dict, fit):
    """``fit`` built again with the record of its call (:func:`_record`)."""
    return replace(fit, call=_record(options, fit))


def _request(model, method: str, vb: str | None, seed, control: Control, nodes=None):
    """What the call asks of the engine (:class:`bayesvm.engines.runs.FitRequest`), the imputation model resolved where
    the model imputes (``imputation="auto"``: :func:`bayesvm.engines.defaults.default_imputation`); ``nodes``: a fold
    fit's variance-parameter nodes."""
    from .engines.runs import FitRequest

    if model.design.imputation is not None:
        check_imputation_arguments(control.imputation, control.imputations)
        if control.imputation == "auto":
            control = replace(control, imputation=default_imputation(model, method, vb))
    return FitRequest(method, vb, seed, control, nodes=nodes)


def _fit_linear(model, data, request) -> BSVMFit:
    """The engine for a linear model (``bsvm`` without a kernel, in-memory data): the route of the registry's table
    (:mod:`bayesvm.engines.registry`) for the model's family and the request's method, its warnings said once, one fit
    built."""
    from .engines.registry import route_for

    run = route_for(model, request).run(model, request)
    for message, category in run.warnings:
        warnings.warn(message, category, stacklevel=3)
    tolerance = {} if request.method == "gibbs" else {"tol": request.control.tol}  # (a sampler has none)
    return BSVMFit(
        model=model if run.model is None else run.model, problem=run.problem, method=request.method,
        result=run.result, data_name=data_name(data), vb_note=run.vb_note, **tolerance,
    )  # fmt: skip


def _warn_mcmc(fit: BSVMFit) -> None:
    from .results.diagnostics import inclusion_disagreement, mcmc_diagnostics, sampled_fit_problems

    message = sampled_fit_problems(fit, mcmc_diagnostics(fit))
    stopping = fit.result.stopping or ""
    if stopping.startswith("stopped at the cap"):  # draws="auto" ran out before its targets: say so once
        from .engines.gibbs_driver import AUTO_ESS, AUTO_RHAT

        cap = f"draws='auto' {stopping}, short of R-hat <= {AUTO_RHAT} and bulk ESS >= {AUTO_ESS} for every quantity"
        message = f"{cap}; {message}" if message else cap
    if message:
        warnings.warn(message, ConvergenceWarning, stacklevel=4)  # (_warn_mcmc, _checked_after_fit, bsvm, the caller)
    disagreement = inclusion_disagreement(fit)
    if disagreement:
        warnings.warn(disagreement, ConvergenceWarning, stacklevel=4)
