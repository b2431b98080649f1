"""The summaries of kernel and PCVM fits: what :class:`~bayesvm.results.summary.Summary` holds for them and how it
prints (the linear and mixed models' are in :mod:`bayesvm.results.summary`).

A kernel fit's summary has no fixed-effect or random-effect rows; its ``info`` holds the kernel, the learned
hyperparameters (``info["hyperparameters"]``, also in ``tidy()``), the inducing points and the engine's convergence
facts.  A PCVM's has one fixed row, the bias, with its posterior SD.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .summary import Summary, data_facts

ENGINE_TITLES = {
    "batch": "batch VB with the full kernel (Wenzel et al. 2017, section 4.1)",
    "inducing": "VB with {M} inducing points, full batch (Wenzel et al. 2017, section 4.2)",
    "svi": "stochastic VB with {M} inducing points (Wenzel et al. 2017, Alg. 1)",
    "gibbs": "Gibbs sampling of the GP at {where} (whitened features; Polson & Scott 2011)",
    "em": "posterior mode by EM of the GP at {where} (whitened features; Polson & Scott 2011)",
    "accurate": "accurate VB (EP) of the GP at {where} (whitened features)",
}
#: What each engine's q(f) is, for the summary's approximation line
APPROXIMATIONS = {
    "gibbs": "none for f given the hyperparameters (MCMC draws of v; f = A'v at the training rows, the exact test "
    "conditional at new rows); the hyperparameters are not integrated",
    "em": "a posterior mode: predict_interval() carries only the prior variance the inducing points leave "
    "unexplained, not the uncertainty of v",
    "accurate": "EP's Gaussian q(v) (the hinge sites matched in their first two moments)",
}


def _sampling_line(i: dict, status: str) -> str:
    table = i["chains"]
    return (
        f"Sampling: {i['n_iter']} draws per chain; over the decision values at {len(table)} training rows "
        f"max R-hat {table['r_hat'].max():.3f}, min bulk ESS {table['ess_bulk'].min():.0f}, min tail ESS "
        f"{table['ess_tail'].min():.0f}; {i['elapsed']:.2f} s"
    )


def _stochastic_line(i: dict, status: str) -> str:
    return (
        f"Stochastic VI: {i['n_iter']} steps of {i['batch_size']} rows; {status}: {i['stopping']}; "
        f"lower bound on the monitor rows {i['monitor']:.4f}; {i['elapsed']:.2f} s"
    )


def _vb_line(i: dict, status: str) -> str:
    return (
        f"Convergence: {status} after {i['n_iter']} iterations at the final hyperparameters; "
        f"lower bound {i['lower_bound']:.4f}; {i['elapsed']:.2f} s"
    )


#: The summary's line on how the engine ran, by the engine the output names (the VB engines' otherwise).
RUN_LINES = {
    "gibbs": _sampling_line,
    "em": lambda i, status: f"Convergence: {status} after {i['n_iter']} EM iterations; {i['elapsed']:.2f} s",
    "accurate": lambda i, status: f"Convergence: EP {status} after {i['n_iter']} sweeps; {i['elapsed']:.2f} s",
    "svi": _stochastic_line,
}


def kernel_summary(fit) -> Summary:
    """The :class:`Summary` of a :class:`~bayesvm.results.kernel_fit.KernelFit`."""
    r, model, design = fit.result, fit.model, fit.model.design
    info = {
        "title": ENGINE_TITLES[r.engine].format(
            M=len(r.locations),
            where=f"the {len(r.locations)} training inputs"
            if r.batch_locations
            else f"{len(r.locations)} inducing locations",
        ),
        **data_facts(fit),
        "n_dropped": dict(design.n_dropped),
        "class_weights": getattr(model, "class_weights", None),  # (fits saved before class weights have none)
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
        "calibration": None if fit.learned_calibration is None else fit.learned_calibration.describe(),
        "reach": fit.reach_problem(),
    }
    info.update(model="kernel", hyperparameters=fit.hyperparameters)
    return Summary(fixed=pd.DataFrame(columns=["mean", "sd"]), random=pd.DataFrame(), info=info, render=render_kernel)


def render_kernel(summary: Summary) -> str:
    """The printed summary of a kernel fit."""
    i = summary.info
    lines = [
        f"Kernel Bayesian SVM fit by {i['title']}",
        f" Formula: {i['formula']}",
        f"    Data: {i['data']}",
        f"Positive class (+1): {i['response']} = {i['positive']!r} ({i['n_positive']} of {i['n_obs']});"
        f" -1: {i['negative']!r}",
        f"  Inputs: {', '.join(i['inputs'])}" + (" (standardised internally)" if i["standardized"] else ""),
        f"  Kernel: {i['kernel'].describe()}",
    ]
    if i.get("class_weights") is not None:
        lines.append(f" Weights: {i['class_weights'].describe()}")
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
    if len(i["hyperparameters"]):
        what = "learned by maximising the lower bound" if i["learned"] else "fixed"
        body = i["hyperparameters"].to_string(float_format=lambda v: f"{v:.4g}")
        lines.append(f"Hyperparameters ({what}; standardised inputs):")
        lines += ["  " + line for line in body.splitlines()]
    if not i["batch_locations"]:
        lines.append(f"Inducing points: {i['n_inducing']} ({i['inducing_method']})")
    engine = i["engine"]
    lines.append(RUN_LINES.get(engine, _vb_line)(i, "converged" if i["converged"] else "NOT converged"))
    if i["stopping"] and not i["converged"] and engine != "svi":
        lines.append(f"WARNING: {i['stopping']}")
    if i["decreases"]:
        lines.append(f"Warning: the lower bound decreased at iteration(s) {i['decreases'][:10]}")
    if i.get("reach"):
        lines.append(f"WARNING: {i['reach']}")
    lines.append(f"Approximation: {APPROXIMATIONS.get(engine, 'mean-field q(f) q(a) (Wenzel et al. 2017)')}.")
    calibration = i.get("calibration")
    lines.append(
        "Probabilities (predict(kind='prob')): "
        + (f"calibrated, {calibration}." if calibration else
           "calibrated by a probit map on q(f), learned on first use by 5-fold cross-fitting "
           "(bayesvm.results.calibration); kind='pseudo' gives the raw pseudo-likelihood.")
    )  # fmt: skip
    return "\n".join(lines)


PCVM_TITLES = {
    "laplace": "Laplace approximation (Chen, Tino & Yao, section II-C)",
    "ep": "expectation propagation (Chen, Tino & Yao, section II-D)",
    "em": "MAP by EM with top-down pruning (Chen, Tino & Yao 2009)",
}


def pcvm_summary(fit) -> Summary:
    """The :class:`Summary` of a :class:`~bayesvm.results.pcvm_fit.PCVMFit`: the bias as its fixed row."""
    r = fit.result
    bias_sd = float(np.sqrt(r.cov[0, 0]))
    info = {
        "model": "pcvm",
        "approximation": r.approximation,
        **data_facts(fit),
        "inputs": fit.model.input_names,
        "kernel": r.kernel,
        "n_relevance": int(r.active.size),
        "bias": float(r.mean[0]),
        "bias_sd": bias_sd,
        "n_iter": r.n_iter,
        "converged": bool(r.converged),
        "elapsed": r.elapsed,
        "loo_error": r.loo_error,
        "calibration": None if fit.learned_calibration is None else fit.learned_calibration.describe(),
    }
    fixed = pd.DataFrame({"mean": [float(r.mean[0])], "sd": [bias_sd]}, index=pd.Index(["bias"]))
    return Summary(fixed=fixed, random=pd.DataFrame(), info=info, render=render_pcvm)


def render_pcvm(summary: Summary) -> str:
    """The printed summary of a PCVM fit."""
    i = summary.info
    em = i["approximation"] == "em"
    selection = "top-down pruning from all training rows" if em else "incremental (add / re-estimate / delete)"
    lines = [
        f"Probabilistic classification vector machine, {PCVM_TITLES[i['approximation']]}",
        f" Formula: {i['formula']}",
        f"    Data: {i['data']}",
        f"Positive class (+1): {i['response']} = {i['positive']!r} ({i['n_positive']} of {i['n_obs']});"
        f" -1: {i['negative']!r}",
        f"  Inputs: {', '.join(i['inputs'])} (standardised internally)",
        f"  Kernel: {i['kernel'].describe()} (fixed: choose it by cross-validation, as Chen et al.)",
        f"Relevance vectors: {i['n_relevance']} of {i['n_obs']} training rows (fit.relevance_vectors); "
        f"bias {i['bias']:.4f} (sd {i['bias_sd']:.4f})",
        f"Selection: {selection}, {i['n_iter']} {'iterations' if em else 'steps'}, "
        f"{'converged' if i['converged'] else 'NOT converged'}; {i['elapsed']:.2f} s",
    ]
    if em:
        lines.append(
            "Weights are the MAP (Jeffreys prior on the truncated weights); SDs and predictive "
            "probabilities use the curvature at the mode with the E-step precisions fixed"
        )
    if i["loo_error"] is not None:
        lines.append(f"EP leave-one-out error estimate (eq. 9): {i['loo_error']:.4f}")
    lines.append(
        "Probabilities (predict(kind='prob')): "
        + (f"calibrated, {i['calibration']}." if i["calibration"] else
           "calibrated by a probit map on f, learned on first use by 5-fold cross-fitting; "
           "kind='pseudo' is the model's own Psi(m / sqrt(1 + v)).")
    )  # fmt: skip
    return "\n".join(lines)
