"""The kernel (nonlinear) view of a fit: :class:`KernelFit`, on the shared :class:`~bayesvm.results.base.Fit`.

``predict``, ``predict_interval``, ``calibration``, ``probability_change``, ``summary``, ``lower_bound``,
``converged``, ``elapsed``, ``save`` and ``to_inference_data`` behave as for linear fits (they are the base's).
What a kernel fit has in their place of coefficients: ``kernel``, ``hyperparameters`` and ``inducing_points``.
It has no ``fixef`` or ``ranef`` (``f`` is a Gaussian process, not a linear predictor); asking for one gives an
``AttributeError`` that says what to use instead.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..arguments import as_level
from ..engines.kernel.vb import KernelVBResult
from ..errors import BayesvmError
from ..model.kernel import KernelModel
from ..model.problems import KernelProblem
from .base import Fit

PROBABILITIES = ("pseudo", "probit")

ENGINE_TITLES = {
    "batch": "batch VB with the full kernel (Wenzel et al. 2017, section 4.1)",
    "inducing": "VB with {M} inducing points, full batch (Wenzel et al. 2017, section 4.2)",
    "svi": "stochastic VB with {M} inducing points (Wenzel et al. 2017, Alg. 1)",
    "gibbs": "Gibbs sampling of the GP at {where} (whitened features; Polson & Scott 2011)",
    "em": "posterior mode by EM of the GP at {where} (whitened features; Polson & Scott 2011)",
    "accurate": "accurate VB (EP) of the GP at {where} (whitened features)",
}
#: Engines whose trace is a lower bound on log p(y)
ENGINE_BOUNDS = ("batch", "inducing", "svi")
#: What each engine's q(f) is, for the summary's approximation line
APPROXIMATIONS = {
    "gibbs": "none for f given the hyperparameters (MCMC draws of v; f = A'v at the training rows, the exact test "
    "conditional at new rows); the hyperparameters are not integrated",
    "em": "a posterior mode: predict_interval() carries only the prior variance the inducing points leave "
    "unexplained, not the uncertainty of v",
    "accurate": "EP's Gaussian q(v) (the hinge sites matched in their first two moments)",
}


class KernelPosterior:
    """``q(f(x))`` of a kernel fit: Gaussian, from the engine's inducing-point posterior."""

    kind = "kernel"

    def __init__(self, result: KernelVBResult):
        self.result = result

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

    def _inference_groups(self, draws: int, seed: int | None, log_likelihood: bool) -> dict:
        from .arviz import kernel_groups

        return kernel_groups(self, draws, seed, log_likelihood)

    # ----- prediction ----------------------------------------------------------------------
    def _inputs(self, newdata: pd.DataFrame | None) -> np.ndarray:
        if newdata is None and self.problem.X.shape[0] != self.model.design.n:
            raise BayesvmError("the training rows of out-of-core (dask) data are not in memory: pass newdata")
        return self.problem.X if newdata is None else self.model.new_inputs(newdata)

    def _predictive(self, newdata, include_random: bool, new_levels: str):
        """``q(f)`` at the rows (section 4.4's ``q(f*)``); a kernel fit has no random effects."""
        mean, var = self.posterior.link(self._inputs(newdata))
        return mean, var, None, None, None

    def predict(
        self,
        newdata: pd.DataFrame | None = None,
        kind: str = "class",
        include_random: bool = True,
        new_levels: str = "integrate",
        probability: str | None = None,
    ) -> np.ndarray:
        """Predict new (or the training) rows: as :meth:`Fit.predict` (``kind="prob"`` is the calibrated
        probability, ``"pseudo"`` the raw pseudo-likelihood averaged over ``q(f)``).

        ``include_random`` and ``new_levels`` are ignored (a kernel fit has no random effects).
        ``probability`` is deprecated: ``"probit"`` gives Wenzel et al.'s uncalibrated
        ``E Phi(f) = Phi(m / sqrt(1 + v))`` (section 4.4; the map of
        :mod:`bayesvm.results.calibration` with ``a = c = 1``), ``"pseudo"`` equals ``kind="pseudo"``.
        """
        if probability is None or kind not in ("prob", "pseudo"):
            return super().predict(newdata, kind=kind, include_random=include_random, new_levels=new_levels)
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
    def summary(self, level: float = 0.95):
        """Kernel, hyperparameters, inducing points, lower bound and stopping rule; ``str()`` prints it."""
        as_level(level)
        return KernelSummary(self)

    def __repr__(self) -> str:
        bound = f", lower bound {self.lower_bound[-1]:.4f}" if self.result.engine in ENGINE_BOUNDS else ""
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


