"""The learned penalty's variance integrated from the slopes against the whole lattice, on real data.

Each case fits the accurate fit on the lattice over every variance parameter (:func:`bayesvm.engines.linear.ep.
fit_accurate`) beside the fit with the penalty's variance integrated from the slopes' posterior
(:mod:`bayesvm.engines.linear.penalty_from_slopes`: the default past 40,000 rows with one other variance, and below
them with two or more), on the same problem in one process: the largest fixed-effect distance in the lattice fit's
SDs, the SD ratios, each variance's ratio, the log evidence's difference, the check's two numbers and seconds.

* lme4's companion data ``Chem97`` (mlmRev: 31,022 A-level students in 2,410 schools of 131 local education
  authorities; response: an A-level score of 6 or more) with ``gcsecnt + gender + age + (1 | school)`` (two variance
  parameters with the penalty) and ``+ (1 | lea)`` (three);
* mlmRev's ``guImmun`` (2,159 children of 1,595 mothers in 161 communities, Guatemala; response: immunised), the
  full model of Rodriguez & Goldman with ``(1 | mom) + (1 | comm)``, where the mothers' variance is large and the
  factor slopes weak: the check declines, at its first look (three EP fits).

Needs ``Rscript`` with mlmRev (Debian: ``r-cran-mlmrev``); prints that it skipped otherwise.

    python -m benchmarks.penalty_from_slopes
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
from bayesvm.engines.linear.penalty_from_slopes import fit_penalty_from_slopes, penalty_index
from benchmarks.r_data import run_rscript

CHEM97 = "passed ~ gcsecnt + gender + age + (1 | school)"
GUIMMUN = "immun ~ kid2p + mom25p + ord + ethn + momEd + husEd + momWork + rural + pcInd81 + (1 | mom) + (1 | comm)"


def mlmrev(name: str, folder: Path) -> pd.DataFrame | None:
    """A data set of mlmRev as a frame (its factors as strings), or None where Rscript or mlmRev is unavailable."""
    path = folder / f"{name}.csv"
    script = f"library(mlmRev); write.csv({name}, '{path}', row.names = FALSE)"
    if not run_rscript(script):
        return None
    return pd.read_csv(path, dtype={"school": str, "lea": str, "mom": str, "comm": str})


def compare(title: str, data: pd.DataFrame, formula: str) -> None:
    """The two fits of ``formula`` on ``data`` side by side (module docstring)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem = bayesvm.bsvm(formula, data, vb="meanfield", progress=False).problem
        start = time.perf_counter()
        lattice = fit_accurate(problem)
        lattice_s = time.perf_counter() - start
        start = time.perf_counter()
        slopes, declined = fit_penalty_from_slopes(problem)
        slopes_s = time.perf_counter() - start
    print(f"{title}, n = {len(data)}, {formula}")
    print(f"  {'fit':34s} {'EP fits':>7s} {'seconds':>8s}")
    print(f"  {'lattice over every variance':34s} {lattice.weights.size:7d} {lattice_s:8.1f}")
    if slopes is None:
        print(f"  {'penalty from the slopes: declined':34s} {'':7s} {slopes_s:8.1f}  ({declined})")
        return
    record = slopes.penalty_from_slopes
    print(f"  {'penalty from the slopes':34s} {record.ep_nodes:7d} {slopes_s:8.1f}")
    p = problem.D.shape[1]
    (m0, c0), (m1, c1) = lattice.fixed_moments(p), slopes.fixed_moments(p)
    sd0, sd1 = np.sqrt(np.diag(c0)), np.sqrt(np.diag(c1))
    print(f"  fixed effects: up to {np.max(np.abs(m1 - m0) / sd0):.3f} of the lattice fit's SDs apart, "
          f"SD ratios {np.min(sd1 / sd0):.3f}-{np.max(sd1 / sd0):.3f}")  # fmt: skip
    c = penalty_index(problem)
    variance = lambda r, k: float(r.variances[:, k] @ r.weights)  # noqa: E731
    ratios = ", ".join(
        f"{'penalty' if k == c else comp.name} {variance(slopes, k) / variance(lattice, k):.4f}"
        for k, comp in enumerate(problem.components)
    )
    print(f"  variance ratios: {ratios}; log evidence difference {slopes.log_evidence - lattice.log_evidence:+.4f}")
    print(f"  check: means within {record.curvature:.2e} SD of the line in 1/sigma_u^2, SDs within "
          f"{100 * record.sd_change:.2f}%")  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        chem97, guimmun = mlmrev("Chem97", Path(folder)), mlmrev("guImmun", Path(folder))
    if chem97 is None or guimmun is None:
        print("Chem97, guImmun: skipped (Rscript or mlmRev is unavailable)")
        return
    chem97 = chem97.assign(passed=(chem97["score"] >= 6).astype(int))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bayesvm.bsvm(CHEM97, chem97.sample(2000, random_state=0), progress=False)  # warm-up (compiled functions)
    sizes = chem97["school"].value_counts()
    compare(f"Chem97 ({sizes.size} schools of {sizes.min()} to {sizes.max()} rows)", chem97, CHEM97)
    compare("Chem97, schools and local education authorities", chem97, CHEM97 + " + (1 | lea)")
    compare("guImmun", guimmun, GUIMMUN)


if __name__ == "__main__":
    main()
