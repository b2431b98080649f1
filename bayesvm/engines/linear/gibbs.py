"""Gibbs sampler for the linear Bayesian SVM (Luts & Ormerod 2014, Appendix A; Polson & Scott 2011, section 4).

Full conditionals, with ``omega_i = 1 / a_i`` and ``C = [D, Z_b]``:

* ``theta | omega, components ~ N(P^{-1} C' Y (1 + omega), P^{-1})``,
  ``P = C' diag(omega) C + blockdiag(prior precisions)``: one block draw through the same
  structured elimination the VB engine uses (``linalg.gaussian_draw``; the sparse Cholesky
  on the sparse path);
* ``omega_i | theta ~ InverseGaussian(1 / |1 - y_i c_i' theta|, 1)`` (``a_i ~ GIG(1/2, 1, (1 - y_i f_i)^2)``),
  drawn with ``Generator.wald``;
* ``sigma^2 | u ~ IG(A + m/2, B + ||u||^2 / 2)`` for each single-column component;
* ``Sigma | u ~ IW(nu + J, Psi + sum_j u_j u_j')`` for each correlated term.

Class weights ``omega_i`` (:mod:`bayesvm.model.class_weights`): row ``i``'s factor
``exp(-2 omega_i max(0, 1 - y_i f_i))`` is the augmented row of the design row ``omega_i c_i`` with margin
``m_i = omega_i`` instead of 1, so the chain runs on the scaled design
(:func:`bayesvm.engines.linear.gibbs_rows.scaled_by_weights`) with
``w_i | theta ~ InverseGaussian(1 / |m_i - y_i c~_i' theta|, 1)`` and linear term ``C~' Y (1 + m w)``; the
paper's sampler, without the interweaving moves and the compiled passes, which assume margin 1.
"""

from __future__ import annotations

import sys
import time
from functools import partial

import numpy as np
import scipy.sparse as sp

from ...linalg import compiled
from ...linalg.dense import BlockedFactor, blas_threads, gaussian_draw, spd_inverse
from ...linalg.row_sums import RowStatistics, row_statistics
from ...linalg.schur import schur_sparse_draw
from ...linalg.sparse import SparseCholesky
from ...memory import check_memory
from ...model.problems import VBProblem, sorted_by_level
from ..components import component_values, draw_components, prior_precisions, sparse_prior
from ..gibbs_driver import TUNE, GibbsResult, gibbs_result, run_chains, run_until_converged
from ..joint import LogPrior
from ..overrelax import RELAXATION
from . import compiled_rows, fused_iteration
from .collapsed_variance import CollapsedVariance
from .fused_iteration import BATCH, FusedIteration
from .gibbs_rows import (
    MARGIN_FLOOR,
    DenseRows,
    LatentDraws,
    level_boundary_split,
    linear_terms,
    row_margins,
    scaled_by_weights,
)
from .interweave import ScaleMoves


def _run_chain(
    problem: VBProblem,
    draws: int,
    tune: int,
    thin: int,
    seed: np.random.SeedSequence,
    show: bool,
    interweave: bool = True,
    whole: bool = True,
) -> dict:
    with blas_threads(problem.D.shape[1], problem.n):
        return _chain(problem, draws, tune, thin, seed, show, interweave, whole)


def _chain(
    problem: VBProblem,
    draws: int,
    tune: int,
    thin: int,
    seed: np.random.SeedSequence,
    show: bool,
    interweave: bool = True,
    whole: bool = True,
) -> dict:
    """``draws`` kept draws of one chain (:func:`chain_draws`), stacked; ``whole``: with the compiled whole iterations
    where the problem has their structure (:mod:`.fused_iteration`; else the separately compiled steps: the same
    chain to rounding)."""
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=tune + draws * thin, desc="Gibbs", leave=False)
    stream = chain_draws(problem, tune, thin, seed, interweave, tick=None if bar is None else bar.update, whole=whole)
    records = [next(stream) for _ in range(draws)]
    stream.close()
    if bar is not None:
        bar.close()
    return stack_draws(records, problem)