class KernelSummary:
    """Summary of a kernel fit (``str()`` renders it)."""

    def __init__(self, fit: KernelFit):
        r, model, design = fit.result, fit.model, fit.model.design
        self.hyperparameters = fit.hyperparameters
        response = design.response
        self.info = {
            "title": ENGINE_TITLES[r.engine].format(
                M=len(r.locations),
                where=f"the {len(r.locations)} training inputs"
                if r.batch_locations
                else f"{len(r.locations)} inducing locations",
            ),
            "formula": fit.formula,
            "data": fit.data_name,
            "response": response.name,
            "positive": response.positive,
            "negative": response.negative,
            "n_positive": int((design.y > 0).sum()),
            "n_obs": design.n,
            "n_dropped": dict(design.n_dropped),
            "inputs": model.input_names,
            "standardized": bool(np.any(model.scale != 1.0) or np.any(model.center != 0.0)),
            "kernel": r.kernel,
            "learned": bool(r.kernel.log_params().size) and len(r.hyper_trace) > 1,
            "n_inducing": len(r.locations),
            "inducing_method": model.inducing_method,
            "engine": r.engine,
            "n_iter": r.n_iter,
            "converged": fit.converged,
            "elapsed": r.elapsed,
            "lower_bound": float(r.lower_bound[-1]) if r.lower_bound.size else None,
            "hyperparameters_from": r.hyperparameters_from,
            "batch_locations": r.engine == "batch" or r.batch_locations,
            "chains": r.chain_diagnostics,
            "monitor": float(r.monitor_bounds[-1]) if r.monitor_bounds.size else None,
            "stopping": r.stopping,
            "batch_size": r.batch_size,
            "decreases": list(r.decreases),
            "calibration": None if fit._calibration is None else fit._calibration.describe(),
        }

    def tidy(self) -> pd.DataFrame:
        """The hyperparameters as a tidy table (:func:`bayesvm.results.tables.hyperparameter_table`)."""
        from .tables import hyperparameter_table

        return hyperparameter_table(self.hyperparameters)

    def __str__(self) -> str:
        i = self.info
        lines = [
            f"Kernel Bayesian SVM fit by {i['title']}",
            f" Formula: {i['formula']}",
            f"    Data: {i['data']}",
            f"Positive class (+1): {i['response']} = {i['positive']!r} ({i['n_positive']} of {i['n_obs']});"
            f" -1: {i['negative']!r}",
            f"  Inputs: {', '.join(i['inputs'])}" + (" (standardised internally)" if i["standardized"] else ""),
            f"  Kernel: {i['kernel'].describe()}",
        ]
        if i["n_dropped"]:
            lines.append(
                " Dropped rows with missing values (" + ", ".join(f"{k}: {v}" for k, v in i["n_dropped"].items()) + ")"
            )
        if i["hyperparameters_from"]:
            lines.append(
                f"Kernel hyperparameters{'' if i['batch_locations'] else ' and inducing locations'} fixed at the "
                f"values of the VB fit ({ENGINE_TITLES[i['hyperparameters_from']].format(M=i['n_inducing'])}; "
                "learned there by maximising its lower bound, ML-II)"
            )
        if len(self.hyperparameters):
            what = "learned by maximising the lower bound" if i["learned"] else "fixed"
            body = self.hyperparameters.to_string(float_format=lambda v: f"{v:.4g}")
            lines.append(f"Hyperparameters ({what}; standardised inputs):")
            lines += ["  " + line for line in body.splitlines()]
        if not i["batch_locations"]:
            lines.append(f"Inducing points: {i['n_inducing']} ({i['inducing_method']})")
        status = "converged" if i["converged"] else "NOT converged"
        engine = i["engine"]
        if engine == "gibbs":
            table = i["chains"]
            lines.append(
                f"Sampling: {i['n_iter']} draws per chain; over the decision values at {len(table)} training rows "
                f"max R-hat {table['r_hat'].max():.3f}, min bulk ESS {table['ess_bulk'].min():.0f}, min tail ESS "
                f"{table['ess_tail'].min():.0f}; {i['elapsed']:.2f} s"
            )
        elif engine == "em":
            lines.append(f"Convergence: {status} after {i['n_iter']} EM iterations; {i['elapsed']:.2f} s")
        elif engine == "accurate":
            lines.append(f"Convergence: EP {status} after {i['n_iter']} sweeps; {i['elapsed']:.2f} s")
        elif i["engine"] == "svi":
            lines.append(
                f"Stochastic VI: {i['n_iter']} steps of {i['batch_size']} rows; {status}: {i['stopping']}; "
                f"lower bound on the monitor rows {i['monitor']:.4f}; {i['elapsed']:.2f} s"
            )
        else:
            lines.append(
                f"Convergence: {status} after {i['n_iter']} iterations at the final hyperparameters; "
                f"lower bound {i['lower_bound']:.4f}; {i['elapsed']:.2f} s"
            )
        if i["stopping"] and not i["converged"] and engine != "svi":
            lines.append(f"WARNING: {i['stopping']}")
        if i["decreases"]:
            lines.append(f"Warning: the lower bound decreased at iteration(s) {i['decreases'][:10]}")
        lines.append(f"Approximation: {APPROXIMATIONS.get(engine, 'mean-field q(f) q(a) (Wenzel et al. 2017)')}.")
        calibration = i.get("calibration")
        lines.append(
            "Probabilities (predict(kind='prob')): "
            + (f"calibrated, {calibration}." if calibration else
               "calibrated by a probit map on q(f), learned on first use by 5-fold cross-fitting "
               "(bayesvm.results.calibration); kind='pseudo' gives the raw pseudo-likelihood.")
        )  # fmt: skip
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return f"<pre>{self}</pre>"
