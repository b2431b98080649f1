"""Speed at scale : ``python -m benchmarks.scale [--small]``.

Cases, each timed in this process next to its floor or peer:

1. dense linear VB, learned penalty (n x d): time per sweep against the BLAS floor
   ``X.T @ (w[:, None] * X)`` plus ``X @ v`` measured here;
2. one grouping factor (n rows, m levels, p = 10): VB to convergence, and Gibbs per iteration, both the default
   sampler and the paper's without the mixing moves (which cost about as much per iteration as the rest of it at
   this size, and pay for it in effective samples: ``--gibbs-ess``);
3. crossed random intercepts ``(1|a) + (1|b)``: VB on the sparse path (the largest factor eliminated onto
   a dense Schur complement), per sweep against the LAPACK floor, and to convergence; the probe engine
   (``probes=32``: conjugate gradients and Rao-Blackwellised variance probes) to convergence against the
   exact fit and against the 60 s goal, with its largest deviation from the exact fit;
4. peers: scikit-learn ``LinearSVC`` with 5-fold ``GridSearchCV`` over 10 values of ``C`` (how users choose
   the penalty) against our learned-penalty VB fit to convergence on the dense design; statsmodels
   ``BinomialBayesMixedGLM.fit_vb`` (logistic GLMM, mean-field VB) against our VB on the one-factor
   design, at the largest size (n = 10^4 ... 10^6, m = n / 10) statsmodels finishes within its budget
   (10 minutes by default, each size in a fresh process);
5. ``--kernel``: kernel SVI (Wenzel et al. 2017, Alg. 1) on simulated data, n = 1e6 and 5e6 rows, d = 18,
   M = 64 inducing points, RBF with learned hyperparameters, minibatches of 100 rows: the time until the
   held-out error (100,000 fresh rows) is within 0.005 of its value at the end of the run, the run's
   time, and the process's peak memory (each n in a fresh process) against the size of the data.

6. ``--gibbs-ess``: the one-factor Gibbs sampler per effective sample (n = 2x10^5, m = 2x10^4) against the
   paper's sampler without the mixing moves, both run here.

``--small`` runs a reduced version (used as a smoke test by the test suite).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from bayesvm.engines.linear import compiled_rows
from bayesvm.engines.linear.gibbs import sample_gibbs
from bayesvm.engines.linear.vb import fit_vb
from bayesvm.linalg.dense import BlockedFactor
from bayesvm.model.problems import VarianceComponent, VBProblem
from bayesvm.priors import InverseGamma


def _labels(rng, X, extra=0.0):
    eta = X @ rng.normal(0, 0.5, X.shape[1]) + extra
    return np.where(rng.random(X.shape[0]) < 1 / (1 + np.exp(-eta)), 1.0, -1.0)


def dense_problem(n: int, d: int, rng) -> VBProblem:
    """Intercept plus ``d - 1`` standard normal columns, learned penalty (Alg. 2 without random effects)."""
    X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    slopes = np.arange(1, d)[:, None]
    comp = VarianceComponent("penalty", slopes, False, d - 1, prior=InverseGamma(0.01, 0.01))
    precision = np.zeros(d)
    precision[0] = 1e-8
    return VBProblem(y=_labels(rng, X), D=X, fixed_precision=precision, components=(comp,))


def dense_case(n: int, d: int, rng) -> dict:
    problem = dense_problem(n, d, rng)
    X = problem.D
    w, v = rng.random(n) + 0.5, rng.standard_normal(d)
    floors, sweeps = [], []
    for _ in range(3):  # interleaved, best of three each (shared machines are noisy)
        start = time.perf_counter()
        X.T @ (w[:, None] * X)
        X @ v
        floors.append(time.perf_counter() - start)
        result = fit_vb(problem, max_iter=10, accelerate=False)
        sweeps.append(result.elapsed / result.n_iter)
    return {
        "case": f"dense VB n={n} d={d}, per sweep",
        "ours_s": min(sweeps),
        "peer": "BLAS floor / sweep",
        "peer_s": min(floors),
    }


def grouped_problem(n: int, m: int, p: int, rng) -> VBProblem:
    X = np.column_stack([np.ones(n), rng.standard_normal((n, p - 1))])
    g = rng.integers(0, m, n)
    y = _labels(rng, X, rng.normal(0, 1, m)[g])
    blocked = BlockedFactor(codes=g, values=np.ones((n, 1)), n_levels=m)
    comp = VarianceComponent("u", np.zeros((1, 1), dtype=int), True, m, prior=InverseGamma(0.01, 0.01))
    return VBProblem(y=y, D=X, fixed_precision=np.full(p, 1e-8), components=(comp,), blocked=blocked)


def grouped_cases(n: int, m: int, rng, gibbs_draws: int = 1000) -> list[dict]:
    """One factor: VB to convergence, and a Gibbs chain of ``gibbs_draws`` draws with its setup (scaled to
    1,000 draws when fewer are run)."""
    problem = grouped_problem(n, m, 10, rng)
    start = time.perf_counter()
    result = fit_vb(problem)
    vb = time.perf_counter() - start
    seconds = {}
    for sampler, moves in (("default", True), ("paper", False)):
        start = time.perf_counter()
        sample_gibbs(problem, draws=gibbs_draws, tune=0, chains=1, seed=1, progress=False, _interweave=moves)
        seconds[sampler] = (time.perf_counter() - start) * 1000 / gibbs_draws
    label = "1000 draws" if gibbs_draws == 1000 else f"{gibbs_draws} draws scaled to 1000"
    label += ", compiled row pass" if compiled_rows.available() else ", numpy row pass"
    return [
        {"case": f"one factor VB n={n} m={m} ({result.n_iter} sweeps)", "ours_s": vb, "peer": "goal", "peer_s": 30.0},
        {"case": f"one factor Gibbs n={n} m={m}, {label}", "ours_s": seconds["default"], "peer": "goal", "peer_s": 60.0},
        {
            "case": f"one factor Gibbs n={n} m={m}, {label}, paper's sampler (no mixing moves)",
            "ours_s": seconds["paper"], "peer": "goal", "peer_s": 60.0,
        },
    ]  # fmt: skip


def grouped_gibbs_ess(n: int, m: int, rng, draws: int = 600, tune: int = 200) -> list[dict]:
    """One factor, Gibbs per effective sample: 2 chains (one process) of the default sampler (with the mixing moves of
    :mod:`bayesvm.engines.linear.interweave`) against the paper's sampler (``_interweave=False``) on the same
    problem; min bulk ESS over the fixed effects and the variance, per second.  The ratio is the paper's ESS per
    second over ours (below 1: ours is faster per effective sample)."""
    import warnings

    import arviz as az

    problem = grouped_problem(n, m, 10, rng)
    rates, rows = {}, []
    for label, moves in (("default", True), ("paper", False)):
        start = time.perf_counter()
        r = sample_gibbs(problem, draws=draws, tune=tune, chains=2, seed=1, progress=False, cores=1, _interweave=moves)
        seconds = time.perf_counter() - start
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ess = [float(az.ess(r.theta_d[..., j])) for j in range(problem.D.shape[1])]
            ess.append(float(az.ess(np.asarray(r.components[0])[..., 0, 0])))
        rates[label] = (min(ess), seconds)
    (ess_ours, s_ours), (ess_paper, s_paper) = rates["default"], rates["paper"]
    rows.append({
        "case": f"one factor Gibbs n={n} m={m}, 2 x ({tune} + {draws}): min ESS {ess_ours:.0f} / paper {ess_paper:.0f}",
        "ours_s": s_ours / ess_ours, "peer": "paper s per ESS", "peer_s": s_paper / ess_paper,
    })  # fmt: skip
    return rows


#: Probes of the probe engine in the crossed case.
PROBES = 32


def crossed_case(n: int, m: int, rng) -> list[dict]:
    """Crossed ``(1|a) + (1|b)``, m levels each, uniformly crossed: every level of ``a`` meets about
    ``n / m`` levels of ``b``, so the Schur complement on ``b`` is dense and each sweep's floor is LAPACK's
    Cholesky factorisation plus inversion of that ``(m + 2)``-square matrix (timed here on a random SPD
    matrix of the same size).  Rows: a sweep against that floor, and the fit to convergence against the
    issue's 60 s goal."""
    import scipy.sparse as sp
    from scipy.linalg import lapack

    X = np.column_stack([np.ones(n), rng.standard_normal(n)])
    a, b = rng.integers(0, m, n), rng.integers(0, m, n)
    y = _labels(rng, X, rng.normal(0, 1, m)[a] + rng.normal(0, 1, m)[b])
    Z = [sp.csr_matrix((np.ones(n), (np.arange(n), codes)), shape=(n, m)) for codes in (a, b)]
    C = sp.hstack([sp.csr_matrix(X), *Z], format="csr")
    comps = tuple(
        VarianceComponent(name, (2 + k * m + np.arange(m))[:, None], False, m, prior=InverseGamma(0.01, 0.01))
        for k, name in enumerate(("a", "b"))
    )
    problem = VBProblem(y=y, D=C, fixed_precision=np.r_[1e-8, 1e-8, np.zeros(2 * m)], components=comps)
    start = time.perf_counter()
    result = fit_vb(problem)
    total = time.perf_counter() - start
    per_sweep = result.elapsed / result.n_iter
    q = m + 2
    spd = rng.standard_normal((q, q)) / np.sqrt(q)
    spd = spd @ spd.T + np.eye(q)
    start = time.perf_counter()
    chol = lapack.dpotrf(spd, lower=1)[0]
    lapack.dpotri(chol, lower=1)
    floor = time.perf_counter() - start
    label = f"crossed VB n={n} m={m}x{m}"
    start = time.perf_counter()
    probe = fit_vb(dataclasses.replace(problem, probes=PROBES))
    probe_total = time.perf_counter() - start
    sd = np.sqrt(result.theta.variance())
    shift = float(np.max(np.abs(probe.theta.mean_d - result.theta.mean_d) / sd))
    spread = float(np.max(np.abs(np.sqrt(probe.theta.variance()) / sd - 1.0)))
    probe_label = f"{label} probes={PROBES} ({probe.n_iter} sweeps; mean {shift:.1e} sd, sd {spread:.1%})"
    return [
        {"case": probe_label, "ours_s": probe_total, "peer": "exact fit", "peer_s": total},
        {"case": f"{label} probes={PROBES}", "ours_s": probe_total, "peer": "goal", "peer_s": 60.0},
        {"case": f"{label}, per sweep", "ours_s": per_sweep, "peer": f"LAPACK floor q={q}", "peer_s": floor},
        {"case": f"{label} ({result.n_iter} sweeps, with setup)", "ours_s": total, "peer": "goal", "peer_s": 60.0},
    ]


