"""The checks section of ``summary()``: one verdict line per check (convergence, the approximation's PSIS check,
identifiability, classes), each with what it means and what to do."""

from __future__ import annotations

import numpy as np

from ..checks.findings import IDENTIFIED_FINDINGS
from .vb_check import KHAT_GOOD, KHAT_LIMIT

SELECTION_EP_CAVEAT = (
    "EP gives each slope one Gaussian site for its prior (a point mass and a slab, or a Laplace); "
    "inclusion probabilities come from each slope's tilted distribution. With a few well-separated predictors it "
    "agrees closely with Gibbs (simulated, with a random intercept: inclusion probabilities within 0.02); with many "
    "correlated or skewed predictors (spam, scikit-learn's breast cancer) one Gaussian cannot hold the models the "
    "posterior spreads over, and it can be as far off as mean-field VB: confirm with {remedy}."
)
VB_CAVEAT = (
    "mean-field VB with q(beta, u){per_data_set} q(a) q(variance components); it understates posterior\n"
    "SDs (about half of Gibbs's without random effects) and shrinks variance components: compare with\n"
    "{remedy} before relying on the intervals."
)
#: The approximation caveats (fields ``per_data_set``: " per data set" for pooled multiple imputation, else "";
#: ``remedy``: the fit to compare with) are filled in by :func:`_approximation_checks`.  Out of core, Gibbs does not
#: run on the streamed rows; the accurate fit does.
OUT_OF_CORE_REMEDY = "vb='accurate' (or method='gibbs' on a sample in memory)"
#: Width of the verdict word (``OK``, ``NOTE``, ``CAUTION``, ``WARNING``, ``FAIL``).
VERDICT_WIDTH = 9


def _verdict(word: str, what: str, meaning: str) -> str:
    return f" {word:<{VERDICT_WIDTH}}{what}: {meaning}"


def checks_section(info: dict) -> str:
    lines = ["Checks:"]
    lines += _convergence_checks(info)
    lines += _approximation_checks(info)
    if info.get("out_of_core"):
        lines.append(
            _verdict(
                "NOTE",
                "identifiability",
                "the separation checks (classes split by the fixed effects, or by them with the random effects) need "
                "every row in memory and did not run on out-of-core data; the level counts and the levels of one "
                "class were checked (fit a sample of the rows in memory to see the separation checks)",
            )
        )
    if _untrusted(info):
        lines.append(
            _verdict(
                "WARNING",
                "identifiability",
                "the problems listed under Identifiability leave part of the posterior shaped by the prior; "
                "read those coefficients as prior-driven",
            )
        )
    finding = _class_finding(info)
    if finding == "one_class":
        lines.append(
            _verdict(
                "WARNING",
                "classes",
                "every training row is predicted as the same class (see Identifiability): the coefficients describe "
                "a constant decision value, not the predictors' effects",
            )
        )
    elif finding == "margin":
        lines.append(
            _verdict(
                "WARNING",
                "classes",
                "most training rows are held at a margin (see Identifiability): the coefficients show where the "
                "majority class changes, not the predictors' effects",
            )
        )
    return "\n".join(lines)


