"""``summary(fit)``: compute first (DataFrames), render second (small section helpers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..engines import variance_prior
from ..engines.ep import accurate_failure
from ..engines.sparse_schur import SchurSparsePosterior

#: ``summary()`` suggests ``probes`` when the exact sparse path factorised a dense complement this large
#: (at 10^4 columns the probe fit took 44 s against 268 s; at 2,000 columns the exact path is faster).
PROBES_HINT_COLUMNS = 4000

METHOD_TITLES = {
    "vb": "mean-field variational Bayes (Luts & Ormerod 2014, Alg. {alg})",
    "gibbs": "Gibbs sampling (Luts & Ormerod 2014, Appendix A; Polson & Scott 2011)",
    "em": "posterior mode by {em} (Polson & Scott 2011, section 3)",
    "svi": "stochastic variational inference (Wenzel et al. 2017, section 4.5; the model of Alg. {alg})",
}

SELECTION_VB_CAVEAT = (
    "Approximation: mean-field VB with q(beta, v) q(sigma_u^2) q(a) q(b) q(gamma); it understates posterior\n"
    "SDs and its inclusion probabilities are more extreme (nearer 0 or 1) than Gibbs's: compare with method='gibbs'."
)
VB_CAVEAT = (
    "Approximation: mean-field VB with q(beta, u) q(a) q(variance components); it understates posterior\n"
    "SDs (about half of Gibbs's without random effects) and shrinks variance components: compare with\n"
    "method='gibbs' before relying on the intervals."
)


@dataclass(frozen=True)
class Summary:
    """Data of a summary; ``str()`` renders it like lme4's ``summary.merMod``.

    Attributes
    ----------
    fixed
        Per fixed effect: ``mean``, ``sd``, lower and upper credible bounds.
    random
        Per random-effect term: ``group``, ``term``, ``variance``, ``sd`` (posterior means
        ``E[sigma^2]`` and ``sqrt(E[sigma^2])``) and, for correlated terms, ``corr`` with the
        term's first column.
    info
        Everything else shown: method, formula, classes, counts, convergence.
    """

    fixed: pd.DataFrame
    random: pd.DataFrame
    info: dict

    def __str__(self) -> str:
        return "\n".join(
            part
            for part in (
                _header(self.info),
                _identifiability_section(self.info),
                _random_section(self),
                _fixed_section(self),
                _footer(self.info),
                _probability_line(self.info),
            )
            if part
        )

    def _repr_html_(self) -> str:
        return f"<pre>{self}</pre>"


def build_summary(fit, level: float = 0.95) -> Summary:
    design = fit.model.design
    mean = fit.fixef
    sd = np.sqrt(np.diag(fit.fixef_cov.to_numpy()))
    lo, hi = f"{100 * (1 - level) / 2:g}%", f"{100 * (1 + level) / 2:g}%"
    sampled = fit.posterior.kind == "sampled"
    if sampled:  # quantiles of the draws
        p = design.p
        beta = fit.result.theta_d[..., :p].reshape(-1, p) @ fit.model.fixed_transform().T
        lower, upper = np.quantile(beta, [(1 - level) / 2, (1 + level) / 2], axis=0)
    else:  # the Gaussian q
        z = norm.ppf(0.5 + level / 2.0)
        lower, upper = mean.to_numpy() - z * sd, mean.to_numpy() + z * sd
    fixed = pd.DataFrame({"mean": mean.to_numpy(), "sd": sd, lo: lower, hi: upper}, index=mean.index)
    if fit.method == "em":
        fixed = fixed[["mean"]]
    diagnostics = None
    if sampled:
        from .diagnostics import mcmc_diagnostics

        diagnostics = mcmc_diagnostics(fit)
        fixed = fixed.join(diagnostics[["ess_bulk", "ess_tail", "r_hat"]])
    inclusion = fit.inclusion
    if inclusion is not None and not inclusion["p_include"].isna().all():
        fixed = fixed.join(inclusion[["p_include"]])
    rows = []
    for est in fit.variance_components:
        if est.group == "penalty":
            continue
        cov = est.mean
        sds = np.sqrt(np.diag(cov))
        for j, term in enumerate(est.terms):
            corr = cov[j, 0] / (sds[j] * sds[0]) if j > 0 else np.nan
            rows.append({"group": est.group, "term": term, "variance": cov[j, j], "sd": sds[j], "corr": corr})
    random = pd.DataFrame(rows, columns=["group", "term", "variance", "sd", "corr"])
    response = design.response
    n_pos = int((design.y > 0).sum())
    penalty = fit.model.penalty
    if penalty is None:
        penalty_text = f"none: vague N(0, {fit.model.priors.fixed_variance:g}) on every fixed effect"
    elif penalty == "learn":
        alpha = fit.penalty_estimate
        penalty_text = "learned: slopes ~ N(0, sigma_u^2), sigma_u^2 ~ IG(A, B)"
        if alpha is not None:
            penalty_text += f"; E[alpha] = E[1/(4 sigma_u^2)] = {alpha:.4g}"
    else:
        penalty_text = f"fixed alpha = {penalty:g} (slopes ~ N(0, 1/(4 alpha)))"
    prior = fit.model.prior
    if prior is not None:
        penalty_text = _prior_text(fit)
    alg = "3" if prior is not None else ("1" if not fit.problem.components else "2")
    learned = bool(fit.problem.components) or (prior is not None and getattr(prior, "nu", 0) is None)
    title = METHOD_TITLES.get(fit.method, fit.method).format(alg=alg, em="ECME" if learned else "EM")
    if prior is not None and fit.method == "gibbs":
        title = SELECTION_GIBBS_TITLES[type(prior).__name__]
    info = {
        "method": fit.method,
        "title": title,
        "formula": fit.formula,
        "data": fit.data_name,
        "response": response.name,
        "positive": response.positive,
        "negative": response.negative,
        "n_positive": n_pos,
        "n_obs": design.n,
        "n_dropped": dict(design.n_dropped),
        "imputed": _imputation_text(design),
        "groups": design.groups,
        "penalty": penalty_text,
        "variance_priors": _variance_prior_text(fit),
        "standardized": bool(np.any(fit.model.scale != 1.0) or np.any(fit.model.center != 0.0)),
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "elapsed": fit.elapsed,
    }
    if inclusion is not None and not inclusion["p_include"].isna().all():
        info.update(selected=fit.selected, n_penalized=len(inclusion))
    mode = getattr(fit.result, "imputation_mode", None)
    if mode == "mi":
        info["imputed"] = info["imputed"].replace(
            "joint normal model of", "multiple imputation from a normal model given the class of"
        )
    if getattr(fit.result, "fits", None) is not None:  # VB on each completed data set (impute_mi)
        r = fit.result
        info.update(
            title=f"multiple imputation: mean-field VB (Alg. {alg}) on each of {len(r.fits)} completed data sets, "
            "posteriors pooled",
            method="vb-mi",
            imputations=len(r.fits),
            draws=int(r.theta_d.shape[0] * r.theta_d.shape[1]),
            sweeps=[f.n_iter for f in r.fits],
            converged=r.converged,  # every completed-data VB fit met its tolerance
            decreases=[k for k, f in enumerate(r.fits) if f.decreases],
        )
    elif fit.posterior.kind == "mixture":
        r = fit.result
        info.update(
            title="accurate VB: EP for (beta, u) given the variance components, integrated over them",
            design=r.design,
            n_nodes=int(r.weights.size),
            method="vb-accurate",
            failure=None if r.converged else accurate_failure(r),
        )
    elif fit.method == "em":
        info.update(objective=float(fit.objective[-1]), n_support=int(fit.result.support.sum()))
    elif sampled:
        from .diagnostics import mcmc_problems

        r = fit.result
        info.update(
            chains=r.chains,
            draws=r.draws,
            tune=r.tune,
            thin=r.thin,
            seed=r.seed,
            max_rhat=float(diagnostics["r_hat"].max()),
            min_ess=float(diagnostics["ess_bulk"].min()),
            problems=mcmc_problems(diagnostics, r.chains),
        )
    elif fit.method == "svi":
        r = fit.result
        info.update(
            lower_bound=float(r.monitor_bounds[-1]) if r.monitor_bounds.size else float("nan"),
            tol=fit.tol,
            decreases=[],
            stopping=r.stopping,
            batch_size=r.batch_size,
        )
    else:
        info.update(lower_bound=float(fit.lower_bound[-1]), tol=fit.tol, decreases=list(fit.result.decreases))
        theta = getattr(fit.result, "theta", None)
        report = getattr(theta, "report", None)
        if report is not None:
            info["probes"] = report
        elif isinstance(theta, SchurSparsePosterior) and theta.layout.q >= PROBES_HINT_COLUMNS:
            info["probes_hint"] = theta.layout.q
    if fit.posterior.kind in ("variational", "mixture"):
        info["psis"] = _vb_check(fit)
    info["vb_note"] = getattr(fit, "vb_note", None)
    diagnostics = getattr(fit, "diagnostics", None)
    info["identifiability"] = (
        [(f.check, f.action, f.message) for f in diagnostics.findings] if diagnostics is not None else []
    )
    calibration = getattr(fit, "_calibration", None)
    info["calibration"] = None if calibration is None else calibration.describe()
    return Summary(fixed=fixed, random=random, info=info)


#: The PSIS check runs with ``summary()`` when rows x draws stays below this (the check evaluates the
#: exact pseudo-posterior at every draw); larger fits show how to run it.
AUTO_CHECK_MAX_VALUES = 2e7
AUTO_CHECK_DRAWS = 1000


def _vb_check(fit) -> tuple | str:
    """``(k-hat, verdict, draws)`` of the fit's PSIS check (run now if affordable), or why there is none."""
    import warnings

    check = getattr(fit, "_vb_check", None)
    if check is None:
        if fit.model.design.X.shape[0] != fit.model.design.n:
            return "no PSIS check for out-of-core data (the check needs every training row in memory)"
        if getattr(fit.result, "z_cov", None) is not None or getattr(fit.result, "include", None) is not None:
            return "no PSIS check for imputation or selection fits (compare with method='gibbs')"
        n = fit.model.design.n
        if n * AUTO_CHECK_DRAWS > AUTO_CHECK_MAX_VALUES:
            return f"run fit.check_vb() for a PSIS diagnostic (not run automatically for {n} rows)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the verdict is printed below instead
            check = fit.check_vb(draws=AUTO_CHECK_DRAWS)
    return check.khat, check.verdict, check.draws, check.marginal_khat