def nested_problem(n: int, m: int, per: int, rng) -> VBProblem:
    """Nested ``(1|a) + (1|a:b)``: m levels of ``a``, each with ``per`` levels of ``b`` (the general sparse path)."""
    import scipy.sparse as sp

    X = np.column_stack([np.ones(n), rng.standard_normal(n)])
    a = rng.integers(0, m, n)
    b = a * per + rng.integers(0, per, n)
    y = _labels(rng, X, rng.normal(0, 1, m)[a] + rng.normal(0, 0.5, m * per)[b])
    rows = np.arange(n)
    C = sp.hstack(
        [sp.csr_matrix(X), *(sp.csr_matrix((np.ones(n), (rows, c)), shape=(n, k)) for c, k in ((a, m), (b, m * per)))],
        format="csr",
    )
    comps = (
        VarianceComponent("a", (2 + np.arange(m))[:, None], False, m, prior=InverseGamma(0.01, 0.01)),
        VarianceComponent("a:b", (2 + m + np.arange(m * per))[:, None], False, m * per, prior=InverseGamma(0.01, 0.01)),
    )
    return VBProblem(y=y, D=C, fixed_precision=np.r_[1e-8, 1e-8, np.zeros(m + m * per)], components=comps)


def nested_case(n: int, m: int, rng, sweeps: int = 3) -> list[dict]:
    """Nested factors on the general sparse path: ``sweeps`` sweeps with CHOLMOD against the same sweeps with
    the SuperLU fallback (each sweep factorises ``P`` and runs the selected inversion), and the fit to
    convergence with CHOLMOD (when scikit-sparse is installed)."""
    import os

    from bayesvm.linalg import sparse

    problem = nested_problem(n, m, 10, rng)
    times = {}
    for backend in ("cholmod", "superlu"):
        if backend == "cholmod" and sparse.cholmod is None:
            continue
        os.environ[sparse.CHOLMOD_SWITCH] = "1" if backend == "cholmod" else "0"
        try:
            start = time.perf_counter()
            fit_vb(problem, max_iter=sweeps)
            times[backend] = (time.perf_counter() - start) / sweeps
        finally:
            os.environ.pop(sparse.CHOLMOD_SWITCH)
    label = f"nested VB n={n} m={m}/{10 * m}"
    if "cholmod" not in times:
        return [{"case": f"{label}, per sweep (SuperLU; CHOLMOD not installed)", "ours_s": times["superlu"],
                 "peer": "-", "peer_s": float("nan")}]  # fmt: skip
    start = time.perf_counter()
    result = fit_vb(problem)
    total = time.perf_counter() - start
    return [
        {
            "case": f"{label}, per sweep (CHOLMOD)",
            "ours_s": times["cholmod"],
            "peer": "SuperLU",
            "peer_s": times["superlu"],
        },
        {"case": f"{label} ({result.n_iter} sweeps, CHOLMOD)", "ours_s": total, "peer": "goal", "peer_s": 60.0},
    ]


