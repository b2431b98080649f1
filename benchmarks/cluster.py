"""A random intercept with many levels on a dask cluster: ``python -m benchmarks.cluster [--small]``.

Simulated registry data (``y ~ a + b + (1 | patient)``, rows sorted by patient as a registry export is) written to
parquet on disk, read back by ``dask.dataframe.read_parquet`` on a ``LocalCluster`` of 2 worker processes, and fitted
by full-batch mean-field VB (the largest grouping factor streamed level by level).  Reported beside it, in the same
process:

* the time and the client's peak resident memory (``ru_maxrss``) of the streamed fit, against the 10-minute goal;
* on a slice of the first rows, the streamed fit against the in-memory mean-field fit of the same rows (both to
  ``tol=1e-16``, where the lower bound stops changing in double precision): the largest absolute differences of the
  fixed effects and the random effects and the relative difference of the variance.

``--small`` runs 2 x 10^5 rows with 2 x 10^4 levels (slice: all of them); the default 10^7 rows with 10^5 levels
(slice: the first file's 10^6 rows).

``--accurate`` fits the accurate VB instead (``vb="accurate"``; with ``penalty=None``, one variance parameter, and with
the learned penalty, two), out of core on the cluster and in memory on the same rows (its PSIS check off: out of
core there is none), and reports both times and the differences of the fixed effects, their SDs and the
random-effect variance.

``--impute`` removes a fifth of ``b`` (missing completely at random, file by file) and fits ``missing="impute"`` (multiple
imputation, 20 completed data sets, each by streamed mean-field VB) on 2 x 10^5 rows with 2 x 10^4 levels out of core,
beside the in-memory multiple imputation of the same rows (``vb="meanfield"``, ``imputation="mi"``): both times, the
client's peak memory, and the differences of the pooled fixed effects (in posterior SDs) and their SDs.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

GOAL_SECONDS = 600.0
#: Both fits of the slice run until the lower bound stops changing (see the module docstring).
AGREEMENT_TOL = 1e-16
ROWS_PER_FILE = 1_000_000


def simulate(rows: int, levels: int, first_level: int, all_levels: int, seed: int) -> pd.DataFrame:
    """``rows`` rows over patients ``first_level .. first_level + levels - 1`` of ``all_levels`` (random intercept SD 1
    on the logit scale), sorted by patient; the patient column is categorical over every patient's name."""
    rng = np.random.default_rng(seed)
    patient = np.sort(rng.integers(first_level, first_level + levels, rows))
    a, b = rng.standard_normal(rows), rng.standard_normal(rows)
    effects = np.random.default_rng(10**6).standard_normal(all_levels)  # the same for every file
    eta = 0.5 + a - 0.5 * b + effects[patient]
    y = np.where(rng.random(rows) < 1.0 / (1.0 + np.exp(-eta)), "yes", "no")
    names = [f"p{k:06d}" for k in range(all_levels)]
    return pd.DataFrame(
        {
            "y": pd.Categorical(y, categories=["no", "yes"]),
            "a": a,
            "b": b,
            "patient": pd.Categorical.from_codes(patient, categories=names),
        }
    )