def _convergence_checks(info: dict) -> list[str]:
    report = info["report"]  # (bayesvm.results.summary.report_kind: what the engine's output holds)
    if report == "mixture":
        if info.get("failure"):
            return [_verdict("FAIL", "convergence", f"NOT converged: {info['failure']}")]
        return [_verdict("OK", "convergence", "EP converged at every value of the variance parameters")]
    if report == "sampled":
        if np.isnan(info["max_rhat"]):  # one chain: R-hat compares chains, so it is not computed
            summary = f"min bulk ESS {info['min_ess']:.0f}; no R-hat from one chain (chains >= 2 check it)"
            limits = "every quantity: ESS >= 100"
        else:
            summary = f"max R-hat {info['max_rhat']:.3f}, min bulk ESS {info['min_ess']:.0f}"
            limits = "every quantity: R-hat <= 1.01, ESS >= 100 per chain"
        if info["problems"]:
            return [_verdict("WARNING", "mixing", f"{summary}: {info['problems']}")]
        return [_verdict("OK", "mixing", f"{summary} ({limits})")]
    if report == "mode":
        word = "OK" if info["converged"] else "FAIL"
        state = "converged" if info["converged"] else "NOT converged: raise max_iter"
        if info["converged"] and info.get("floor_note"):
            state = f"converged; {info['floor_note']}"
        return [
            _verdict(word, "convergence", state),
            _verdict("NOTE", "uncertainty", "a posterior mode has no SDs or intervals (use method='vb' or 'gibbs')"),
        ]
    if report == "pooled":
        out = [
            _verdict("OK", "convergence", "VB converged on every completed data set")
            if info["converged"]
            else _verdict(
                "FAIL",
                "convergence",
                "accurate VB (EP) NOT converged on every completed data set: max_iter does not change EP's sweeps; "
                "refit with vb='meanfield', or method='gibbs'"
                if info.get("engine") == "accurate"
                else "VB NOT converged on every completed data set: raise max_iter",
            )
        ]
        if info["decreases"]:
            out.append(
                _verdict(
                    "FAIL",
                    "lower bound",
                    f"decreased on completed data set(s) {info['decreases'][:10]} (a bug: report it)",
                )
            )
        return out
    if report == "stochastic":
        state = "converged" if info["converged"] else "NOT converged"
        return [_verdict("OK" if info["converged"] else "WARNING", "convergence", f"{state}: {info['stopping']}")]
    out = [
        _verdict("OK", "convergence", f"converged after {info['n_iter']} sweeps")
        if info["converged"]
        else _verdict("FAIL", "convergence", f"NOT converged after {info['n_iter']} sweeps: raise max_iter")
    ]
    if info["decreases"]:
        out.append(
            _verdict("FAIL", "lower bound", f"decreased at iteration(s) {info['decreases'][:10]} (a bug: report it)")
        )
    else:
        out.append(_verdict("OK", "lower bound", "never decreased (fit.lower_bound; plot_lower_bound(fit))"))
    return out


def _approximation_checks(info: dict) -> list[str]:
    report = info["report"]
    out = []
    mean_field = report in ("variational", "pooled", "stochastic") and not info.get("accurate")
    if mean_field or info.get("caveat") == SELECTION_EP_CAVEAT:
        caveat = info.get("caveat", VB_CAVEAT).format(
            per_data_set=" per data set" if report == "pooled" else "",
            remedy=OUT_OF_CORE_REMEDY if info.get("out_of_core") else "method='gibbs'",
        )
        out.append(_verdict("NOTE", "approximation", " ".join(caveat.split())))
    if info.get("floored"):
        out.append(
            _verdict(
                "WARNING",
                "EP sites",
                f"the sites of {', '.join(info['floored'])} could not match their tilted moments (held at precision "
                "0 where a negative one made q improper): the approximation is off, for those slopes most; check the "
                "inclusion probabilities with method='gibbs'",
            )
        )
    check = info.get("psis")
    if check is None:
        return out
    if isinstance(check, str):
        return out + [_verdict("NOTE", "PSIS check", check)]
    if report == "mixture" and info.get("failure"):
        return out + [_verdict("NOTE", "PSIS check", "no verdict (the fit did not converge)")]
    if _untrusted(info):
        return out + [
            _verdict(
                "NOTE",
                "PSIS check",
                f"k-hat = {check.governing_khat:.2f}, but no verdict: it compares q with a posterior that the "
                "identifiability problems leave shaped by the prior; check with method='gibbs'",
            )
        ]
    draws = f"{check.draws} draws from q"
    if check.joint_only and check.khat > KHAT_LIMIT:
        out.append(
            _verdict(
                "CAUTION",
                f"all {check.joint_only} coefficients jointly",
                f"k-hat = {check.khat:.2f} > 0.7 ({draws}; strict in high dimension, and the check integrates random "
                "effects out exactly only for one coefficient per level of one factor, so it cannot judge the fixed "
                "effects and variances alone here): compare with method='gibbs' before reporting",
            )
        )
        return out
    if check.marginal_khat is None:
        out.append(
            _khat_verdict(
                "fixed effects", check.khat, draws, "fit.check_vb().fixef", detail=check.detail, moved=check.moved,
                suspects=check.suspects, remedy=check.remedy,
            )
        )  # fmt: skip
        return out
    if check.adapted is not None and check.moved is None:
        out.append(_adapted_verdict(check.adapted))
    else:
        detail = info.get("integration") or "random effects integrated out exactly"
        if check.adapted is not None:
            detail += f"; {check.adapted.describe()}"
        out.append(
            _khat_verdict(
                "fixed effects and variance components", check.governing_khat, draws, "fit.check_vb().marginal",
                detail=detail, moved=check.moved, suspects=check.suspects,
            )
        )  # fmt: skip
    if check.khat > KHAT_LIMIT:
        out.append(
            _verdict(
                "CAUTION",
                "individual random effects",
                f"k-hat = {check.khat:.2f} for the joint q of all coefficients (strict in high dimension): "
                "fit.ranef is approximate; refit with method='gibbs' before reporting single levels",
            )
        )
    else:
        out.append(
            _verdict("OK", "individual random effects", f"k-hat = {check.khat:.2f} for the joint q of all coefficients")
        )
    return out


