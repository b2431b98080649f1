"""After a kernel fit: rows where the fitted Gaussian process keeps its prior.

A kernel fit's ``f`` has prior mean 0 (Wenzel et al. 2017, section 2) and is informed at an input only through the
kernel's correlation with the inputs the data sit at (the inducing points, or every training input for a batch
fit).  Where the learned lengthscale is short next to the distances between inputs, ``f`` at many inputs keeps its
prior: posterior mean 0 and variance ``k(x, x)``, so the calibrated probability is exactly 1/2 whatever the rate of
the classes.  Found on data none of this was tuned on: carData's ``Womenlf`` (263 women; ``hincome`` has many
distinct values, the other inputs are categories), where ML-II on one 70/30 split learned a lengthscale of 0.013
on standardised inputs; the fit was silent, and 19 of the 79 held-out women got ``P = 0.5`` at a base rate of 41%.
This check finds those rows by what the posterior says, for any kernel: a row whose posterior variance of ``f`` is
at least :data:`PRIOR_SHARE` of its prior variance.
"""

from __future__ import annotations

import numpy as np

#: ``f`` at a row keeps its prior where its posterior variance is at least this share of ``k(x, x)``
PRIOR_SHARE = 0.99
#: The fit warns where at least this share of its training rows keep the prior
TRAINING_SHARE = 0.05
#: Training rows checked, at most (evenly spaced)
CHECKED_ROWS = 20_000


def unreached(var: np.ndarray, prior_var: np.ndarray) -> np.ndarray:
    """Rows whose posterior variance of ``f`` is at least :data:`PRIOR_SHARE` of the prior's (``k(x, x) > 0``)."""
    prior_var = np.asarray(prior_var, dtype=float)
    return (prior_var > 0) & (np.asarray(var, dtype=float) >= PRIOR_SHARE * prior_var)


def reach_message(count: int, total: int, kernel, which: str) -> str:
    """What ``count`` of ``total`` rows (``which``: "training rows" or "rows asked for") keeping the prior means."""
    return (
        f"the kernel fit leaves f at its prior (mean 0, so P = 0.5 whatever the classes' rates) on {count:,} of "
        f"{total:,} {which}: they lie too far from the inputs the fit learned from, in units of the kernel's "
        f"lengthscale ({kernel.describe()}, standardised inputs), for the data to say anything there.  Where ML-II "
        "learned a lengthscale this short it has fitted each distinct input on its own (inputs with few distinct "
        "values); fix it (e.g. RBF(lengthscale=1.0, learn=('variance',))), use more inducing points, or compare the "
        "linear fit"
    )