SELECTION_GIBBS_TITLES = {
    "LaplaceZero": "Gibbs sampling (Luts & Ormerod 2014, Appendix B)",
    "SpikeSlab": "Gibbs sampling (Polson & Scott 2011, section 4.2)",
    "Lasso": "Gibbs sampling (Polson & Scott 2011, section 4.1)",
}


def _prior_text(fit) -> str:
    """The selection prior in words, with its learned scale."""
    prior, result = fit.model.prior, fit.result
    unpen = f"; unpenalized: {', '.join(fit.model.unpenalized)}" if fit.model.unpenalized else ""
    name = type(prior).__name__
    if name == "LaplaceZero":
        text = f"Laplace-zero, rho = {prior.rho:g}: slope = gamma v, gamma ~ Bernoulli(rho), v ~ Laplace(0, sigma_u)"
        if hasattr(result, "sigma2_shape"):
            text += f"; E[sigma_u^2] = {result.sigma2_scale / (result.sigma2_shape - 1.0):.4g}"
        elif hasattr(result, "scale"):
            text += f"; E[sigma_u] = {float(np.mean(result.scale)):.4g}"
    elif name == "SpikeSlab":
        text = f"spike-and-slab, pi = {prior.pi:g}: included slopes ~ N(0, nu^2 s_j^2), nu = {prior.nu:g}"
    else:
        text = "lasso: slopes ~ Laplace(0, nu s_j)"
        if prior.nu is not None:
            text += f", nu = {prior.nu:g}"
        elif hasattr(result, "nu"):
            text += f"; nu learned (1/nu ~ Gamma({prior.a:g}, {prior.b:g})), mode {result.nu:.4g}"
        else:
            text += f"; nu learned (1/nu ~ Gamma({prior.a:g}, {prior.b:g})), E[nu] = {float(np.mean(result.scale)):.4g}"
    return text + unpen


