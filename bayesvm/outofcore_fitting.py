"""The out-of-core route of ``bsvm()``: a dask frame fitted through the engines' table
(:mod:`bayesvm.engines.registry`, the ``"out-of-core ..."`` families).

Full-batch VB streams the largest grouping factor level by level and the other terms as dense columns
(:mod:`bayesvm.engines.linear.stream_vb`); SVI and the selection priors stream one dense ``q`` over every
coefficient, at most :data:`bayesvm.model.MAX_DENSE_COLUMNS` of them; a kernel model is fitted by SVI.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

from .arguments import data_name, iteration_defaults
from .checks import check_identifiability
from .combinations import check_checks, check_imputation_arguments, check_prior_method
from .control import Control
from .errors import BayesvmError
from .formula.bars import parse_formula
from .model import build_model
from .model.kernel import build_kernel_model
from .priors import PriorSet
from .results.fit import BSVMFit
from .results.kernel_fit import KernelFit


def fit_streamed(formula, data, *, method, positive, missing, standardize, penalty, priors, seed, prior, vb, kernel,
                 control: Control, nodes=None, checks=None) -> BSVMFit | KernelFit:  # fmt: skip
    """Out-of-core (dask) data: formula -> streamed design (one pass over the partitions) -> model -> the
    identifiability checks the pass's counts allow (levels per factor, levels of one class) -> the route of its
    out-of-core family -> one fit.  ``control``: the engine settings, settled; ``nodes``: a cross-fitting fold's
    variance-parameter nodes (:class:`bayesvm.engines.runs.FitRequest`); ``checks``: as ``bsvm()``'s."""
    from .engines.registry import cell, route_for
    from .engines.runs import FitRequest
    from .outofcore import build_streamed

    if prior is not None:
        if kernel is not None:
            raise BayesvmError("a selection prior selects slopes, and a kernel fit has no slopes to penalise")
        check_prior_method(prior, method, penalty, vb)
    family = "kernel" if kernel is not None else "selection" if prior is not None else "linear"
    if missing == "impute":  # multiple imputation out of core (what 'auto' chooses there): the joint model is refused
        check_imputation_arguments(control.imputation, control.imputations)
        if control.imputation == "auto":
            control = replace(control, imputation="mi")
    cell(f"out-of-core {family}", method)  # (refused before the pass over the data where no engine fits)
    tol, max_iter = iteration_defaults(method, control.tol, control.max_iter, control.batch_size, vb_max_iter=500)
    streamed = build_streamed(parse_formula(formula, getattr(data, "columns", None)), data, positive, missing)
    if kernel is not None:
        model = build_kernel_model(streamed.design, kernel, standardize, control.inducing, control.inducing_method,
                                   seed)  # fmt: skip
        diagnostics = None
    else:
        model = build_model(streamed.design, penalty, PriorSet() if priors is None else priors, standardize,
                            prior=prior)  # fmt: skip
        diagnostics = check_identifiability(model, check_checks(checks))
        diagnostics.enforce(stacklevel=4)  # (enforce, this, bsvm, the caller)
    request = FitRequest(method, vb, seed, replace(control, tol=tol, max_iter=max_iter), rows=streamed, nodes=nodes)
    run = route_for(model, request).run(model, request)
    for message, category in run.warnings:
        warnings.warn(message, category, stacklevel=3)  # (fit_streamed, bsvm, the caller)
    model = model if run.model is None else run.model
    Fit = KernelFit if kernel is not None else BSVMFit
    note = {} if kernel is not None else {"vb_note": run.vb_note}
    if diagnostics is not None:
        note["diagnostics"] = diagnostics
    return Fit(model=model, problem=run.problem, method=method, result=run.result, data_name=data_name(data), tol=tol,
               **note)  # fmt: skip
