"""``pcvm()``: the probabilistic classification vector machine (Chen, Tino & Yao) with the formula interface.

Inputs and kernel as for ``bsvm(..., kernel=...)`` (:mod:`bayesvm.model.kernel`); the engines are in
:mod:`bayesvm.engines.kernel.pcvm`.  The result is a :class:`PCVMFit`, a :class:`~bayesvm.results.fit.BSVMFit`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from .arguments import as_count, as_flag, as_level, as_seed
from .crossfit import record_call
from .engines.kernel.pcvm import BIAS_PRECISION, fit_pcvm_ep, fit_pcvm_laplace
from .engines.kernel.pcvm_em import fit_pcvm_em
from .engines.kernel.vb import ROW_CHUNK
from .errors import BayesvmError
from .formula.bars import parse_formula
from .formula.design import build_design
from .kernels import RBF, Kernel
from .model.kernel import build_kernel_model
from .model.output import EngineOutput
from .model.problems import KernelProblem
from .results.kernel_fit import KernelFit

PCVM_METHODS = ("laplace", "ep", "em")


@dataclass(eq=False)
class PCVMResult(EngineOutput):
    """Selected relevance vectors and the Gaussian posterior ``N(mean, cov)`` of ``(w_0, w_active)``."""

    kernel: Kernel
    centres: np.ndarray  # standardised inputs of the relevance vectors
    centre_labels: np.ndarray  # their y in {-1, +1}
    active: np.ndarray  # their training-row positions
    alpha: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    approximation: str
    loo_error: float | None
    n_iter: int
    converged: bool
    elapsed: float

    lower_bound = np.zeros(0)
    decreases: tuple = ()

    def basis(self, X: np.ndarray) -> np.ndarray:
        """``[1, y_j k(x, x_j)]`` for the relevance vectors ``j`` (their eq. 1)."""
        return np.column_stack([np.ones(len(X)), self.kernel.matrix(X, self.centres) * self.centre_labels[None, :]])

    #: a Gaussian approximation ``N(mean, cov)`` of the weights' posterior (Laplace or EP)
    posterior_form = "variational"
    weight_draws = None

    def features(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(B, r)`` with ``f(x) = B w`` exactly (``r = 0``): the basis of the relevance vectors."""
        return self.basis(X), np.zeros(len(X))

    def predictor(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f(x) = Phi(x)' w`` under the approximate posterior."""
        mean, var = np.empty(len(X)), np.empty(len(X))
        for start in range(0, len(X), ROW_CHUNK):
            B = self.basis(X[start : start + ROW_CHUNK])
            mean[start : start + len(B)] = B @ self.mean
            var[start : start + len(B)] = np.einsum("ij,jk,ik->i", B, self.cov, B)
        return mean, np.maximum(var, 0.0)


@dataclass(eq=False)
class PCVMFit(KernelFit):
    """A fitted PCVM.  ``predict(kind="pseudo")`` is the model's own ``Psi(m / sqrt(1 + v))`` for
    ``f ~ N(m, v)`` (the probit likelihood averaged over the posterior); ``kind="prob"`` is calibrated as for
    every fit (:mod:`bayesvm.results.calibration`)."""

    result: PCVMResult

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

    def summary(self, level: float = 0.95):
        as_level(level)
        return PCVMSummary(self)

    def __repr__(self) -> str:
        return f"<PCVMFit {self.result.approximation}: {self.formula!r}, {self.result.active.size} relevance vectors>"


class PCVMSummary:
    """Text summary of a PCVM fit."""

    def __init__(self, fit: PCVMFit):
        self.fit = fit

    def tidy(self) -> pd.DataFrame:
        """The bias with its posterior SD (the relevance vectors' weights are in ``fit.relevance_vectors``)."""
        from .results.tables import hyperparameter_table

        r = self.fit.result
        return hyperparameter_table(pd.Series({"bias": r.mean[0]}), sd=pd.Series({"bias": np.sqrt(r.cov[0, 0])}))

    def __str__(self) -> str:
        fit, r = self.fit, self.fit.result
        design = fit.model.design
        selection = (
            "top-down pruning from all training rows"
            if r.approximation == "em"
            else "incremental (add / re-estimate / delete)"
        )
        response = design.response
        title = {
            "laplace": "Laplace approximation (Chen, Tino & Yao, section II-C)",
            "ep": "expectation propagation (Chen, Tino & Yao, section II-D)",
            "em": "MAP by EM with top-down pruning (Chen, Tino & Yao 2009)",
        }[r.approximation]
        lines = [
            f"Probabilistic classification vector machine, {title}",
            f" Formula: {fit.formula}",
            f"    Data: {fit.data_name}",
            f"Positive class (+1): {response.name} = {response.positive!r} ({int((design.y > 0).sum())} of {design.n});"
            f" -1: {response.negative!r}",
            f"  Inputs: {', '.join(fit.model.input_names)} (standardised internally)",
            f"  Kernel: {r.kernel.describe()} (fixed: choose it by cross-validation, as Chen et al.)",
            f"Relevance vectors: {r.active.size} of {design.n} training rows (fit.relevance_vectors); "
            f"bias {r.mean[0]:.4f} (sd {np.sqrt(r.cov[0, 0]):.4f})",
            f"Selection: {selection}, {r.n_iter} {'iterations' if r.approximation == 'em' else 'steps'}, "
            f"{'converged' if r.converged else 'NOT converged'}; {r.elapsed:.2f} s",
        ]
        if r.approximation == "em":
            lines.append(
                "Weights are the MAP (Jeffreys prior on the truncated weights); SDs and predictive "
                "probabilities use the curvature at the mode with the E-step precisions fixed"
            )
        if r.loo_error is not None:
            lines.append(f"EP leave-one-out error estimate (eq. 9): {r.loo_error:.4f}")
        calibration = fit._calibration
        lines.append(
            "Probabilities (predict(kind='prob')): "
            + (f"calibrated, {calibration.describe()}." if calibration is not None else
               "calibrated by a probit map on f, learned on first use by 5-fold cross-fitting; "
               "kind='pseudo' is the model's own Psi(m / sqrt(1 + v)).")
        )  # fmt: skip
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return f"<pre>{self}</pre>"


def pcvm(
    formula: str,
    data: pd.DataFrame,
    *,
    kernel: Kernel | None = None,
    method: str = "laplace",
    positive: object | None = None,
    missing: str = "error",
    standardize: bool = True,
    max_iter: int | None = None,
    seed: int | None = 0,
) -> PCVMFit:
    """Fit the probabilistic classification vector machine (EPCVM; Chen, Tino & Yao).

    Parameters
    ----------
    formula, data, positive, missing, standardize
        As for :func:`bayesvm.bsvm` with a kernel: the fixed part gives the inputs (no intercept column).
    kernel
        Basis function ``k`` (default ``RBF()`` with the median-distance lengthscale); its hyperparameters
        are used as given.
    method
        ``"laplace"``: Laplace approximation (eqs. 3-4) at every step of the incremental selection;
        ``"ep"``: the same selection, then expectation propagation (section II-D) for the posterior of the
        selected weights, with the leave-one-out error estimate (eq. 9) in ``summary()``;
        ``"em"``: the original PCVM (their PCVM_EM, for comparison): every training row starts as a basis
        function and EM prunes them (:mod:`bayesvm.engines.kernel.pcvm_em`); O(N^3) per early iteration.
    max_iter
        Selection steps at most (default 2000), or EM iterations for ``"em"`` (default 5000).
    seed
        ``"em"`` only: seed of the random start ``w_j ~ U(0.2, 1.2)`` (EM's answer depends on its start; the
        other methods are deterministic).
    """
    options = dict(locals())  # the call as given, for cross-fitting (bayesvm.crossfit)
    if method not in PCVM_METHODS:
        raise BayesvmError(f"method must be one of {PCVM_METHODS}, got {method!r}")
    max_iter = (5000 if method == "em" else 2000) if max_iter is None else as_count(max_iter, "max_iter")
    seed, standardize = as_seed(seed), as_flag(standardize, "standardize")
    start = time.perf_counter()
    design = build_design(parse_formula(formula), data, positive=positive, missing=missing, rank="keep")
    model = build_kernel_model(design, RBF() if kernel is None else kernel, standardize, "all", "kmeans", 0)
    problem = KernelProblem(X=model.inputs(design.X), y=design.y, kernel=model.kernel)
    X, y = problem.X, problem.y
    Phi = np.column_stack([np.ones(len(X)), model.kernel.matrix(X, X) * y[None, :]])
    if method == "em":
        selected = fit_pcvm_em(Phi, y, max_iter=max_iter, seed=seed)
    else:
        selected = fit_pcvm_laplace(Phi, y, max_iter=max_iter)
    mean, cov, loo = selected.mean, selected.cov, None
    if method == "ep":
        cols = [0] + [1 + j for j in selected.active]
        ep = fit_pcvm_ep(Phi[:, cols], y, np.concatenate([[BIAS_PRECISION], selected.alpha]))
        mean, cov, loo = ep.mean, ep.cov, ep.loo_error
    result = PCVMResult(
        kernel=model.kernel, centres=X[selected.active], centre_labels=y[selected.active], active=selected.active,
        alpha=selected.alpha, mean=mean, cov=cov, approximation=method, loo_error=loo, n_iter=selected.n_iter,
        converged=selected.converged, elapsed=time.perf_counter() - start,
    )  # fmt: skip
    name = getattr(data, "attrs", {}).get("name") or f"{len(data)} rows"
    fit = PCVMFit(model=model, problem=problem, method=method, result=result, data_name=name)
    options["seed"] = seed
    fit.call = record_call("pcvm", formula, data, options, design.row_index, design.parsed.fixed)
    return fit
