"""The accurate fit where EP alone is weakest, against long Gibbs runs: ``python -m benchmarks.ep_hard``.

Sets (each beside Gibbs, 4 chains x (1,000 tuning + 10,000 draws), in one process):

* correlated random slopes, ``(month | subject)`` with a learned penalty (four hyperparameters, the Gauss-Hermite
  rule): R HSAUR3's ``schizophrenia2`` (``disorder ~ month * onset + (month | subject)``, 44 patients, complete rows;
  Debian ``r-cran-hsaur3``) and three simulated sets of its shape.  EP's evidence shrinks both variances; the default
  fit weights its nodes by importance-sampled evidence, each level's pair of random effects integrated by importance
  sampling (:mod:`bayesvm.engines.linear.sampled_levels`), and re-centres the rule on the reweighted moments;
* a polynomial in age with many small, nearly separated groups: R geepack's ``muscatine``
  (``obese ~ gender * poly(age, 2) + (1 | id)``, 9,856 rows, 4,856 children; Debian ``r-cran-geepack``), where EP's
  fixed effects sit two Gibbs SDs off and the check's adaptive importance sampling
  (:mod:`bayesvm.results.adaptive_check`) corrects them;
* crossed factors with a learned penalty (three hyperparameters): R lme4's ``VerbAgg``
  (``r2 ~ Anger + Gender + btype + situ + (1 | id) + (1 | item)``, 7,584 answers of 316 people to 24 items; Debian
  ``r-cran-lme4``), the default's most expensive kind of fit per row.

Columns: ``var / Gibbs`` each variance component's posterior mean over Gibbs's (``EP-w``: the same nodes weighted by
EP's evidence alone, ``fit_accurate(importance_weights=False)``); ``fixef`` the largest ``|mean - Gibbs's|`` of a fixed
effect in Gibbs SDs; ``SD`` the smallest and largest fixed-effect SD over Gibbs's; the check's verdict as ``summary()``
prints it; seconds of the default fit (checks included) and of Gibbs.  A set whose source is unavailable is skipped
with a line saying so.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.engines.linear.ep import fit_accurate
from benchmarks.r_data import run_rscript

CHAINS, TUNE, DRAWS = 4, 1000, 10000

R_SOURCES = {
    "schizophrenia2": (
        "data(schizophrenia2, package = 'HSAUR3'); d <- schizophrenia2; "
        "d$disorder <- as.integer(d$disorder == 'present'); d$onset <- as.character(d$onset)",
        "disorder ~ month * onset + (month | subject)",
    ),
    "muscatine": (
        "data(muscatine, package = 'geepack'); d <- muscatine; d$obese <- as.integer(d$obese == 'yes')",
        "obese ~ gender * poly(age, 2) + (1 | id)",
    ),
    "VerbAgg": (
        "data(VerbAgg, package = 'lme4'); d <- VerbAgg; d$r2 <- as.integer(d$r2 == 'Y')",
        "r2 ~ Anger + Gender + btype + situ + (1 | id) + (1 | item)",
    ),
}


def from_r(name: str, folder: Path) -> pd.DataFrame | None:
    """An R package's data set with its complete rows, or None where Rscript or the package is unavailable."""
    script, _ = R_SOURCES[name]
    path = folder / f"{name}.csv"
    if not run_rscript(f"{script}; write.csv(d, '{path}', row.names = FALSE)"):
        return None
    frame = pd.read_csv(path).dropna()
    group = "subject" if "subject" in frame else "id"
    return frame.assign(**{group: frame[group].astype(str)})


def visits(seed: int, subjects: int = 44) -> pd.DataFrame:
    """The schizophrenia2 shape: visits at months 0, 2, 6, 8, 10, a strong random intercept and a month slope
    correlated with it (-0.8), a subject-level binary covariate and its interaction with month."""
    rng = np.random.default_rng(seed)
    months = np.array([0, 2, 6, 8, 10.0])
    g = np.repeat(np.arange(subjects), months.size)
    month = np.tile(months, subjects)
    late = np.repeat(rng.random(subjects) < 0.3, months.size)
    u = rng.standard_normal((subjects, 2)) @ np.linalg.cholesky(np.array([[9.0, -1.2], [-1.2, 0.25]])).T
    eta = 1.0 - 0.4 * month - 0.2 * late * month + u[g, 0] + u[g, 1] * month
    y = (rng.random(g.size) < 1 / (1 + np.exp(-1.7 * eta))).astype(int)
    return pd.DataFrame(
        {"disorder": y, "month": month, "onset": np.where(late, "late", "early"), "subject": [f"s{k}" for k in g]}
    )


def sets(folder: Path) -> dict[str, tuple[pd.DataFrame | None, str]]:
    correlated = R_SOURCES["schizophrenia2"][1]
    out = {"schizophrenia2": (from_r("schizophrenia2", folder), correlated)}
    for seed in (1, 2, 3):
        out[f"simulated visits {seed}"] = (visits(seed), correlated)
    for name in ("muscatine", "VerbAgg"):
        out[name] = (from_r(name, folder), R_SOURCES[name][1])
    return out


def _variances(fit) -> np.ndarray:
    """The random-effect variances' posterior means (the penalty left out)."""
    return np.concatenate([np.diag(v.mean) for v in fit.variance_components if v.group != "penalty"])


def _ep_weighted_variances(fit) -> np.ndarray:
    """The same nodes weighted by EP's evidence alone: the components' covariances averaged over the nodes."""
    result = fit_accurate(fit.problem, importance_weights=False)
    out = []
    for c, comp in enumerate(fit.problem.components):
        if comp.source >= 0:  # (a random-effect term; the learned penalty has source -1)
            out.append(np.einsum("n,nkk->k", result.weights, result.covariances[c]))
    return np.concatenate(out)


def row(name: str, data: pd.DataFrame, formula: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        fit = bayesvm.bsvm(formula, data)
        fit_seconds = time.perf_counter() - start
        verdict = next(
            (line.strip() for line in str(fit.summary()).splitlines() if "fixed effects and variance" in line
             or "coefficients jointly" in line),
            "",
        )  # fmt: skip
        ep_weighted = _ep_weighted_variances(fit)
        start = time.perf_counter()
        gibbs = bayesvm.bsvm(formula, data, method="gibbs", chains=CHAINS, tune=TUNE, draws=DRAWS, seed=1)
        gibbs_seconds = time.perf_counter() - start
    gibbs_sd = np.sqrt(np.diag(gibbs.fixef_cov.to_numpy()))
    ratio = np.sqrt(np.diag(fit.fixef_cov.to_numpy())) / gibbs_sd
    reference = _variances(gibbs)
    return {
        "set": f"{name} ({len(data)} rows)",
        "var / Gibbs": " ".join(f"{v:.3f}" for v in _variances(fit) / reference),
        "EP-w var / Gibbs": " ".join(f"{v:.3f}" for v in ep_weighted / reference),
        "fixef": float(np.max(np.abs(fit.fixef.to_numpy() - gibbs.fixef.to_numpy()) / gibbs_sd)),
        "SD min": float(ratio.min()),
        "SD max": float(ratio.max()),
        "fit s": fit_seconds,
        "Gibbs s": gibbs_seconds,
        "check": verdict[:60],
    }


def main() -> pd.DataFrame:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, (data, formula) in sets(Path(folder)).items():
            if data is None:
                print(f"{name}: skipped (Rscript or the R package is unavailable)")
                continue
            rows.append(row(name, data, formula))
    table = pd.DataFrame(rows)
    print(f"accurate VB (default settings) against Gibbs, {CHAINS} x ({TUNE} + {DRAWS}), same process")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