def _variance_prior_text(fit) -> str | None:
    """The prior of each random-effect variance, e.g. ``(1 | g): sigma ~ half-t(3, 2.5)``."""
    parts = []
    for comp in fit.problem.components:
        if comp.source < 0:
            continue
        if comp.is_wishart:
            parts.append(f"{comp.name}: Sigma ~ IW({comp.prior_df:g}, {np.round(comp.prior_scale, 3).tolist()})")
        else:
            parts.append(f"{comp.name}: {variance_prior.describe(comp)}")
    if not parts:
        return None
    note = "" if any(c.prior_nu > 0 for c in fit.problem.components) else " (the paper's)"
    return "; ".join(parts) + note


def _imputation_text(design) -> str | None:
    layout = design.imputation
    if layout is None:
        return None
    counts = ", ".join(f"{name} {count}" for name, count in layout.n_missing.items())
    rows = int(layout.missing.any(axis=1).sum())
    return (
        f" Imputed: {counts} value(s) in {rows} of {design.n} rows, inside the model (fit.imputation_report());\n"
        f"   assumes missing completely at random; joint normal model of {', '.join(layout.variables)}"
    )


def _header(info: dict) -> str:
    lines = [
        f"Bayesian SVM fit by {info['title']}",
        f" Formula: {info['formula']}",
        f"    Data: {info['data']}",
        f"Positive class (+1): {info['response']} = {info['positive']!r} ({info['n_positive']} of {info['n_obs']});"
        f" -1: {info['negative']!r}",
        f" Penalty: {info['penalty']}",
    ]
    if info.get("variance_priors"):
        lines.append(f"  Priors: {info['variance_priors']}")
    if info.get("selected") is not None:
        chosen = ", ".join(info["selected"]) or "none"
        lines.append(f"Selected (p_include > 0.5): {len(info['selected'])} of {info['n_penalized']}: {chosen}")
    if info.get("imputed"):
        lines.append(info["imputed"])
    if info["n_dropped"]:
        dropped = ", ".join(f"{k}: {v}" for k, v in info["n_dropped"].items())
        lines.append(f" Dropped rows with missing values ({dropped})")
    return "\n".join(lines) + "\n"


