"""Kernel Bayesian SVM on the Raetsch benchmark sets against scikit-learn, in one process.

Per data set and split: our kernel fit (``bsvm(..., kernel=RBF())``: RBF lengthscale and variance
learned by the lower bound, ``min(n, 100)`` k-means inducing points, full-batch VB), the same with one
lengthscale per input (ARD, starting at ``sqrt(d)``), scikit-learn
``SVC(probability=True)`` with C and gamma chosen by 3-fold grid search (Platt scaling), and
``GaussianProcessClassifier`` (Laplace, RBF lengthscale and variance by marginal likelihood).  Error,
Brier score and seconds per fit (grid search included for the SVC; ``fixed_s``: our fit again with the
hyperparameters fixed at the learned values, as Wenzel et al. timed theirs), next to Wenzel et al.'s Table 1
(S-BSVM column; their sets with splits here: breast cancer, diabetes, german, heart, waveform).  Our Brier
score is of Wenzel et al.'s probability ``E Phi(f)`` (section 4.4), as their table scores it; the calibrated
``predict(kind="prob")`` is compared with the peers in ``python -m benchmarks.calibration --kernel``.

Sets with standard splits use splits 1-10; pooled sets use 10-fold stratified CV (as Wenzel et al.).

    python -m benchmarks.kernel                # every set, 10 splits
    python -m benchmarks.kernel --splits 2 --sets banana heart_pooled
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.stats import norm

import bayesvm
from bayesvm.kernels import RBF

#: Wenzel et al. (2017), Table 1, S-BSVM: (error, Brier, seconds per fit).
WENZEL_TABLE1 = {
    "breast_cancer": (0.26, 0.18, 0.32),
    "diabetis_pooled": (0.22, 0.16, 3.9),
    "german": (0.24, 0.17, 12.0),
    "heart_pooled": (0.16, 0.13, 0.34),
    "waveform": (0.09, 0.06, 12.5),
}
SETS = bayesvm.datasets.RATSCH_SETS


def _splits(data, count: int, seed: int = 2017):
    if data.train is not None:
        for k in range(min(count, len(data.train))):
            yield data.split(k)
        return
    from sklearn.model_selection import StratifiedKFold

    folds = StratifiedKFold(10, shuffle=True, random_state=seed)
    for k, (tr, te) in enumerate(folds.split(data.frame, data.frame["y"])):
        if k >= count:
            return
        yield data.frame.iloc[tr], data.frame.iloc[te]


def _ours(train, test, formula, seed, ard=False):
    start = time.perf_counter()
    d = train.shape[1] - 1
    kernel = RBF(lengthscale=np.full(d, np.sqrt(d))) if ard else RBF()
    fit = bayesvm.bsvm(formula, train, kernel=kernel, seed=seed)
    seconds = time.perf_counter() - start
    # the same fit with the hyperparameters fixed at the learned values (Wenzel et al. timed fixed ones)
    start = time.perf_counter()
    bayesvm.bsvm(formula, train, kernel=replace(fit.kernel, learn=False), seed=seed)
    fixed = time.perf_counter() - start
    # Wenzel et al.'s section 4.4 probability E Phi(f) = Phi(m / sqrt(1 + v)), as their Table 1 scores it (the
    # calibrated predict(kind="prob") is compared in benchmarks/calibration.py --kernel)
    mean, var = fit.posterior.link(fit._inputs(test))
    return norm.cdf(mean / np.sqrt(1.0 + var)), seconds, fixed


def _svc(train, test):
    from sklearn.model_selection import GridSearchCV
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    X, y = train.drop(columns="y").to_numpy(), train["y"].to_numpy()
    start = time.perf_counter()
    scaler = StandardScaler().fit(X)
    grid = GridSearchCV(
        SVC(probability=True, random_state=0),
        {"C": np.logspace(-1, 2, 4), "gamma": np.logspace(-2, 1, 4) / X.shape[1]},
        cv=3,
    ).fit(scaler.transform(X), y)
    seconds = time.perf_counter() - start
    prob = grid.predict_proba(scaler.transform(test.drop(columns="y").to_numpy()))[:, 1]
    return prob, seconds


def _gpc(train, test):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF as SkRBF
    from sklearn.gaussian_process.kernels import ConstantKernel
    from sklearn.preprocessing import StandardScaler

    X, y = train.drop(columns="y").to_numpy(), train["y"].to_numpy()
    start = time.perf_counter()
    scaler = StandardScaler().fit(X)
    gpc = GaussianProcessClassifier(ConstantKernel() * SkRBF(np.sqrt(X.shape[1])), random_state=0)
    gpc.fit(scaler.transform(X), y)
    seconds = time.perf_counter() - start
    return gpc.predict_proba(scaler.transform(test.drop(columns="y").to_numpy()))[:, 1], seconds


def run(sets=SETS, splits: int = 10, peers: bool = True, seed: int = 0) -> pd.DataFrame:
    """One row per (set, method): mean and SD of error and Brier over the splits, median seconds per fit."""
    rows = []
    methods = {"bayesvm RBF (learned)": None, "bayesvm ARD RBF (learned)": "ard"}
    if peers:
        methods.update({"SVC + Platt (grid)": _svc, "GPC (sklearn)": _gpc})
    for name in sets:
        data = bayesvm.datasets.load_ratsch(name)
        scores = {m: [] for m in methods}
        for train, test in _splits(data, splits):
            truth = (test["y"].to_numpy() > 0).astype(float)
            for method, peer in methods.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if peer is None or peer == "ard":
                        prob, seconds, fixed = _ours(train, test, data.formula, seed, ard=peer == "ard")
                    else:
                        (prob, seconds), fixed = peer(train, test), np.nan
                error = np.mean((prob > 0.5) != truth)
                scores[method].append((error, np.mean((prob - truth) ** 2), seconds, fixed))
        for method, values in scores.items():
            arr = np.array(values)
            rows.append({
                "set": name, "n_train": len(train), "method": method, "splits": len(arr),
                "error": arr[:, 0].mean(), "error_sd": arr[:, 0].std(ddof=1) if len(arr) > 1 else np.nan,
                "brier": arr[:, 1].mean(), "brier_sd": arr[:, 1].std(ddof=1) if len(arr) > 1 else np.nan,
                "seconds": float(np.median(arr[:, 2])), "fixed_s": float(np.median(arr[:, 3])),
            })  # fmt: skip
        if name in WENZEL_TABLE1:
            error, brier, seconds = WENZEL_TABLE1[name]
            rows.append({"set": name, "n_train": len(train), "method": "Wenzel et al. Table 1 (S-BSVM)",
                         "splits": 10, "error": error, "error_sd": np.nan, "brier": brier, "brier_sd": np.nan,
                         "seconds": seconds, "fixed_s": seconds})  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args(argv)
    table = run(args.sets, args.splits, peers=not args.no_peers)
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    ours = table[table["method"] == "bayesvm RBF (learned)"].set_index("set")
    for peer, column in (("SVC + Platt (grid)", "seconds"), ("Wenzel et al. Table 1 (S-BSVM)", "fixed_s")):
        other = table[table["method"] == peer].set_index("set")
        common = ours.index.intersection(other.index)
        if len(common):
            ratio = (ours.loc[common, column] / other.loc[common, "seconds"]).round(3)
            what = "learning included" if column == "seconds" else "hyperparameters fixed, as theirs"
            print(f"time ratio bayesvm / {peer} ({what}): " + ", ".join(f"{k} {v:g}" for k, v in ratio.items()))
    return table


if __name__ == "__main__":
    main()
