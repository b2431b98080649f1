"""Toenail random-intercept Gibbs: 4 chains x (5000 tune + 5000 draws), wall time and bulk ESS per second.

    python benchmarks/toenail_gibbs.py

If bambi is installed, its NUTS on the logistic random-intercept model is run as a peer.
"""

from __future__ import annotations

import time
import warnings

import bayesvm
from bayesvm.results.diagnostics import mcmc_diagnostics


def main() -> None:
    toenail = bayesvm.datasets.load_toenail()
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bayesvm.ConvergenceWarning)
        fit = bayesvm.bsvm(
            formula,
            toenail,
            penalty=None,
            method="gibbs",
            draws=5000,
            tune=5000,
            chains=4,
            cores=2,
            seed=2014,
            progress=False,
        )
    wall = time.perf_counter() - start
    table = mcmc_diagnostics(fit)
    print(f"bayesvm Gibbs, 4 chains x (5000 tune + 5000 draws), 2 processes: {wall:.1f} s")
    print(table.round(3).to_string())
    print(
        f"max R-hat {table['r_hat'].max():.4f}; min bulk ESS {table['ess_bulk'].min():.0f} "
        f"= {table['ess_bulk'].min() / wall:.1f} per second"
    )
    print(fit.summary())
    try:
        import bambi  # noqa: F401
    except ImportError:
        print("bambi is not installed: no NUTS peer run")
        return
    data = toenail.assign(y=(toenail["outcome"] == "moderate or severe").astype(int))
    model = bambi.Model("y ~ visit * treatment + (1 | patientID)", data, family="bernoulli")
    start = time.perf_counter()
    idata = model.fit(draws=1000, tune=1000, chains=4, cores=2, progressbar=False)
    peer = time.perf_counter() - start
    import arviz as az

    ess = az.ess(idata).to_array().min().item()
    print(
        f"bambi NUTS (logistic GLMM), 4 x (1000 + 1000): {peer:.1f} s, min bulk ESS {ess:.0f} = {ess / peer:.1f} per second"
    )


if __name__ == "__main__":
    main()
