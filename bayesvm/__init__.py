"""bayesvm: Bayesian support vector machines with an R-style formula interface.

The public names are imported on first use (PEP 562), so ``import bayesvm`` is fast and a command that
only needs the errors or the data sets never loads the engines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import (
    ApproximationWarning,
    BayesvmError,
    ConvergenceWarning,
    DataError,
    DesignError,
    FormulaError,
    IdentifiabilityWarning,
    ImputationWarning,
    ScaleWarning,
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from . import datasets, docs, kernels, plots, priors
    from .checks import Checks, Diagnostics
    from .control import Control
    from .fitting import bsvm
    from .pcvm_fit import pcvm
    from .results.base import Fit
    from .results.fit import BSVMFit
    from .results.kernel_fit import KernelFit
    from .results.multiclass import MulticlassFit
    from .results.storage import load_fit as load

from .version import __version__

#: public name -> (module, attribute; None for the module itself)
_LAZY = {
    "bsvm": (".fitting", "bsvm"),
    "pcvm": (".pcvm_fit", "pcvm"),
    "load": (".results.storage", "load_fit"),
    "Fit": (".results.base", "Fit"),
    "BSVMFit": (".results.fit", "BSVMFit"),
    "KernelFit": (".results.kernel_fit", "KernelFit"),
    "MulticlassFit": (".results.multiclass", "MulticlassFit"),
    "Checks": (".checks", "Checks"),
    "Control": (".control", "Control"),
    "Diagnostics": (".checks", "Diagnostics"),
    "datasets": (".datasets", None),
    "priors": (".priors", None),
    "kernels": (".kernels", None),
    "plots": (".plots", None),
    "docs": (".docs", None),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'bayesvm' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "bsvm",
    "pcvm",
    "load",
    "Fit",
    "BSVMFit",
    "KernelFit",
    "MulticlassFit",
    "Checks",
    "Control",
    "Diagnostics",
    "datasets",
    "priors",
    "kernels",
    "plots",
    "docs",
    "BayesvmError",
    "FormulaError",
    "DesignError",
    "DataError",
    "ConvergenceWarning",
    "ScaleWarning",
    "IdentifiabilityWarning",
    "ApproximationWarning",
    "ImputationWarning",
    "__version__",
]
