"""After the fit: every training row on one side of the decision boundary, or most rows held at a margin.

With unequal classes that overlap, the hinge loss of Luts & Ormerod (2014, eq. 1) is smallest for a decision value
that sits at the margin of the larger class on every row (``f = -1``: its rows cost nothing, each row of the smaller
class costs 2).  The fit then predicts one class everywhere and its slopes are near 0 with small posterior SDs:
read as effects, they say the predictors do not matter, while a logistic model of the same data can find clear
effects (lme4's ``cbpp`` expanded to one row per animal, 12% cases: ``glmer`` gives the periods log-odds -1.0 to
-1.6, |z| > 3; the Bayesian SVM predicts "no case" on all 842 rows with period coefficients within 0.05 of 0).

With random effects the same corner makes a mode at zero variance: on statsmodels' anes96 (``vote ~ age + (1 | g)``,
``g`` a grouping of the rows by index modulo 37) the exact marginal pseudo-likelihood (quadrature over the fixed
effects, the group effects integrated in closed form) is 17 nats higher at ``sigma_g -> 0`` than at 0.37, where Gibbs
(R-hat 1.00), mean-field VB and the accurate fit with a fixed penalty all sit (variance 0.48), while the default fit
finds the zero mode.  The finding says so where the model has random-effect terms.

**Rows held at a margin.**  The same mechanism acts within a region of the predictors: where one class is the
majority throughout it, the hinge loss is smallest with ``f`` at that class's margin on every row of the region, and
moving a coefficient would push rows off their kinks at a cost that the minority's rows do not repay.  The fit then
holds most rows at ``f = +1`` or ``f = -1``; the coefficients show where the majority class changes, and the others
sit near 0 with small SDs.  Found on public data none of this was tuned on (posterior z of the accurate fit against a
logistic regression's Wald z):

- AER's ``HMDA`` (2,380 mortgage applications, 12% denied): 88% of the rows within 0.1 of a margin; the side follows
  ``insurance`` (44 of its 48 rows denied).  ``afam`` z 0.9 against 3.9, ``chist`` 1.9 against 7.4.
- carData's ``TitanicSurvival`` (complete cases): every row within 0.1 of a margin, the side set by ``sex``; ``age``
  z -1.3 against -5.4, third class -1.8 against -10.1.
- carData's ``Womenlf``: 98%, the side set by ``children``; ``hincome`` z -1.2 against -2.2.

Fits whose coefficients do carry the association have few rows there (:data:`MARGIN_SHARE`), and a design with
as many coefficients as rows can hold every row there by itself (:data:`FREE_MARGIN_ROWS`).
"""

from __future__ import annotations

import numpy as np

from ..errors import BayesvmError
from .findings import Finding

#: A row is held at a margin when its posterior mean decision value is within this of +1 or -1 (the margins sit at
#: +/-1 whatever the data's scale).
MARGIN_TOLERANCE = 0.1
#: The finding fires when at least this share of the training rows is held at a margin.  Within 0.1 of a margin, in
#: the accurate, mean-field and Gibbs fits: HMDA 0.88-0.96, TitanicSurvival 1.00, Womenlf 0.98; fits whose
#: coefficients agree with a logistic regression's signs and z to within a factor of about 1.5: MASS's birthwt
#: 0.42-0.46, Mroz 0.10, Pima 0.10, toenail 0.02-0.05, biopsy 0.02, ordinal's wine (with a random intercept) 0.22.
MARGIN_SHARE = 0.7
#: Coefficients in general position put at most as many rows exactly on a margin as there are coefficients (each
#: such row is one linear equation ``f_i = +/-1``); rows held there beyond this multiple of them are ties that the
#: predictors' discreteness or one class's majority makes, which is what the finding is about.  A design with more
#: columns than rows can hold every row at a margin by itself (a hard-margin SVM), and is not flagged.
FREE_MARGIN_ROWS = 2
#: A column sets the side when its coefficient times its range over the training rows is at least this: alone it
#: moves a row from one margin half-way to the other.
DECIDING_SPAN = 1.0
#: The warning names at most this many of them (the finding's culprits hold them all).
NAMED_COLUMNS = 5
#: The class-balance note fires when the decisions call the smaller class for less than this share of its rows
BALANCE_SHARE = 0.5
#: ... and the smaller class has at least this many rows
BALANCE_MIN_ROWS = 10
_LOGISTIC = "fit a logistic model (statsmodels' BinomialBayesMixedGLM, lme4's glmer)"


def one_class_findings(fit, action: str = "warn") -> list[Finding]:
    """A finding when the posterior mean of ``f`` puts every training row on the same side of 0, else when it holds
    at least :data:`MARGIN_SHARE` of them at a margin (module docstring)."""
    if action == "ignore":
        return []
    try:
        mean_f = np.asarray(fit.predict(kind="link"), dtype=float)
    except BayesvmError:  # training rows the fit cannot predict (none kept): nothing to judge
        return []
    if mean_f.size == 0 or not np.all(np.isfinite(mean_f)):
        return []
    if not (np.all(mean_f > 0) or np.all(mean_f < 0)):
        return _margin_findings(fit, mean_f) or _balance_findings(fit, mean_f)
    response = fit.model.design.response
    y = np.asarray(fit.model.design.y)
    side = 1.0 if mean_f[0] > 0 else -1.0
    predicted = response.positive if side > 0 else response.negative
    other = response.negative if side > 0 else response.positive
    missed = int(np.sum(y != side))
    terms = [term.label for term in fit.model.design.re_terms]
    weights = getattr(fit.model, "class_weights", None)
    weighing = (
        "class_weight='balanced' counts each class's hinge loss alike"
        if weights is None
        else f"the fit weighs the classes {weights.negative:.4g} and {weights.positive:.4g}: raise the weight of {other!r}"
    )
    variances = (
        f"; nor do the variances of {', '.join(terms)}: the pseudo-posterior can have a mode at zero variance (every "
        "row at the margin) and another above it, which the engines need not agree on or move between"
        if terms
        else ""
    )
    return [
        Finding(
            "one_class",
            "warn",  # ("stop" acts as "warn": the fit exists)
            f"the fit predicts {predicted!r} for every one of the {mean_f.size:,} training rows ({missed:,} rows, "
            f"{missed / mean_f.size:.0%}, are {other!r}): with unequal classes that overlap, the hinge loss is "
            "smallest for a decision value near the larger class's margin on every row, so the coefficients do not "
            f"measure the predictors' association with the response (values near 0 here do not mean no effect)"
            f"{variances}. {weighing}; for the predictors' association with the response " + _LOGISTIC,
            (str(other),),
        )
    ]


