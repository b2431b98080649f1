"""Spam variable selection (Luts & Ormerod 2014, section 4.4): Laplace-zero VB and Gibbs, rho = 0.01.

Prints the VB time (Alg. 3) and the Gibbs time for ``tune + draws`` iterations per chain
(default 50,000 + 50,000, the paper's run), the number of selected variables (p_include > 0.5),
the agreement between VB and Gibbs, and the ratio against the paper's reported times
(VB 76 minutes, MCMC "over 10 hours"; their R code cannot run here).

    python -m benchmarks.spam                      # the full run (about 3-4 minutes on 2 cores)
    python -m benchmarks.spam --draws 500 --tune 500   # a quick look
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import bayesvm
from bayesvm.errors import ConvergenceWarning
from bayesvm.priors import LaplaceZero

PAPER_VB_SECONDS = 76 * 60.0
PAPER_MCMC_SECONDS = 10 * 3600.0


def spam_formula(spam) -> str:
    return "type ~ " + " + ".join(column for column in spam.columns if column != "type")


def run(draws: int = 50_000, tune: int = 50_000, chains: int = 1, cores: int = 1, seed: int = 2014) -> dict:
    spam = bayesvm.datasets.load_spam()
    formula = spam_formula(spam)
    prior = LaplaceZero(rho=0.01)
    start = time.perf_counter()
    vb = bayesvm.bsvm(formula, spam, prior=prior)
    vb_time = time.perf_counter() - start
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gibbs = bayesvm.bsvm(
            formula,
            spam,
            prior=prior,
            method="gibbs",
            draws=draws,
            tune=tune,
            chains=chains,
            cores=cores,
            seed=seed,
            progress=False,
        )
    gibbs_time = time.perf_counter() - start
    p_vb, p_gibbs = vb.inclusion["p_include"], gibbs.inclusion["p_include"]
    return {
        "vb": vb,
        "gibbs": gibbs,
        "vb_time": vb_time,
        "gibbs_time": gibbs_time,
        "agree": float(np.mean((p_vb > 0.5) == (p_gibbs > 0.5))),
        "max_abs_diff": float(np.max(np.abs(p_vb - p_gibbs))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=50_000)
    parser.add_argument("--tune", type=int, default=50_000)
    parser.add_argument("--chains", type=int, default=1)
    parser.add_argument("--cores", type=int, default=1)
    args = parser.parse_args()
    out = run(args.draws, args.tune, args.chains, args.cores)
    vb, gibbs = out["vb"], out["gibbs"]
    both = sorted(set(vb.selected) & set(gibbs.selected))
    print(f"spam, n = {vb.model.design.n}, 57 standardised predictors, Laplace-zero prior, rho = 0.01")
    print(
        f"  VB (Alg. 3):  {out['vb_time']:.2f} s, {vb.n_iter} sweeps, {len(vb.selected)} selected"
        f"   | paper 76 min: ratio {out['vb_time'] / PAPER_VB_SECONDS:.5f}"
    )
    print(
        f"  Gibbs:        {out['gibbs_time']:.1f} s for {args.chains} chain(s) x ({args.tune} + {args.draws}), "
        f"{len(gibbs.selected)} selected   | paper > 10 h: ratio {out['gibbs_time'] / PAPER_MCMC_SECONDS:.5f}"
    )
    print(
        f"  agreement: same decision (p_include > 0.5) for {100 * out['agree']:.0f}% of the 57 variables; "
        f"{len(both)} selected by both; largest |p_vb - p_gibbs| = {out['max_abs_diff']:.2f}"
    )
    only_vb = sorted(set(vb.selected) - set(gibbs.selected))
    only_gibbs = sorted(set(gibbs.selected) - set(vb.selected))
    print(f"  only VB: {only_vb}; only Gibbs: {only_gibbs}")


if __name__ == "__main__":
    main()
