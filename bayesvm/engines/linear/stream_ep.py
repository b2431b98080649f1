"""The accurate fit (EP for ``theta`` given the variance components, integrated over them) on out-of-core data.

:func:`bayesvm.engines.linear.ep.integrate_ep` runs unchanged on :class:`StreamedRows`; what differs is where the
rows and EP's per-row sites live.  Each partition keeps its rows' sites ``(tau_i, nu_i)`` beside its rows, as a
persisted object on the worker that holds the partition (``dask.distributed``; in the process without a cluster),
never gathered on the driver.  A sweep of parallel EP (:func:`bayesvm.engines.linear.ep.run_ep`) is one pass: each
partition, given the broadcast ``q(theta)``,

1. computes its rows' predictor moments ``mu_i = E[f_i]``, ``s_i = Var(f_i)`` (the blocked factor's levels through
   the broadcast per-level gains and block inverses, as :mod:`bayesvm.engines.linear.stream_vb`),
2. the cavities ``N(m_i, v_i)`` (``1/v_i = 1/s_i - tau_i``, ``m_i/v_i = mu_i/s_i - nu_i``), the tilted moments of
   the hinge site (closed form, :func:`bayesvm.engines.hinge_sites.tilted_moments`) and the damped sites that match
   them (:func:`bayesvm.engines.hinge_sites.damped_sites`; the three in one pass over the rows,
   :func:`bayesvm.engines.hinge_sites.updated_sites`),
3. and returns the sums of its new sites: ``D' diag(tau) D``, ``D' nu`` and, per level of the blocked factor,
   ``sum tau z z'``, ``sum tau z d'`` and ``sum z nu``, from which the driver solves the next ``q(theta)`` with
   precision ``C' diag(tau) C + Lambda`` by the elimination the in-memory fit uses
   (:func:`bayesvm.linalg.dense.gaussian_from_statistics`).

These are exactly the in-memory sweeps, up to the order of the additions.  The last pass returns each partition's
terms of EP's ``log Z`` (Rasmussen & Williams 2006, eq. 3.65; :func:`bayesvm.engines.hinge_sites.site_log_evidence`),
which are sums over rows.  Memory: ``O(n)`` on the workers per node kept as a warm start (:data:`KEPT_SITES` of
them), ``O(J K p)`` on the driver.

The nodes' importance-sampled evidence (:mod:`bayesvm.engines.linear.node_evidence`) integrates each level's random
intercept over that level's rows in closed form, so the rows are first shuffled by the blocked factor's grouping
columns (each level's rows then lie in one partition, :meth:`bayesvm.outofcore.StreamedData.passes`); each
partition returns ``sum_j log I_j`` over its own levels for every draw, and the driver adds them.  A correlated
term's levels, integrated in memory by importance sampling from each level's conditional, are not integrated out of
core (nor those of several terms of one factor): the fit keeps EP's weights and ``summary()`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import refuse
from ...linalg.dense import GaussianPosterior, blas_threads, gaussian_from_natural, gaussian_from_statistics
from ...linalg.row_sums import RowStatistics, weighted_gram_and_product
from ...model.problems import VBProblem
from ..augmentation import inverse_a_mean, row_terms, update_chi
from ..components import prior_precisions
from ..hinge_sites import extrapolated_sites, final_cavities, site_log_evidence, tilted_moments, updated_sites
from .ep import EPState, integrate_ep, prior_log_det, scope_refusal
from .node_evidence import draws_log_integrals, node_evidence
from .stream_vb import added_by_level, fit_streamed_vb, own_levels, weighted_level_sums
from .vb import VBResult

#: Converged nodes whose sites stay on the workers as warm starts for their neighbours (each costs two doubles per
#: row): the nearest of the last few is as good a start as the nearest of all.
KEPT_SITES = 8


@dataclass
class PartitionSites:
    """One partition's EP sites and its rows' predictor means of the sweep that made them (None: not yet swept)."""

    tau: np.ndarray
    nu: np.ndarray
    mean_f: np.ndarray | None = None


@dataclass
class StreamedSites:
    """The sites of every partition (persisted handles, one per partition) and their sums on the driver."""

    parts: list
    stats: RowStatistics


def _rows_and_factor(rows) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(D, codes, values)`` of a partition's engine rows (``D`` alone without a blocked factor)."""
    return rows if isinstance(rows, tuple) else (rows, None, None)


