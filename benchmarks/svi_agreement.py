"""How close linear SVI stops to the batch mean-field fit it targets: ``python -m benchmarks.svi_agreement [DIR]``.

SVI's fixed point is the batch mean-field optimum (``bayesvm/engines/linear/svi.py``); this prints, per data set and
seed, the largest distance of SVI's fixed effects from batch VB's in batch VB's posterior SDs, the ratio of each
variance component's mean (SVI / batch), the steps, and the time ratio (SVI / batch VB), both run here with
``method="svi"`` at the default ``batch_size=100`` and at ``tol=1e-4`` (the default) and ``1e-6``.

Data: the shipped toenail set (``outcome ~ visit * treatment + (1|patientID)``, on which SVI ran to an intercept of
775 before it started where batch VB starts) and, when ``DIR`` holds them (exported from R by
``write.csv``), modeldata's ``attrition``, MASS's ``bacteria`` and lme4's ``grouseticks``, ``Arabidopsis`` and
``VerbAgg`` (2,000 rows, ``random_state=0``).  Measured 2026-11-28 (toenail): max |dfix|/sd 0.17 and 0.52 at
``tol=1e-4`` (seeds 0, 1; 2,350 and 1,150 steps), 0.03 at ``tol=1e-6`` (34,100 steps, 83x batch VB's time).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import bayesvm


def cases(folder: Path | None) -> list[tuple[str, pd.DataFrame, str]]:
    out = [("toenail", bayesvm.datasets.load_toenail(), "outcome ~ visit * treatment + (1|patientID)")]
    if folder is None:
        return out
    readers = {
        "attrition.csv": ("attrition", lambda d: d, "Attrition ~ Age + MonthlyIncome + OverTime + JobRole + (1|Department)"),
        "bacteria.csv": ("bacteria", lambda d: d, "y ~ trt + week + (1|ID)"),
        "grouse.csv": ("grouseticks", lambda d: d.assign(any=(d.TICKS > 0).astype(int)),
                       "any ~ C(YEAR) + HEIGHT + (1|BROOD) + (1|LOCATION)"),
        "arabidopsis.csv": ("Arabidopsis", lambda d: d.assign(fruit=(d["total.fruits"] > 0).astype(int)),
                            "fruit ~ nutrient + amd + status + (1|popu) + (1|gen)"),
        "verbagg.csv": ("VerbAgg", lambda d: d.sample(2000, random_state=0), "r2 ~ Anger + Gender + btype + situ + (1|id)"),
    }  # fmt: skip
    for file, (name, prepare, formula) in readers.items():
        if (folder / file).exists():
            out.append((name, prepare(pd.read_csv(folder / file)), formula))
    return out


def main(folder: Path | None, seeds: tuple[int, ...] = (0, 1)) -> None:
    warnings.simplefilter("ignore")
    print(
        f"{'data':12s} {'tol':>6s} seed {'max |dfix|/sd':>13s} {'variance ratios':>22s} {'steps':>6s} {'time ratio':>10s}"
    )
    for name, data, formula in cases(folder):
        start = time.perf_counter()
        batch = bayesvm.bsvm(formula, data, vb="meanfield", progress=False)
        batch_time = time.perf_counter() - start
        sd = np.sqrt(np.diag(batch.fixef_cov.to_numpy()))
        for tol in (1e-4, 1e-6):
            for seed in seeds:
                start = time.perf_counter()
                svi = bayesvm.bsvm(formula, data, method="svi", seed=seed, tol=tol, progress=False)
                ratio = (time.perf_counter() - start) / batch_time
                gap = np.max(np.abs(svi.fixef.to_numpy() - batch.fixef.to_numpy()) / sd)
                variances = " ".join(
                    f"{float(s.mean.ravel()[0]) / float(b.mean.ravel()[0]):.3f}"
                    for s, b in zip(svi.variance_components, batch.variance_components)
                )
                print(f"{name:12s} {tol:6.0e} {seed:4d} {gap:13.3f} {variances:>22s} {svi.result.n_iter:6d} {ratio:10.1f}",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