def stack_draws(records: list[tuple], problem: VBProblem) -> dict:
    """Kept draws ``(theta_d, theta_b, covs, log pseudo-likelihood)`` of one chain (:func:`chain_draws`) as arrays
    (a chain's dict), with each draw's log posterior: the log pseudo-likelihood plus the log prior, the latter
    computed here for every draw at once (:meth:`bayesvm.engines.joint.LogPrior.of_draws`)."""
    out = {
        "theta_d": np.stack([r[0] for r in records]),
        "theta_b": np.stack([r[1] for r in records]),
        "components": [np.stack([r[2][c] for r in records]) for c in range(len(problem.components))],
    }
    prior = LogPrior(problem).of_draws(out["theta_d"], out["theta_b"], out["components"])
    out["log_posterior"] = np.array([r[3] for r in records]) + prior
    return out


def sparse_coefficient_draw(
    problem: VBProblem,
    omega: np.ndarray,
    precisions: list[np.ndarray],
    rng: np.random.Generator,
    margins: np.ndarray | None = None,
    rhs: np.ndarray | None = None,
) -> np.ndarray:
    """``theta | w, Sigma`` on the sparse path (Luts & Ormerod 2014, App. A, step 1): ``N(P^-1 C'y(1 + w), P^-1)``
    with ``P = C' diag(w) C + prior``, by elimination onto a dense Schur complement where the problem's layout
    allows it (crossed factors), else by a sparse Cholesky factor (``margins``: :func:`linear_terms`; ``rhs``: the
    rows' linear terms as given)."""
    D = problem.D
    rhs = linear_terms(problem.y, omega, margins) if rhs is None else rhs
    prior = sparse_prior(problem, precisions)
    if problem.elimination is not None:
        return schur_sparse_draw(problem.elimination, omega, rhs, prior, rng)
    factor = SparseCholesky.factor((D.T @ sp.diags(omega) @ D + prior).tocsc())
    return factor.solve(D.T @ rhs) + factor.sample_deviation(rng, 1)[0]


