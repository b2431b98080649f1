"""The learned penalty's variance integrated from the slopes against the whole lattice, on real data.

lme4's companion data set ``Chem97`` (mlmRev: 31,022 A-level students in 2,410 schools; response: an A-level score of
6 or more) with ``gcsecnt + gender + age + (1 | school)`` and the learned penalty: the accurate fit on the lattice over
both variance parameters (:func:`bayesvm.engines.linear.ep.fit_accurate`, the default below 40,000 rows) beside the
fit with the penalty's variance integrated from the slopes' posterior
(:mod:`bayesvm.engines.linear.penalty_from_slopes`, the default above), on the same problem in one process: the
largest fixed-effect distance in the lattice fit's SDs, the SD ratios, the school variance's and the penalty's ratio,
the log evidence's difference, the check's two numbers and seconds.  Needs ``Rscript`` with mlmRev (Debian:
``r-cran-mlmrev``); prints that it skipped otherwise.

    python -m benchmarks.penalty_from_slopes
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.engines.linear.ep import fit_accurate
from bayesvm.engines.linear.penalty_from_slopes import fit_penalty_from_slopes, penalty_index

FORMULA = "passed ~ gcsecnt + gender + age + (1 | school)"


def chem97(folder: Path) -> pd.DataFrame | None:
    """mlmRev's Chem97 with ``passed = score >= 6``, or None where Rscript or mlmRev is unavailable."""
    path = folder / "chem97.csv"
    script = f"library(mlmRev); write.csv(Chem97, '{path}', row.names = FALSE)"
    try:
        subprocess.run(["Rscript", "-e", script], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    frame = pd.read_csv(path, dtype={"school": str})
    return frame.assign(passed=(frame["score"] >= 6).astype(int))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        data = chem97(Path(folder))
    if data is None:
        print("Chem97: skipped (Rscript or mlmRev is unavailable)")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bayesvm.bsvm(FORMULA, data.sample(2000, random_state=0), progress=False)  # warm-up (compiled functions)
        problem = bayesvm.bsvm(FORMULA, data, vb="meanfield", progress=False).problem
        start = time.perf_counter()
        lattice = fit_accurate(problem)
        lattice_s = time.perf_counter() - start
        start = time.perf_counter()
        slopes, declined = fit_penalty_from_slopes(problem)
        slopes_s = time.perf_counter() - start
    sizes = data["school"].value_counts()
    print(f"Chem97, n = {len(data)}, {FORMULA}: {sizes.size} schools of {sizes.min()} to {sizes.max()} rows")
    if slopes is None:
        print(f"  the fit from the slopes declined: {declined}")
        return
    p = problem.D.shape[1]
    (m0, c0), (m1, c1) = lattice.fixed_moments(p), slopes.fixed_moments(p)
    sd0, sd1 = np.sqrt(np.diag(c0)), np.sqrt(np.diag(c1))
    c = penalty_index(problem)
    variance = lambda r, k: float(r.variances[:, k] @ r.weights)  # noqa: E731
    record = slopes.penalty_from_slopes
    print(f"  {'fit':34s} {'EP fits':>7s} {'seconds':>8s}")
    print(f"  {'lattice over both variances':34s} {lattice.weights.size:7d} {lattice_s:8.1f}")
    print(f"  {'penalty from the slopes':34s} {record.ep_nodes:7d} {slopes_s:8.1f}")
    print(f"  fixed effects: up to {np.max(np.abs(m1 - m0) / sd0):.3f} of the lattice fit's SDs apart, "
          f"SD ratios {np.min(sd1 / sd0):.3f}-{np.max(sd1 / sd0):.3f}")  # fmt: skip
    print(f"  school variance ratio {variance(slopes, 1 - c) / variance(lattice, 1 - c):.4f}, penalty variance ratio "
          f"{variance(slopes, c) / variance(lattice, c):.3f}, log evidence difference "
          f"{slopes.log_evidence - lattice.log_evidence:+.4f}")  # fmt: skip
    print(f"  check: means within {record.curvature:.2e} SD of the line in 1/sigma_u^2, SDs within "
          f"{100 * record.sd_change:.2f}%")  # fmt: skip


if __name__ == "__main__":
    main()
