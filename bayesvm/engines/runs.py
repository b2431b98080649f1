"""The records an engine route takes and gives (:mod:`bayesvm.engines.registry`): what the caller asked
(:class:`FitRequest`) and what the engine made of it (:class:`EngineRun`), and the words of the warnings every
iterative engine's run calls for (one wording whichever family ran).  Inert: no fitting here."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..control import Control
from ..errors import ConvergenceWarning

#: A warning a route's run calls for: ``(message, category)``, said once by the face that built the fit.
Warned = tuple[str, type[Warning]]


@dataclass(frozen=True)
class FitRequest:
    """What the caller asked of the engine: ``method`` (``"vb"``, ``"gibbs"``, ``"em"``, ``"svi"``; the PCVM's
    ``"laplace"``, ``"ep"``, ``"em"``), ``vb`` (None: the default's choice, ``"meanfield"`` or ``"accurate"``), the seed
    and the engine settings (``control``, its imputation model resolved: ``"mi"`` or ``"joint"``).

    ``rows``: where the rows live when they are not in the model's design: out-of-core data
    (:class:`bayesvm.outofcore.StreamedData`: ``sweep(transform)`` gives a pass over its partitions,
    ``minibatches(transform, size)`` their minibatches); None for in-memory data.  ``family``: the family a face fits
    where the model's blocks do not tell it (``pcvm()``'s model is a kernel expansion like a kernel SVM's); None to
    read it from the model.  ``nodes``: values of the variance parameters for the accurate fit to use instead of
    integrating over them (:class:`bayesvm.engines.hyper_grid.GivenNodes`: cross-fitting's fold fits reuse the
    full fit's); None to integrate."""

    method: str
    vb: str | None
    seed: int | None
    control: Control
    rows: object = None
    family: str | None = None
    nodes: object = None


@dataclass
class EngineRun:
    """An engine's fit of one model: its output (``result``), the problem it was fitted to, why the engine differs from
    the one asked for (``vb_note``: the default's fallback, None otherwise), ``(message, category)`` warnings, and the
    model the fit describes where the route changed its layout (``model``: every random-effect term in the dense
    columns for SVI; None where it is the model asked for)."""

    result: object
    problem: object
    vb_note: str | None = None
    warnings: list[Warned] = field(default_factory=list)
    model: object = None


def sweeps_stopped(what: str, max_iter: int, tol: float, where: str = "") -> Warned:
    """A coordinate ascent (VB) that used its ``max_iter`` sweeps without its change falling below ``tol``."""
    message = f"{what} stopped after max_iter={max_iter} sweeps without meeting tol={tol:g}{where}; increase max_iter"
    return message, ConvergenceWarning


def iterations_stopped(what: str, n_iter: int) -> Warned:
    """An iterative engine (EM / ECME, a selection prior's VB) that stopped after ``n_iter`` iterations unconverged."""
    return f"{what} stopped after {n_iter} iterations without converging; increase max_iter", ConvergenceWarning


def bound_decreased(decreases, unit: str = "sweep") -> Warned:
    """A lower bound that decreased at the listed sweeps: coordinate ascent never lowers it in exact arithmetic (each
    step maximises the bound in one factor), so a decrease is numerical trouble."""
    return (
        f"the lower bound decreased at {unit}(s) {list(decreases[:10])}: numerical trouble (coordinate ascent never "
        "lowers it in exact arithmetic); check the data's scaling",
        RuntimeWarning,
    )
