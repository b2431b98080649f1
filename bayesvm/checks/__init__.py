"""Identifiability checks run before any engine (DESIGN section 4b): separation, rank, random-effect levels.

Each finding names its column, level or term; :meth:`Diagnostics.enforce` raises for a ``stop`` and
warns once per ``warn``; ``fit.diagnostics`` keeps every finding and ``summary()`` prints them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..priors import HalfT
from .findings import Checks, Diagnostics, Finding, IdentifiabilityError
from .levels import (
    fixed_span_findings,
    level_findings,
    one_class_levels,
    random_effect_separation,
    singular_findings,
)
from .predicted_classes import one_class_findings
from .rank import Aliased, aliased_columns
from .separation import Separation, detect_separation

__all__ = [
    "Aliased",
    "Checks",
    "Diagnostics",
    "Finding",
    "IdentifiabilityError",
    "Separation",
    "aliased_columns",
    "check_identifiability",
    "detect_separation",
    "one_class_findings",
    "singular_findings",
    "with_penalty_prior",
]

#: The separation test on the fixed effects runs up to this many rows x columns (a linear programme whose cost grows
#: with them); larger designs get a note instead.
SEPARATION_MAX_VALUES = 5_000_000


def check_identifiability(model, checks: Checks, kernel: bool = False) -> Diagnostics:
    """Every identifiability finding for ``model`` (a :class:`~bayesvm.model.LinearModel`).

    ``kernel``: a Gaussian-process fit (its prior keeps every direction proper: separation is a note).
    """
    design = model.design
    findings: list[Finding] = []
    if design.aliased:
        listed = design.aliased[:LISTED_COLUMNS]
        detail = "; ".join(f"{a.name!r} ({a.reason})" for a in listed)
        if len(design.aliased) > len(listed):
            detail += f"; and {len(design.aliased) - len(listed)} more (fit.diagnostics.frame() lists them)"
        findings.append(
            Finding(
                "rank",
                checks.rank if checks.rank != "stop" else "warn",
                f"the fixed-effect model matrix is rank deficient, so {len(design.aliased)} aliased column(s) are "
                f"dropped and not estimated: {detail}",
                tuple(a.name for a in design.aliased),
            )
        )
    if design.wide_kept:
        findings.append(_wide_finding(design, checks))
    isolated = None
    if design.X.shape[0] == design.n:  # rows in memory (out-of-core designs hold a prototype only)
        separation_finding, isolated = _fixed_separation(model, checks, kernel)
        if separation_finding is not None:
            findings.append(separation_finding)
        findings.extend(level_findings(design, checks))
        findings.extend(fixed_span_findings(design, checks))
        if checks.random_separation != "ignore" and not any(f.action == "stop" for f in findings):
            for finding in random_effect_separation(design.X, design.x_names, design, isolated, checks):
                action = checks.random_separation if finding.action == "warn" else finding.action
                findings.append(Finding(finding.check, action, finding.message, finding.culprits))
    else:  # out of core: the columns' spread, the level counts and each level's classes, from the pass that read them
        constant = _constant_beside_intercept(design)
        if constant:
            findings.append(
                Finding(
                    "rank",
                    checks.rank if checks.rank != "stop" else "warn",
                    f"the column(s) {_listed(constant, design.p)} are constant over every row: aliased with the intercept, so their "
                    "coefficients are determined by the prior, not the data (in memory they are dropped); remove them "
                    "from the formula",
                    tuple(constant),
                )
            )
        findings.extend(level_findings(design, checks))
        findings.extend(fixed_span_findings(design, checks))  # (from the cross-products the data's pass summed)
        if not any(f.action == "stop" for f in findings):
            findings.extend(one_class_levels(design, checks))
    return Diagnostics(tuple(findings))


#: Coefficients a separation message lists by name; more are counted (``fit.diagnostics.frame()`` has them all).
LISTED_COLUMNS = 8


def _constant_beside_intercept(design) -> list[str]:
    """Fixed-effect columns with no spread over every row (the streamed design's moments), where there is an
    intercept they alias."""
    if not design.has_intercept:
        return []
    sd = design.column_moments()[1]
    return [name for name, s in zip(design.x_names, sd) if s == 0 and name != "(Intercept)"]


def _wide_finding(design, checks: Checks) -> Finding:
    """More columns than rows, the columns past the rank kept (:func:`bayesvm.formula.design.build_design`'s
    ``keep_wide``): the data inform only as many directions of the coefficients as the design's rank."""
    n, p = design.X.shape
    kept = design.wide_kept
    named = _listed(list(kept), p)
    subject = named if len(kept) > LISTED_COLUMNS else f"{len(kept)} column(s) ({named})"
    return Finding(
        "wide",
        checks.rank if checks.rank != "stop" else "warn",
        f"the fixed-effect design has more columns ({p}) than rows ({n}): {subject} are combinations of earlier "
        "ones on these rows and are kept, as a ridge regression or a linear SVM keeps them, their coefficients "
        f"identified by the prior on the slopes; the data inform only {p - len(kept)} directions of the {p} "
        "coefficients, so read the coefficients together (predictions), not one at a time as effects",
        tuple(kept),
    )


def _listed(columns, p: int) -> str:
    """``'a', 'b'``; ``all 31 coefficients``; or the first few and how many more."""
    if len(columns) <= LISTED_COLUMNS:
        return ", ".join(repr(c) for c in columns)
    if len(columns) == p:
        return f"all {p} coefficients"
    head = ", ".join(repr(c) for c in columns[: LISTED_COLUMNS - 2])
    return f"{len(columns)} coefficients ({head} and {len(columns) - LISTED_COLUMNS + 2} more: fit.diagnostics.frame())"


def _separating_columns(result, names) -> str:
    """``'bwt' separates the classes by itself (with the intercept)``: the culprits of a separation."""
    p = len(names)
    if not result.alone:
        together = " together" if len(result.columns) > LISTED_COLUMNS else ""
        verb = "separates" if len(result.columns) == 1 else "separate"
        return f"{_listed(result.columns, p)}{together} {verb} the classes"
    listed = _listed(result.alone, p)
    which = f"{listed} separates" if len(result.alone) == 1 else f"each of {listed} separates"
    return f"{which} the classes by itself" + (" (with the intercept)" if "(Intercept)" in names else "")


def _fixed_separation(model, checks: Checks, kernel: bool) -> tuple[Finding | None, np.ndarray | None]:
    design = model.design
    X, y, names = design.X, design.y, design.x_names
    if X.shape[1] == 0:
        return None, None
    if X.size > SEPARATION_MAX_VALUES:
        return Finding("separation", "note", f"separation not tested ({X.shape[0]:,} x {X.shape[1]:,} design; the "
                       f"test runs up to {SEPARATION_MAX_VALUES:,} values)"), None  # fmt: skip
    result = detect_separation(X, y, names)
    if not result.separated:
        return None, result.isolated
    rows = result.isolated
    pos = int((y[rows] > 0).sum())
    neg = int(rows.sum()) - pos
    r = design.response
    isolated = (
        f"{pos:,} row(s) of class {r.positive!r}" if not neg else
        f"{neg:,} row(s) of class {r.negative!r}" if not pos else
        f"{pos:,} row(s) of class {r.positive!r} and {neg:,} of class {r.negative!r}"
    )  # fmt: skip
    head = f"{result.kind} separation: {_separating_columns(result, names)}, isolating {isolated} of {design.n:,}; "
    head += "along that direction the hinge loss never grows, so "
    head += (
        "those coefficients are bounded by their prior only"
        if not result.alone
        else "every coefficient is bounded by its prior only"
        if len(result.columns) == len(names)
        else f"the coefficients of {_listed(result.columns, len(names))} are bounded by their prior only"
    )
    if result.kind == "complete" and result.alone:
        head += (
            " (a column that alone separates every row is often the response recorded another way, or"
            " measured after it: check how it was collected)"
        )
    culprits = result.alone or result.columns
    vague = ~model.penalized if model.penalty is not None else np.ones(X.shape[1], dtype=bool)
    if (
        not kernel
        and vague.any()
        and detect_separation(X[:, vague], y, [n for n, v in zip(names, vague) if v]).separated
    ):
        fixed = "penalty=None gives every fixed effect" if model.penalty is None else "unpenalized= gives these columns"
        return Finding("separation", "stop", f"{head}. {fixed} a flat N(0, {model.priors.fixed_variance:g}) prior, so "
                       "their posterior is as wide as that prior; use penalty='learn' (the default) or a fixed penalty "
                       "such as penalty=1 (or keep these columns penalised)", culprits), rows  # fmt: skip
    if kernel or isinstance(model.penalty, float):
        return Finding("separation", "note", f"{head} (a fixed Gaussian penalty keeps them finite: the usual SVM "
                       "on separable data)", culprits), rows  # fmt: skip
    advice = _learned_penalty_advice(model.priors.penalty)
    return Finding("separation", checks.separation, f"{head}; {advice}", culprits), rows


def _learned_penalty_advice(prior) -> str:
    """What a separation finding under a learned penalty says of the penalty's prior."""
    if isinstance(prior, HalfT):
        return (
            f"the learned penalty's half-t prior on its SD (half-t({prior.nu:g}, {prior.scale:g})) bounds them, so "
            "their size is that prior's: compare with a fixed penalty (e.g. penalty=1), or check with method='gibbs'"
        )
    return (
        "a learned penalty gives their posterior a heavy upper tail: check it with method='gibbs', or fix the penalty "
        "(e.g. penalty=1)"
    )


def with_penalty_prior(finding: Finding, old, new, why: str) -> Finding:
    """A separation finding made under the learned penalty's prior ``old``, said for the prior ``new`` the fit uses
    instead, and ``why`` (the other findings do not depend on that prior, so they stand as they are)."""
    if finding.check != "separation":
        return finding
    message = finding.message.replace(_learned_penalty_advice(old), _learned_penalty_advice(new))
    return replace(finding, message=f"{message} ({why})")
