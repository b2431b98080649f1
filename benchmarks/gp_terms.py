"""A ``gp()`` term on real public data the package was not developed on: ``python -m benchmarks.gp_terms``.

statsmodels' Fair (1978) affairs survey (6,366 women, shipped with statsmodels): the outcome is any time
spent in affairs; predictors the marriage rating, religiousness, education, age and years married, with a
random intercept per occupation (6 levels).  One 70/30 split (seed 0), in one process:

- the linear model, VB and Gibbs;
- the same with ``gp(age, yrs_married)`` in place of the two linear terms, VB and Gibbs;
- scikit-learn's ``LogisticRegression`` on the linear predictors (the peer).

Printed: held-out log loss, balanced error and time of each (the fit plus its calibrated predictions,
whose probit map is learned on first use from five cross-fitted refits), the ratio of our log loss to the peer's,
and, for the gp model, accurate VB's function ``g`` and fixed effects against Gibbs (in Gibbs SDs).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd

import bayesvm

LINEAR = "affair ~ rate_marriage + religious + educ + age + yrs_married + (1 | occ)"
GP = "affair ~ rate_marriage + religious + educ + gp(age, yrs_married) + (1 | occ)"
PREDICTORS = ["rate_marriage", "religious", "educ", "age", "yrs_married"]


def load() -> pd.DataFrame:
    import statsmodels.api as sm

    data = sm.datasets.fair.load_pandas().data
    return data.assign(affair=(data["affairs"] > 0).astype(int), occ=data["occupation"].astype(int).astype(str))


def main() -> pd.DataFrame:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score, log_loss

    data = load()
    test = np.random.default_rng(0).random(len(data)) < 0.3
    train, held = data[~test], data[test]
    rows, fits = [], {}
    for model, formula in (("linear", LINEAR), ("gp", GP)):
        for engine, options in (
            ("vb", {}),
            ("gibbs", {"method": "gibbs", "draws": 1000, "tune": 500, "seed": 1, "progress": False}),
        ):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (each fit's own checks are in its summary)
                fit = bayesvm.bsvm(formula, train, **options)
                prob = fit.predict(held, kind="prob").to_numpy()
            fits[(model, engine)] = fit
            rows.append((model, engine, time.perf_counter() - start, log_loss(held["affair"], prob),
                         1 - balanced_accuracy_score(held["affair"], prob > 0.5)))  # fmt: skip
    start = time.perf_counter()
    peer = LogisticRegression(max_iter=2000).fit(train[PREDICTORS], train["affair"])
    prob = peer.predict_proba(held[PREDICTORS])[:, 1]
    rows.append(("linear", "LogisticRegression", time.perf_counter() - start, log_loss(held["affair"], prob),
                 1 - balanced_accuracy_score(held["affair"], prob > 0.5)))  # fmt: skip
    table = pd.DataFrame(rows, columns=["model", "engine", "seconds", "log loss", "balanced error"])
    table["log loss / peer"] = table["log loss"] / table["log loss"].iloc[-1]
    print(f"Fair (1978) affairs, n = {len(data)}; train {len(train)}, held out {len(held)}")
    print(table.round(4).to_string(index=False))
    grid = pd.DataFrame({"age": [22, 27, 32, 37, 42], "yrs_married": [2.5, 6.0, 9.0, 13.0, 16.5]})
    vb, gibbs = fits[("gp", "vb")], fits[("gp", "gibbs")]
    ours, reference = vb.gp_effect(newdata=grid), gibbs.gp_effect(newdata=grid)
    sd = np.sqrt(np.diag(gibbs.fixef_cov))
    print("gp(age, yrs_married), accurate VB - Gibbs (Gibbs SDs):",
          ((ours["mean"] - reference["mean"]) / reference["sd"]).round(2).tolist(),
          "; SD ratio:", (ours["sd"] / reference["sd"]).round(2).tolist())  # fmt: skip
    print("fixed effects, accurate VB - Gibbs (Gibbs SDs):", ((vb.fixef - gibbs.fixef) / sd).round(2).to_dict())
    return table


if __name__ == "__main__":
    main()
