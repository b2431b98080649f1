"""The probability map learned from PSIS leave-one-out predictions against the one learned by 5-fold cross-fitting,
side by side on the same fits and splits: held-out log loss of each and the time each took to learn.

Fixed-effect models, where ``calibrate()`` uses leave-one-out by default (:mod:`bayesvm.results.loo`): the Raetsch
sets' first two standard splits by the default accurate VB, mean-field VB and Gibbs, and spam's 70/30 splits.

    python -m benchmarks.loo_calibration
    python -m benchmarks.loo_calibration --sets german waveform --splits 1
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import bayesvm
from bayesvm.results.calibration import calibrated_probability
from bayesvm.results.new_levels import expected_new_variance

SETS = ("banana", "breast_cancer", "german", "image", "titanic", "waveform", "spam")
ENGINES = {
    "accurate": {},
    "meanfield": {"vb": "meanfield"},
    "gibbs": {"method": "gibbs", "draws": 500, "tune": 500, "chains": 2, "seed": 1, "progress": False},
}


def held_out_log_loss(fit, cmap, test) -> float:
    y = fit.model.design.response_of(test)
    mean, var, law, _, _ = fit._predictive(test, True, "integrate")
    p = np.clip(calibrated_probability(cmap, mean, var, expected_new_variance(law, mean.size)), 1e-12, 1 - 1e-12)
    positive = (y > 0).astype(float)
    return float(-np.mean(positive * np.log(p) + (1 - positive) * np.log(1 - p)))


def splits(name: str, count: int):
    if name == "spam":
        from sklearn.model_selection import train_test_split

        spam = bayesvm.datasets.load_spam()
        response = spam.columns[-1]
        for seed in range(count):
            train, test = train_test_split(spam, test_size=0.3, random_state=seed, stratify=spam[response])
            yield f"{response} ~ .", train, test
        return
    data = bayesvm.datasets.load_ratsch(name)
    for k in range(count):
        train, test = data.split(k)
        yield "y ~ " + " + ".join(c for c in train.columns if c != "y"), train, test


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--splits", type=int, default=2)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"{'set, split, engine':32s} {'cross-fit':>10s} {'loo':>8s} {'loo - cv':>9s} {'cv s':>6s} {'loo s':>6s}")
    gaps = []
    for name in args.sets:
        engines = ENGINES if name != "spam" else {"accurate": {}}
        for k, (formula, train, test) in enumerate(splits(name, args.splits)):
            for engine, options in engines.items():
                fit = bayesvm.bsvm(formula, train, **options)
                start = time.perf_counter()
                cross = fit.calibrate(method="crossfit")
                middle = time.perf_counter()
                loo = fit.calibrate(method="loo")
                end = time.perf_counter()
                a, b = held_out_log_loss(fit, cross, test), held_out_log_loss(fit, loo, test)
                gaps.append(b - a)
                print(f"{name + ' ' + str(k) + ' ' + engine:32s} {a:10.4f} {b:8.4f} {b - a:+9.4f} "
                      f"{middle - start:6.2f} {end - middle:6.2f}", flush=True)  # fmt: skip
    gaps = np.asarray(gaps)
    print(f"loo - cross-fit over {gaps.size} fits: median {np.median(gaps):+.4f}, worst {gaps.max():+.4f}")


if __name__ == "__main__":
    main()
