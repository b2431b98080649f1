"""Cardiac catheterisation with missing cholesterol (Luts & Ormerod 2014, section 4.5): fit times.

VB with imputation (median of 5 fits) and Gibbs with imputation (4 chains x (1000 + 1000), 2 processes),
against the paper's reported average of 1028 s per VB run and 1719 s per MCMC run.

    python -m benchmarks.acath_impute
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import bayesvm
from bayesvm.errors import ConvergenceWarning

PAPER_VB_SECONDS, PAPER_MCMC_SECONDS = 1028.18, 1718.98
FORMULA = "sigdz ~ age + sex + log_dur + log_chol"


def data():
    acath = bayesvm.datasets.load_acath()
    return acath.assign(log_dur=np.log1p(acath["cad.dur"]), log_chol=np.log(acath["choleste"]))


def run(repeats: int = 5, draws: int = 1000, tune: int = 1000) -> dict:
    acath = data()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        vb = bayesvm.bsvm(FORMULA, acath, missing="impute")
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gibbs = bayesvm.bsvm(FORMULA, acath, missing="impute", method="gibbs", draws=draws, tune=tune, cores=2, seed=1)
    return {"vb": vb, "vb_time": float(np.median(times)), "gibbs": gibbs, "gibbs_time": time.perf_counter() - start}


def main() -> None:
    out = run()
    print("acath, n = 3504, log cholesterol missing for 1246 patients")
    print(
        f"  VB impute:    {out['vb_time']:.3f} s (median of 5, {out['vb'].n_iter} sweeps)"
        f"   | paper {PAPER_VB_SECONDS:.0f} s: ratio {out['vb_time'] / PAPER_VB_SECONDS:.5f}"
    )
    print(
        f"  Gibbs impute: {out['gibbs_time']:.1f} s (4 chains x (1000 + 1000), 2 processes)"
        f"   | paper {PAPER_MCMC_SECONDS:.0f} s: ratio {out['gibbs_time'] / PAPER_MCMC_SECONDS:.5f}"
    )


if __name__ == "__main__":
    main()
