"""The driver every Gibbs engine shares: its chains, when to stop them, and the draws they return.

A Gibbs engine (:mod:`bayesvm.engines.linear.gibbs`, :mod:`bayesvm.engines.selection.gibbs`,
:mod:`bayesvm.engines.imputation.joint_model`) supplies one chain, ``chain(problem, draws, tune, thin, seed_sequence,
show) -> dict`` of stacked draws, or a generator of single draws; this module owns the rest, the same for every engine
and every model:

* :func:`run_chains`: ``chains`` independent chains from ``SeedSequence(seed).spawn(chains)``, in worker processes
  when ``cores > 1`` (the same draws as serially), with the progress bar;
* :func:`run_until_converged`: ``draws="auto"``, batches of :data:`AUTO_BATCH` draws per chain until every watched
  quantity has R-hat <= :data:`AUTO_RHAT` and bulk ESS >= :data:`AUTO_ESS` (Vehtari et al. 2021's rank-normalised
  diagnostics, :func:`bayesvm.engines.chain_checks.rhat_and_ess`), or a cap;
* :func:`kept_draw_index`: which iterations are stored (after ``tune``, every ``thin``-th);
* :class:`GibbsResult` and :func:`gibbs_result`: the draws as the engine-output contract gives them to the results.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..model.output import EngineOutput
from .chain_checks import rhat_and_ess
from .workers import run_in_processes

TUNE = 1000
"""Default burn-in of the linear and imputation samplers and ``bsvm``'s for every Gibbs fit but the selection
priors' (:data:`bayesvm.engines.selection.gibbs.TUNE`; :func:`bayesvm.control.default_tune`)."""


@dataclass
class GibbsResult(EngineOutput):
    """Stored draws (after tuning and thinning).

    Attributes
    ----------
    theta_d
        ``(chains, draws, q)``.
    theta_b
        ``(chains, draws, J, K)`` (``J = K = 0`` without a blocked factor).
    components
        One ``(chains, draws, k, k)`` array per variance component (variance or covariance matrix).
    log_posterior
        ``(chains, draws)``: log pseudo-posterior ``-2 sum_i (1 - y_i f_i)_+ + log prior`` with every
        constant of the prior.
    """

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): draws (chains x draws).
    posterior_form: ClassVar[str] = "sampled"

    theta_d: np.ndarray
    theta_b: np.ndarray
    components: list[np.ndarray]
    log_posterior: np.ndarray
    elapsed: float
    tune: int
    thin: int
    seed: int | None
    stopping: str | None = None  # draws="auto": why sampling stopped

    @property
    def chains(self) -> int:
        return self.theta_d.shape[0]

    @property
    def draws(self) -> int:
        return self.theta_d.shape[1]


#: ``draws="auto"``: draws per chain between checks, the targets (every monitored quantity) and the caps.
AUTO_BATCH = 250
AUTO_RHAT, AUTO_ESS = 1.01, 400
AUTO_MAX_DRAWS = 20_000
AUTO_MAX_SECONDS = 600.0