def write_parquet(n: int, levels: int, folder: Path) -> pd.DataFrame:
    """The rows in files of :data:`ROWS_PER_FILE`, each file its own block of patients (a registry export sorted by
    patient), generated file by file so the client never holds them all; returns the first file's rows."""
    files = max(1, n // ROWS_PER_FILE)
    first = None
    for k in range(files):
        part = simulate(n // files, levels // files, k * (levels // files), levels, seed=k)
        part.to_parquet(folder / f"part{k:03d}.parquet", index=False)
        first = part if first is None else first
    return first


def main(argv: list[str] | None = None) -> list[dict]:
    import dask.dataframe as dd
    import distributed

    import bayesvm

    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster")
    parser.add_argument("--small", action="store_true", help="2 x 10^5 rows, 2 x 10^4 levels")
    parser.add_argument("--accurate", action="store_true", help="the accurate fit, out of core and in memory")
    parser.add_argument("--impute", action="store_true", help="multiple imputation of a missing predictor (--small)")
    args = parser.parse_args(argv)
    n, levels, slice_rows = (200_000, 20_000, 200_000) if args.small else (10_000_000, 100_000, 1_000_000)
    formula = "y ~ a + b + (1 | patient)"
    if args.accurate:
        return _print(accurate_rows(formula, n, levels))
    if args.impute:
        return _print(imputation_rows(formula, 200_000, 20_000))
    rows = []
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        folder = Path(tmp)
        first = write_parquet(n, levels, folder)
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        with distributed.Client(cluster):
            ddf = dd.read_parquet(str(folder / "*.parquet")).categorize(columns=["y", "patient"])
            start = time.perf_counter()
            fit = bayesvm.bsvm(formula, ddf)
            seconds = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
            rows.append(
                {
                    "case": f"streamed VB, {n:,} rows, {levels:,} levels ({fit.n_iter} sweeps)",
                    "ours_s": seconds,
                    "peer": "goal",
                    "peer_s": GOAL_SECONDS,
                    "note": f"client peak memory {peak:.2f} GiB",
                }
            )
            start = time.perf_counter()
            fit.predict(ddf, kind="link").mean().compute()  # every row's decision value, partition by partition
            rows.append(
                {
                    "case": f"predict(kind='link') of the {n:,} rows on the cluster",
                    "ours_s": time.perf_counter() - start,
                    "peer": "-",
                    "peer_s": float("nan"),
                    "note": "a dask series",
                }
            )
            part = first.iloc[:slice_rows]
            part = part.assign(patient=part["patient"].cat.remove_unused_categories())
            streamed = bayesvm.bsvm(formula, dd.from_pandas(part, npartitions=4), tol=AGREEMENT_TOL, max_iter=5000)
        cluster.close()
    start = time.perf_counter()
    memory = bayesvm.bsvm(formula, part, vb="meanfield", tol=AGREEMENT_TOL, max_iter=5000)
    memory_seconds = time.perf_counter() - start
    fixef = float(np.max(np.abs(streamed.fixef - memory.fixef)))
    ranef = float(np.max(np.abs(streamed.ranef["patient"].to_numpy() - memory.ranef["patient"].to_numpy())))
    variance = abs(streamed.variance_components[0].mean[0, 0] / memory.variance_components[0].mean[0, 0] - 1.0)
    rows.append(
        {
            "case": f"in-memory VB, the first {slice_rows:,} rows",
            "ours_s": memory_seconds,
            "peer": "-",
            "peer_s": float("nan"),
            "note": f"streamed - in memory: fixef {fixef:.1e}, ranef {ranef:.1e} (absolute), variance {variance:.1e} "
            "(relative)",
        }
    )
    return _print(rows)


def accurate_rows(formula: str, n: int, levels: int) -> list[dict]:
    """The accurate fit of ``n`` rows out of core (parquet on a 2-worker cluster) beside the in-memory one."""
    import dask.dataframe as dd
    import distributed

    import bayesvm

    rows = []
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        folder = Path(tmp)
        frame = write_parquet(n, levels, folder)
        for penalty in (None, "learn"):
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               dashboard_address=None)  # fmt: skip
            with distributed.Client(cluster):
                ddf = dd.read_parquet(str(folder / "*.parquet")).categorize(columns=["y", "patient"])
                start = time.perf_counter()
                streamed = bayesvm.bsvm(formula, ddf, vb="accurate", penalty=penalty)
                streamed_seconds = time.perf_counter() - start
            cluster.close()
            start = time.perf_counter()
            memory = bayesvm.bsvm(formula, frame, vb="accurate", penalty=penalty,
                                  checks=bayesvm.Checks(vb_check="ignore"))  # fmt: skip
            memory_seconds = time.perf_counter() - start
            rows.append(_accurate_row(streamed, memory, streamed_seconds, memory_seconds, penalty, n, levels))
    return rows


#: The share of ``b`` removed for ``--impute``.
MISSING_SHARE = 0.2


def imputation_rows(formula: str, n: int, levels: int) -> list[dict]:
    """Multiple imputation of ``n`` rows out of core (parquet on a 2-worker cluster) beside the in-memory one."""
    import dask.dataframe as dd
    import distributed

    import bayesvm

    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        folder = Path(tmp)
        frame = simulate(n, levels, 0, levels, seed=0)
        frame.loc[np.random.default_rng(1).random(n) < MISSING_SHARE, "b"] = np.nan
        for k, rows in enumerate(np.array_split(np.arange(n), 4)):
            frame.iloc[rows].to_parquet(folder / f"part{k:03d}.parquet", index=False)
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        with distributed.Client(cluster):
            ddf = dd.read_parquet(str(folder / "*.parquet")).categorize(columns=["y", "patient"])
            start = time.perf_counter()
            streamed = bayesvm.bsvm(formula, ddf, missing="impute", seed=0)
            streamed_seconds = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        cluster.close()
    start = time.perf_counter()
    memory = bayesvm.bsvm(formula, frame, missing="impute", vb="meanfield", seed=0,
                          control=bayesvm.Control(imputation="mi"))  # fmt: skip
    memory_seconds = time.perf_counter() - start
    ours, theirs = streamed.summary().fixed, memory.summary().fixed
    fixef = float(np.max(np.abs(ours["mean"] - theirs["mean"]) / theirs["sd"]))
    sds = float(np.max(np.abs(ours["sd"] / theirs["sd"] - 1.0)))
    # Monte Carlo standard error of the difference of two pooled means (engine scale): the spread between completed
    # data sets over their number, on each side
    spread = [np.var([f.theta.mean_d for f in fit.result.fits], axis=0, ddof=1) / len(fit.result.fits)
              for fit in (streamed, memory)]  # fmt: skip
    gap = np.abs(streamed.result.theta_d.mean(axis=(0, 1)) - memory.result.theta_d.mean(axis=(0, 1)))
    in_errors = float(np.max((gap / np.sqrt(spread[0] + spread[1]))[: streamed.model.design.p]))
    missing = int(frame["b"].isna().sum())
    return [
        {
            "case": f"multiple imputation out of core, {n:,} rows, {levels:,} levels, {missing:,} values of b imputed",
            "ours_s": streamed_seconds,
            "peer": "memory",
            "peer_s": memory_seconds,
            "note": f"20 completed data sets; streamed - in memory: fixef {fixef:.2f} SD ({in_errors:.1f} Monte Carlo "
            f"SE of the difference), SDs {sds:.2f} (relative); peak memory of this process {peak:.2f} GiB (it also "
            "simulates the rows)",
        }
    ]


def _accurate_row(streamed, memory, streamed_seconds: float, memory_seconds: float, penalty, n: int, levels: int):
    sd_s, sd_m = np.sqrt(np.diag(streamed.fixef_cov)), np.sqrt(np.diag(memory.fixef_cov))
    fixef = float(np.max(np.abs(streamed.fixef - memory.fixef) / sd_m))
    sds = float(np.max(np.abs(sd_s / sd_m - 1.0)))
    variance = abs(streamed.variance_components[0].mean[0, 0] / memory.variance_components[0].mean[0, 0] - 1.0)
    nodes = streamed.result.nodes.shape[0]
    what = "penalty=None" if penalty is None else "learned penalty"
    return {
        "case": f"accurate VB out of core ({what}), {n:,} rows, {levels:,} levels, {nodes} nodes",
        "ours_s": streamed_seconds,
        "peer": "memory",
        "peer_s": memory_seconds,
        "note": f"streamed - in memory: fixef {fixef:.1e} SD, SDs {sds:.1e}, variance {variance:.1e} (relative); "
        f"node weights: {streamed.result.node_weights.method}",
    }


def _print(rows: list[dict]) -> list[dict]:
    print(f"{'case':62s} {'ours (s)':>9s} {'peer':>6s} {'peer (s)':>9s}  note")
    for row in rows:
        print(f"{row['case']:62s} {row['ours_s']:9.1f} {row['peer']:>6s} {row['peer_s']:9.1f}  {row['note']}")
    return rows


if __name__ == "__main__":
    main()
