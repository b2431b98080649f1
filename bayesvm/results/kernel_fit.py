"""The kernel (nonlinear) view of a fit: :class:`KernelFit`, on the shared :class:`~bayesvm.results.base.Fit`.

``predict``, ``predict_interval``, ``calibration``, ``probability_change``, ``summary``, ``lower_bound``,
``converged``, ``elapsed``, ``save`` and ``to_inference_data`` behave as for linear fits (they are the base's).
What a kernel fit has in place of coefficients: ``kernel``, ``hyperparameters`` and ``inducing_points``.
It has no ``fixef`` or ``ranef`` (``f`` is a Gaussian process, not a linear predictor); asking for one gives an
``AttributeError`` that says what to use instead.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..arguments import as_level
from ..checks.kernel_reach import CHECKED_ROWS, TRAINING_SHARE, reach_message, unreached
from ..engines.kernel.vb import KernelVBResult
from ..errors import BayesvmError, IdentifiabilityWarning
from ..model.kernel import KernelModel
from ..model.problems import KernelProblem
from .base import PREDICT_KINDS, Fit, checked_kind
from .posterior import VIEWS, PosteriorView

PROBABILITIES = ("pseudo", "probit")


class KernelPosterior(PosteriorView):
    """``q(f(x))`` of a kernel fit: Gaussian, from the engine's inducing-point posterior; its capabilities are those
    of the linear view of the same output form (draws for Gibbs, a point for EM, a Gaussian ``q`` otherwise)."""

    kind = "kernel"
    result: KernelVBResult

    def __init__(self, result: KernelVBResult):
        self.result = result
        like = VIEWS[result.posterior_form]
        self.holds_draws, self.point, self.approximate = like.holds_draws, like.point, like.approximate

    def link(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.result.predictor(inputs)


@dataclass(eq=False)
class KernelFit(Fit):
    """A fitted kernel Bayesian SVM (``bsvm(..., kernel=...)``)."""

    model: KernelModel
    problem: KernelProblem
    method: str
    result: KernelVBResult
    data_name: str = "data"
    tol: float = 1e-8

    def _make_posterior(self):
        return KernelPosterior(self.result)

    # ----- what a kernel fit has ---------------------------------------------------------
    @property
    def kernel(self):
        """The fitted kernel (learned hyperparameters filled in; inputs on the standardised scale)."""
        return self.result.kernel

    @property
    def hyperparameters(self) -> pd.Series:
        """Learned kernel hyperparameters (empty when none were learned)."""
        values = self.result.hyperparameters
        return pd.Series(values, dtype=float, name="value")

    @property
    def inducing_points(self) -> pd.DataFrame:
        """Inducing locations on the original scale of the inputs (batch VB: the training inputs)."""
        Z = self.result.locations * self.model.scale + self.model.center
        return pd.DataFrame(Z, columns=self.model.input_names)

    def inference_groups(self, draws: int, seed: int | None, log_likelihood: bool) -> dict:
        from .arviz import kernel_groups

        return kernel_groups(self, draws, seed, log_likelihood)

    # ----- prediction ----------------------------------------------------------------------
    def _inputs(self, newdata: pd.DataFrame | None) -> np.ndarray:
        if newdata is None and self.problem.X.shape[0] != self.model.design.n:
            raise BayesvmError("the training rows of out-of-core (dask) data are not in memory: pass newdata")
        return self.problem.X if newdata is None else self.model.new_inputs(newdata)

    def _predictive(self, newdata, include_random: bool, new_levels: str):
        """``q(f)`` at the rows (section 4.4's ``q(f*)``); a kernel fit has no random effects.  New rows where ``f``
        keeps its prior (:mod:`bayesvm.checks.kernel_reach`) are warned about, once per call (training rows passed as
        ``newdata`` too)."""
        inputs = self._inputs(newdata)
        mean, var = self.posterior.link(inputs)
        if newdata is not None and self.checks_reach:
            count = int(np.sum(unreached(var, self.kernel.diag(inputs))))
            if count:
                warnings.warn(reach_message(count, len(var), self.kernel, "rows asked for"), IdentifiabilityWarning, 3)
        return mean, var, None, None, None

    #: Whether ``f`` has the kernel's zero-mean prior, so that rows keeping it can be found (not a PCVM's)
    checks_reach = True

    def reach_problem(self) -> str:
        """Why the fit cannot be read at many of its training rows (``f`` keeps its prior there: at least
        :data:`~bayesvm.checks.kernel_reach.TRAINING_SHARE` of them), or ``""``."""
        X = self.problem.X
        if not self.checks_reach or X.shape[0] != self.model.design.n or not len(X):
            return ""  # (out-of-core data: the training rows are not in memory)
        rows = np.unique(np.linspace(0, len(X) - 1, min(len(X), CHECKED_ROWS)).astype(int))
        _, var = self.posterior.link(X[rows])
        count = int(np.sum(unreached(var, self.kernel.diag(X[rows]))))
        if count < TRAINING_SHARE * rows.size:
            return ""
        return reach_message(
            count, rows.size, self.kernel, "training rows" + (" checked" if rows.size < len(X) else "")
        )

    def predict(
        self,
        newdata: pd.DataFrame | None = None,
        kind: str = "class",
        include_random: bool = True,
        new_levels: str = "integrate",
        probability: str | None = None,
        threshold: float | None = None,
        *,
        type: str | None = None,  # (R's name: refused as Fit.predict refuses it)
    ) -> np.ndarray:
        """Predict new (or the training) rows: as :meth:`Fit.predict` (``kind="prob"`` is the calibrated
        probability, ``"pseudo"`` the raw pseudo-likelihood averaged over ``q(f)``).

        ``include_random`` and ``new_levels`` are ignored (a kernel fit has no random effects); ``threshold`` decides
        the classes by the calibrated probability, as :meth:`Fit.predict`.
        ``probability`` is deprecated: ``"probit"`` gives Wenzel et al.'s uncalibrated
        ``E Phi(f) = Phi(m / sqrt(1 + v))`` (section 4.4; the map of
        :mod:`bayesvm.results.calibration` with ``a = c = 1``), ``"pseudo"`` equals ``kind="pseudo"``.
        """
        from scipy.stats import norm

        checked_kind(kind, PREDICT_KINDS, type)
        if probability is None or kind not in ("prob", "pseudo"):
            return super().predict(
                newdata, kind=kind, include_random=include_random, new_levels=new_levels, threshold=threshold,
                type=type,
            )  # fmt: skip
        if probability not in PROBABILITIES:
            raise BayesvmError(f"probability must be one of {PROBABILITIES}, got {probability!r}")
        warnings.warn(
            "predict(probability=...) is deprecated: kind='prob' is now calibrated for every fit and "
            "kind='pseudo' is the pseudo-likelihood; probability='probit' (E Phi(f)) goes in the next release",
            FutureWarning,
            stacklevel=2,
        )
        if probability == "pseudo":
            return super().predict(newdata, kind="pseudo")
        mean, var = self.posterior.link(self._inputs(newdata))
        return pd.Series(norm.cdf(mean / np.sqrt(1.0 + var)), index=self._row_labels(newdata), name="prob")

    # ----- reporting -----------------------------------------------------------------------
    def summary(self, level: float = 0.95, detail: bool = False):
        """Kernel, hyperparameters, inducing points, lower bound and stopping rule; ``str()`` prints it."""
        from .kernel_summary import kernel_summary

        as_level(level)
        return kernel_summary(self)

    def __repr__(self) -> str:
        bound = f", lower bound {self.lower_bound[-1]:.4f}" if self.lower_bound.size else ""
        return f"<KernelFit {self.result.engine}: {self.formula!r}, n={self.model.design.n}{bound}>"

    def __getattr__(self, name: str):
        """Only called for a name the fit does not have: say where a linear-model attribute went."""
        if name in LINEAR_ONLY and not name.startswith("__"):
            raise AttributeError(
                f"{type(self).__name__!r} has no {name!r}: {name} is a linear model's (coefficients, random effects, "
                "selection, imputation); a kernel fit's f is a Gaussian process: use predict(), predict_interval(), "
                "probability_change(), hyperparameters or to_inference_data()"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


#: Attributes of the linear / mixed view that a kernel fit does not have (for the error that says so)
LINEAR_ONLY = frozenset(
    {"fixef", "fixef_cov", "ranef", "ranef_sd", "variance_components", "penalty_estimate", "inclusion", "selected",
     "check_vb", "imputation_report", "plot_imputation", "plot_inclusion", "gp_effect", "support"}
)  # fmt: skip
