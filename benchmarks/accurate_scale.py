"""The accurate fit on many rows, against mean-field VB and a long Gibbs run: ``python -m benchmarks.accurate_scale``.

Simulated longitudinal data (``y ~ x1 + x2 + x3 + (1 | g)``, ten rows per level, random-intercept SD 1 on the logit
scale), in one process:

* :data:`ONE_HYPERPARAMETER_ROWS` rows (a tenth as many levels) with a fixed prior on the slopes (``penalty=None``:
  one variance hyperparameter): the default (accurate) fit on its line of
  :data:`bayesvm.engines.hyper_grid.WIDE_LINE_NODES` nodes, the accurate fit on
  the line of :data:`bayesvm.engines.hyper_grid.LINE_NODES`, mean-field VB and Gibbs (4 chains x (1,000 tuning
  + 2,000 draws)): the variance's posterior mean over Gibbs's, the largest ``|mean - Gibbs's|`` of a fixed effect in
  Gibbs SDs, the fixed effects' SDs over Gibbs's, seconds;
* :data:`bayesvm.engines.defaults.AUTO_ACCURATE_MAX_ROWS` rows (a tenth as many levels) with the learned penalty (two
  variance hyperparameters, the largest default accurate fit on their lattice): the default against mean-field VB and
  Gibbs as above, the learned penalty's variance over Gibbs's beside the random intercept's;
* three times as many rows with the learned penalty: the default, now the accurate fit with the penalty's variance
  integrated from the slopes' posterior (:mod:`bayesvm.engines.linear.penalty_from_slopes`), against the same;
* 10^6 rows and 10^5 levels (:data:`bayesvm.engines.defaults.AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER`, the largest
  default accurate fit): the default with the learned penalty (its variance from the slopes) and with
  ``penalty=None``, each against mean-field VB, timed, and how far mean-field's variance and fixed effects lie from
  the accurate fit's.
"""

from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.engines import hyper_grid
from bayesvm.engines.defaults import AUTO_ACCURATE_MAX_ROWS, AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER

FORMULA = "y ~ x1 + x2 + x3 + (1 | g)"
#: Rows of the learned-penalty case past the two-hyperparameter limit (the penalty's variance from the slopes'
#: posterior, :mod:`bayesvm.engines.linear.penalty_from_slopes`).
PAST_THE_LIMIT = 3 * AUTO_ACCURATE_MAX_ROWS
#: Rows of the one-hyperparameter case run against Gibbs.
ONE_HYPERPARAMETER_ROWS = 300_000
#: The rows of the largest accurate fit timed (:func:`million`): the default's limit with one variance to integrate.
MILLION = AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER
CHAINS, TUNE, DRAWS = 4, 1000, 2000


