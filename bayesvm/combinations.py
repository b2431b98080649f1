"""The combinations of arguments a fit accepts: each check refuses a combination with the reason and what works
instead (a :class:`~bayesvm.errors.BayesvmError` naming the argument)."""

from __future__ import annotations

import numpy as np

from .checks import Checks
from .errors import BayesvmError
from .priors import SelectionPrior

#: Most Monte Carlo probes of the probe engine (each is a vector of every coefficient; a few dozen serve).
MAX_PROBES = 10_000


def check_checks(checks: object) -> Checks:
    if checks is None:
        return Checks()
    if not isinstance(checks, Checks):
        raise BayesvmError(
            f"checks must be a bayesvm.Checks(...) (or None for the defaults), got {type(checks).__name__}"
        )
    return checks


def check_probes(probes: object, method: str, vb: str | None, special: bool) -> None:
    if probes is None:
        return
    if isinstance(probes, bool) or not isinstance(probes, (int, np.integer)) or not 2 <= probes <= MAX_PROBES:
        raise BayesvmError(f"probes must be an integer from 2 to {MAX_PROBES:,}, got {probes!r}")
    if method != "vb" or vb == "accurate" or special:
        raise BayesvmError(
            "probes apply to mean-field VB of linear models on complete in-memory data (method='vb', vb=None or "
            "'meanfield'; no kernel, selection prior or missing='impute')"
        )


def check_sampling(draws, tune, chains, thin, cores) -> None:
    if draws == "auto":
        draws = 1
    for name, value, low in (
        ("draws", draws, 1),
        ("tune", tune, 0),
        ("chains", chains, 1),
        ("thin", thin, 1),
        ("cores", cores, 1),
    ):
        if not (isinstance(value, int) and value >= low):
            raise BayesvmError(f"{name} must be an integer >= {low}, got {value!r}")


def check_prior_method(prior: object, method: str, penalty: object, vb: str) -> None:
    if not isinstance(prior, SelectionPrior):
        raise BayesvmError(
            f"prior must be bayesvm.priors.LaplaceZero, SpikeSlab or Lasso (or None), got {type(prior).__name__}"
        )
    allowed = prior.methods
    if method not in allowed:
        why = ""
        if method == "em" and prior.point_mass:
            why = (
                ": a posterior mode does not exist under a point mass at zero (the density is infinite there, "
                "so every slope's mode is 0)"
            )
        raise BayesvmError(f"{type(prior).__name__} is fitted by method in {allowed}, not method={method!r}{why}")
    if penalty != "learn":
        raise BayesvmError(
            f"prior={type(prior).__name__}(...) replaces the penalty: leave penalty at its default, got {penalty!r}"
        )


def check_imputation_arguments(imputation: object, imputations: object) -> None:
    """The imputation settings' values (the combinations no engine fits are refused by the imputation routes:
    :mod:`bayesvm.engines.imputation.routes`)."""
    if imputation not in ("auto", "mi", "joint"):
        raise BayesvmError(f"imputation must be 'auto', 'mi' or 'joint', got {imputation!r}")
    if not (isinstance(imputations, (int, np.integer)) and imputations >= 2):
        raise BayesvmError(f"imputations must be an integer >= 2, got {imputations!r}")


#: The routes whose engines weigh rows by class (:mod:`bayesvm.model.class_weights`): ``method`` values of a linear
#: or mixed model or a kernel model held in memory (imputed predictors and selection priors included).
CLASS_WEIGHT_METHODS = ("vb", "em", "gibbs", "svi")


def check_class_weight(class_weight: object, method: str, *, streamed: bool) -> None:
    """Refuse ``class_weight`` on a route whose engine does not weigh rows (the message names the route and what
    runs instead).  The weights themselves are checked against the response when the model is built
    (:func:`bayesvm.model.class_weights.resolve_class_weight`)."""
    if class_weight is None:
        return
    route = (
        "out-of-core (dask) data" if streamed
        else f"method={method!r}" if method not in CLASS_WEIGHT_METHODS
        else None
    )  # fmt: skip
    if route is not None:
        raise BayesvmError(
            f"class_weight is not available with {route}: class weights enter the engines of method in "
            f"{CLASS_WEIGHT_METHODS} for linear, mixed and kernel models in memory. For unequal classes there, predict with "
            "kind='class' and a threshold on the calibrated probability (fit.predict(newdata, kind='class', "
            "threshold=...))"
        )
