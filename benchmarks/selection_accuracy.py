"""Selection priors: accurate VB (EP with a site per slope) and mean-field VB against the Gibbs sampler.

Gibbs (4 x (1,000 + 2,000), default moves) is the reference.  Per data set and prior the benchmark prints each
variational fit's time, the largest and mean gap of its inclusion probabilities to Gibbs's, how many differ by more
than 0.1, and the largest and median gap of the coefficients' posterior means in Gibbs SDs (over the coefficients
whose Gibbs SD is not zero), all in one process:

* a simulated model with a random intercept (300 rows, 6 predictors, two of them correlated 0.7, 15 groups);
* scikit-learn's breast cancer data (569 rows, 30 strongly correlated measurements; quasi-separated);
* spam (4,601 rows, 57 predictors).

    python -m benchmarks.selection_accuracy [--quick]

``--quick`` runs the simulated set only.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.priors import LaplaceZero, SpikeSlab

GIBBS = {"method": "gibbs", "draws": 2000, "tune": 1000, "chains": 4, "seed": 1, "progress": False}


def simulated() -> tuple[pd.DataFrame, str]:
    rng = np.random.default_rng(0)
    n, p = 300, 6
    X = rng.normal(size=(n, p))
    X[:, 1] = 0.7 * X[:, 0] + 0.7 * X[:, 1]
    g = rng.integers(0, 15, n)
    eta = 0.3 + 1.0 * X[:, 0] - 0.6 * X[:, 2] + 0.25 * X[:, 3] + rng.normal(0, 0.8, 15)[g]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-2 * eta)), "a", "b")
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(p)]).assign(y=y, g=g.astype(str))
    return frame, "y ~ " + " + ".join(f"x{j}" for j in range(p)) + " + (1 | g)"


def breast_cancer() -> tuple[pd.DataFrame, str]:
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    return frame, "target ~ " + " + ".join(c for c in frame.columns if c != "target")


def spam() -> tuple[pd.DataFrame, str]:
    frame = bayesvm.datasets.load_spam()
    return frame, "type ~ " + " + ".join(c for c in frame.columns if c != "type")


def compare(frame: pd.DataFrame, formula: str, prior) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence and identifiability warnings are reported in the table
        gibbs = bayesvm.bsvm(formula, frame, prior=prior, **GIBBS)
        rows = []
        for label, vb in (("accurate VB (EP)", "accurate"), ("mean-field VB", "meanfield")):
            start = time.perf_counter()
            fit = bayesvm.bsvm(formula, frame, prior=prior, vb=vb, seed=1)
            seconds = time.perf_counter() - start
            gap = (fit.inclusion["p_include"] - gibbs.inclusion["p_include"]).abs()
            sd = np.sqrt(np.diag(gibbs.fixef_cov.to_numpy()))
            moved = (np.abs(fit.fixef - gibbs.fixef).to_numpy() / sd)[sd > 0]
            rows.append({
                "fit": label, "seconds": seconds, "converged": fit.converged, "incl max gap": gap.max(),
                "incl mean gap": gap.mean(), "gaps > 0.1": int((gap > 0.1).sum()),
                "mean max gap (SD)": moved.max(), "mean median gap (SD)": np.median(moved),
            })  # fmt: skip
    return rows, gibbs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the simulated set only")
    args = parser.parse_args(argv)
    sets = {"simulated, (1 | g)": simulated}
    if not args.quick:
        sets.update({"breast cancer": breast_cancer, "spam": spam})
    for name, load in sets.items():
        frame, formula = load()
        for prior in (SpikeSlab(pi=0.1), LaplaceZero(rho=0.1)):
            start = time.perf_counter()
            rows, gibbs = compare(frame, formula, prior)
            table = pd.DataFrame(rows).set_index("fit")
            print(f"{name}, {type(prior).__name__}: Gibbs 4 x (1000 + 2000) {gibbs.elapsed:.1f} s "
                  f"(max inclusion R-hat {_max_rhat(gibbs):.3f}); all fits {time.perf_counter() - start:.0f} s")  # fmt: skip
            print(table.to_string(float_format=lambda v: f"{v:.3f}"))
            print(f"  time ratio accurate VB / Gibbs: {table.loc['accurate VB (EP)', 'seconds'] / gibbs.elapsed:.2f}")
            print()


def _max_rhat(gibbs) -> float:
    import arviz as az

    include = gibbs.result.include.astype(float)
    values = [float(az.rhat(include[..., k])) for k in range(include.shape[-1]) if include[..., k].std() > 0]
    return max(values) if values else float("nan")


if __name__ == "__main__":
    main()
