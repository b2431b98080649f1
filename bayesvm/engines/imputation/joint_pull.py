"""Where the paper's joint imputation model (Luts & Ormerod 2014, section 3.3) moved an imputed predictor's coefficient.

The joint model imputes under the unnormalised hinge pseudo-likelihood ``exp(-2 max(0, 1 - y f))``, whose normaliser
over ``y`` grows with ``|f|``: imputed values are pulled beyond the margin, and the imputed predictor's coefficient away
from 0 (the shipped acath data: log cholesterol 2.2 against 0.03 from the complete rows).  Its held-out predictions
stay sound (``benchmarks.imputation_default``), so the fit is kept, and the user is told which coefficients not to read
as associations.
"""

from __future__ import annotations

import numpy as np

from ..linear.vb import fit_vb

#: The joint model's coefficient of an imputed predictor is reported as pulled when it lies this many combined SDs
#: from the complete rows' mean-field fit ...
PULL_SDS = 3.0
#: ... is the larger in magnitude, and differs from it by at least this share of itself
PULL_SHARE = 0.5


def joint_pull_message(model, base, theta) -> str | None:
    """The warning for a joint-model VB fit whose imputed predictors' coefficients lie far from, and farther from 0
    than, those of the complete rows (mean-field VB on the rows with every imputed value observed, the same prior),
    or None.

    The paper's joint model imputes under the unnormalised hinge pseudo-likelihood, which pulls imputed values beyond
    the margin and the imputed predictor's coefficient away from 0 (acath: log cholesterol 2.2 against 0.03 from the
    complete rows); its predictions stay sound, but the coefficient does not measure the predictor's association."""
    layout = model.design.imputation
    complete = ~layout.missing.any(axis=1)
    if base.is_sparse or complete.sum() <= base.D.shape[1] + 1 or len(np.unique(base.y[complete])) < 2:
        return None
    try:
        reference = fit_vb(base.take(np.flatnonzero(complete))).theta
    except np.linalg.LinAlgError:
        return None
    imputed = [j for j in range(len(layout.variables)) if layout.missing[:, j].any()]
    named = []
    for j in imputed:
        col = layout.x_columns[j]
        joint, plain = theta.mean_d[col], reference.mean_d[col]
        sd = np.sqrt(theta.cov_d[col, col] + reference.cov_d[col, col])
        away = abs(joint) > abs(plain)  # the pull's direction (complete rows that nearly separate give larger ones)
        if away and abs(joint - plain) > PULL_SDS * sd and abs(joint - plain) >= PULL_SHARE * abs(joint):
            scale = model.scale[col]
            named.append(f"{layout.variables[j]!r} {joint / scale:.3g} against {plain / scale:.3g}")
    if not named:
        return None
    return (
        f"the joint imputation model pulls the coefficients of imputed predictors away from what the complete rows "
        f"give ({'; '.join(named)}): it imputes under the unnormalised hinge pseudo-likelihood, which rewards imputed "
        "values beyond the margin. Its predictions are sound; for inference on these coefficients refit with "
        "imputation='mi'"
    )