def _site_sums(rows, tau: np.ndarray, nu: np.ndarray) -> tuple:
    """``(D' diag(tau) D, D' nu, levels, blocks, cross, rhs)``: the sums ``q(theta)`` is solved from."""
    D, codes, values = _rows_and_factor(rows)
    if codes is None:  # (no blocked factor: the level sums are not asked for)
        return weighted_gram_and_product(D, tau, nu)
    return weighted_level_sums((D, codes, values), tau, nu)


def _moments(rows, theta: GaussianPosterior) -> tuple[np.ndarray, np.ndarray]:
    D, codes, values = _rows_and_factor(rows)
    return theta.predictor(D, codes, values)


def start_sites(rows, y: np.ndarray, _state, theta: GaussianPosterior) -> tuple[PartitionSites, tuple]:
    """Mean-field VB's sites at its ``q(theta)``: ``chi_i = max(E[(1 - y_i f_i)^2], floor)`` (Alg. 2 step 3),
    ``tau_i = chi_i^(-1/2)``, ``nu_i = y_i (1 + tau_i)`` (step 2), and their sums."""
    if y.size == 0:
        tau = nu = np.zeros(0)
    else:
        mean_f, var_f = _moments(rows, theta)
        tau, nu = row_terms(y, inverse_a_mean(update_chi((1.0 - y * mean_f) ** 2 + var_f)), None)
    return PartitionSites(tau, nu), _site_sums(rows, tau, nu)


def ep_sweep(rows, y: np.ndarray, sites: PartitionSites, theta: GaussianPosterior, damping: float, first: bool):
    """One partition's part of a parallel EP sweep (module docstring, steps 1-3): ``(new sites, (sums, largest
    change of a predictor mean since the last sweep, largest predictor mean, finite))``; ``first``: no last sweep of
    this run to compare with (the change is infinite)."""
    if y.size == 0:
        return sites, (_site_sums(rows, sites.tau, sites.nu), 0.0, 0.0, True)
    mean_f, var_f = _moments(rows, theta)
    if not np.all(np.isfinite(mean_f)):
        return sites, (None, np.inf, np.inf, False)
    tau, nu = updated_sites(y, mean_f, var_f, sites.tau, sites.nu, None, damping)
    change = np.inf if first or sites.mean_f is None else float(np.max(np.abs(mean_f - sites.mean_f)))
    return PartitionSites(tau, nu, mean_f), (_site_sums(rows, tau, nu), change, float(np.max(np.abs(mean_f))), True)


def extrapolated_partition_sites(rows, y: np.ndarray, sites: list, coefficients: list) -> tuple[list, list]:
    """A partition's sites at several new nodes, each extrapolated from its sites at converged nodes
    (``sites[b]``, ``coefficients[b]``; :func:`bayesvm.engines.hinge_sites.extrapolated_sites`): ``(the new
    sites, their sums)``."""
    new = [extrapolated_sites([(s.tau, s.nu) for s in mine], c) for mine, c in zip(sites, coefficients)]
    return [PartitionSites(tau, nu) for tau, nu in new], [_site_sums(rows, tau, nu) for tau, nu in new]


def ep_sweeps(rows, y: np.ndarray, sites: list, thetas: list, damping: float, firsts: list) -> tuple[list, list]:
    """:func:`ep_sweep` of several nodes: ``(their new sites, their results)``."""
    pairs = [ep_sweep(rows, y, s, theta, damping, first) for s, theta, first in zip(sites, thetas, firsts)]
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def evidence_terms_many(rows, y: np.ndarray, sites: list, thetas: list) -> list[float]:
    """:func:`evidence_terms` of several nodes."""
    return [evidence_terms(rows, y, s, theta) for s, theta in zip(sites, thetas)]


