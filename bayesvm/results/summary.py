"""``summary(fit)``: compute first (DataFrames), render second (small section helpers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import ndtri

from ..engines import variance_prior
from ..engines.linear.ep import accurate_failure
from ..engines.selection.ep import floored_slopes
from ..engines.selection.laws import law_of
from ..errors import BayesvmError
from ..model.problems import PENALTY_SOURCE
from ..outofcore import StreamedDesign
from ..priors import InverseGamma
from .imputation_check import covers as imputation_covers
from .marginal_check import integration_note
from .summary_checks import SELECTION_EP_CAVEAT, checks_section
from .vb_check import VBCheck, not_run_by_itself

#: ``summary()`` suggests ``probes`` when the exact sparse path factorised a dense complement this large (below it
#: the exact path is the faster).
PROBES_HINT_COLUMNS = 4000

METHOD_TITLES = {
    "vb": "mean-field variational Bayes (Luts & Ormerod 2014, Alg. {alg})",
    "gibbs": "Gibbs sampling (Luts & Ormerod 2014, Appendix A; Polson & Scott 2011)",
    "em": "posterior mode by {em} (Polson & Scott 2011, section 3)",
    "svi": "stochastic variational inference (Wenzel et al. 2017, section 4.5; the model of Alg. {alg})",
}

#: How ``summary()`` names an engine that is not one of :data:`METHOD_TITLES`: by the form of its output.
FORM_TITLES = {
    "variational": "a Gaussian q",
    "mixture": "Gaussians over nodes of the variance parameters",
    "sampled": "posterior draws",
    "mode": "the posterior mode",
    "selection": "a spike-and-Gaussian q per slope",
}

SELECTION_EP_TITLE = (
    "accurate VB: EP with a site per slope for the selection prior, integrated over the variance parameters and "
    "the prior's scale"
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
    #: how it prints, where not as a linear or mixed model's (kernel and PCVM fits)
    render: Callable[[Summary], str] | None = None

    def tidy(self) -> pd.DataFrame:
        """The estimates as one tidy table (:func:`bayesvm.results.tables.tidy`)."""
        from .tables import tidy

        return tidy(self)

    def __str__(self) -> str:
        if self.render is not None:  # kernel and PCVM fits (bayesvm.results.kernel_summary)
            return self.render(self)
        return "\n".join(
            part
            for part in (
                _header(self.info),
                _identifiability_section(self.info),
                _random_section(self),
                _fixed_section(self),
                _footer(self.info),
                _probability_line(self.info),
                f"Documentation: python -m bayesvm docs {self.info.get('docs', 'toenail')}",
            )
            if part
        )

    def _repr_html_(self) -> str:
        return f"<pre>{self}</pre>"


def build_summary(fit, level: float = 0.95, detail: bool = False) -> Summary:
    """The summary of a linear or mixed fit: its fixed-effect table (:func:`fixed_table`), its random-effect table
    (:func:`_random_table`) and the facts the text prints (:func:`_call_info`, then the engine's own:
    :func:`_engine_info`)."""
    fixed, diagnostics = fixed_table(fit, level)
    title, reference = _title(fit)
    info = _call_info(fit, title)
    inclusion, prior = fit.inclusion, fit.model.prior
    has_inclusion = inclusion is not None and not inclusion["p_include"].isna().all()
    if has_inclusion:
        info.update(selected=fit.selected, n_penalized=len(inclusion))
    if prior is not None and (has_inclusion or not prior.point_mass):  # (what mean-field VB's factors leave out)
        info["caveat"] = law_of(prior).vb_caveat
    _engine_info(fit, info, reference, diagnostics)
    if fit.posterior.approximate:
        info["psis"] = _vb_check(fit)
        if isinstance(info["psis"], VBCheck) and info["psis"].marginal_khat is not None:
            info["integration"] = integration_note(fit.problem)
    elif info["report"] == "pooled":  # multiple imputation: why there is no PSIS check
        info["psis"] = imputation_covers(fit)
    info["vb_note"] = fit.vb_note
    info["identifiability"] = [(f.check, f.action, f.message) for f in fit.diagnostics.findings]
    info["out_of_core"] = isinstance(getattr(fit.model, "design", None), StreamedDesign)
    info["calibration"] = None if fit.learned_calibration is None else fit.learned_calibration.describe()
    info["docs"] = _documentation_topic(fit)
    info["detail"] = detail
    return Summary(fixed=fixed, random=_random_table(fit), info=info)


def fixed_table(fit, level: float) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The fixed effects' posterior means, SDs and credible interval (quantiles of the draws of a sampled fit, else
    the Gaussian ``q``'s), with the chains' ESS and R-hat and the inclusion probabilities where there are any; and the
    chains' diagnostics table (None unless sampled)."""
    design = fit.model.design
    mean = fit.fixef
    sd = np.sqrt(np.diag(fit.fixef_cov.to_numpy()))
    lo, hi = f"{100 * (1 - level) / 2:g}%", f"{100 * (1 + level) / 2:g}%"
    sampled = fit.posterior.holds_draws
    if sampled:  # quantiles of the draws
        p = design.p
        beta = fit.result.theta_d[..., :p].reshape(-1, p) @ fit.model.fixed_transform().T
        lower, upper = np.quantile(beta, [(1 - level) / 2, (1 + level) / 2], axis=0)
    else:  # the Gaussian q
        z = ndtri(0.5 + level / 2.0)
        lower, upper = mean.to_numpy() - z * sd, mean.to_numpy() + z * sd
    fixed = pd.DataFrame({"mean": mean.to_numpy(), "sd": sd, lo: lower, hi: upper}, index=mean.index)
    if fit.posterior.point:
        fixed = fixed[["mean"]]
    diagnostics = None
    if sampled:
        from .diagnostics import mcmc_diagnostics

        diagnostics = mcmc_diagnostics(fit)
        fixed = fixed.join(diagnostics[["ess_bulk", "ess_tail", "r_hat"]])
    inclusion = fit.inclusion
    if inclusion is not None and not inclusion["p_include"].isna().all():
        fixed = fixed.join(inclusion[["p_include"]])
    return fixed, diagnostics


