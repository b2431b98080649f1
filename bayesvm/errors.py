"""Exception and warning types raised by bayesvm.

Every complaint about user input is a subclass of :class:`ValueError`, so callers who
already guard with ``except ValueError`` keep working; the subclasses let them be precise.
"""

from __future__ import annotations


class BayesvmError(ValueError):
    """Base class for errors caused by the user's input."""


def refuse(reason: str | None) -> None:
    """Raise :class:`BayesvmError` with ``reason`` where there is one: an engine called directly refuses what its
    route's ``supports()`` refuses (:mod:`bayesvm.engines.registry`)."""
    if reason is not None:
        raise BayesvmError(reason)


class FormulaError(BayesvmError):
    """The formula cannot be parsed or refers to something that does not exist."""


class DesignError(BayesvmError):
    """The formula parsed, but the model matrices cannot be built from the data."""


class DataError(BayesvmError):
    """The data are unusable as given (missing values, wrong response, empty frame)."""


class ConvergenceWarning(UserWarning):
    """An iterative fit stopped before meeting its convergence criterion."""


class ScaleWarning(UserWarning):
    """A fit is about to take far longer than it needs to for the data's size; the message says what to use."""


class IdentifiabilityWarning(UserWarning):
    """The data cannot identify part of the model as specified (the message names the column, level or term)."""


class ImputationWarning(UserWarning):
    """The imputation model moved an imputed predictor's coefficient far from what the complete rows give (the message
    names the predictor and what to use for inference on it)."""


class ApproximationWarning(UserWarning):
    """A VB fit's PSIS check found q off the posterior it approximates (the message names the parameter, or says that
    the approximation as a whole is unreliable, and what to report instead)."""