def dense_coefficient_draw(
    D: np.ndarray,
    omega: np.ndarray,
    y: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    prior_b: np.ndarray | None,
    rng: np.random.Generator,
    stats: RowStatistics | None,
    margins: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``theta | w, Sigma`` on the dense path (Luts & Ormerod 2014, App. A, step 1) by
    :func:`linalg.gaussian_draw`; for a random intercept whose level sums the compiled row pass gave, by
    :func:`compiled_rows.intercept_draw` on the same standard normals (the same draw, without the general path's
    temporaries: about a fifth of an iteration on toenail)."""
    if stats is not None and stats.levels is not None and blocked is not None and blocked.K == 1:
        # (the level sums come only from the compiled row pass: numba is there)
        q, J = D.shape[1], blocked.n_levels
        eps_d, eps_b = rng.standard_normal(q), rng.standard_normal((J, 1))
        theta_d, theta_b = np.empty(q), np.empty((J, 1))
        levels = stats.levels
        drawn = compiled_rows.intercept_draw(
            stats.gram, stats.product, prior_dd, levels.blocks, levels.cross, levels.rhs, float(prior_b[0, 0]),
            eps_d, eps_b, theta_d, theta_b,
        )  # fmt: skip
        if drawn:
            return theta_d, theta_b
    return gaussian_draw(D, omega, linear_terms(y, omega, margins), prior_dd, blocked, prior_b, rng, stats=stats)


def chain_draws(
    problem: VBProblem,
    tune: int,
    thin: int,
    seed: np.random.SeedSequence,
    interweave: bool = True,
    tick=None,
    whole: bool = True,
):
    """One chain, as a generator: after ``tune`` iterations it yields ``(theta_d, theta_b, covs, log
    pseudo-likelihood)`` every ``thin`` iterations (:func:`stack_draws` adds the log prior), for as long as it is
    asked (``draws="auto"`` keeps asking until the chains agree).  ``tick()`` is called once per iteration (a
    progress bar).

    Each iteration: ``theta | w, Sigma`` (Luts & Ormerod 2014, App. A, step 1); with ``interweave``, with ``w``
    integrated out, the random intercepts' effects given the rest (on levels of few rows; collapsed_variance), one
    rescaling move of ``(theta, Sigma)`` per coordinate of every random-effect term, one global rescaling and one
    update of each fixed-effect coefficient given the rest (:mod:`bayesvm.engines.linear.interweave`; False gives the
    paper's sampler, kept for comparison) and then each random intercept's variance with its random effects
    integrated out, and they given it (:mod:`bayesvm.engines.linear.collapsed_variance`); ``w | theta``
    (step 2); ``Sigma | theta`` (step 3).  With ``interweave`` the draw of each random-effect term's variance in step
    3 is over-relaxed after tuning (:mod:`bayesvm.engines.overrelax`, ``alpha = RELAXATION``).
    """
    rng = np.random.default_rng(seed)
    _, problem = sorted_by_level(problem)
    margins = problem.weights  # class weights: margins on the scaled design, the paper's sampler (module docstring)
    if margins is not None:
        problem, interweave, whole = scaled_by_weights(problem), False, False
    y, D, blocked = problem.y, problem.D, problem.blocked
    sparse = sp.issparse(D)
    # over-dispersed start: omega and the components' precisions jittered around 1
    omega = np.exp(rng.normal(0.0, 0.5, y.size))
    covs = [np.eye(c.k) * np.exp(rng.normal(0.0, 0.5)) for c in problem.components]
    aux: list = [None] * len(problem.components)  # half-t auxiliary variables
    latent = LatentDraws(rng, y.size, split=level_boundary_split(None if sparse else blocked, y.size))
    rows = None if sparse else DenseRows(D, y, blocked, latent, margins=margins)
    stats = None if sparse else row_statistics(D, omega, linear_terms(y, omega, margins), blocked)
    mover = ScaleMoves(problem) if interweave and problem.components else None
    fixed_diagonal = np.diag(problem.fixed_precision).astype(float)  # (the prior precision's fixed part, copied)
    collapsed = CollapsedVariance(problem, tune) if mover is not None else None
    if collapsed is not None and not collapsed.has_moves:
        collapsed = None
    fused = FusedIteration(problem, rows, mover, collapsed, MARGIN_FLOOR, enabled=whole)
    step, refused = 0, False
    # (FusedIteration.run's first call takes the state before its first theta | w, which overwrites it)
    theta_d = np.zeros(D.shape[1])
    theta_b = np.zeros((blocked.n_levels, blocked.K)) if blocked is not None else np.zeros((0, 0))
    while True:
        # the over-relaxed variance draws (overrelax) once tuning is over: the schedule of the collapsed step is
        # settled during tuning from the lag-1 autocorrelation of the variance's ordinary draws, which over-relaxing
        # would hide
        relaxation = RELAXATION if interweave and step >= tune else 0.0
        if fused.ready and not refused and stats.levels is not None:
            # whole iterations in one compiled call where nothing else is due (fused_iteration.FusedIteration.run)
            count = collapsed.quiet_steps(step, min(BATCH, tune - step) if step < tune else BATCH)
            if count:
                batch = fused.run(count, theta_d, theta_b, covs, aux, stats, rng, relaxation)
                theta_d, theta_b, covs, aux, stats, omega = (batch.theta_d, batch.theta_b, batch.covs, batch.aux,
                                                             batch.stats, batch.omega)  # fmt: skip
                refused = batch.refused
                yield from _batch_draws(batch, step, tune, thin, collapsed, tick)
                step += batch.completed
                if not refused:
                    continue
        if sparse:
            theta_d, theta_b, covs, loglik, omega = _sparse_iteration(
                problem, margins, omega, covs, aux, rng, mover, collapsed, latent, step
            )
        else:
            if refused:  # the compiled run's theta | w refused after drawing its normals: the fallback below
                drawn, refused = None, False
            else:
                drawn = fused.coefficient_draw(covs, stats, rng) if fused.ready and stats.levels is not None else None
            if drawn is not None:  # the prior precisions and the draw in one compiled call (fused_iteration)
                theta_d, theta_b = drawn
            else:
                prior_dd, prior_b = prior_precisions(problem, [spd_inverse(c) for c in covs], fixed_diagonal)
                if fused.ready and stats.levels is not None:  # (its normals drawn: the compiled draw's fallback)
                    theta_d, theta_b = gaussian_draw(D, omega, linear_terms(y, omega, margins), prior_dd, blocked,
                                                     prior_b, rng, stats=stats)  # fmt: skip
                else:
                    theta_d, theta_b = dense_coefficient_draw(
                        D, omega, y, prior_dd, blocked, prior_b, rng, stats, margins
                    )
            due = collapsed.due(step) if collapsed is not None else []
            if fused.ready and not due:  # the rest of the iteration in one compiled call (fused_iteration)
                batch = fused.run(1, theta_d, theta_b, covs, aux, stats, rng, relaxation, drawn_first=True)
                theta_d, theta_b, covs, aux, stats, omega = (batch.theta_d, batch.theta_b, batch.covs, batch.aux,
                                                             batch.stats, batch.omega)  # fmt: skip
                yield from _batch_draws(batch, step, tune, thin, collapsed, tick)
                step += 1
                continue
            else:
                if mover is not None:  # before w | theta, which it needs (interweave module)
                    f = rows.predictor(theta_d, theta_b)
                    if collapsed is not None:  # u | beta, Sigma with w integrated out (collapsed_variance)
                        collapsed.level_draws(theta_d, theta_b, covs, f, rng)
                    theta_d, theta_b, covs, f = mover(theta_d, theta_b, covs, aux, f, rng)
                    if collapsed is not None:  # w integrated out too (collapsed_variance)
                        theta_d, theta_b, covs, _ = collapsed(theta_d, theta_b, covs, aux, f, rng, step, due)
                loglik, omega, stats = rows(theta_d, theta_b)  # omega | theta, and the next draw's row sums
        covs = draw_components(
            problem.components, [component_values(c, theta_d, theta_b) for c in problem.components], rng, aux, covs,
            relaxation,
        )  # fmt: skip
        if tick is not None:
            tick()
        kept = step - tune
        if kept >= 0 and kept % thin == 0:
            yield (
                np.array(theta_d, copy=True),
                np.array(theta_b, copy=True),
                [np.array(c, copy=True) for c in covs],
                loglik,
            )
        step += 1


def _sparse_iteration(problem, margins, omega, covs, aux, rng, mover, collapsed, latent, step: int):
    """Steps 1 and 2 of an iteration on the sparse path (:func:`chain_draws`; ``margins``: the class weights of the
    rows before scaling, None without): ``theta | w, Sigma``, the moves (with ``interweave``) and ``w | theta``;
    returns ``(theta_d, theta_b, covs, log pseudo-likelihood, omega)``."""
    D, y = problem.D, problem.y
    precisions = [spd_inverse(c) for c in covs]
    theta_d = sparse_coefficient_draw(problem, omega, precisions, rng, margins)
    theta_b = np.zeros((0, 0))
    if mover is not None:  # before w | theta, which it needs (interweave module)
        f = D @ theta_d
        if collapsed is not None:  # u | beta, Sigma with w integrated out (collapsed_variance)
            collapsed.level_draws(theta_d, theta_b, covs, f, rng)
        theta_d, theta_b, covs, f = mover(theta_d, theta_b, covs, aux, f, rng)
        if collapsed is not None:  # w integrated out too (collapsed_variance)
            theta_d, theta_b, covs, _ = collapsed(theta_d, theta_b, covs, aux, f, rng, step)
    margin = row_margins(margins, y, D @ theta_d)
    loglik = -2.0 * float(np.sum(np.maximum(margin, 0.0)))
    return theta_d, theta_b, covs, loglik, latent(np.maximum(np.abs(margin), MARGIN_FLOOR))


def _batch_draws(batch, step: int, tune: int, thin: int, collapsed: CollapsedVariance, tick):
    """The kept draws of a compiled run of iterations (:meth:`FusedIteration.run`) whose first is iteration ``step``,
    as :func:`chain_draws` yields them, with each iteration's tuning record of the collapsed step and progress tick."""
    J = batch.theta_b.shape[0]
    for i in range(batch.completed):
        collapsed.record(step + i, [np.array([[v]]) for v in batch.moved[i]])
        if tick is not None:
            tick()
        kept = step + i - tune
        if kept >= 0 and kept % thin == 0:
            covs = [np.array([[v]]) for v in batch.variances[i]]
            yield batch.draws_d[i].copy(), batch.draws_b[i].reshape(J, 1).copy(), covs, float(batch.loglik[i])


def _default_monitor(problem: VBProblem):
    """The quantities ``draws="auto"`` watches when the caller names none: the coefficients outside every
    variance component (the fixed effects) and the SDs of every component."""
    in_component = np.zeros(problem.D.shape[1], dtype=bool)
    for comp in problem.components:
        if not comp.blocked:
            in_component[comp.index.ravel()] = True
    keep = np.flatnonzero(~in_component)

    def monitor(theta_d: np.ndarray, components: list[np.ndarray]) -> np.ndarray:
        parts = [theta_d[..., keep]]
        parts += [np.sqrt(np.diagonal(c, axis1=-2, axis2=-1)) for c in components]
        return np.concatenate(parts, axis=-1)

    return monitor


def sample_until_converged(
    problem: VBProblem,
    tune: int,
    thin: int,
    chains: int,
    seed,
    progress: bool,
    monitor=None,
    interweave: bool = True,
    max_draws: int | None = None,
    max_seconds: float | None = None,
) -> tuple[list[dict], str]:
    """``draws="auto"`` for this sampler: :func:`run_until_converged` on its chains (:func:`chain_draws`), watching
    ``monitor(theta_d, components)`` (``(chains, draws, m)``; default: the fixed effects and the components'
    SDs); returns the chains' dicts and the stopping reason."""
    monitor = monitor or _default_monitor(problem)
    seeds = np.random.SeedSequence(seed).spawn(chains)
    whole = _whole_iterations_at_hand()  # (as sample_gibbs: the same draws as a fixed-length run of the seed)
    streams = [chain_draws(problem, tune, thin, s, interweave, whole=whole) for s in seeds]
    n_components = len(problem.components)

    def watched(records: list[list]) -> np.ndarray:
        theta_d = np.stack([np.stack([r[0] for r in kept]) for kept in records])
        comps = [np.stack([np.stack([r[2][c] for r in kept]) for kept in records]) for c in range(n_components)]
        return monitor(theta_d, comps)

    with blas_threads(problem.D.shape[1], problem.n):
        records, reason = run_until_converged(streams, watched, progress, max_draws, max_seconds)
    return [stack_draws(kept, problem) for kept in records], reason


def sample_gibbs(
    problem: VBProblem,
    draws: int = 1000,
    tune: int = TUNE,
    chains: int = 4,
    thin: int = 1,
    seed: int | None = None,
    cores: int = 1,
    progress: bool = True,
    _interweave: bool = True,
    monitor=None,
) -> GibbsResult:
    """Run ``chains`` Gibbs chains; in parallel processes when ``cores > 1``.  ``_interweave=False`` runs the
    paper's sampler without the interweaving moves (for the mixing benchmark's comparison).

    ``draws="auto"`` samples until every quantity of ``monitor`` (default: the fixed effects and the
    components' SDs) has R-hat <= 1.01 and bulk ESS >= 400, in batches, the chains side by side in this
    process, up to :data:`bayesvm.engines.gibbs_driver.AUTO_MAX_DRAWS` draws per chain or ``AUTO_MAX_SECONDS`` (:func:`sample_until_converged`).
    """
    start = time.perf_counter()
    if draws == "auto":
        runs, stopping = sample_until_converged(
            problem, tune, thin, chains, seed, progress, monitor=monitor, interweave=_interweave
        )
        return gibbs_result(runs, len(problem.components), start, tune, thin, seed, stopping)
    size = problem.D.shape[1] + (0 if problem.blocked is None else problem.blocked.n_levels * problem.blocked.K)
    size += sum(c.k * c.k for c in problem.components)
    check_memory(
        8.0 * chains * draws * size * 2,
        f"storing {chains} x {draws} draws of {size} parameters",
        "use fewer draws, thin=k, or method='vb'",
    )
    whole = _whole_iterations_at_hand()
    chain = partial(_run_chain, interweave=_interweave, whole=whole)
    warm_up = partial(_load_compiled, chain, problem) if compiled_rows.available() else None
    runs = run_chains(chain, problem, draws, tune, thin, chains, seed, cores, progress, warm_up)
    if not whole and _interweave:
        _compile_whole_iterations_in_background(problem)
    return gibbs_result(runs, len(problem.components), start, tune, thin, seed)


def _whole_iterations_at_hand() -> bool:
    """Whether the chains use the compiled whole iterations (:mod:`.fused_iteration`): where numba has them on disk
    when this process first asks, and from then on in this process (so that a seed gives the same draws in every fit
    of a process).  A process that finds them missing (the first after install) compiles only the separate steps
    (about half the compiling; the same chain to rounding) and says once that it is compiling; the whole iterations
    are then compiled in the background (:func:`_compile_whole_iterations_in_background`) for later processes."""
    if not compiled_rows.available():
        return False
    if not _decided:
        if not compiled.on_disk(compiled_rows.row_pass):
            compiled.say_once(
                "gibbs",
                "compiling the Gibbs sampler for this machine; this happens once (numba keeps the compiled code on "
                "disk for later fits)",
            )
        _decided.append(compiled.on_disk(fused_iteration.fused_chain))
    return _decided[0]


_decided: list[bool] = []


_background: list = []


def _compile_whole_iterations_in_background(problem: VBProblem) -> None:
    """Compile the whole iterations for later processes, once per process: a detached, low-priority interpreter
    (:mod:`bayesvm.engines.linear.compile_ahead`) makes two throwaway iterations of a chain with them on a small
    problem of the same layout, so that numba writes them to its disk cache; it goes on after this process ends, and
    only one runs at a time on a machine.  A short-lived launcher starts it and exits at once, so this process holds
    no child it would have to wait for (or be warned about at exit)."""
    import subprocess

    if _background:
        return
    _background.append(True)
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    launcher = (
        "import subprocess, sys; subprocess.Popen([sys.executable, '-m', 'bayesvm.engines.linear.compile_ahead'], "
        "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)"
    )
    try:
        subprocess.run([sys.executable, "-c", launcher], timeout=LAUNCH_SECONDS, check=False, **quiet)
    except (OSError, subprocess.TimeoutExpired):  # no process to be had: the next process compiles them instead
        pass


#: Longest wait for the launcher of the background compile (it starts one process and exits).
LAUNCH_SECONDS = 30.0


def load_whole_iterations(problem: VBProblem) -> None:
    """Load (compiling on the first call after install) the compiled chain with whole iterations that ``problem``'s
    structure runs, by two throwaway iterations (:func:`_load_compiled`); the compile-ahead process calls it."""
    _load_compiled(partial(_run_chain, whole=True), problem)


def _load_compiled(chain, problem: VBProblem) -> None:
    """Two throwaway iterations of ``chain`` (its own seed; no chain's random numbers; the second, with no collapsed
    step due, runs the compiled whole iterations of ``fused_iteration`` where the problem has their structure), so
    that numba loads the compiled functions the chains call into this process before the chains' workers fork from
    it; otherwise each worker loads them again."""
    chain(problem, 2, 0, 1, np.random.SeedSequence(0), False)