def _random_table(fit) -> pd.DataFrame:
    """Each random-effect term's posterior mean variance, SD and correlation with its group's first term."""
    rows = []
    for est in fit.variance_components:
        if est.group == "penalty":
            continue
        cov = est.mean
        sds = np.sqrt(np.diag(cov))
        for j, term in enumerate(est.terms):
            corr = cov[j, 0] / (sds[j] * sds[0]) if j > 0 else np.nan
            rows.append({"group": est.group, "term": term, "variance": cov[j, j], "sd": sds[j], "corr": corr})
    return pd.DataFrame(rows, columns=["group", "term", "variance", "sd", "corr"])


def _penalty_text(fit) -> str:
    """The fixed effects' prior as the summary's ``Penalty:`` line says it."""
    penalty = fit.model.penalty
    if fit.model.prior is not None:
        return _prior_text(fit)
    if penalty is not None and not fit.model.penalized.any():
        return f"none to apply: every fixed effect keeps the vague N(0, {fit.model.priors.fixed_variance:g})"
    if penalty is None:
        return f"none: vague N(0, {fit.model.priors.fixed_variance:g}) on every fixed effect"
    if penalty != "learn":
        return f"fixed alpha = {penalty:g} (slopes ~ N(0, 1/(4 alpha)))"
    alpha = fit.penalty_estimate
    text = f"learned: slopes ~ N(0, sigma_u^2), {_penalty_prior(fit)}"
    if alpha is not None:
        text += f"; E[alpha] = E[1/(4 sigma_u^2)] = {alpha:.4g}"
    slopes = int(np.sum(fit.model.penalized))
    if slopes <= FEW_PENALISED_SLOPES:
        text += (
            f"\n          only {slopes} slope{'s' if slopes > 1 else ''} inform{'' if slopes > 1 else 's'} sigma_u^2, "
            "so its posterior is mostly its prior: compare with a fixed penalty (e.g. penalty=1)"
        )
    return text


def _title(fit) -> tuple[str, str]:
    """``(the engine's title, the mean-field VB it names)``: Luts & Ormerod's algorithm, or the selection prior's own
    factors (its law's ``vb_reference``)."""
    prior = fit.model.prior
    alg = "3" if prior is not None else ("1" if not fit.problem.components else "2")
    learned = bool(fit.problem.components) or (prior is not None and prior.learns_scale)
    if fit.method in METHOD_TITLES:
        title = METHOD_TITLES[fit.method].format(alg=alg, em="ECME" if learned else "EM")
    else:  # an engine added to the table: named by its method and what its output holds
        title = f"the {fit.method!r} engine ({FORM_TITLES[fit.posterior.kind]})"
    if prior is None:
        return title, f"Alg. {alg}"
    law = law_of(prior)
    if fit.method == "gibbs":
        title = law.gibbs_title
    elif fit.method == "svi":
        title = f"stochastic variational inference (Wenzel et al. 2017, section 4.5) with {law.vb_family}"
    elif fit.method == "vb" and law.vb_named_by_family:
        title = f"mean-field variational Bayes with {law.vb_family}"
    return title, law.vb_reference


