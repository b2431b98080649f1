"""The accurate VB fit against long Gibbs runs: its node weights (EP's marginal likelihood or importance-sampled
evidence) and the PSIS correction of its coefficients.

The default fit (``vb="accurate"``) weights its nodes of the variance parameters by ``p(y | phi)`` importance-sampled
with the random intercepts integrated in closed form (:mod:`bayesvm.engines.linear.node_evidence`); the same nodes
weighted by EP's ``Z_EP(phi)`` (``fit_accurate(importance_weights=False)``, the fit before) are shown next to it, and
Gibbs (4 chains x (2,000 tuning + 10,000 draws)) is the reference, all in one process.  Sets: toenail with default
settings and simulated random-intercept data (60-200 groups of 2-20 rows, a logistic model with two predictors).
The default fit also ends with the PSIS check, which corrects the coefficients where its importance weights move them
beyond Monte Carlo error (:mod:`bayesvm.results.psis_correction`); "+PSIS" is that fit, "IS-w" the same fit without
the check.  Per set: the random-intercept variance (posterior mean) of each fit and its ratio to Gibbs's, the largest
distance of a fixed effect's posterior mean from Gibbs's in Gibbs posterior SDs, and the largest ``|SD / Gibbs's - 1|``.

    python -m benchmarks.accurate_gibbs
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.engines.linear.ep import fit_accurate

#: Gibbs reference: chains x (tune + draws)
CHAINS, TUNE, DRAWS = 4, 2000, 10000


def simulated(seed: int, groups: int, size: int, sd: float) -> pd.DataFrame:
    """``y ~ x1 + x2 + (1 | g)`` from a logistic model with random-intercept SD ``sd``."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), size)
    X = rng.standard_normal((g.size, 2))
    eta = 0.3 + X @ np.array([1.0, -0.5]) + rng.normal(0.0, sd, groups)[g]
    data = pd.DataFrame(X, columns=["x1", "x2"])
    data["g"] = g.astype(str)
    data["y"] = np.where(rng.random(g.size) < 1 / (1 + np.exp(-eta)), "yes", "no")
    return data


def sets() -> dict[str, tuple[pd.DataFrame, str]]:
    intercept = "y ~ x1 + x2 + (1 | g)"
    return {
        "toenail": (bayesvm.datasets.load_toenail(), "outcome ~ visit * treatment + (1 | patientID)"),
        "simulated 100 x 5": (simulated(1, 100, 5, 1.5), intercept),
        "simulated 60 x 3": (simulated(2, 60, 3, 1.0), intercept),
        "simulated 30 x 20": (simulated(3, 30, 20, 2.0), intercept),
        "simulated 200 x 2": (simulated(4, 200, 2, 1.0), intercept),
    }


def _variance(fit) -> float:
    """The random-intercept variance's posterior mean (the last component; the learned penalty comes first)."""
    return float(fit.variance_components[-1].mean[0, 0])


def _sd_error(fit, reference: np.ndarray) -> float:
    """The largest ``|SD / Gibbs's SD - 1|`` over the fixed effects."""
    return float(np.max(np.abs(np.sqrt(np.diag(fit.fixef_cov.to_numpy())) / reference - 1.0)))


def compare(data: pd.DataFrame, formula: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        fit = bayesvm.bsvm(formula, data, checks=bayesvm.Checks(vb_check="ignore"))
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        ep_only = dataclasses.replace(fit, result=fit_accurate(fit.problem, importance_weights=False))
        ep_seconds = time.perf_counter() - start
        start = time.perf_counter()
        corrected = bayesvm.bsvm(formula, data)  # the default: with the PSIS check and its correction
        corrected_seconds = time.perf_counter() - start
        gibbs = bayesvm.bsvm(
            formula, data, method="gibbs", draws=DRAWS, tune=TUNE, chains=CHAINS, seed=1, progress=False
        )
    sd = np.sqrt(np.diag(gibbs.fixef_cov.to_numpy()))
    reference = _variance(gibbs)
    return {
        "var Gibbs": reference,
        "var EP-w": _variance(ep_only),
        "var IS-w": _variance(fit),
        "EP-w / Gibbs": _variance(ep_only) / reference,
        "IS-w / Gibbs": _variance(fit) / reference,
        "fixef EP-w": float(np.max(np.abs(ep_only.fixef.to_numpy() - gibbs.fixef.to_numpy()) / sd)),
        "fixef IS-w": float(np.max(np.abs(fit.fixef.to_numpy() - gibbs.fixef.to_numpy()) / sd)),
        "fixef +PSIS": float(np.max(np.abs(corrected.fixef.to_numpy() - gibbs.fixef.to_numpy()) / sd)),
        "SD IS-w": _sd_error(fit, sd),
        "SD +PSIS": _sd_error(corrected, sd),
        "fit s": seconds,
        "+PSIS s": corrected_seconds,
        "EP-w engine s": ep_seconds,
        "ESS": fit.result.node_weights.ess_fraction,
    }


def main() -> pd.DataFrame:
    rows = {name: compare(data, formula) for name, (data, formula) in sets().items()}
    table = pd.DataFrame(rows).T.astype(float)
    print(f"accurate VB (default settings) against Gibbs, {CHAINS} x ({TUNE} + {DRAWS}), same process")
    print("var: the random-intercept variance's posterior mean; EP-w: nodes weighted by EP's Z_EP (the fit before);")
    print("IS-w: by importance-sampled p(y | phi), no PSIS check; fixef: the largest |mean - Gibbs's| in Gibbs SDs;")
    print(
        "+PSIS: the default fit, coefficients corrected by its PSIS check where they differ beyond Monte Carlo error;"
    )
    print(
        "SD: the largest |SD / Gibbs's - 1| over the fixed effects; ESS: the importance draws' effective sample size,"
    )
    print("a fraction of the 32 per node")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(3).to_string())
    ratios = table[["EP-w / Gibbs", "IS-w / Gibbs"]].sub(1).abs().max()
    print(
        f"largest |variance / Gibbs - 1|: EP's weights {ratios['EP-w / Gibbs']:.3f}, "
        f"importance-sampled weights {ratios['IS-w / Gibbs']:.3f}"
    )
    print(
        f"largest fixed-effect distance from Gibbs (Gibbs SDs): without the correction {table['fixef IS-w'].max():.3f}, "
        f"with it {table['fixef +PSIS'].max():.3f}"
    )
    return table


if __name__ == "__main__":
    main()
