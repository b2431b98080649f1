"""bayesvm: Bayesian support vector machines with an R-style formula interface."""

from . import datasets, priors
from .checks import Checks, Diagnostics
from .errors import (
    BayesvmError,
    ConvergenceWarning,
    DataError,
    DesignError,
    FormulaError,
    IdentifiabilityWarning,
    ScaleWarning,
)
from .fitting import bsvm
from .pcvm_fit import pcvm
from .results.fit import BSVMFit
from .results.storage import load_fit as load

__version__ = "0.1.0"

__all__ = [
    "bsvm",
    "pcvm",
    "load",
    "BSVMFit",
    "Checks",
    "Diagnostics",
    "datasets",
    "priors",
    "BayesvmError",
    "FormulaError",
    "DesignError",
    "DataError",
    "ConvergenceWarning",
    "ScaleWarning",
    "IdentifiabilityWarning",
    "__version__",
]