def data_facts(fit) -> dict:
    """What every summary (linear, kernel, PCVM) says of the formula and its rows: the formula, the data's name, the
    response and which class is coded +1, and the counts."""
    design = fit.model.design
    response = design.response
    return {
        "formula": fit.formula,
        "data": fit.data_name,
        "response": response.name,
        "positive": response.positive,
        "negative": response.negative,
        "n_positive": int((design.y > 0).sum()),
        "n_obs": design.n,
    }


def _call_info(fit, title: str) -> dict:
    """The facts of the call and its data the summary prints whatever the engine."""
    design = fit.model.design
    return {
        "method": fit.method,
        "title": title,
        **data_facts(fit),
        "n_dropped": dict(design.n_dropped),
        "class_weights": _class_weight_text(fit.model),
        "imputed": _imputation_text(design, getattr(fit.result, "imputation_mode", None)),
        "groups": design.groups,
        "penalty": _penalty_text(fit),
        "variance_priors": _variance_prior_text(fit),
        "standardized": bool(np.any(fit.model.scale != 1.0) or np.any(fit.model.center != 0.0)),
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "elapsed": fit.elapsed,
        "floor_note": getattr(fit.result, "floor_note", ""),  # (EM: where its continuation stopped)
    }


def report_kind(result, view) -> str:
    """Which report the summary gives, from what the engine's output holds and its posterior view can give (never
    from the method's name): ``"pooled"`` (fits pooled over completed data sets), ``"mixture"`` (the accurate fit's
    Gaussians over nodes), ``"mode"``, ``"sampled"`` (draws), ``"stochastic"`` (minibatch steps with a monitor bound)
    or ``"variational"`` (coordinate ascent on a lower bound)."""
    if result.fits is not None:
        return "pooled"
    for report, capable in (("mixture", view.over_nodes), ("mode", view.point), ("sampled", view.holds_draws)):
        if capable:
            return report
    return "stochastic" if result.batch_size is not None else "variational"


def _engine_info(fit, info: dict, reference: str, diagnostics) -> None:
    """The engine's own facts, into ``info``: which report (:func:`report_kind`), then multiple imputation's pooled
    fits, the accurate fit's nodes, EM's objective, the chains' settings and diagnostics, SVI's monitor bound, or VB's
    bound and sweeps."""
    prior = fit.model.prior
    info["report"] = report = report_kind(fit.result, fit.posterior)
    if report == "pooled":  # VB on each completed data set (impute_mi)
        r = fit.result
        kind = r.engine
        accurate = kind == "accurate"
        engine = {
            "accurate": "accurate VB (EP integrated over the variance parameters)",
            "svi": "stochastic VI (Wenzel et al. 2017, section 4.5)",
        }.get(kind, f"mean-field VB ({reference})")
        if accurate and prior is not None:
            info["caveat"] = SELECTION_EP_CAVEAT
            info["floored"] = floored_slopes(fit.model, r.fits)
            engine = "accurate VB (EP with a site per slope, integrated over the variance parameters)"
        info.update(
            title=f"multiple imputation: {engine} on each of {len(r.fits)} completed data sets, posteriors pooled",
            accurate=accurate,
            engine=kind,
            imputations=len(r.fits),
            draws=int(r.theta_d.shape[0] * r.theta_d.shape[1]),
            sweeps=[f.n_iter for f in r.fits],
            converged=r.converged,  # every completed-data fit met its tolerance
            decreases=[k for k, f in enumerate(r.fits) if f.decreases],
        )
    elif report == "mixture":
        r = fit.result
        if prior is not None:
            info["caveat"] = SELECTION_EP_CAVEAT
            info["floored"] = floored_slopes(fit.model, [r])
        info.update(
            title=SELECTION_EP_TITLE
            if prior is not None
            else "accurate VB: EP for (beta, u) given the variance components, integrated over them",
            design=r.design,
            n_nodes=int(r.weights.size),
            failure=None if r.converged else accurate_failure(r),
            log_evidence=float(r.log_evidence),
            node_weights=r.node_weights,
            fixed_correction=getattr(r, "fixed_correction", None),
            penalty_from_slopes=getattr(r, "penalty_from_slopes", None),
        )
        if info["penalty_from_slopes"] is not None:  # (EP ran on the other parameters' values, not on every node)
            info["n_nodes"] = info["penalty_from_slopes"].ep_nodes
    elif report == "mode":
        objective, stage = fit.objective, np.asarray(fit.result.stage)
        if info["floor_note"]:  # the mode kept is the last finished stage's, not the broken stage's last iterate
            objective = objective[stage < stage[-1]]
        info.update(objective=float(objective[-1]), n_support=int(fit.result.support.sum()))
    elif report == "sampled":
        from .diagnostics import inclusion_disagreement, sampled_fit_problems

        r = fit.result
        info.update(
            chains=r.chains,
            draws=r.draws,
            tune=r.tune,
            thin=r.thin,
            seed=r.seed,
            stopping=r.stopping,
            max_rhat=float(diagnostics["r_hat"].max()),
            min_ess=float(diagnostics["ess_bulk"].min()),
            problems="; ".join(
                text for text in (sampled_fit_problems(fit, diagnostics), inclusion_disagreement(fit)) if text
            )
            or None,
        )
    elif report == "stochastic":
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
        if fit.result.probe_report is not None:
            info["probes"] = fit.result.probe_report
        elif fit.result.schur_columns >= PROBES_HINT_COLUMNS:  # a large dense Schur complement
            info["probes_hint"] = fit.result.schur_columns