def simulate(n: int, levels: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    g = rng.integers(0, levels, n)
    eta = 0.5 + X @ [1.0, -0.5, 0.25] + rng.normal(0.0, 1.0, levels)[g]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(int)
    return pd.DataFrame({"y": y, "x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2], "g": [f"g{k}" for k in g]})


def timed(**options):
    def fit(data):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = bayesvm.bsvm(FORMULA, data, **options)
        return result, time.perf_counter() - start

    return fit


@contextlib.contextmanager
def fine_line():
    """The one-hyperparameter line of :data:`bayesvm.engines.hyper_grid.LINE_NODES` nodes whatever the levels."""
    wide = hyper_grid.WIDE_LINE_FROM_LEVELS
    hyper_grid.WIDE_LINE_FROM_LEVELS = np.inf
    try:
        yield
    finally:
        hyper_grid.WIDE_LINE_FROM_LEVELS = wide


def _variance(fit, name: str) -> float:
    """The posterior mean of the variance called ``name`` (``"penalty"`` or a term's), NaN where there is none."""
    means = [v.mean[0, 0] for v in fit.variance_components if (v.group == "penalty") == (name == "penalty")]
    return float(means[0]) if means else float("nan")


def compared(fit, gibbs) -> dict:
    """The random intercept's variance and the learned penalty's over Gibbs's, the largest fixed-effect distance in
    Gibbs SDs, the SD ratios' range."""
    reference_sd = np.sqrt(np.diag(gibbs.fixef_cov.to_numpy()))
    ratio = np.sqrt(np.diag(fit.fixef_cov.to_numpy())) / reference_sd
    return {
        "var": _variance(fit, "(1 | g)") / _variance(gibbs, "(1 | g)"),
        "penalty": _variance(fit, "penalty") / _variance(gibbs, "penalty"),
        "fixef": float(np.max(np.abs(fit.fixef.to_numpy() - gibbs.fixef.to_numpy()) / reference_sd)),
        "sd": (float(ratio.min()), float(ratio.max())),
    }


def main() -> list[dict]:
    rows = []
    cases = (
        (ONE_HYPERPARAMETER_ROWS, {"penalty": None}, "penalty=None (one variance hyperparameter)"),
        (AUTO_ACCURATE_MAX_ROWS, {}, "the learned penalty (two variance hyperparameters)"),
        (PAST_THE_LIMIT, {}, "the learned penalty past the two-hyperparameter limit (its variance from the slopes)"),
    )
    for n, options, what in cases:
        data = simulate(n, n // 10)
        default, default_s = timed(**options)(data)
        fits = [("default (accurate VB)", default, default_s)]
        if n == ONE_HYPERPARAMETER_ROWS:  # the same fit on the fine line, for comparison
            with fine_line():
                fine, fine_s = timed(**options)(data)
            fits.append((f"accurate VB, {hyper_grid.LINE_NODES}-node line", fine, fine_s))
        meanfield, meanfield_s = timed(vb="meanfield", **options)(data)
        fits.append(("mean-field VB", meanfield, meanfield_s))
        gibbs, gibbs_s = timed(
            method="gibbs", chains=CHAINS, tune=TUNE, draws=DRAWS, seed=1, progress=False, **options
        )(data)
        print(f"{n:,} rows, {n // 10:,} levels, {what}; Gibbs {CHAINS} x ({TUNE} + {DRAWS})")
        print(
            f"{'fit':28s} {'var / Gibbs':>11s} {'penalty':>8s} {'fixef (SD)':>10s} {'SD / Gibbs':>13s} {'seconds':>8s}"
        )
        for name, fit, seconds in fits:
            c = compared(fit, gibbs)
            print(f"{name:28s} {c['var']:11.3f} {c['penalty']:8.3f} {c['fixef']:10.3f} {c['sd'][0]:6.3f}-{c['sd'][1]:.3f} "
                  f"{seconds:8.1f}")  # fmt: skip
            rows.append({"case": f"{name}, {n:,} rows", "ours_s": seconds, "peer": "Gibbs", "peer_s": gibbs_s, **c})
        print(f"{'Gibbs':28s} {'1':>11s} {'1':>8s} {'0':>10s} {'1':>13s} {gibbs_s:8.1f}")
        print(f"  the default chose: {default.posterior.kind} ({default.vb_note or 'the accurate fit'})")
    rows.extend(million())
    return rows


def million() -> list[dict]:
    """:data:`MILLION` rows, a tenth as many levels: the default with the learned penalty and with ``penalty=None``,
    each against mean-field VB, the variance and fixed effects of the mean-field fit measured in the accurate fit's
    SDs (no Gibbs run at this size: its agreement at the sizes above is measured there)."""
    data = simulate(MILLION, MILLION // 10)
    rows = []
    for options, what in (({}, "the learned penalty"), ({"penalty": None}, "penalty=None")):
        default, default_s = timed(**options)(data)
        meanfield, meanfield_s = timed(vb="meanfield", **options)(data)
        c = compared(meanfield, default)
        print(f"{MILLION:,} rows, {MILLION // 10:,} levels, {what}: the default ({default.posterior.kind}) {default_s:.1f} s, "
              f"mean-field VB {meanfield_s:.1f} s (its variance {c['var']:.3f} of the accurate fit's, fixed effects up to "
              f"{c['fixef']:.2f} of its SDs away, SDs {c['sd'][0]:.2f}-{c['sd'][1]:.2f} of its)")  # fmt: skip
        rows.append({"case": f"default, {what}, {MILLION:,} rows", "ours_s": default_s, "peer": "mean-field VB",
                     "peer_s": meanfield_s, **c})  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
