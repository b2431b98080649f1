"""The one table from which every engine is chosen: ``bsvm()`` (in memory and out of core, linear and kernel models)
and ``pcvm()``.

A model belongs to one family, by its blocks: ``"linear"`` (normal or learned-penalty fixed effects and random-effect
terms), ``"selection"`` (a selection prior on the slopes), ``"multiple imputation"`` and ``"joint imputation"``
(imputed predictor columns, Luts & Ormerod 2014, section 3.3), ``"imputed selection"`` (both), ``"kernel"`` (a
Gaussian process on the inputs, Wenzel et al. 2017) and ``"pcvm"`` (Chen, Tino & Yao's kernel expansion, named by
``pcvm()``); on out-of-core data (a dask frame) ``"out-of-core linear"``, ``"out-of-core selection"``,
``"out-of-core kernel"`` and ``"out-of-core multiple imputation"`` (the other imputation families are refused there).  Each ``(family, method)`` cell of :data:`ROUTES` is a :class:`Route`: ``supports(model,
request)`` gives the reason it cannot fit this model with these settings (None where it can), and ``run(model,
request)`` fits it and returns an :class:`EngineRun` (the engine's output, the problem it was fitted to, why the engine
differs from the one asked for, and the warnings its result calls for).  The face builds the fit from the run once and
says its warnings; a cell that is absent is a combination no engine fits, refused with the family's reason
(:data:`ABSENT`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import BayesvmError
from ..model.kernel import KernelModel
from .imputation import routes as imputation_routes
from .kernel import routes as kernel_routes
from .linear import routes as linear_routes
from .runs import EngineRun, FitRequest
from .selection import routes as selection_routes

__all__ = ["ABSENT", "ROUTES", "Route", "cell", "family_of", "methods", "route_for"]


@dataclass(frozen=True)
class Route:
    """One cell of the table: ``supports(model, request) -> reason or None`` and ``run(model, request) -> EngineRun``."""

    run: Callable[[object, FitRequest], EngineRun]
    supports: Callable[[object, FitRequest], str | None] = lambda model, request: None


ROUTES: dict[tuple[str, str], Route] = {
    ("linear", "vb"): Route(linear_routes.run_vb, linear_routes.supports_vb),
    ("linear", "em"): Route(linear_routes.run_em, linear_routes.supports_em),
    ("linear", "gibbs"): Route(linear_routes.run_gibbs),
    ("linear", "svi"): Route(linear_routes.run_svi, linear_routes.supports_svi),
    ("selection", "vb"): Route(selection_routes.run_vb, selection_routes.supports),
    ("selection", "em"): Route(selection_routes.run_em, selection_routes.supports),
    ("selection", "gibbs"): Route(selection_routes.run_gibbs, selection_routes.supports),
    ("selection", "svi"): Route(selection_routes.run_svi, selection_routes.supports_selection_svi),
    ("multiple imputation", "vb"): Route(imputation_routes.run_multiple_vb, imputation_routes.supports),
    ("multiple imputation", "gibbs"): Route(imputation_routes.run_gibbs, imputation_routes.supports),
    ("multiple imputation", "svi"): Route(imputation_routes.run_multiple_svi, imputation_routes.supports_svi),
    ("joint imputation", "vb"): Route(imputation_routes.run_joint_vb, imputation_routes.supports),
    ("joint imputation", "gibbs"): Route(imputation_routes.run_gibbs, imputation_routes.supports),
    # (SVI imputes by multiple imputation only: this cell's supports() says so)
    ("joint imputation", "svi"): Route(imputation_routes.run_multiple_svi, imputation_routes.supports_svi),
    ("imputed selection", "vb"): Route(imputation_routes.run_selection_vb, imputation_routes.supports_selection),
    ("imputed selection", "gibbs"): Route(imputation_routes.run_selection_gibbs, imputation_routes.supports_selection),
    ("imputed selection", "svi"): Route(imputation_routes.run_selection_svi, imputation_routes.supports_selection_svi),
    ("kernel", "vb"): Route(kernel_routes.run_vb, kernel_routes.supports),
    ("kernel", "svi"): Route(kernel_routes.run_svi, kernel_routes.supports),
    ("kernel", "gibbs"): Route(kernel_routes.run_gibbs, kernel_routes.supports),
    ("kernel", "em"): Route(kernel_routes.run_em, kernel_routes.supports),
    ("pcvm", "laplace"): Route(kernel_routes.run_pcvm_laplace),
    ("pcvm", "ep"): Route(kernel_routes.run_pcvm_ep),
    ("pcvm", "em"): Route(kernel_routes.run_pcvm_em),
    ("out-of-core linear", "vb"): Route(linear_routes.run_streamed_vb, linear_routes.supports_streamed),
    ("out-of-core linear", "svi"): Route(linear_routes.run_streamed_svi, linear_routes.supports_streamed),
    ("out-of-core selection", "vb"): Route(selection_routes.run_streamed_vb, selection_routes.supports_streamed),
    ("out-of-core selection", "svi"): Route(selection_routes.run_streamed_svi, selection_routes.supports_streamed),
    ("out-of-core kernel", "svi"): Route(kernel_routes.run_svi, kernel_routes.supports),
    ("out-of-core multiple imputation", "vb"): Route(
        imputation_routes.run_streamed_vb, imputation_routes.supports_streamed
    ),
}


def _methods_of(family: str) -> tuple[str, ...]:
    return tuple(method for (cell_family, method) in ROUTES if cell_family == family)


def _out_of_core(family: str):
    def reason(method: str) -> str:
        return f"out-of-core (dask) data are fitted by method in {_methods_of(family)}, not {method!r}"

    return reason


#: Why a family has no route for a method (the message of a refused cell).
ABSENT = {
    "multiple imputation": imputation_routes.absent_method,
    "joint imputation": imputation_routes.absent_method,
    "imputed selection": imputation_routes.absent_method,
    "pcvm": lambda method: f"method must be one of {_methods_of('pcvm')}, got {method!r}",
    "out-of-core linear": _out_of_core("out-of-core linear"),
    "out-of-core selection": _out_of_core("out-of-core selection"),
    "out-of-core kernel": _out_of_core("out-of-core kernel"),
    "out-of-core multiple imputation": imputation_routes.absent_streamed,
    "out-of-core joint imputation": imputation_routes.absent_streamed_joint,
    "out-of-core imputed selection": imputation_routes.absent_streamed_selection,
}


def methods() -> tuple[str, ...]:
    """The methods ``bsvm()`` accepts: every method of a cell of a family it fits (all but ``"pcvm"``), in the table's
    order; a new engine's cell adds its method."""
    return tuple(dict.fromkeys(method for family, method in ROUTES if family != "pcvm"))