def run_until_converged(
    streams: list, watched, progress: bool, max_draws: int | None = None, max_seconds: float | None = None
) -> tuple[list[list], str]:
    """``draws="auto"`` for any sampler: take ``AUTO_BATCH`` draws from each chain's generator in turn (the chains
    side by side in this process) until every quantity ``watched(records)`` returns (``(chains, draws, m)``) has
    R-hat <= ``AUTO_RHAT`` and bulk ESS >= ``AUTO_ESS``, or ``max_draws`` per chain or ``max_seconds`` are reached
    (default ``AUTO_MAX_DRAWS``, ``AUTO_MAX_SECONDS``); returns each chain's kept records and the stopping reason.
    The progress bar (on a terminal) shows the largest R-hat and the smallest ESS as it goes."""
    max_draws = AUTO_MAX_DRAWS if max_draws is None else max_draws
    max_seconds = AUTO_MAX_SECONDS if max_seconds is None else max_seconds
    chains = len(streams)
    records: list[list] = [[] for _ in streams]
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"Gibbs ({chains} chains, until R-hat <= {AUTO_RHAT} and ESS >= {AUTO_ESS})", leave=False)
    start = time.perf_counter()
    try:
        while True:
            for stream, kept in zip(streams, records):
                kept.extend(next(stream) for _ in range(AUTO_BATCH))
            n = len(records[0])
            rhat, ess = rhat_and_ess(watched(records))
            if bar is not None:
                bar.update(AUTO_BATCH * chains)
                bar.set_postfix({"draws/chain": n, "max R-hat": f"{rhat:.3f}", "min ESS": f"{ess:.0f}"})
            elapsed = time.perf_counter() - start
            if rhat <= AUTO_RHAT and ess >= AUTO_ESS:
                reason = f"converged after {n} draws per chain: max R-hat {rhat:.3f}, min bulk ESS {ess:.0f}"
                break
            if n >= max_draws or elapsed >= max_seconds:
                cap = f"{max_draws} draws per chain" if n >= max_draws else f"{max_seconds:.0f} s"
                reason = (
                    f"stopped at the cap of {cap} ({n} draws per chain): max R-hat {rhat:.3f}, min bulk ESS {ess:.0f}"
                )
                break
    finally:
        for stream in streams:
            stream.close()
        if bar is not None:
            bar.close()
    return records, reason


def run_chains(
    chain, problem, draws: int, tune: int, thin: int, chains: int, seed, cores: int, progress: bool, warm_up=None
):
    """``chain(problem, draws, tune, thin, seed_sequence, show)`` for each of ``chains`` independent seeds
    spawned from ``SeedSequence(seed)``: in ``min(cores, chains)`` processes at a time when ``cores > 1`` (the
    same draws as serially; :func:`bayesvm.engines.workers.run_in_processes`: on Ctrl-C or SIGTERM the workers end
    too), with a tqdm bar on a terminal.  Shared by every Gibbs engine.

    ``warm_up()``, where given, runs in this process before the workers are forked (not where they would be
    spawned): what it loads (numba's compiled functions, from its disk cache on first use) every worker then
    inherits instead of loading it again.
    """
    seeds = np.random.SeedSequence(seed).spawn(chains)
    show = progress and sys.stderr.isatty()
    if cores <= 1 or chains <= 1:
        return [chain(problem, draws, tune, thin, s, show) for s in seeds]
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=chains, desc=f"Gibbs ({chains} chains)", leave=False)
    try:
        return run_in_processes(
            [(chain, (problem, draws, tune, thin, s, False)) for s in seeds],
            cores,
            "Gibbs chain",
            warm_up=warm_up,
            on_result=None if bar is None else lambda index: bar.update(),
        )
    finally:
        if bar is not None:
            bar.close()


def kept_draw_index(tune: int, draws: int, thin: int) -> np.ndarray:
    """Per iteration of a chain of ``tune + draws * thin``: the index of the stored draw, or -1 (tuning, thinning)."""
    kept = np.arange(tune + draws * thin) - tune
    return np.where((kept >= 0) & (kept % thin == 0), kept // thin, -1)


def gibbs_result(
    runs: list[dict], n_components: int, start: float, tune: int, thin: int, seed, stopping=None
) -> GibbsResult:
    """The chains' stacked draws (each run a dict of ``theta_d``, ``theta_b``, ``components``, ``log_posterior``) as one
    :class:`GibbsResult`; ``start`` is the ``time.perf_counter()`` at which sampling began."""
    return GibbsResult(
        theta_d=np.stack([r["theta_d"] for r in runs]),
        theta_b=np.stack([r["theta_b"] for r in runs]),
        components=[np.stack([r["components"][c] for r in runs]) for c in range(n_components)],
        log_posterior=np.stack([r["log_posterior"] for r in runs]),
        elapsed=time.perf_counter() - start,
        tune=tune,
        thin=thin,
        seed=seed,
        stopping=stopping,
    )