def _identifiability_section(info: dict) -> str:
    """Every finding of the identifiability checks: '!' for a warning, '-' for a note."""
    findings = [(action, message) for _, action, message in info.get("identifiability", []) if action != "ignore"]
    if not findings:
        return ""
    lines = ["Identifiability:"]
    for action, message in findings:
        lines.append(f" {'!' if action in ('warn', 'stop') else '-'} {message}")
    return "\n".join(lines) + "\n"


def _untrusted(info: dict) -> bool:
    """A check other than aliasing (whose columns are dropped, leaving an identified model) warned."""
    return any(check != "rank" and action in ("warn", "stop") for check, action, _ in info.get("identifiability", []))


def _random_section(summary: Summary) -> str:
    info = summary.info
    if summary.random.empty:
        return f"Number of obs: {info['n_obs']}\n"
    table = summary.random.rename(
        columns={"group": "Groups", "term": "Name", "variance": "Variance", "sd": "Std.Dev.", "corr": "Corr"}
    )
    table = table.copy()
    table["Groups"] = table["Groups"].where(~table["Groups"].duplicated(), "")
    if table["Corr"].isna().all():
        table = table.drop(columns="Corr")
    else:
        table["Corr"] = table["Corr"].map(lambda v: "" if np.isnan(v) else f"{v:.2f}")
    body = table.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    groups = ", ".join(f"{g}, {n}" for g, n in info["groups"].items())
    return (
        f"Random effects ({'modes' if info['method'] == 'em' else 'posterior means'} of the variance components):\n"
        + _indent(body)
        + f"\nNumber of obs: {info['n_obs']}, groups:  {groups}\n"
    )