def linear_svc_peer(n: int, d: int, rng) -> dict:
    """Our learned-penalty VB to convergence against LinearSVC tuned by 5-fold CV over 10 values of C."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import LinearSVC

    problem = dense_problem(n, d, rng)
    X, y = problem.D, problem.y
    start = time.perf_counter()
    result = fit_vb(problem)
    ours = time.perf_counter() - start
    grid = GridSearchCV(LinearSVC(dual=False), {"C": np.logspace(-3, 2, 10)}, cv=5, n_jobs=1)
    start = time.perf_counter()
    grid.fit(X[:, 1:], y)
    peer = time.perf_counter() - start
    return {
        "case": f"VB learned penalty n={n} d={d} ({result.n_iter} sweeps)",
        "ours_s": ours,
        "peer": "LinearSVC 5-fold x 10 C",
        "peer_s": peer,
    }


def _statsmodels_run(n: int, m: int, seed: int, queue) -> None:
    import scipy.sparse as sp
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    problem = grouped_problem(n, m, 10, np.random.default_rng(seed))
    Z = sp.csr_matrix((np.ones(n), (np.arange(n), problem.blocked.codes)), shape=(n, m))
    model = BinomialBayesMixedGLM((problem.y > 0).astype(float), problem.D, Z, np.zeros(m, dtype=int))
    start = time.perf_counter()
    model.fit_vb()
    peer = time.perf_counter() - start
    start = time.perf_counter()
    result = fit_vb(problem)
    queue.put({"peer_s": peer, "ours_s": time.perf_counter() - start, "sweeps": result.n_iter})


def statsmodels_peer(sizes: list[int], budget: float) -> dict | None:
    """The largest size statsmodels' GLMM VB finishes within ``budget`` seconds, with our VB beside it."""
    import multiprocessing
    import queue as queues

    context = multiprocessing.get_context("spawn")
    best = None
    for n in sizes:
        m = n // 10
        results = context.Queue()
        child = context.Process(target=_statsmodels_run, args=(n, m, 2014, results))
        child.start()
        try:
            out = results.get(timeout=budget + 120)  # our fit runs after statsmodels' in the same process
        except queues.Empty:
            out = None
        child.join(timeout=5)
        if child.is_alive():
            child.terminate()
        if out is None or out["peer_s"] > budget:
            print(f"statsmodels BinomialBayesMixedGLM.fit_vb n={n:,d} m={m:,d}: not finished within {budget:.0f} s")
            break
        print(
            f"statsmodels BinomialBayesMixedGLM.fit_vb n={n:,d} m={m:,d}: {out['peer_s']:.1f} s (ours {out['ours_s']:.2f} s)"
        )
        best = {
            "case": f"one factor VB n={n} m={m} ({out['sweeps']} sweeps)",
            "ours_s": out["ours_s"],
            "peer": "statsmodels GLMM VB",
            "peer_s": out["peer_s"],
        }
    return best


