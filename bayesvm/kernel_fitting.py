"""``bsvm(..., kernel=...)``: the face's route for kernel fits (Wenzel et al. 2017 by VB or SVI; Gibbs, EM and
accurate VB on the whitened features of :mod:`bayesvm.engines.kernel.features`), through the engines' table
(:mod:`bayesvm.engines.registry`)."""

from __future__ import annotations

import warnings
from dataclasses import replace

from .arguments import data_name, iteration_defaults
from .control import Control
from .errors import BayesvmError, ConvergenceWarning, IdentifiabilityWarning
from .formula.bars import parse_formula
from .formula.design import build_design
from .model.kernel import build_kernel_model
from .results.kernel_fit import KernelFit


def fit_kernel(formula, data, *, method, positive, missing, standardize, seed, kernel, penalty, prior, vb,
               control: Control, fold=None, class_weight=None) -> KernelFit:  # fmt: skip
    """``bsvm(..., kernel=...)``: formula -> design -> kernel model -> the kernel family's route for ``method``
    (:mod:`bayesvm.engines.kernel.routes`) -> one :class:`~bayesvm.results.kernel_fit.KernelFit`.  ``control``: the
    engine settings (:class:`bayesvm.control.Control`, settled); ``fold``: a cross-fitting fold fit's
    :class:`bayesvm.formula.design.FoldDesign`."""
    from .engines.registry import route_for
    from .engines.runs import FitRequest

    if penalty != "learn" or prior is not None:
        raise BayesvmError(
            "penalty= and prior= do not apply to a kernel fit: the kernel's variance is the penalty "
            "(learned when the kernel's learn includes 'variance')"
        )
    tol, max_iter = iteration_defaults(method, control.tol, control.max_iter, control.batch_size, vb_max_iter=1000)
    parsed = parse_formula(formula, getattr(data, "columns", None))
    design = build_design(parsed, data, positive=positive, missing=missing, rank="keep", fold=fold)
    model = build_kernel_model(design, kernel, standardize, control.inducing, control.inducing_method, seed,
                               class_weight)  # fmt: skip
    request = FitRequest(method, vb, seed, replace(control, tol=tol, max_iter=max_iter))
    run = route_for(model, request).run(model, request)
    for message, category in run.warnings:
        warnings.warn(message, category, stacklevel=3)  # (fit_kernel, bsvm, the caller)
    fit = KernelFit(model=model, problem=run.problem, method=method, result=run.result, data_name=data_name(data),
                    tol=tol)  # fmt: skip
    reach = fit.reach_problem()
    if reach:
        warnings.warn(reach, IdentifiabilityWarning, stacklevel=3)
    if method == "gibbs":
        from .results.diagnostics import mcmc_problems

        message = mcmc_problems(run.result.chain_diagnostics, control.chains, control.draws)
        if message:
            warnings.warn(message, ConvergenceWarning, stacklevel=3)
    return fit
