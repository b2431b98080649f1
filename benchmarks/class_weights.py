"""Class weights on unequal classes: ``python -m benchmarks.class_weights``.

Five-fold stratified cross-validation (the same folds for every method) of the held-out balanced error (the mean of
the two classes' error rates) and log loss of

* ``bsvm(...)`` and ``bsvm(..., class_weight="balanced")`` (classes: the sign of ``f``; probabilities: calibrated);
* scikit-learn's ``LogisticRegression`` unweighted and with ``class_weight="balanced"`` (one-hot, standardised, no
  penalty to speak of), the peers.

Data: R MASS's ``birthwt`` (189 births, 59 of low weight; ``low ~ age + lwt + race + smoke + ptl + ht + ui + ftv``),
exported by ``Rscript`` (Debian: ``r-cran-mass``), and the shipped ``acath`` (``tvdlm``, three-vessel disease: 723
of 2,258 complete rows; ``tvdlm ~ sex + age + cad_dur + choleste``).  A set whose source is unavailable is skipped
with a line saying so.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.r_data import run_rscript

FORMULAS = {
    "birthwt": ("low ~ age + lwt + race + smoke + ptl + ht + ui + ftv", "low"),
    "acath": ("tvdlm ~ sex + age + cad_dur + choleste", "tvdlm"),
}


def load(name: str, folder: Path) -> pd.DataFrame | None:
    """The data set as a frame, or None where its source is unavailable."""
    if name == "acath":
        from bayesvm.datasets import load_acath

        frame = load_acath().rename(columns={"cad.dur": "cad_dur"})
        return frame[["tvdlm", "sex", "age", "cad_dur", "choleste"]].dropna().astype({"tvdlm": int})
    path = folder / "birthwt.csv"
    script = (
        "library(MASS); d <- birthwt; d$race <- factor(d$race, labels = c('white', 'black', 'other')); "
        f"write.csv(d, '{path}', row.names = FALSE)"
    )
    if not run_rscript(script):
        return None
    return pd.read_csv(path).drop(columns=["bwt"])


def balanced_error(y: np.ndarray, predicted: np.ndarray) -> float:
    return float(0.5 * (np.mean(predicted[y == 1] != 1) + np.mean(predicted[y == 0] != 0)))


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def logistic(train: pd.DataFrame, test: pd.DataFrame, response: str, class_weight) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    columns = [c for c in train.columns if c != response]
    both = pd.get_dummies(pd.concat([train[columns], test[columns]]), drop_first=True).astype(float)
    X_train, X_test = both.iloc[: len(train)], both.iloc[len(train) :]
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1e6, max_iter=5000, class_weight=class_weight))
    return model.fit(X_train, train[response]).predict_proba(X_test)[:, 1]


def run(names=("birthwt", "acath"), folds: int = 5, seed: int = 0) -> pd.DataFrame:
    from sklearn.model_selection import StratifiedKFold

    import bayesvm

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            frame = load(name, Path(folder))
            if frame is None:
                print(f"{name}: skipped (Rscript or the R package is unavailable)")
                continue
            formula, response = FORMULAS[name]
            y = frame[response].to_numpy()
            scores = {key: ([], []) for key in ("bsvm", "bsvm balanced", "LogisticRegression", "LR balanced")}
            for train_rows, test_rows in StratifiedKFold(folds, shuffle=True, random_state=seed).split(frame, y):
                train, test = frame.iloc[train_rows], frame.iloc[test_rows]
                truth = test[response].to_numpy()
                for key, class_weight in (("bsvm", None), ("bsvm balanced", "balanced")):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # (the class-balance note of the unweighted fits)
                        fit = bayesvm.bsvm(formula, train, class_weight=class_weight, seed=seed)
                    predicted = fit.predict(test, kind="class").to_numpy()
                    scores[key][0].append(balanced_error(truth, predicted))
                    scores[key][1].append(log_loss(truth, fit.predict(test, kind="prob").to_numpy()))
                for key, class_weight in (("LogisticRegression", None), ("LR balanced", "balanced")):
                    p = logistic(train, test, response, class_weight)
                    scores[key][0].append(balanced_error(truth, (p > 0.5).astype(int)))
                    scores[key][1].append(log_loss(truth, p))
            for key, (errors, losses) in scores.items():
                rows.append(
                    {"data": f"{name} ({len(frame)} rows, {int(y.sum())} positive)", "method": key,
                     "balanced error": np.mean(errors), "log loss": np.mean(losses)}
                )  # fmt: skip
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)
    table = run(folds=args.folds)
    with pd.option_context("display.width", 120, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