def _kernel_data(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """18 inputs; the class depends nonlinearly on six of them (a SUSY-like size and shape)."""
    X = rng.standard_normal((n, 18))
    f = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.5 * X[:, 3] ** 2 - 0.5 + np.tanh(X[:, 4] + X[:, 5])
    return X, np.where(f + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)


def _kernel_svi_run(n: int, seed: int, queue) -> None:
    import resource

    from bayesvm.engines.kernel.svi import fit_svi
    from bayesvm.kernels import RBF
    from bayesvm.model.kernel import choose_locations
    from bayesvm.model.problems import KernelProblem

    rng = np.random.default_rng(seed)
    X, y = _kernel_data(n, rng)
    X_test, y_test = _kernel_data(100_000, rng)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    locations = choose_locations(X, 64, "kmeans", rng, np.zeros(18), np.ones(18))
    kernel = RBF(lengthscale=np.full(18, RBF().resolved(X, rng).lengthscale))  # ARD, from the median distance
    setup = time.perf_counter() - start
    trace = []

    def record(step, seconds, snapshot):
        mean, _ = snapshot.predictor(X_test)
        trace.append((setup + seconds, step, float(np.mean(np.sign(mean) != y_test))))

    result = fit_svi(KernelProblem(X, y, kernel), locations, batch_size=100, seed=seed, callback=record, window=200)
    total = time.perf_counter() - start
    final = trace[-1][2]
    reach = next(t for t, _, err in trace if err <= final + 0.005)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({
        "n": n, "reach_s": reach, "total_s": total, "steps": result.n_iter, "final_error": final,
        "peak_mb": peak, "data_mb": (X.nbytes + y.nbytes) / 2**20, "extra_mb": peak - baseline,
        "stopping": result.stopping, "lengthscale": float(np.min(result.kernel.lengthscale)),
    })  # fmt: skip


def kernel_cases(sizes: list[int]) -> list[dict]:
    import multiprocessing

    rows = []
    context = multiprocessing.get_context("spawn")
    for n in sizes:
        queue = context.Queue()
        child = context.Process(target=_kernel_svi_run, args=(n, 2017, queue))
        child.start()
        out = queue.get()
        child.join()
        rows.append(out)
        print(
            f"kernel SVI n={n:>9,d} d=18 M=64: held-out error within 0.005 of final after {out['reach_s']:.1f} s "
            f"(final {out['final_error']:.4f} after {out['total_s']:.1f} s, {out['steps']} steps); peak memory "
            f"{out['peak_mb']:.0f} MB (data {out['data_mb']:.0f} MB, {out['extra_mb']:.0f} MB above the data's "
            f"creation); shortest ARD lengthscale {out['lengthscale']:.2f}; {out['stopping']}",
            flush=True,
        )
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    parser.add_argument("--small", action="store_true", help="reduced sizes (smoke test)")
    parser.add_argument("--kernel", action="store_true", help="kernel SVI at 1e6 and 5e6 rows only")
    parser.add_argument("--peer-budget", type=float, default=600.0, help="seconds allowed to statsmodels per size")
    parser.add_argument("--no-peers", action="store_true", help="skip the LinearSVC and statsmodels peers")
    parser.add_argument("--gibbs-ess", action="store_true", help="one-factor Gibbs per effective sample only")
    parser.add_argument(
        "--learned-penalty", action="store_true", help="learned-penalty VB at 10^6 x 50 against the LinearSVC grid only"
    )
    args = parser.parse_args(argv)
    if args.learned_penalty:  # its own data, whatever cases run before it in the full set
        rows = [linear_svc_peer(20_000 if args.small else 1_000_000, 50, np.random.default_rng(2014))]
        _print(rows)
        return rows
    if args.kernel:
        return kernel_cases([20_000] if args.small else [1_000_000, 5_000_000])
    rng = np.random.default_rng(2014)
    if args.gibbs_ess:
        rows = grouped_gibbs_ess(5_000, 500, rng, 100, 50) if args.small else grouped_gibbs_ess(200_000, 20_000, rng)
        _print(rows)
        return rows
    if args.small:
        rows = [dense_case(20_000, 20, rng), *grouped_cases(20_000, 2_000, rng, 50), *crossed_case(5_000, 200, rng)]
        rows += nested_case(5_000, 100, rng, sweeps=2)
        if not args.no_peers:
            rows.append(linear_svc_peer(5_000, 10, rng))
            rows.append(statsmodels_peer([2_000], budget=args.peer_budget))
    else:
        rows = [
            dense_case(1_000_000, 50, rng),
            *grouped_cases(1_000_000, 100_000, rng),
            *crossed_case(200_000, 2_000, rng),
            *crossed_case(1_000_000, 10_000, rng),
            *nested_case(1_000_000, 10_000, rng),
        ]
        if not args.no_peers:
            rows.append(linear_svc_peer(1_000_000, 50, rng))
            rows.append(statsmodels_peer([10_000, 30_000, 100_000, 300_000, 1_000_000], budget=args.peer_budget))
    rows = [row for row in rows if row is not None]
    _print(rows)
    return rows


def _print(rows: list[dict]) -> None:
    print(f"{'case':55s} {'ours (s)':>10s} {'peer':>20s} {'peer (s)':>10s} {'ratio':>8s}")
    for row in rows:
        ratio = row["ours_s"] / row["peer_s"] if np.isfinite(row["peer_s"]) else float("nan")
        print(f"{row['case']:55s} {row['ours_s']:10.3f} {row['peer']:>20s} {row['peer_s']:10.3f} {ratio:8.2f}")


if __name__ == "__main__":
    main()