def _fixed_section(summary: Summary) -> str:
    table = summary.fixed.rename(columns={"mean": "Estimate", "sd": "Std.Dev."})
    formats = {c: (lambda v: f"{v:.0f}") for c in ("ess_bulk", "ess_tail")}
    formats["r_hat"] = lambda v: f"{v:.3f}"
    body = table.to_string(
        float_format=lambda v: f"{v:.4f}", formatters={c: f for c, f in formats.items() if c in table}
    )
    note = ", original scale of the predictors" if summary.info["standardized"] else ""
    what = "posterior mode" if summary.info["method"] == "em" else "posterior mean, sd and credible interval"
    return f"Fixed effects ({what}{note}):\n{body}\n"


def _probability_line(info: dict) -> str:
    """How ``predict(kind="prob")`` is made (:mod:`bayesvm.results.calibration`)."""
    learned = info.get("calibration")
    if learned:
        return f"Probabilities (predict(kind='prob')): calibrated, {learned}."
    return (
        "Probabilities (predict(kind='prob')): calibrated by a probit map on f, learned on first use by 5-fold "
        "cross-fitting; predict(kind='pseudo') gives the raw pseudo-likelihood."
    )


def _footer(info: dict) -> str:
    if info["method"] == "vb-accurate":
        rule = "lattice" if info["design"] == "lattice" else "Gauss-Hermite"
        nodes = f" at {info['n_nodes']} {rule} nodes of the variance parameters" if info["n_nodes"] > 1 else ""
        if info.get("failure"):
            return (
                f"Fit: expectation propagation{nodes}, {info['n_iter']} EP sweeps in all; NOT converged:\n"
                f"  {info['failure']}\nPSIS check: no verdict (the fit did not converge)."
            )
        return (
            f"Fit: expectation propagation{nodes}, {info['n_iter']} EP sweeps in all; {1000 * info['elapsed']:.1f} ms\n"
            + (
                "Approximation: EP is close to the exact posterior for well-identified log-concave models, which this "
                "one is not (see Identifiability above)."
                if _untrusted(info)
                else "Approximation: EP is close to the exact posterior for this log-concave model (see vignettes/toenail.md)."
            )
            + _psis_line(info)
        )
    if info["method"] == "em":
        status = "converged" if info["converged"] else "NOT converged"
        return (
            f"Support vectors: {info['n_support']} of {info['n_obs']} rows (fit.support)\n"
            f"Convergence: {status} after {info['n_iter']} iterations; log posterior (up to a constant) "
            f"{info['objective']:.4f}; {1000 * info['elapsed']:.1f} ms\n"
            "A posterior mode: no posterior SDs or intervals (use method='gibbs' or 'vb')."
        )
    if info["method"] == "vb-mi":
        status = "converged" if info["converged"] else "NOT converged on every data set"
        sweeps = info["sweeps"]
        text = (
            f"Fit: {info['imputations']} completed data sets, VB {status} ({min(sweeps)}-{max(sweeps)} sweeps each); "
            f"{info['draws']} draws of the pooled posterior (within- plus between-imputation spread); "
            f"{1000 * info['elapsed']:.1f} ms"
        )
        if info["decreases"]:
            text += f"\nWarning: the lower bound decreased on completed data set(s) {info['decreases'][:10]}"
        return text + "\n" + VB_CAVEAT.replace("q(beta, u)", "q(beta, u) per data set")
    if info["method"] == "gibbs":
        text = (
            f"Sampling: {info['chains']} chains x {info['draws']} draws (thin {info['thin']}) after {info['tune']} "
            f"tuning iterations, seed {info['seed']}; max R-hat {info['max_rhat']:.3f}, min bulk ESS "
            f"{info['min_ess']:.0f}; {info['elapsed']:.2f} s"
        )
        if info["problems"]:
            text += f"\nWarning: {info['problems']}"
        return text
    status = "converged" if info["converged"] else "NOT converged"
    text = (
        f"Convergence: {status} after {info['n_iter']} iterations (tol {info['tol']:g}); "
        f"lower bound {info['lower_bound']:.4f}; {1000 * info['elapsed']:.1f} ms"
    )
    if info["method"] == "svi":
        text = (
            f"Stochastic VI: {info['n_iter']} steps of {info['batch_size']} rows; {status}: {info['stopping']};\n"
            f"lower bound on the monitor rows {info['lower_bound']:.4f}; {1000 * info['elapsed']:.1f} ms"
        )
    if info["decreases"]:
        text += f"\nWarning: the lower bound decreased at iteration(s) {info['decreases'][:10]}"
    if info.get("probes") is not None:
        rep = info["probes"]
        text += (
            f"\nVariances from {rep.probes} Rao-Blackwellised probes (fixed effects exact): Monte Carlo error of "
            f"Var(f_i) {100 * rep.row_variance_rse[0]:.2g}% median, {100 * rep.row_variance_rse[1]:.2g}% max; "
            f"lower bound +/- {0.5 * rep.logdet_se:.2g} (its log-determinant)"
        )
    if info.get("probes_hint"):
        text += (
            f"\nEach sweep factorised a dense {info['probes_hint']}-column complement; probes=32 fits this model "
            "several times faster, with a small reported Monte Carlo error in the variances"
        )
    if info.get("selected") is not None:
        return text + "\n" + SELECTION_VB_CAVEAT
    if info.get("vb_note"):
        text += f"\nMean-field VB by default here ({info['vb_note']}); vb='accurate' gives the accurate fit."
    return text + "\n" + VB_CAVEAT + _psis_line(info)


