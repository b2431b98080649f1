"""Which imputation predicts best on real data with missing predictors: ``python -m benchmarks.imputation_default``.

Five-fold stratified cross-validation (the same folds for every method) of the held-out log loss and AUC of

* ``bsvm(..., missing="impute", imputation="mi")`` and ``imputation="joint"`` (calibrated probabilities);
* ``bsvm`` on the rows completed by the training fold's means (numeric) and most frequent levels (categorical);
* scikit-learn's ``LogisticRegression`` (one-hot, mean imputation, standardised), the peer.

Data sets (public, with missing predictor values): R mlbench's ``HouseVotes84`` (16 y/n votes, 203 of 435 rows
incomplete), MASS's ``Pima.tr2`` (diastolic pressure, skin fold and BMI missing in 100 of 300 rows), mlbench's
``BreastCancer`` (``Bare.nuclei`` missing in 16 of 699 rows) and the shipped ``acath`` (cholesterol missing in 1,246
of 3,504 rows).  The R data sets are exported by ``Rscript`` (Debian: ``r-cran-mlbench r-cran-mass``); a set whose
source is unavailable is skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.r_data import run_rscript

R_EXPORT = {
    "housevotes84": "library(mlbench); data(HouseVotes84); write.csv(HouseVotes84, '{path}', row.names=FALSE)",
    "pima": "library(MASS); write.csv(Pima.tr2, '{path}', row.names=FALSE)",
    "breastcancer": "library(mlbench); data(BreastCancer); write.csv(BreastCancer[, -1], '{path}', row.names=FALSE)",
}


def load(name: str, folder: Path) -> tuple[pd.DataFrame, str, str] | None:
    """``(frame, response, positive class)`` of a data set, or None where its source is unavailable."""
    if name == "acath":
        from bayesvm.datasets import load_acath

        frame = load_acath()[["sigdz", "sex", "age", "cad.dur", "choleste"]]
        return frame.rename(columns={"cad.dur": "cad_dur"}), "sigdz", None
    path = folder / f"{name}.csv"
    if not run_rscript(R_EXPORT[name].format(path=path)):
        return None
    frame = pd.read_csv(path)
    if name == "housevotes84":
        frame = frame.astype("category")
        return frame, "Class", "republican"
    if name == "pima":
        return frame.assign(type=frame["type"].astype("category")), "type", "Yes"
    frame.columns = [c.replace(".", "_") for c in frame.columns]
    return frame.assign(Class=frame["Class"].astype("category")), "Class", "malignant"


def mean_completed(train: pd.DataFrame, test: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both frames with missing values replaced by the training rows' means / most frequent levels."""
    fill = {}
    for column in train.columns:
        if pd.api.types.is_numeric_dtype(train[column]) and not isinstance(train[column].dtype, pd.CategoricalDtype):
            fill[column] = train[column].mean()
        else:
            fill[column] = train[column].mode(dropna=True).iloc[0]
    return train.fillna(fill), test.fillna(fill)


def scores(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import log_loss, roc_auc_score

    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(log_loss(y, p, labels=[0, 1])), float(roc_auc_score(y, p))


def logistic(train, test, response, positive) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, test = mean_completed(train, test)
    X = pd.get_dummies(pd.concat([train, test]).drop(columns=[response]), drop_first=True, dtype=float)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(X.iloc[: len(train)], (train[response] == positive).to_numpy())
    return model.predict_proba(X.iloc[len(train) :])[:, 1]


def run(name: str, frame: pd.DataFrame, response: str, positive, folds: int = 5, seed: int = 0) -> list[dict]:
    from sklearn.model_selection import StratifiedKFold

    import bayesvm

    if positive is None:
        positive = 1
    formula = f"{response} ~ " + " + ".join(c for c in frame.columns if c != response)
    y = (frame[response] == positive).to_numpy().astype(int)
    methods = {
        "bsvm mi": lambda tr, te: bayesvm.bsvm(
            formula, tr, missing="impute", imputation="mi", positive=positive, seed=seed
        ).predict(te, kind="prob"),  # fmt: skip
        "bsvm joint": lambda tr, te: bayesvm.bsvm(
            formula, tr, missing="impute", imputation="joint", positive=positive, seed=seed
        ).predict(te, kind="prob"),  # fmt: skip
        "bsvm mean-imputed": lambda tr, te: (
            lambda a, b: bayesvm.bsvm(formula, a, positive=positive).predict(b, kind="prob")
        )(*mean_completed(tr, te)),  # fmt: skip
        "LogisticRegression mean-imputed": lambda tr, te: logistic(tr, te, response, positive),
    }
    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    predictions = {m: np.empty(len(frame)) for m in methods}
    seconds = dict.fromkeys(methods, 0.0)
    for train_rows, test_rows in splitter.split(frame, y):
        train, test = frame.iloc[train_rows], frame.iloc[test_rows]
        for method, predict in methods.items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                predictions[method][test_rows] = np.asarray(predict(train, test), dtype=float)
            seconds[method] += time.perf_counter() - start
    rows = []
    for method in methods:
        loss, auc = scores(y, predictions[method])
        rows.append({"data": name, "method": method, "log_loss": loss, "auc": auc, "seconds": seconds[method]})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.imputation_default")
    parser.add_argument("--sets", nargs="+", default=["housevotes84", "pima", "breastcancer", "acath"])
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets:
            loaded = load(name, Path(tmp))
            if loaded is None:
                print(f"{name}: skipped (Rscript or its package is not installed)")
                continue
            frame, response, positive = loaded
            incomplete = int(frame.drop(columns=[response]).isna().any(axis=1).sum())
            print(f"{name}: {len(frame)} rows, {incomplete} with missing predictors", flush=True)
            rows += run(name, frame, response, positive)
            for row in rows[-4:]:
                print(f"  {row['method']:34s} log loss {row['log_loss']:.4f}  AUC {row['auc']:.4f}  "
                      f"{row['seconds']:6.1f} s", flush=True)  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
