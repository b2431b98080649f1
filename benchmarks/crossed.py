"""Two large crossed grouping factors (the sparse path): the default fit, what its own checks and its first calibrated
probability cost beside it, and its held-out log loss against lme4's ``glmer``.

* lme4's ``InstEval`` (73,421 course evaluations; response: a rating of 4 or 5) with crossed random intercepts for
  2,972 students and 1,128 lecturers, split 80/20 at random (seed 0): the ``bsvm()`` call, the engine alone, the
  one-class check at the fit's end run by itself, the first ``predict(kind="prob")`` of the held-out rows (five fold
  fits for the calibration map included) and the held-out log loss, beside ``glmer`` (``nAGQ = 0`` and the Laplace
  fit) run by ``Rscript`` on the same rows.  Needs ``Rscript`` with lme4 (Debian: ``r-cran-lme4``); prints that it
  skipped otherwise.
* Simulated crossed factors of 3,000 levels each on 100,000 rows: the call, the engine, the one-class check and the
  training rows' ``predict_interval()``.

    python -m benchmarks.crossed
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import log_loss

import bayesvm
from bayesvm.checks.predicted_classes import one_class_findings
from benchmarks.r_data import run_rscript

INSTEVAL_FORMULA = "good ~ service + C(studage) + C(lectage) + (1 | s) + (1 | d)"
GLMER = """
library(lme4)
train <- read.csv("{train}"); test <- read.csv("{test}")
prep <- function(d) {{ for (v in c("s", "d", "studage", "lectage")) d[[v]] <- factor(d[[v]]); d }}
train <- prep(train); test <- prep(test)
for (agq in c(0, 1)) {{
  seconds <- system.time(m <- suppressWarnings(glmer(
    good ~ service + studage + lectage + (1 | s) + (1 | d), data = train, family = binomial, nAGQ = agq)))[["elapsed"]]
  p <- predict(m, newdata = test, type = "response", allow.new.levels = TRUE)
  cat(agq, seconds, -mean(test$good * log(p) + (1 - test$good) * log(1 - p)), "\\n")
}}
"""


def _timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    value = function()
    return time.perf_counter() - start, value


def _insteval(folder: Path) -> pd.DataFrame | None:
    """lme4's InstEval with the response ``good`` (a rating of 4 or 5), or None without Rscript or lme4."""
    path = folder / "insteval.csv"
    script = (
        "d <- lme4::InstEval; d$good <- as.integer(d$y >= 4); "
        f"write.csv(d[, c('s', 'd', 'studage', 'lectage', 'service', 'good')], '{path}', row.names = FALSE)"
    )
    if not run_rscript(script):
        return None
    return pd.read_csv(path).astype({"s": str, "d": str, "studage": str, "lectage": str})


def _glmer(train: pd.DataFrame, test: pd.DataFrame, folder: Path) -> dict[str, tuple[float, float]]:
    """``glmer``'s seconds and held-out log loss, ``nAGQ = 0`` and Laplace, fitted on the same rows."""
    paths = {name: folder / f"{name}.csv" for name in ("train", "test")}
    train.to_csv(paths["train"], index=False)
    test.to_csv(paths["test"], index=False)
    out = subprocess.run(
        ["Rscript", "-e", GLMER.format(**paths)], check=True, capture_output=True, text=True
    ).stdout.split()
    rows = np.array(out, dtype=float).reshape(-1, 3)
    return {("nAGQ = 0" if agq == 0 else "Laplace"): (seconds, loss) for agq, seconds, loss in rows}


def _ours(formula: str, train: pd.DataFrame) -> tuple[float, object, float]:
    """The default call's seconds, the fit, and its one-class check run by itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call, fit = _timed(lambda: bayesvm.bsvm(formula, train, seed=1, progress=False))
        check = _timed(lambda: one_class_findings(fit))[0]
    return call, fit, check


def insteval() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = _insteval(Path(tmp))
        if data is None:
            print("InstEval: skipped (Rscript or lme4 is unavailable)")
            return
        held = np.random.default_rng(0).random(len(data)) < 0.2
        train, test = data[~held], data[held]
        call, fit, check = _ours(INSTEVAL_FORMULA, train)
        first_prob, prob = _timed(lambda: fit.predict(test, kind="prob"))
        peers = _glmer(train, test, Path(tmp))
    y = test["good"].to_numpy()
    print(
        f"InstEval, {INSTEVAL_FORMULA}: train {len(train):,} rows ({train['s'].nunique():,} students x "
        f"{train['d'].nunique():,} lecturers), held out {len(test):,}"
    )
    print(f"  bayesvm default ({fit.posterior.kind} posterior; {fit.vb_note or 'the accurate fit'})")
    print(f"    bsvm() call (checks included):              {call:7.1f} s")
    print(f"    engine alone:                               {fit.elapsed:7.1f} s")
    print(f"    one-class check by itself:                  {check:7.2f} s (check / engine {check / fit.elapsed:.3f})")
    print(f"    first predict(kind='prob') of the test rows: {first_prob:6.1f} s (5 fold fits for the map)")
    print(f"    held-out log loss:                          {log_loss(y, prob.to_numpy()):7.4f}")
    for name, (seconds, loss) in peers.items():
        print(f"  glmer {name:<9}: {seconds:7.1f} s, held-out log loss {loss:.4f}")


def simulated(n: int = 100_000, levels: int = 3_000) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, levels, n), rng.integers(0, levels, n)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    eta = 0.3 + 0.8 * x1 - 0.5 * x2 + rng.normal(0, 1.0, levels)[a] + rng.normal(0, 0.7, levels)[b]
    data = pd.DataFrame({
        "y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int), "x1": x1, "x2": x2,
        "a": "a" + pd.Series(a).astype(str), "b": "b" + pd.Series(b).astype(str),
    })  # fmt: skip
    call, fit, check = _ours("y ~ x1 + x2 + (1 | a) + (1 | b)", data)
    interval = _timed(fit.predict_interval)[0]
    print(f"simulated, y ~ x1 + x2 + (1 | a) + (1 | b): {n:,} rows, {levels:,} x {levels:,} crossed levels")
    print(f"  bsvm() call (checks included): {call:6.1f} s; engine alone {fit.elapsed:6.1f} s")
    print(f"  one-class check by itself:     {check:6.2f} s (check / engine {check / fit.elapsed:.3f})")
    print(f"  predict_interval() of the training rows: {interval:.2f} s")


def main() -> None:
    insteval()
    simulated()


if __name__ == "__main__":
    main()
