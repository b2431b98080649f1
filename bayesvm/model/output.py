"""The one output type every engine returns: :class:`EngineOutput`.

Engines of every family (mean-field VB, accurate VB, Gibbs, EM / ECME, SVI, the selection, imputation and kernel
engines) return a subclass of it; :mod:`bayesvm.results` reads the contract declared here and never asks which
engine ran.  It lives in the model layer, which the engines and the results both import (never the reverse).

The contract:

* ``posterior_form``: what the output holds (``"variational"``: a Gaussian ``q``; ``"mixture"``: Gaussians over
  nodes of the hyperparameters; ``"sampled"``: draws; ``"mode"``: a point; ``"selection"``: a spike-and-Gaussian
  ``q`` per slope), which chooses the posterior view (:func:`bayesvm.results.posterior.posterior_view`);
* ``converged``, ``n_iter``, ``elapsed``: every engine;
* the optional parts below, with the value an engine that has no such part leaves.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

#: An empty, read-only trace: the lower bound or objective of an engine that has none.
EMPTY_TRACE = np.zeros(0)
EMPTY_TRACE.setflags(write=False)


#: The optional parts of the contract and what an engine without the part has: ``lower_bound`` (mean-field VB and
#: SVI: the bound after every sweep), ``objective`` (EM / ECME: ``log p(theta | y)`` per iteration), ``decreases``
#: (sweeps where the bound fell), ``stopping`` (why the engine stopped, where it says: SVI, ``draws="auto"``),
#: ``include`` (selection indicators: draws or ``q(gamma)``), ``fits`` (the fits pooled over completed data sets),
#: ``imputation``, ``imputation_mode`` (``"joint"`` or ``"mi"``), ``imputation_moments`` and ``z_cov`` (the
#: imputed values' posterior and the joint model's VB moments), ``imputed_cells`` (each imputed entry's ``row`` label,
#: variable ``column``, ``mean`` and ``sd``, where the output holds no ``(n, V)`` moments: out-of-core data), ``log_posterior`` (per draw), ``slopes`` (a
#: selection prior's slopes under the accurate fit), ``scale_estimate`` (a selection prior's learned scale:
#: ``(template, value)``, the template naming the statistic with ``{s}`` for the parameter, e.g. ``("E[{s}^2]", 0.3)``
#: or ``("mode of {s}", 1.2)``), ``probe_report`` (the stochastic-probe solver's Monte Carlo report) and
#: ``schur_columns`` (the size of the dense Schur complement the sparse solver formed; 0 for none), ``batch_size`` (rows per
#: minibatch of a stochastic engine; None for the engines that visit every row each sweep) and ``monitor_bounds`` (a
#: stochastic engine's bound on its monitor rows at each check).
OPTIONAL_PARTS: dict[str, object] = {
    "lower_bound": EMPTY_TRACE,
    "objective": EMPTY_TRACE,
    "decreases": (),
    "stopping": None,
    "include": None,
    "fits": None,
    "imputation": None,
    "imputation_mode": None,
    "imputation_moments": None,
    "z_cov": None,
    "imputed_cells": None,
    "log_posterior": None,
    "slopes": None,
    "scale_estimate": None,
    "probe_report": None,
    "schur_columns": 0,
    "batch_size": None,
    "monitor_bounds": EMPTY_TRACE,
}


class EngineOutput:
    """Base of every engine's output (module docstring).  Subclasses are dataclasses whose fields hold what the
    engine computed; a part of :data:`OPTIONAL_PARTS` the engine does not compute reads as its default there (through
    ``__getattr__``, which Python consults only when the instance and its class have no such attribute, so the
    subclasses' dataclass fields are untouched)."""

    #: the form of the posterior the output holds
    posterior_form: ClassVar[str] = ""

    converged: bool
    n_iter: int
    elapsed: float

    def __getattr__(self, name: str):
        try:
            return OPTIONAL_PARTS[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None
