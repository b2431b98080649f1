"""Cardiac catheterisation with missing cholesterol (Luts & Ormerod 2014, section 4.5): fit times.

VB and Gibbs with both imputation models, multiple imputation (``imputation="mi"``, the default: 20
completed data sets for VB) and the paper's joint model (``"joint"``: Alg. 4 / Appendix C); VB is the median
of 5 fits, Gibbs 4 chains x (1000 + 1000) on 2 processes.  Against the paper's reported average of 1028 s per
VB run and 1719 s per MCMC run.

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


def run(repeats: int = 5, draws: int = 1000, tune: int = 1000, imputations=("mi", "joint")) -> dict:
    acath = data()
    out = {}
    for imputation in imputations:
        times = []
        for k in range(repeats):
            start = time.perf_counter()
            vb = bayesvm.bsvm(FORMULA, acath, missing="impute", imputation=imputation, seed=k)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gibbs = bayesvm.bsvm(FORMULA, acath, missing="impute", imputation=imputation, method="gibbs", draws=draws,
                                 tune=tune, cores=2, seed=1)  # fmt: skip
        out[imputation] = {"vb": vb, "vb_time": float(np.median(times)), "gibbs": gibbs,
                           "gibbs_time": time.perf_counter() - start}  # fmt: skip
    return out


def main() -> None:
    out = run()
    print("acath, n = 3504, log cholesterol missing for 1246 patients")
    for imputation, r in out.items():
        sweeps = r["vb"].n_iter
        print(
            f"  {imputation:5s} VB:    {r['vb_time']:.3f} s (median of 5, {sweeps} sweeps in all)"
            f"   | paper {PAPER_VB_SECONDS:.0f} s: ratio {r['vb_time'] / PAPER_VB_SECONDS:.5f}"
        )
        print(
            f"  {imputation:5s} Gibbs: {r['gibbs_time']:.1f} s (4 chains x (1000 + 1000), 2 processes)"
            f"   | paper {PAPER_MCMC_SECONDS:.0f} s: ratio {r['gibbs_time'] / PAPER_MCMC_SECONDS:.5f}"
        )
        print(
            f"        log_chol coefficient: VB {r['vb'].fixef['log_chol']:.3f}, Gibbs {r['gibbs'].fixef['log_chol']:.3f}"
        )


if __name__ == "__main__":
    main()