def _margin_findings(fit, mean_f: np.ndarray) -> list[Finding]:
    """A ``"margin"`` finding when at least :data:`MARGIN_SHARE` of the rows have ``| |f| - 1 | <=``
    :data:`MARGIN_TOLERANCE`, naming the columns that set the side (:func:`deciding_columns`)."""
    held = np.abs(np.abs(mean_f) - 1.0) <= MARGIN_TOLERANCE
    share = float(held.mean())
    if share < MARGIN_SHARE or held.sum() <= FREE_MARGIN_ROWS * free_coefficients(fit.model.design):
        return []
    deciding = deciding_columns(fit)
    named = ", ".join(map(repr, deciding[:NAMED_COLUMNS]))
    more = f" and {len(deciding) - NAMED_COLUMNS} more" if len(deciding) > NAMED_COLUMNS else ""
    side = f"; the side follows {named}{more}" if deciding else ""
    return [
        Finding(
            "margin",
            "warn",  # ("stop" acts as "warn": the fit exists)
            f"{share:.0%} of the training rows ({int(held.sum()):,} of {mean_f.size:,}) are held at a margin (decision "
            f"value within {MARGIN_TOLERANCE} of +1 or -1){side}: where one class is the majority throughout a region "
            "of the predictors, the hinge loss is smallest with the decision value at that class's margin on every "
            "row of it, so the coefficients show where the majority class changes, not the predictors' association "
            "with the response (values near 0 here do not mean no effect). For the association " + _LOGISTIC,
            tuple(deciding),
        )
    ]


def _balance_findings(fit, mean_f: np.ndarray) -> list[Finding]:
    """A ``"class_balance"`` note when the decisions call the smaller class for less than :data:`BALANCE_SHARE` of its
    share of the training rows (and it has at least :data:`BALANCE_MIN_ROWS` rows).

    The sign of ``f`` minimises expected hinge loss, which weighs every row alike: where the classes overlap it sides
    with the larger one, as a logistic model's ``P > 0.5`` does, so the smaller class is called less often than it
    occurs (MASS's ``birthwt``: 18 of 189 births called low where 59 are).  The note says so and how to weigh the
    classes equally: class weights (``class_weight="balanced"``), or a threshold on the calibrated probability at
    the data's share of the positive class."""
    y = np.asarray(fit.model.design.y)
    response = fit.model.design.response
    smaller = 1.0 if np.sum(y > 0) < np.sum(y < 0) else -1.0
    in_data = int(np.sum(y == smaller))
    called = int(np.sum(np.sign(mean_f) == smaller))
    if in_data < BALANCE_MIN_ROWS or called >= BALANCE_SHARE * in_data:
        return []
    name = response.positive if smaller > 0 else response.negative
    positive_share = float(np.mean(y > 0))
    weights = getattr(fit.model, "class_weights", None)
    remedy = (
        "To weigh both classes equally, refit with class_weight='balanced' (each class's hinge loss counted alike), or "
        if weights is None
        else f"The fit has {weights.describe()}. For more calls of {name!r}, raise its weight, or "
    )
    return [
        Finding(
            "class_balance",
            "note",
            f"the decisions call {name!r} for {called:,} of the {y.size:,} training rows ({called / y.size:.0%}) where "
            f"the data have {in_data:,} ({in_data / y.size:.0%}): the sign of f weighs every row alike and sides with "
            f"the larger class where the classes overlap. {remedy}threshold the calibrated "
            f"probability at the data's share of {response.positive!r}: "
            f"fit.predict(newdata, kind='class', threshold={positive_share:.2f})",
            (str(name),),
        )
    ]


def free_coefficients(design) -> int:
    """The fixed-effect columns plus every random-effect term's coefficients and every ``gp()`` basis column."""
    random = sum(term.n_levels * len(term.columns) for term in design.re_terms)
    return design.X.shape[1] + random + sum(basis.shape[1] for basis in design.gp_bases)


def deciding_columns(fit) -> list[str]:
    """The fixed-effect columns (not the intercept) whose coefficient times their range over the training rows is at
    least :data:`DECIDING_SPAN`, largest first."""
    design = fit.model.design
    if design.X.shape[0] == 0:
        return []
    coefficients = np.asarray(fit.fixef.reindex(design.x_names), dtype=float)
    span = np.abs(coefficients) * np.ptp(design.X, axis=0)
    names = [
        (value, name)
        for value, name in zip(span, design.x_names, strict=True)
        if name != "(Intercept)" and np.isfinite(value) and value >= DECIDING_SPAN
    ]
    return [name for _, name in sorted(names, reverse=True)]
