"""Records of the identifiability checks: what each found, and what the user asked to do about it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pandas as pd

from ..errors import BayesvmError, IdentifiabilityWarning

ACTIONS = ("ignore", "warn", "stop")
#: Findings that leave a fitted model identified (aliased columns are dropped; a one-class fit is an identified fit of
#: a constant decision value, and a fit holding most rows at a margin one of a step), so a PSIS verdict after them
#: still means what it says
IDENTIFIED_FINDINGS = ("rank", "one_class", "margin", "class_balance")


class IdentifiabilityError(BayesvmError):
    """The data cannot identify the model as specified; the message names the column, level or term."""


@dataclass(frozen=True)
class Finding:
    """One finding of a check.

    Attributes
    ----------
    check
        Which check (``"separation"``, ``"rank"``, ``"nlevels"``, ``"nobs_vs_nlev"``, ``"nobs_vs_nRE"``,
        ``"re_separation"``, ``"singular"``, ``"one_class"``, ``"margin"``, ``"class_balance"``).
    action
        ``"stop"`` (refused), ``"warn"`` (one warning and a line in ``summary()``), ``"note"`` (a line
        in ``summary()`` only) or ``"ignore"``.
    message
        What was found, naming the culprit, and what to do.
    culprits
        The columns, levels or grouping factors at fault.
    """

    check: str
    action: str
    message: str
    culprits: tuple[str, ...] = ()


@dataclass(frozen=True)
class Checks:
    """What to do when an identifiability check fails, as lme4's ``glmerControl(check.* = ...)``.

    Each field is ``"ignore"``, ``"warn"`` or ``"stop"``.

    Attributes
    ----------
    separation
        Complete or quasi-complete separation of the classes by the fixed effects (``"warn"``; a flat
        prior on a separating coefficient, e.g. ``penalty=None``, is always refused).
    rank
        Aliased fixed-effect columns: ``"warn"`` drops them (named, reported as aliased), ``"stop"``
        refuses, ``"ignore"`` drops them silently (they are still listed in ``summary()``).
    nlevels
        A grouping factor with fewer than 5 levels (``"warn"``; fewer than 2 is always refused).
    nobs_vs_nlev
        A random-effect term with at least as many levels as rows, or one the fixed effects can express (a
        grouping factor that is also a fixed-effect factor): confounded, its variance not identified (``"stop"``); a
        majority of single-row levels is warned about unless ``"ignore"``.
    nobs_vs_nre
        More random-effect coefficients than rows (``"stop"``).
    random_separation
        Rows the random effects alone separate, when they are nearly all rows or leave fewer than 5
        levels holding both classes (``"warn"``).
    singular
        A variance component at the boundary after the fit (an SD of about zero or a correlation of
        +/-1, as lme4's ``isSingular``; ``"warn"``; ``"stop"`` acts as ``"warn"``: the fit exists).
    one_class
        Every training row on one side of the decision boundary after the fit (unequal, overlapping classes), or
        most rows held at a margin (the coefficients then show where the majority class changes, not the
        predictors' association: :mod:`bayesvm.checks.predicted_classes`; ``"warn"``; ``"stop"`` acts as
        ``"warn"``); unless ``"ignore"``, a note in ``summary()`` when the decisions call the smaller class for
        less than half its share of the rows, with the threshold that weighs both classes equally.
    vb_check
        The PSIS check of a VB fit against the posterior it approximates, run at the end of the fit
        (:func:`bayesvm.results.vb_check.check_at_fit_end`; ``"warn"``: one warning when k-hat exceeds 0.7 or the importance
        weights move a reported mean by half of q's SD or more, naming it; ``"stop"`` acts as ``"warn"``;
        ``"ignore"`` leaves the check to ``summary()``).  It costs 1,000 evaluations of the pseudo-posterior.  On
        the accurate fit, where its k-hat is at most 0.7 the check also corrects the coefficients whose weighted mean
        or SD differs from q's beyond Monte Carlo error, and runs again on the corrected fit
        (:mod:`bayesvm.results.psis_correction`); ``"ignore"`` leaves EP's coefficients as they are.
    """

    separation: str = "warn"
    rank: str = "warn"
    nlevels: str = "warn"
    nobs_vs_nlev: str = "stop"
    nobs_vs_nre: str = "stop"
    random_separation: str = "warn"
    singular: str = "warn"
    one_class: str = "warn"
    vb_check: str = "warn"

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value not in ACTIONS:
                raise BayesvmError(f"Checks({name}=...) must be one of {ACTIONS}, got {value!r}")


@dataclass(frozen=True)
class Diagnostics:
    """Every finding of the identifiability checks of one fit (``fit.diagnostics``)."""

    findings: tuple[Finding, ...] = ()

    @property
    def problems(self) -> tuple[Finding, ...]:
        """Findings that were warned about (or would have stopped the fit)."""
        return tuple(f for f in self.findings if f.action in ("warn", "stop"))

    def frame(self) -> pd.DataFrame:
        """One row per finding: check, action, culprits, message."""
        return pd.DataFrame(
            [{"check": f.check, "action": f.action, "culprits": ", ".join(f.culprits), "message": f.message}
             for f in self.findings],
            columns=["check", "action", "culprits", "message"],
        )  # fmt: skip

    def with_findings(self, findings: list[Finding]) -> Diagnostics:
        """These diagnostics and ``findings`` (found after the fit, such as a singular variance)."""
        return Diagnostics(self.findings + tuple(findings))

    def __bool__(self) -> bool:
        return bool(self.problems)

    def enforce(self, stacklevel: int = 2) -> None:
        """Raise for the first ``stop`` finding; otherwise one warning per ``warn`` finding."""
        for finding in self.findings:
            if finding.action == "stop":
                raise IdentifiabilityError(finding.message)
        for finding in self.findings:
            if finding.action == "warn":
                warnings.warn(finding.message, IdentifiabilityWarning, stacklevel=stacklevel + 1)