def _adapted_verdict(adapted) -> str:
    """The verdict where q's marginal k-hat exceeded 0.7 but an adapted proposal's did not
    (:mod:`bayesvm.results.adaptive_check`) and its weighted means sit where q's reported ones do."""
    return _verdict(
        "CAUTION",
        "fixed effects and variance components",
        f"q itself is far from the posterior (k-hat = {adapted.q_khat:.2f} > 0.7), but its reported means and SDs "
        f"match adaptive importance sampling's (k-hat = {adapted.khat:.2f} after {adapted.rounds} round(s), ESS "
        f"{adapted.ess:.0f} of {adapted.draws} draws; random effects integrated out exactly): intervals assume q's "
        "shape; method='gibbs' for exact tails",
    )


def _khat_verdict(
    what: str,
    khat: float,
    draws: str,
    corrected: str,
    detail: str = "",
    moved=None,
    suspects: tuple[str, ...] = (),
    remedy: str = "method='gibbs'",
) -> str:
    detail = f"; {detail}" if detail else ""
    if khat <= KHAT_LIMIT and moved is not None:  # (vb_check.SHIFT_LIMIT) the table's means are off by that much
        name, shift, q_mean, weighted = moved
        return _verdict(
            "CAUTION",
            what,
            f"importance weighting moves {name!r} by {abs(shift):.1f} of q's posterior SDs ({q_mean:.4g} -> "
            f"{weighted:.4g}; PSIS k-hat = {khat:.2f}, {draws}{detail}): the table's means are off by that much; "
            f"report the importance-weighted estimates ({corrected}) or refit with {remedy}",
        )
    if khat <= KHAT_GOOD:
        return _verdict("OK", what, f"q matches the exact posterior (PSIS k-hat = {khat:.2f} <= 0.5, {draws}{detail})")
    if khat <= KHAT_LIMIT:
        return _verdict(
            "CAUTION",
            what,
            f"q is near the posterior (k-hat = {khat:.2f}, 0.5-0.7, {draws}{detail}); report the "
            f"importance-weighted estimates: {corrected}",
        )
    where = f"; q and its weighted draws disagree most on {', '.join(repr(n) for n in suspects)}" if suspects else ""
    return _verdict(
        "FAIL",
        what,
        f"q is far from the posterior (k-hat = {khat:.2f} > 0.7, {draws}{detail}): unreliable{where}; use {remedy}",
    )


def _untrusted(info: dict) -> bool:
    """A check other than aliasing (whose columns are dropped, leaving an identified model) and the one-class check
    (an identified fit of a constant decision value) warned."""
    return any(
        check not in IDENTIFIED_FINDINGS and action in ("warn", "stop")
        for check, action, _ in info.get("identifiability", [])
    )


def _class_finding(info: dict) -> str | None:
    """``"one_class"`` when the fit puts every training row on one side of the decision boundary, ``"margin"`` when it
    holds most of them at a margin (:mod:`bayesvm.checks.predicted_classes`), else None."""
    for check, action, _ in info.get("identifiability", []):
        if check in ("one_class", "margin") and action == "warn":
            return check
    return None
