"""The PCVM's view of a fit: :class:`PCVMFit`, a :class:`~bayesvm.results.kernel_fit.KernelFit` whose ``f`` is a
weighted sum of relevance vectors' basis functions (Chen, Tino & Yao; fitted by :func:`bayesvm.pcvm`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..arguments import as_level
from ..engines.kernel.pcvm import PCVMResult
from .kernel_fit import KernelFit


@dataclass(eq=False)
class PCVMFit(KernelFit):
    """A fitted PCVM.  ``predict(kind="pseudo")`` is the model's own ``Psi(m / sqrt(1 + v))`` for
    ``f ~ N(m, v)`` (the probit likelihood averaged over the posterior); ``kind="prob"`` is calibrated as for
    every fit (:mod:`bayesvm.results.calibration`)."""

    result: PCVMResult
    likelihood_note = "the PCVM's probit likelihood"
    checks_reach = False  # (its f has a bias and relevance weights, not the kernel's zero-mean prior)

    def _pseudo(self, mean, var, law, rows, extra) -> np.ndarray:
        return norm.cdf(mean / np.sqrt(1.0 + var))

    def log_likelihood(self, y: np.ndarray, f: np.ndarray) -> np.ndarray:
        """The PCVM's probit likelihood ``log Phi(y f)`` (Chen, Tino & Yao, eq. 2; broadcast over draws of ``f``)."""
        return norm.logcdf(y * f)

    @property
    def relevance_vectors(self) -> pd.DataFrame:
        """The selected training rows (by label), their class and the posterior mean and SD of their weight."""
        r = self.result
        sd = np.sqrt(np.diag(r.cov))[1:]
        index = self.model.design.row_index[r.active]
        frame = pd.DataFrame(self.inducing_points.to_numpy(), index=index, columns=self.model.input_names)
        return frame.assign(y=r.centre_labels, weight=r.mean[1:], weight_sd=sd, alpha=r.alpha)

    @property
    def inducing_points(self) -> pd.DataFrame:
        Z = self.result.centres * self.model.scale + self.model.center
        return pd.DataFrame(Z, columns=self.model.input_names)

    @property
    def hyperparameters(self) -> pd.Series:
        return pd.Series({"bias": self.result.mean[0]}, name="value")

    def summary(self, level: float = 0.95, detail: bool = False):
        """Relevance vectors, bias, selection and convergence; ``str()`` prints it."""
        from .kernel_summary import pcvm_summary

        as_level(level)
        return pcvm_summary(self)

    def __repr__(self) -> str:
        return f"<PCVMFit {self.result.approximation}: {self.formula!r}, {self.result.active.size} relevance vectors>"