def family_of(model, request: FitRequest) -> str:
    """The family of ``model`` as ``request`` fits it (module docstring): the one the request names, else the
    model's by its blocks, on out-of-core data where ``request.rows`` holds them."""
    if request.family is not None:
        return request.family
    if isinstance(model, KernelModel):
        family = "kernel"
    elif model.design.imputation is not None:
        if model.prior is not None:
            family = "imputed selection"
        else:
            family = "multiple imputation" if request.control.imputation == "mi" else "joint imputation"
    else:
        family = "selection" if model.prior is not None else "linear"
    return family if request.rows is None else f"out-of-core {family}"


def cell(family: str, method: str) -> Route:
    """The cell of the table for ``(family, method)``; a :class:`~bayesvm.errors.BayesvmError` with the family's reason
    where it is absent (a face may ask before it builds the model, e.g. before a pass over out-of-core data)."""
    route = ROUTES.get((family, method)) if isinstance(method, str) else None
    if route is None:
        absent = ABSENT.get(family)
        reason = absent(method) if absent is not None else None
        raise BayesvmError(reason or f"method={method!r} does not fit a model of the {family} family")
    return route


def route_for(model, request: FitRequest) -> Route:
    """The route that fits ``model`` as ``request`` asks; a :class:`~bayesvm.errors.BayesvmError` with the reason where
    none does."""
    route = cell(family_of(model, request), request.method)
    reason = route.supports(model, request)
    if reason is not None:
        raise BayesvmError(reason)
    return route
