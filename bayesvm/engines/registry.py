"""The one table from which ``bsvm()`` chooses the engine of an in-memory linear or mixed model.

A model belongs to one family, by its blocks: ``"linear"`` (normal or learned-penalty fixed effects and random-effect
terms), ``"selection"`` (a selection prior on the slopes), ``"multiple imputation"`` and ``"joint imputation"``
(imputed predictor columns, Luts & Ormerod 2014, section 3.3) and ``"imputed selection"`` (both).  Each ``(family,
method)`` cell of :data:`ROUTES` is a :class:`Route`: ``supports(model, request)`` gives the reason it cannot fit this
model with these settings (None where it can), and ``run(model, request)`` fits it and returns an
:class:`EngineRun` (the engine's output, the problem it was fitted to, why the engine differs from the one asked for,
and the warnings its result calls for).  The driver (:func:`bayesvm.fitting.bsvm`) builds the fit from the run once and
says its warnings; a cell that is absent is a combination no engine fits, refused with the family's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import BayesvmError
from .imputation import routes as imputation_routes
from .linear import routes as linear_routes
from .runs import EngineRun, FitRequest
from .selection import routes as selection_routes

__all__ = ["ABSENT", "ROUTES", "Route", "family_of", "route_for"]


@dataclass(frozen=True)
class Route:
    """One cell of the table: ``supports(model, request) -> reason or None`` and ``run(model, request) -> EngineRun``."""

    run: Callable[[object, FitRequest], EngineRun]
    supports: Callable[[object, FitRequest], str | None] = lambda model, request: None


ROUTES: dict[tuple[str, str], Route] = {
    ("linear", "vb"): Route(linear_routes.run_vb, linear_routes.supports_vb),
    ("linear", "em"): Route(linear_routes.run_em),
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
}


#: Why a family has no route for a method (the message of a refused cell).
ABSENT = {
    "multiple imputation": imputation_routes.absent_method,
    "joint imputation": imputation_routes.absent_method,
    "imputed selection": imputation_routes.absent_method,
}


def family_of(model, imputation: str) -> str:
    """The family of ``model`` (module docstring); ``imputation`` is the resolved imputation model."""
    if model.design.imputation is not None:
        if model.prior is not None:
            return "imputed selection"
        return "multiple imputation" if imputation == "mi" else "joint imputation"
    return "selection" if model.prior is not None else "linear"


def route_for(model, request: FitRequest) -> Route:
    """The route that fits ``model`` as ``request`` asks; a :class:`~bayesvm.errors.BayesvmError` with the reason where
    none does."""
    family = family_of(model, request.control.imputation)
    route = ROUTES.get((family, request.method))
    if route is None:
        absent = ABSENT.get(family)
        reason = absent(request.method) if absent is not None else None
        raise BayesvmError(reason or f"method={request.method!r} does not fit a model of the {family} family")
    reason = route.supports(model, request)
    if reason is not None:
        raise BayesvmError(reason)
    return route