def _vb_check(fit) -> VBCheck | str:
    """The fit's PSIS check (run now if affordable and not run at the end of the fit), or why there is none."""
    check = fit.last_vb_check
    if check is None:
        reason = not_run_by_itself(fit)
        if reason is not None:
            return reason
        try:
            check = fit.check_vb(warn=False)  # the verdict is printed instead
        except BayesvmError as exc:
            return f"no PSIS check: {exc}"
    return check


def _documentation_topic(fit) -> str:
    """The shipped vignette closest to this fit (``python -m bayesvm docs NAME``)."""
    if fit.model.design.gp_terms:
        return "clinical_gp"
    if fit.model.design.imputation is not None:
        return "cardiac"
    if fit.model.prior is not None:
        return "spam"
    return "toenail"


def _prior_text(fit) -> str:
    """The selection prior in words, with its learned scale (the engine's ``scale_estimate``)."""
    unpen = f"; unpenalized: {', '.join(fit.model.unpenalized)}" if fit.model.unpenalized else ""
    return law_of(fit.model.prior).describe(fit.result.scale_estimate) + unpen


#: A learned penalty resting on this many slopes or fewer is said to be mostly its prior (one slope is one draw
#: from ``N(0, sigma_u^2)``: the paper's ``IG(0.01, 0.01)`` then leaves ``sigma_u^2 | beta`` an ``IG(0.51, ...)``, whose
#: mean is infinite).
FEW_PENALISED_SLOPES = 2


def _penalty_prior(fit) -> str:
    """The learned penalty's prior, e.g. ``sigma_u^2 ~ IG(0.01, 0.01)``."""
    for comp in fit.problem.components:
        if comp.source == PENALTY_SOURCE:
            return variance_prior.describe(comp).replace("sigma^2", "sigma_u^2", 1)
    return "sigma_u^2 ~ IG(A, B)"


def _variance_prior_text(fit) -> str | None:
    """The prior of each random-effect variance, e.g. ``(1 | g): sigma ~ half-t(3, 2.5)``."""
    parts = []
    for comp in fit.problem.components:
        if comp.source == PENALTY_SOURCE:
            continue
        if comp.is_wishart:
            parts.append(f"{comp.name}: Sigma ~ IW({comp.prior_df:g}, {np.round(comp.prior_scale, 3).tolist()})")
        else:
            parts.append(f"{comp.name}: {variance_prior.describe(comp)}")
    if not parts:
        return None
    paper = all(isinstance(c.prior, InverseGamma) for c in fit.problem.components if not c.is_wishart)
    note = " (the paper's)" if paper else ""
    return "; ".join(parts) + note


