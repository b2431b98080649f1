"""Spam: BayesianSVC (penalty learned) against SVC + GridSearchCV over C, in one process.

5-fold cross-validated accuracy of BayesianSVC (one fit per fold) next to the 5-fold
GridSearchCV score of a linear SVC over 10 values of C (50 fits), with the time ratio.
Both see the same standardised predictors (a StandardScaler in the pipeline).

    python benchmarks/spam_sklearn.py
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

import bayesvm
from bayesvm.sklearn import BayesianSVC


def main() -> None:
    spam = bayesvm.datasets.load_spam()
    X = spam.drop(columns="type").to_numpy()
    y = spam["type"].to_numpy()
    folds = StratifiedKFold(5, shuffle=True, random_state=2014)

    start = time.perf_counter()
    ours = cross_val_score(make_pipeline(StandardScaler(), BayesianSVC()), X, y, cv=folds)
    ours_time = time.perf_counter() - start

    grid = GridSearchCV(
        make_pipeline(StandardScaler(), SVC(kernel="linear")),
        {"svc__C": np.logspace(-3, 1.5, 10)},
        cv=folds,
    )
    start = time.perf_counter()
    grid.fit(X, y)
    peer_time = time.perf_counter() - start

    print(f"spam, n = {len(y)}, 57 predictors, 5 folds")
    print(
        f"  BayesianSVC (penalty learned), cross_val_score: accuracy {ours.mean():.4f} (sd {ours.std():.4f}), {ours_time:.1f} s"
    )
    print(
        f"  SVC + GridSearchCV over 10 C values:           accuracy {grid.best_score_:.4f} "
        f"(best C = {grid.best_params_['svc__C']:.3g}), {peer_time:.1f} s"
    )
    print(f"  time ratio ours / peer: {ours_time / peer_time:.3f} (1/{peer_time / ours_time:.0f})")


if __name__ == "__main__":
    main()
