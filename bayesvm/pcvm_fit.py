"""``pcvm()``: the probabilistic classification vector machine (Chen, Tino & Yao) with the formula interface.

Inputs and kernel as for ``bsvm(..., kernel=...)`` (:mod:`bayesvm.model.kernel`); the engines are in
:mod:`bayesvm.engines.kernel.pcvm`.  The result is a :class:`~bayesvm.results.pcvm_fit.PCVMFit`, a kernel fit.
"""

from __future__ import annotations

import pandas as pd

from .arguments import as_count, as_flag, as_seed, data_name
from .control import Control
from .engines.runs import FitRequest
from .errors import BayesvmError
from .formula.bars import parse_formula
from .formula.design import FoldDesign, build_design
from .kernels import RBF, Kernel
from .model.kernel import build_kernel_model
from .results.crossfit import record_call, register_refit
from .results.pcvm_fit import PCVMFit


def _check_pcvm_design(design) -> None:
    """Refuse what a PCVM cannot hold, in its own words (the kernel fits' checks speak of ``kernel=`` and ``gp()``
    terms, which ``pcvm()`` has neither of): its model is one kernel expansion over every predictor (Chen, Tino & Yao),
    with no random effects, no ``gp()`` terms and no imputation model."""
    parts = []
    if design.re_terms:
        parts.append(f"random effects {[t.bar.group_name for t in design.re_terms]}")
    if design.gp_terms:
        parts.append(f"gp() terms {[t.label for t in design.gp_terms]}")
    if design.imputation is not None:
        parts.append("missing='impute'")
    if parts:
        raise BayesvmError(
            f"pcvm() fits one kernel expansion over all the predictors, so it cannot take {' or '.join(parts)}; "
            "for a nonlinear effect beside random effects or imputed predictors use "
            "bsvm('y ~ gp(x1, x2) + (1 | g)', data), or drop them (missing='drop' for missing values)"
        )


def pcvm(
    formula: str,
    data: pd.DataFrame,
    *,
    kernel: Kernel | None = None,
    method: str = "laplace",
    positive: object | None = None,
    missing: str = "error",
    standardize: bool = True,
    max_iter: int | None = None,
    seed: int | None = 0,
    _fold_design: FoldDesign | None = None,
) -> PCVMFit:
    """Fit the probabilistic classification vector machine (EPCVM; Chen, Tino & Yao).

    Parameters
    ----------
    formula, data, positive, missing, standardize
        As for :func:`bayesvm.bsvm` with a kernel: the fixed part gives the inputs (no intercept column).
    kernel
        Basis function ``k`` (default ``RBF()`` with the median-distance lengthscale); its hyperparameters
        are used as given.
    method
        ``"laplace"``: Laplace approximation (eqs. 3-4) at every step of the incremental selection;
        ``"ep"``: the same selection, then expectation propagation (section II-D) for the posterior of the
        selected weights, with the leave-one-out error estimate (eq. 9) in ``summary()``;
        ``"em"``: the original PCVM (their PCVM_EM, for comparison): every training row starts as a basis
        function and EM prunes them (:mod:`bayesvm.engines.kernel.pcvm_em`); O(N^3) per early iteration.
    max_iter
        Selection steps at most (default 2000), or EM iterations for ``"em"`` (default 5000).
    seed
        ``"em"`` only: seed of the random start ``w_j ~ U(0.2, 1.2)`` (EM's answer depends on its start; the
        other methods are deterministic).
    _fold_design
        Internal: a cross-fitting fold fit's :class:`bayesvm.formula.design.FoldDesign`
        (:mod:`bayesvm.results.crossfit`); not recorded in the fit's call.
    """
    # the call as given, for cross-fitting (bayesvm.results.crossfit)
    options = {name: value for name, value in locals().items() if name != "_fold_design"}
    from .engines.registry import cell, route_for

    cell("pcvm", method)  # (an unknown method is refused before the data are read)
    max_iter = (5000 if method == "em" else 2000) if max_iter is None else as_count(max_iter, "max_iter")
    seed, standardize = as_seed(seed), as_flag(standardize, "standardize")
    design = build_design(
        parse_formula(formula, getattr(data, "columns", None)),
        data,
        positive=positive,
        missing=missing,
        rank="keep",
        fold=_fold_design,
    )
    _check_pcvm_design(design)
    model = build_kernel_model(design, RBF() if kernel is None else kernel, standardize, "all", "kmeans", 0)
    request = FitRequest(method, None, seed, Control(max_iter=max_iter), family="pcvm")
    run = route_for(model, request).run(model, request)
    options["seed"] = seed
    call = record_call("pcvm", formula, data, options, design.row_index, design.parsed.fixed)
    return PCVMFit(model=model, problem=run.problem, method=method, result=run.result, data_name=data_name(data),
                   call=call)  # fmt: skip


register_refit("pcvm", pcvm)  # cross-fitting (results/crossfit.py) refits through it