def _imputation_text(design, mode: str | None) -> str | None:
    layout = design.imputation
    if layout is None:
        return None
    missing, per_source, modelled = layout.n_missing, {}, {}
    for name, source in zip(layout.variables, layout.source_columns):  # a factor's indicators: one count, one entry
        if name in missing:
            per_source.setdefault(source, missing[name])
        modelled[source] = modelled.get(source, 0) + 1
    counts = ", ".join(f"{source} {count}" for source, count in per_source.items())
    variables = [
        source
        if name == source
        else f"{source} (its {modelled[source]} indicator column{'s' * (modelled[source] > 1)})"
        for name, source in zip(layout.variables, layout.source_columns)
    ]
    rows = layout.incomplete_rows
    how = (
        "multiple imputation from a normal model given the class"
        if mode == "mi"
        else "the joint model (Luts & Ormerod section 3.3: the fit informs the imputations; it predicts well, but the "
        "imputed predictors' coefficients lean away from 0: for inference on them, imputation='mi')"
    )
    return (
        f" Imputed: {counts} value(s) in {rows} of {design.n} rows, inside the model (fit.imputation_report());\n"
        f"   {how}; assumes missing completely at random; normal model of {', '.join(dict.fromkeys(variables))}"
    )


def _class_weight_text(model) -> str:
    """The classes' weights in the pseudo-likelihood (:mod:`bayesvm.model.class_weights`), or "" without them."""
    weights = getattr(model, "class_weights", None)
    if weights is None:
        return ""
    return (
        f" Weights: {weights.describe()}; the decisions (sign of f) move toward the heavier class, the calibrated "
        "probabilities are the data's (the map is learned on the weighted classes and taken back by Bayes' rule)"
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
    if info.get("class_weights"):
        lines.append(info["class_weights"])
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
        f"Random effects ({'modes' if info['report'] == 'mode' else 'posterior means'} of the variance components):\n"
        + _indent(body)
        + f"\nNumber of obs: {info['n_obs']}, groups:  {groups}\n"
    )


def _estimate_format(value: float) -> str:
    """Four decimals, or four significant digits where those would print a nonzero value as 0.0000 (a predictor on a
    scale of thousands has a coefficient of 1e-5 per unit)."""
    return f"{value:.3e}" if value != 0.0 and abs(value) < 5e-4 else f"{value:.4f}"


def _fixed_section(summary: Summary) -> str:
    table = summary.fixed.rename(columns={"mean": "Estimate", "sd": "Std.Dev."})
    formats = {c: (lambda v: f"{v:.0f}") for c in ("ess_bulk", "ess_tail")}
    formats["r_hat"] = lambda v: f"{v:.3f}"
    body = table.to_string(float_format=_estimate_format, formatters={c: f for c, f in formats.items() if c in table})
    note = ", original scale of the predictors" if summary.info["standardized"] else ""
    what = "posterior mode" if summary.info["report"] == "mode" else "posterior mean, sd and credible interval"
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
    """What ran (one line, in plain words), the fit criterion, the scale line and one verdict per check."""
    lines = [_fit_line(info), _criterion_line(info), _scale_line(info), checks_section(info)]
    return "\n".join(line for line in lines if line)


