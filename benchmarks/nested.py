"""Two nested random intercepts (children in mothers in communities, simulated in the shape of mlmRev's guImmun):
the default (accurate) fit with the dense path's sums over each row's nonzero columns, against the same sums over
every column and mean-field VB (and, with ``--statsmodels``, statsmodels' BinomialBayesMixedGLM.fit_vb), in one
process.

2,200 children, 1,600 mothers (most with one or two children), 160 communities, two covariates; the mothers are
eliminated and the 160 community indicators sit in the dense part beside the fixed effects, about 4 nonzero of 163
columns per row.  ``bayesvm.linalg.row_pattern`` sums over the nonzero columns (numba); ``--dense`` also fits with
the pattern switched off, the BLAS path over every column (about 100 s).  One EP solve is timed both ways in any case.
``--wide`` adds 20 binary covariates (about 12 nonzero columns per row, as in mlmRev's guPrenat with its 11 categorical
predictors) and fits that design twice: with the pattern's loops on both CPUs (:mod:`bayesvm.linalg.row_threads`, the
default) and with them in one thread.
statsmodels fits a logistic GLMM (another likelihood), so its variances are on another scale; the simulated truth is
printed for the orders of magnitude: mothers' SD 2, communities' SD 0.7 on the logit scale.  Its ``fit_vb`` took 814 s
here (2 cores, beside another job), so it runs only when asked for.

    python -m benchmarks.nested [--dense] [--statsmodels] [--wide]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.linalg import compiled
from bayesvm.model import problems

FORMULA = "y ~ x + treated + (1 | community) + (1 | mother)"


def simulated(
    seed: int = 2026, children: int = 2_200, mothers: int = 1_600, communities: int = 160, covariates: int = 0
) -> pd.DataFrame:
    """Children in mothers in communities: a logistic model with mothers' SD 2 and communities' SD 0.7; with
    ``covariates``, that many more binary covariates ``c1, c2, ...`` (each 1 for 40% of the children, effect 0.3)."""
    rng = np.random.default_rng(seed)
    mother = np.concatenate([np.arange(mothers), rng.integers(0, mothers, children - mothers)])
    community = rng.integers(0, communities, mothers)[mother]
    x = rng.standard_normal(children)
    treated = rng.random(mothers)[mother] < 0.4
    eta = (
        -0.5
        + 0.8 * x
        + 1.0 * treated
        + rng.normal(0, 2.0, mothers)[mother]
        + rng.normal(0, 0.7, communities)[community]
    )
    extra = rng.random((children, covariates)) < 0.4
    eta = eta + 0.3 * extra.sum(axis=1)
    return pd.DataFrame({
        "y": (rng.random(children) < 1.0 / (1.0 + np.exp(-eta))).astype(int), "x": x,
        "treated": np.where(treated, "yes", "no"), "mother": [f"m{j}" for j in mother],
        "community": [f"c{k}" for k in community], **{f"c{k + 1}": extra[:, k].astype(float) for k in range(covariates)},
    })  # fmt: skip


#: ``--wide``: this many more binary covariates, so that each row has about 12 nonzero dense columns, not 4
WIDE_COVARIATES = 20


def wide_formula(covariates: int = WIDE_COVARIATES) -> str:
    return FORMULA.replace("treated", "treated + " + " + ".join(f"c{k + 1}" for k in range(covariates)))


def _fit(data: pd.DataFrame, formula: str = FORMULA, **options) -> tuple[float, object]:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm(formula, data, seed=0, progress=False, **options)
    return time.perf_counter() - start, fit


def _wide() -> None:
    """The default fit with the row pattern's loops split onto both CPUs (:mod:`bayesvm.linalg.row_threads`), and
    with them in one thread, on the design with :data:`WIDE_COVARIATES` more covariates."""
    from bayesvm.linalg import row_threads

    data, formula = simulated(covariates=WIDE_COVARIATES), wide_formula()
    print(f"--wide: {formula} ({len(data)} children)")
    seconds, fit = _fit(data, formula)
    split = row_threads.COMPILED_SPLIT_WORK
    row_threads.COMPILED_SPLIT_WORK = np.inf
    try:
        one_seconds, one = _fit(data, formula)
    finally:
        row_threads.COMPILED_SPLIT_WORK = split
    gap = np.max(np.abs(fit.predict(data, kind="link") - one.predict(data, kind="link")))
    print(f"bayesvm default fit, loops on two CPUs: {seconds:6.1f} s   {_variances(fit)}")
    print(f"  the same fit, loops in one thread:    {one_seconds:6.1f} s   (ratio {seconds / one_seconds:.3f}; "
          f"largest difference of f {gap:.1e})")  # fmt: skip


def _variances(fit) -> str:
    return ", ".join(f"{c.label} {float(c.mean[0, 0]):.2f}" for c in fit.variance_components if c.group != "penalty")


def _solve_times(fit_data: pd.DataFrame) -> tuple[float, float, int]:
    """Milliseconds of one EP solve (posterior and rows' moments) over the nonzero columns and over every column, on
    the fit's own problem at unit weights, and the dense part's width."""
    from bayesvm.engines.linear import ep
    from bayesvm.linalg.dense import gaussian_posterior

    captured = {}
    original = ep.run_ep

    def capture(problem, *args, **kwargs):
        captured["problem"] = problem
        raise StopIteration

    ep.run_ep = capture
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bayesvm.bsvm(FORMULA, fit_data, seed=0, progress=False)
    except StopIteration:
        pass
    finally:
        ep.run_ep = original
    problem = captured["problem"]
    D, blocked = problem.D, problem.blocked
    w = np.ones(problem.n)
    prior_dd, prior_b = ep.prior_precisions(problem, [np.eye(c.k) for c in problem.components])
    out = []
    for pattern in (problem.row_pattern, None):
        gaussian_posterior(D, w, problem.y * 2.0, prior_dd, blocked, prior_b, pattern)  # (compiles on first use)
        start = time.perf_counter()
        for _ in range(20):
            theta = gaussian_posterior(D, w, problem.y * 2.0, prior_dd, blocked, prior_b, pattern)
            theta.predictor(D, blocked.codes, blocked.values, pattern)
        out.append(1000.0 * (time.perf_counter() - start) / 20)
    return out[0], out[1], D.shape[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dense", action="store_true", help="also the whole fit over every column (about 100 s)")
    parser.add_argument("--statsmodels", action="store_true", help="also BinomialBayesMixedGLM.fit_vb (minutes)")
    parser.add_argument("--wide", action="store_true", help="also 20 more covariates, loops on two CPUs or one")
    args = parser.parse_args(argv)
    data = simulated()
    print(f"{FORMULA}: {len(data)} children, {data['mother'].nunique()} mothers, {data['community'].nunique()} "
          "communities (simulated: mothers' SD 2, communities' SD 0.7, logit scale)")  # fmt: skip
    if not compiled.available():
        print("numba is not installed: the sums run over every column (pip install 'bayesvm[fast]')")
    pattern_ms, dense_ms, width = _solve_times(data)
    print(f"one EP solve, {width} dense columns: {pattern_ms:.1f} ms over the nonzero columns, {dense_ms:.1f} ms "
          f"over every column (ratio {pattern_ms / dense_ms:.3f})")  # fmt: skip
    seconds, fit = _fit(data)
    kind = "accurate VB" if type(fit.result).__name__ == "IntegratedResult" else type(fit.result).__name__
    print(f"bayesvm default fit ({kind}):       {seconds:6.1f} s   {_variances(fit)}")
    if args.dense:
        original = problems.VBProblem.row_pattern
        problems.VBProblem.row_pattern = property(lambda self: None)
        try:
            dense_seconds, _ = _fit(data)
        finally:
            problems.VBProblem.row_pattern = original
        print(f"  the same fit over every column:     {dense_seconds:6.1f} s   (ratio {seconds / dense_seconds:.3f})")
    mf_seconds, mean_field = _fit(data, vb="meanfield")
    print(f"bayesvm vb='meanfield':               {mf_seconds:6.1f} s   {_variances(mean_field)}")
    if args.wide:
        _wide()
    if not args.statsmodels:
        return
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    model = BinomialBayesMixedGLM.from_formula(
        "y ~ x + treated", {"community": "0 + C(community)", "mother": "0 + C(mother)"}, data
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = model.fit_vb()
    peer_seconds = time.perf_counter() - start
    sds = np.exp(peer.vcp_mean)
    names = model.vcp_names
    print(f"statsmodels BinomialBayesMixedGLM.fit_vb: {peer_seconds:5.1f} s   "
          + ", ".join(f"{n} SD {s:.2f}" for n, s in zip(names, sds)))  # fmt: skip
    print(f"ratio bayesvm default / statsmodels: {seconds / peer_seconds:.1f}")


if __name__ == "__main__":
    main()