def evidence_terms(rows, y: np.ndarray, sites: PartitionSites, theta: GaussianPosterior) -> float:
    """The partition's terms of EP's ``log Z`` at convergence (:func:`bayesvm.engines.hinge_sites.site_log_evidence`)."""
    if y.size == 0:
        return 0.0
    mean_f, var_f = _moments(rows, theta)
    m, v = final_cavities(mean_f, var_f, sites.tau, sites.nu)
    log_z, _, _ = tilted_moments(y, m, v)
    return site_log_evidence(sites.tau, sites.nu, mean_f, log_z, m, v)


def level_log_integrals(rows, y: np.ndarray, theta_d: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """``sum_j log I_j`` over the partition's own levels (each level's rows all here) for draws ``theta_d (S, q)``
    and ``sigma2 (S,)`` (:func:`bayesvm.engines.linear.node_evidence.draws_log_integrals`)."""
    if y.size == 0:
        return np.zeros(theta_d.shape[0])
    D, codes, values = _rows_and_factor(rows)
    levels, local = own_levels(codes)
    return draws_log_integrals(y, D, theta_d, values[:, 0], local, sigma2, levels.size)


class StreamedRows:
    """The rows of out-of-core data for :func:`bayesvm.engines.linear.ep.integrate_ep` (the module docstring) and
    for :class:`bayesvm.engines.linear.node_evidence.NodeEvidence`.

    ``passes`` are the data's passes over its partitions (:meth:`bayesvm.outofcore.StreamedData.passes`, each
    level's rows in one partition): ``passes.sweep(func, *args)`` gathers ``func(rows, y, *args)`` of every
    partition, ``passes.carry(func, states, *args)`` applies ``func(rows, y, state, *args) -> (state, result)`` and
    keeps the new states where the partitions are; ``n`` is the number of rows.
    """

    kept_sites = KEPT_SITES
    batched = True

    def __init__(self, problem: VBProblem, passes, n: int, tol: float = 1e-8, max_iter: int = 500) -> None:
        self.problem, self.passes, self.n = problem, passes, n
        self.tol, self.max_iter = tol, max_iter
        self.p = problem.D.shape[1]
        blocked = problem.blocked
        self.J, self.K = (0, 0) if blocked is None else (blocked.n_levels, blocked.K)

    def mean_field(self) -> VBResult:
        return fit_streamed_vb(self.problem, self.passes.sweep, tol=self.tol, max_iter=self.max_iter)

    def start_sites(self, warm: VBResult) -> StreamedSites:
        states, sums = self.passes.carry(start_sites, None, warm.theta)
        return StreamedSites(states, self._statistics(sums))

    def _statistics(self, sums: list) -> RowStatistics:
        gram, product = sum(s[0] for s in sums), sum(s[1] for s in sums)
        levels = None if self.J == 0 else added_by_level(sums, self.J, self.K, self.p, first=2)
        return RowStatistics(gram, product, levels=levels)

    def _solver(self, precisions: list[np.ndarray]):
        prior_dd, prior_b = prior_precisions(self.problem, precisions)
        if self.J == 0:
            return lambda stats: gaussian_from_natural(stats.gram + prior_dd, stats.product)
        return lambda stats: gaussian_from_statistics(stats, prior_dd, self.J, self.K, prior_b)

    def run(self, precisions: list[np.ndarray], sites: StreamedSites, **settings) -> EPState:
        """:func:`bayesvm.engines.linear.ep.run_ep` with one pass over the partitions per sweep."""
        return self.run_many([precisions], [sites], **settings)[0]

    def extrapolated(self, requests: list[tuple[list[StreamedSites], np.ndarray]]) -> list[StreamedSites]:
        """Each partition's sites extrapolated where they live, every request in one pass, as in memory."""
        count = len(requests[0][0][0].parts)  # (partitions)
        handles = [[[site.parts[k] for site in sites] for sites, _ in requests] for k in range(count)]
        states, sums = self.passes.carry(extrapolated_partition_sites, handles, [c for _, c in requests])
        return [
            StreamedSites([state[i] for state in states], self._statistics([part[i] for part in sums]))
            for i in range(len(requests))
        ]

    def run_many(
        self, precisions: list[list[np.ndarray]], sites: list[StreamedSites], max_iter: int = 200, tol: float = 1e-7,
        damping: float = 0.7,
    ) -> list[EPState]:  # fmt: skip
        """:func:`bayesvm.engines.linear.ep.run_ep` at several nodes (``precisions[b]`` from ``sites[b]``), every
        node's sweep in the same pass over the partitions; each stops by ``run_ep``'s rule (no predictor mean moved
        more than ``tol`` relative to the largest), or diverges (its sites stay those of its last finite sweep, as in
        memory), on its own.  The last pass gives every node's terms of ``log Z_EP``."""
        solvers = [self._solver(p) for p in precisions]
        sites = list(sites)
        thetas = [solve(s.stats) for solve, s in zip(solvers, sites)]
        sweeps, converged, active = [0] * len(sites), [False] * len(sites), list(range(len(sites)))
        count = len(sites[0].parts)  # (partitions)
        while active:
            for b in active:
                sweeps[b] += 1
            handles = [[sites[b].parts[k] for b in active] for k in range(count)]
            firsts = [sweeps[b] == 1 for b in active]
            states, results = self.passes.carry(ep_sweeps, handles, [thetas[b] for b in active], damping, firsts)
            still = []
            for i, b in enumerate(active):
                mine = [part[i] for part in results]
                if not all(finite for *_, finite in mine):
                    continue  # diverged: stopped, not converged
                sites[b] = StreamedSites([state[i] for state in states], self._statistics([m[0] for m in mine]))
                thetas[b] = solvers[b](sites[b].stats)
                if max(m[1] for m in mine) < tol * (1.0 + max(m[2] for m in mine)):
                    converged[b] = True
                elif sweeps[b] < max_iter:
                    still.append(b)
            active = still
        handles = [[s.parts[k] for s in sites] for k in range(count)]
        terms = self.passes.sweep_states(evidence_terms_many, handles, thetas)
        out = []
        for b, (p, site, theta) in enumerate(zip(precisions, sites, thetas)):
            log_evidence = 0.5 * prior_log_det(self.problem, p) - 0.5 * theta.logdet_precision
            log_evidence += sum(part[b] for part in terms)
            out.append(EPState(theta=theta, sites=site, log_evidence=log_evidence, n_iter=sweeps[b],
                               converged=converged[b] and bool(np.isfinite(log_evidence))))  # fmt: skip
        return out

    def chi(self, state: EPState) -> np.ndarray:
        """Out of core no per-row quantity is gathered (as in streamed mean-field VB)."""
        return np.zeros(0)

    def evidence(self, hyperparameters):
        return node_evidence(self.problem, hyperparameters, levels=self)

    def exact_log_integrals(self, theta_d: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
        return sum(self.passes.sweep(level_log_integrals, theta_d, sigma2))

    def sampled_refusal(self) -> str | None:
        return (
            "out of core, a grouping factor's random-effect vectors (a correlated term, or several terms of one factor) "
            "are not integrated level by level (in memory each level is importance-sampled from its conditional); EP's "
            "weights shrink their variances, by 10-20% on small data"
        )


def fit_streamed_accurate(
    problem: VBProblem, passes, n: int, tol: float = 1e-8, max_iter: int = 500, given=None, progress: bool = False
):
    """The accurate fit of out-of-core rows (module docstring); ``tol`` and ``max_iter`` are the mean-field start's;
    ``given``: the variance-parameter nodes of a full fit (a cross-fitting fold's refit); ``progress``: the nodes
    fitted counted on a bar (:func:`bayesvm.engines.progress.counter`)."""
    refuse(scope_refusal(problem.components))  # (the route refuses first: supports_streamed)
    with blas_threads(problem.D.shape[1]):
        rows = StreamedRows(problem, passes, n, tol, max_iter)
        return integrate_ep(problem, rows, None, 4.0, True, given, progress)
