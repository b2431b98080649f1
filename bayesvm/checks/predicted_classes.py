"""After the fit: every training row on one side of the decision boundary.

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
"""

from __future__ import annotations

import numpy as np

from ..errors import BayesvmError
from .findings import Finding


def one_class_findings(fit, action: str = "warn") -> list[Finding]:
    """A finding when the posterior mean of ``f`` puts every training row on the same side of 0."""
    if action == "ignore":
        return []
    try:
        mean_f = np.asarray(fit.predict(kind="link"), dtype=float)
    except BayesvmError:  # training rows the fit cannot predict (none kept): nothing to judge
        return []
    if mean_f.size == 0 or not np.all(np.isfinite(mean_f)) or not (np.all(mean_f > 0) or np.all(mean_f < 0)):
        return []
    response = fit.model.design.response
    y = np.asarray(fit.model.design.y)
    side = 1.0 if mean_f[0] > 0 else -1.0
    predicted = response.positive if side > 0 else response.negative
    other = response.negative if side > 0 else response.positive
    missed = int(np.sum(y != side))
    terms = [term.label for term in fit.model.design.re_terms]
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
            f"{variances}. bayesvm has no class weights; for the predictors' association with the response fit a "
            "logistic model (statsmodels' BinomialBayesMixedGLM, lme4's glmer)",
            (str(other),),
        )
    ]