def _psis_line(info: dict) -> str:
    if isinstance(info.get("psis"), str):
        return f"\nPSIS check: {info['psis']}."
    if _untrusted(info):
        khat = info["psis"][3] if info["psis"][3] is not None else info["psis"][0]
        return (
            f"\nPSIS check: k-hat = {khat:.2f}, but no verdict: it compares q with a posterior that the "
            "identifiability problems above leave shaped by the prior; check with method='gibbs'"
        )
    khat, verdict, draws, marginal = info["psis"]
    if marginal is None:
        text = f"\nPSIS check ({draws} draws from q): k-hat = {khat:.2f}, {verdict}"
        return text + ("; importance-weighted estimates: fit.check_vb().fixef" if khat <= 0.7 else "")
    text = (
        f"\nPSIS check ({draws} draws from q): k-hat = {marginal:.2f} for the fixed effects and variance components "
        f"(random effects integrated out exactly), {verdict};\n  k-hat = {khat:.2f} for the joint q of all "
        "coefficients (strict in high dimension; judges the individual random effects)"
    )
    return text + ("\n  importance-weighted estimates: fit.check_vb().marginal" if marginal <= 0.7 else "")


def _indent(text: str, by: str = " ") -> str:
    return "\n".join(by + line for line in text.splitlines())