def _fit_line(info: dict) -> str:
    ms = f"{1000 * info['elapsed']:.1f} ms"
    report = info["report"]
    if report == "mixture" and not info.get("detail"):
        nodes = f" at {info['n_nodes']} values of the variance parameters" if info["n_nodes"] > 1 else ""
        corrected = info.get("fixed_correction")
        moved = "; the PSIS check corrected the fixed effects it found off" if corrected is not None else ""
        weights = info.get("node_weights")
        caveat = _node_weights_text(weights) if weights is not None and weights.method != "importance" else ""
        return f"Fit: accurate VB (EP{nodes}){moved}; {ms}; summary(detail=True) shows the engine's report{caveat}"
    if report == "mixture":
        if info["n_nodes"] > 1:
            rule = "lattice" if info["design"] == "lattice" else "Gauss-Hermite rule"
            where = (
                f" at {info['n_nodes']} values of the variance parameters (a {rule} over their posterior; "
                "each value is one EP fit of the coefficients)"
            )
        else:
            where = ""
        weighted = _node_weights_text(info.get("node_weights"))
        if info.get("penalty_from_slopes") is not None:
            weighted += "\n  " + info["penalty_from_slopes"].describe()
        if info.get("fixed_correction") is not None:
            weighted += "\n  " + info["fixed_correction"].describe()
        return (
            f"Fit: expectation propagation{where}; {info['n_iter']} EP sweeps (passes over the rows) in all; {ms}"
            + weighted
        )
    if report == "mode":
        return (
            f"Fit: posterior mode after {info['n_iter']} EM iterations; support vectors (rows on or inside the "
            f"margin): {info['n_support']} of {info['n_obs']} (fit.support); {ms}"
        )
    if report == "pooled":
        sweeps = info["sweeps"]
        kind, unit = {"accurate": ("accurate VB", "EP sweeps"), "svi": ("SVI", "steps")}.get(
            info.get("engine"), ("mean-field VB", "sweeps")
        )
        text = (
            f"Fit: {info['imputations']} completed data sets, one {kind} fit each ({min(sweeps)}-{max(sweeps)} "
            f"{unit}), pooled into {info['draws']} draws (within- plus between-imputation spread); {ms}"
        )
        return text + _vb_note_line(info)
    if report == "sampled":
        auto = f"\n  draws='auto': {info['stopping']}" if info.get("stopping") else ""
        return (
            f"Sampling: {info['chains']} chains x {info['draws']} draws (thin {info['thin']}) after {info['tune']} "
            f"tuning iterations, seed {info['seed']}; {info['elapsed']:.2f} s{auto}"
        )
    if report == "stochastic":
        return f"Stochastic VI: {info['n_iter']} steps of {info['batch_size']} rows; stopping rule: {info['stopping']}; {ms}"
    text = f"Fit: {info['n_iter']} sweeps of coordinate ascent (tol {info['tol']:g}); {ms}"
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
    return text + _vb_note_line(info)


def _vb_note_line(info: dict) -> str:
    """Why the default fit is mean-field VB here (:func:`bayesvm.engines.defaults.default_vb`, ``default_mi_vb``), if it
    is."""
    if not info.get("vb_note"):
        return ""
    return f"\nMean-field VB by default here ({info['vb_note']}); vb='accurate' gives the accurate fit."


def _node_weights_text(weights) -> str:
    """How the accurate fit weighted its nodes (:class:`bayesvm.engines.linear.node_evidence.NodeWeights`)."""
    if weights is None:
        return ""
    if weights.method == "importance":
        ess = f"effective sample size {weights.ess_fraction:.0%} of {weights.draws} draws per node"
        how = "exactly" if weights.levels == "exact" else "level by level by importance sampling"
        return (
            f"\n  Nodes weighted by importance-sampled evidence p(y | variances), random effects integrated out {how} "
            f"({ess})"
        )
    return (
        f"\n  Nodes weighted by EP's evidence, not importance-sampled evidence ({weights.reason}); see the PSIS check"
    )


def _criterion_line(info: dict) -> str:
    """A number to compare models fitted to the same rows and response (higher is better), like logLik."""
    report = info["report"]
    compare = " (higher is better; compare fits of the same rows and response)"
    if report == "mixture":
        if info.get("failure") or not np.isfinite(info.get("log_evidence", np.nan)):
            return "Fit criterion: none (the fit did not converge: see Checks)"
        weights = info.get("node_weights")
        how = "importance-sampled at each node" if weights is not None and weights.method == "importance" else "EP's"
        text = f"Fit criterion: log evidence log p(y) = {info['log_evidence']:.2f} ({how})"
        check = info.get("psis")
        if not isinstance(check, str) and check is not None and check.log_evidence is not None:
            value, se = check.log_evidence
            text += f"; {value:.2f} +/- {se:.2f} by importance sampling from the fit"
        return text + compare
    if report == "mode":
        return f"Fit criterion: log posterior at the mode {info['objective']:.2f} (up to a constant; not comparable across priors)"
    if report in ("variational", "stochastic"):
        value = info.get("lower_bound", np.nan)
        if not np.isfinite(value):
            return ""
        where = " on the monitor rows" if report == "stochastic" else ""
        return f"Fit criterion: lower bound on log p(y){where} = {value:.2f} (mean-field VB's)" + compare
    return "Fit criterion: none for a sampler; compare models by held-out log loss (fit.calibration(newdata))"


def _scale_line(info: dict) -> str:
    return (
        f"Scale: coefficients move the SVM decision value f (f > 0 predicts {info['positive']!r}; the margin is "
        "-1 < f < 1), not the log-odds:\n  do not exponentiate them; effects on the probability scale: "
        "fit.probability_change(column)."
    )


def _indent(text: str, by: str = " ") -> str:
    return "\n".join(by + line for line in text.splitlines())
