"""Accurate VB: expectation propagation for q(beta, u | sigma^2), integrated over log sigma^2.

Mean-field VB factorises q(a) from q(beta, u) and gives the variance component its own
factor; both shrink posterior spread (the toenail random-intercept variance comes out three
times too small).  Here, instead:

1. For fixed variance components the pseudo-posterior of ``theta = (beta, u)`` is the Gaussian
   prior times the hinge sites ``t_i(f_i) = exp(-2 max(0, 1 - y_i f_i))``, a log-concave
   model where expectation propagation (Minka 2001) is accurate.  Each site gets a Gaussian
   ``exp(-tau_i f_i^2 / 2 + nu_i f_i)``, so the EP posterior has the precision
   ``C' diag(tau) C + prior`` and is solved by the same structured elimination as VB.
   Tilted moments are closed form.  With ``z = y f ~ N(a, v)`` under the cavity,

       Z = e^{2a + 2v - 2} Phi((1 - a - 2v) / sqrt v) + Phi((a - 1) / sqrt v),

   a mixture of ``N(a + 2v, v)`` truncated to ``z < 1`` and ``N(a, v)`` truncated to ``z > 1``,
   whose means and variances are the truncated-normal ones.
2. The EP marginal likelihood (Rasmussen & Williams 2006, eq. 3.65, with a general prior
   precision ``Lambda``)

       log Z_EP = log|Lambda|/2 - log|P|/2 + nu' C mu / 2
                  + sum_i [log Z_i + log(1 + v_i tau_i)/2 - (m_i/v_i + nu_i)^2 / (2 (1/v_i + tau_i)) + m_i^2 / (2 v_i)]

   times the prior of ``sigma^2`` gives ``p(log sigma^2 | y)`` up to a constant on a grid of
   ``log sigma^2`` around its mode (INLA-style, Rue, Martino & Chopin 2009); the posterior of
   ``theta`` is the weighted mixture of the per-node EP Gaussians.
3. ``Z_EP`` is not exact for hinge sites, and its error grows with the variance (toenail: 6.4 nats at the
   lattice's smallest patient variance, 12.4 at its largest), so EP's weights shrink the variance (11.7 against
   long Gibbs's 13.5).  Where the random effects sit in one blocked grouping factor, each node is reweighted by an
   importance-sampled ``p(y | phi)`` over the remaining coefficients, proposed from the node's own EP Gaussian, each
   level's random effects integrated out: in closed form for one coefficient per level
   (:mod:`bayesvm.engines.linear.node_evidence`; toenail's variance becomes 13.4), by importance sampling from the
   node's conditional of the level's vector for correlated terms (:mod:`bayesvm.engines.linear.sampled_levels`);
   the lattice grows where the new weights reach its edge.  Where the draws' effective sample size is too small to
   trust, EP's weights stay.

With several variance components (the learned penalty and random intercepts, crossed
intercepts, slopes) the hyperparameters ``phi`` are integrated in the eigen-directions of the
Hessian of ``log p(phi | y)`` at its mode ``phi*`` (``phi = phi* + A z``, ``A A' = H^{-1}``):

* up to three hyperparameters on a lattice in ``z`` (21 points for one, 9 where it is the variance of a term with
  1,000 levels or more: :func:`bayesvm.engines.hyper_grid.line_nodes`; 7 a side for two, 5 for three), each
  node weighted by ``p(phi | y)`` (a Riemann sum: accurate for smooth integrands);
* four to six on the 3-point Gauss-Hermite product rule in ``z`` (81 to 729 nodes), each node
  weighted by ``omega_GH(z) p(phi | y) / N(z; 0, I)``, exact when ``p(phi | y)`` is Gaussian in ``phi``
  and otherwise a corrected Gaussian quadrature as in INLA's grid and CCD strategies.  Where the nodes are
  reweighted by importance-sampled evidence (step 3) and their weighted mean of ``z`` moves off the rule's centre,
  the rule is re-centred on the weighted moments and evaluated again
  (:func:`bayesvm.engines.hyper_grid.recentred_rule`): three points a side cannot follow a weight that grows
  towards one edge (simulated correlated slopes: variances 10% low without it).

A single-column component has ``phi = log sigma^2``.  A correlated ``k x k`` term
(inverse-Wishart prior) has the log-Cholesky parameters of ``Sigma = L L'``: ``log L_ii`` and
``L_ij`` (``i > j``), ``k (k + 1) / 2`` of them; its density in ``phi`` is the inverse-Wishart
density times the Jacobian ``|d vech(Sigma) / d phi| = 2^k prod_i L_ii^(k - i + 2)`` (``i`` from 1).
Both the Schur path (one large blocked factor) and the sparse path (several large factors,
sparse Cholesky with a selected inverse) are supported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

import numpy as np

from ...errors import refuse
from ...linalg.dense import GaussianPosterior, blas_threads, gaussian_posterior
from ...linalg.schur import SchurSparsePosterior
from ...linalg.sparse import SparseGaussianPosterior
from ...model.output import EngineOutput
from ...model.problems import VBProblem, sorted_by_level
from ..augmentation import row_terms
from ..components import prior_precisions, sparse_prior
from ..hinge_sites import (
    ep_log_evidence,
    extrapolated_sites,
    final_cavities,
    updated_sites,
    weighted_tilted_moments,
)
from ..hyper_grid import (
    MAX_EXTENSION_STEPS,
    MAX_LATTICE_NODES,
    TAIL_MASS,
    GivenNodes,
    HyperGrid,
    extend_lattice,
    given_grid,
    integrate,
    line_nodes,
    recentred_rule,
    weighted_grid,
)
from ..hyperparameters import Hyperparameters
from ..parallel_ep import parallel_sweeps
from ..progress import counter
from . import ep_moments
from .node_evidence import MIN_ESS_FRACTION, NodeEvidence, NodeWeights, UnreliableEvidence, node_evidence
from .vb import fit_vb, sparse_posterior


class SelectedSlopes(Protocol):
    """What the mixture needs of a selection prior's slopes (met by
    :class:`bayesvm.engines.selection.ep.SlopeMarginals`, which builds on this module)."""

    #: the posterior mean of the prior's learned scale (``None`` when it is fixed)
    scale: float | None

    def carry(self, theta_d: np.ndarray, node: np.ndarray, thetas: list[GaussianPosterior]) -> np.ndarray:
        """Draws of ``q(theta)`` with each selected slope carried to its own tilted distribution."""
        ...


@dataclass
class EPState:
    """EP at one node: ``q(theta)``, the sites it was solved from (``(tau, nu)`` of every row in memory; each
    partition's persisted sites out of core, :mod:`bayesvm.engines.linear.stream_ep`), ``log Z_EP`` and the sweeps."""

    theta: GaussianPosterior
    sites: object
    log_evidence: float
    n_iter: int
    converged: bool = True

    @property
    def tau(self) -> np.ndarray:
        """The site precisions of in-memory rows."""
        return self.sites[0]

    @property
    def nu(self) -> np.ndarray:
        """The site shifts of in-memory rows."""
        return self.sites[1]


def prior_log_det(problem: VBProblem, precisions: list[np.ndarray]) -> float:
    """``log |Lambda|`` of :func:`ep_log_evidence`: the fixed precisions and each component's precision on its
    coefficients."""
    lam = problem.fixed_precision
    logdet_prior = float(np.sum(np.log(lam[lam > 0])))
    for comp, precision in zip(problem.components, precisions):
        logdet_prior += comp.n_levels * float(np.linalg.slogdet(precision)[1])
    return logdet_prior


def run_ep(
    problem: VBProblem,
    precisions: list[np.ndarray],
    tau: np.ndarray,
    nu: np.ndarray,
    max_iter: int = 200,
    tol: float = 1e-7,
    damping: float = 0.7,
) -> EPState:
    """Parallel EP for fixed component precisions (rows sorted as in ``problem``).  Each sweep needs only the rows'
    predictive moments under ``q`` (one compiled pass where the design allows, :mod:`.ep_moments`); the Gaussian
    itself is solved once, after the last sweep."""
    y = problem.y
    posterior = _posterior_solver(problem, precisions)
    moments = ep_moments.sweep_moments(problem, precisions)

    def sweep(tau, nu):
        found = None if moments is None else moments(tau, nu)
        mean_f, var_f = posterior(tau, nu)[1] if found is None else found
        if not np.all(np.isfinite(mean_f)):
            return None
        return mean_f, *updated_sites(y, mean_f, var_f, tau, nu, problem.weights, damping)

    tau, nu, sweeps, converged = parallel_sweeps(sweep, tau.copy(), nu.copy(), max_iter, tol)
    theta, (mean_f, var_f) = posterior(tau, nu)
    m, v = final_cavities(mean_f, var_f, tau, nu)
    log_z, _, _ = weighted_tilted_moments(y, m, v, problem.weights)
    logdet_prior = prior_log_det(problem, precisions)
    log_evidence = ep_log_evidence(logdet_prior, theta.logdet_precision, tau, nu, mean_f, log_z, m, v)
    converged = converged and bool(np.isfinite(log_evidence))
    return EPState(theta=theta, sites=(tau, nu), log_evidence=log_evidence, n_iter=sweeps, converged=converged)


def _posterior_solver(problem: VBProblem, precisions: list[np.ndarray]):
    """``(tau, nu) -> (q(theta), (mean f, var f))`` for the precision ``C' diag(tau) C + prior``."""
    D = problem.D
    if problem.is_sparse:
        prior = sparse_prior(problem, precisions)

        def solve_sparse(tau, nu):
            theta = sparse_posterior(problem, tau, nu, prior)
            return theta, theta.predictor(D, training=True)

        return solve_sparse
    blocked = problem.blocked
    codes = None if blocked is None else blocked.codes
    values = None if blocked is None else blocked.values
    prior_dd, prior_b = prior_precisions(problem, precisions)

    pattern = problem.row_pattern  # (None unless the dense part is wide and mostly zero)

    def solve(tau, nu):
        theta = gaussian_posterior(D, tau, nu, prior_dd, blocked, prior_b, pattern)
        return theta, theta.predictor(D, codes, values, pattern)

    return solve


@dataclass
class IntegratedResult(EngineOutput):
    """Mixture over nodes of the hyperparameters: ``weights[k]``, ``covariances[c][k]``, ``thetas[k]``.

    The nodes are ``phi = center + axes @ z`` with ``z`` on a lattice of spacing ``step``
    (``design="lattice"``; each node stands for its cell, used by the PSIS check to turn the
    mixture into a density) or on the 3-point Gauss-Hermite product grid (``design="gauss-hermite"``).
    """

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): a mixture of Gaussians over nodes of the variance parameters.
    posterior_form: ClassVar[str] = "mixture"

    nodes: np.ndarray  # (nodes, hyperparameters): phi
    covariances: list[np.ndarray]  # per component, (nodes, k, k)
    weights: np.ndarray
    thetas: list[GaussianPosterior | SparseGaussianPosterior | SchurSparsePosterior]
    node_log_posterior: np.ndarray
    chi: np.ndarray
    has_component: bool
    converged: bool
    n_iter: int
    elapsed: float
    axes: np.ndarray = None  # (hyperparameters, hyperparameters)
    step: float = 1.0
    design: str = "lattice"
    center: np.ndarray = None
    lattice: np.ndarray = None  # (nodes, hyperparameters): z of each node
    hyperparameters: Hyperparameters = None
    failed_nodes: int = 0  # nodes where EP did not converge even with strong damping (the fit is not converged)
    tails_ok: bool = True  # the mass beyond the lattice's edge is negligible (False: the integral is truncated)
    log_evidence: float = float("nan")  # log p(y), the variance parameters integrated out (from the nodes' weights)
    #: how the nodes were weighted: importance-sampled evidence or EP's (:mod:`bayesvm.engines.linear.node_evidence`)
    node_weights: NodeWeights | None = None
    #: a selection prior's slopes (:class:`bayesvm.engines.selection.ep.SlopeMarginals`; None without one)
    slopes: SelectedSlopes | None = None
    #: the PSIS correction of the coefficients applied at the fit's end (:mod:`bayesvm.results.psis_correction`; None:
    #: EP's nodes as they came)
    fixed_correction: object = None
    #: how the learned penalty's variance was integrated from the slopes' posterior
    #: (:class:`bayesvm.engines.linear.penalty_from_slopes.PenaltyFromSlopes`; None: on the lattice with the others)
    penalty_from_slopes: object = None

    @property
    def scale_estimate(self) -> tuple[str, float] | None:
        """A selection prior's learned scale averaged over the nodes (the engine-output contract)."""
        if self.slopes is None or self.slopes.scale is None:
            return None
        return "E[{s}]", float(self.slopes.scale)

    def fixed_moments(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the first ``p`` coefficients of ``theta_d`` under the mixture: ``sum_k w_k m_k`` and
        ``sum_k w_k (S_k + m_k m_k') - m m'`` (the law of total covariance over the nodes)."""
        grid = np.arange(p)
        mean = sum(w * theta.mean_d[:p] for w, theta in zip(self.weights, self.thetas))
        second = sum(
            w * (theta.cov_entries(grid[:, None], grid[None, :]) + np.outer(theta.mean_d[:p], theta.mean_d[:p]))
            for w, theta in zip(self.weights, self.thetas)
        )
        return mean, second - np.outer(mean, mean)

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """``size`` draws of the mixture: a node by its weight, then ``theta`` from that node's Gaussian;
        ``(theta_d (size, q), theta_b (size, J, K), [covariance (size, k, k) per component])``.  Under a
        selection prior each slope is then carried to its own tilted distribution (exact zeros included) by
        :meth:`bayesvm.engines.selection.ep.SlopeMarginals.carry`."""
        return self.sample_nodes(rng, size)[:3]

    def sample_nodes(self, rng: np.random.Generator, size: int):
        """:meth:`sample` and the node of each draw."""
        counts = rng.multinomial(size, self.weights)
        thetas_d, thetas_b, nodes = [], [], []
        for k, (count, theta) in enumerate(zip(counts, self.thetas)):
            if count:
                d, b = theta.sample(rng, int(count))
                thetas_d.append(d)
                thetas_b.append(b)
                nodes.append(np.full(int(count), k))
        order = rng.permutation(size)
        node = np.concatenate(nodes)[order]
        covariances = [cov[node] for cov in self.covariances]
        theta_d = np.concatenate(thetas_d)[order]
        if self.slopes is not None:
            theta_d = self.slopes.carry(theta_d, node, self.thetas)
        return theta_d, np.concatenate(thetas_b)[order], covariances, node

    @property
    def variances(self) -> np.ndarray:
        """``(nodes, components)``: the first diagonal entry of each component's covariance."""
        if not self.covariances:
            return np.zeros((self.weights.size, 0))
        return np.stack([c[:, 0, 0] for c in self.covariances], axis=1)


#: EP stops when no predictor mean moves more than this (relative) in a sweep; on the simulated
#: correlated-slope and toenail designs 1e-5 and 1e-7 give the same means, SDs and variances to four
#: digits in half the sweeps.
EP_TOL = 1e-5

MAX_HYPERPARAMETERS = 6


def scope_refusal(components) -> str | None:
    """Why the accurate fit cannot take these variance components (``None`` where it can): more variance
    hyperparameters than it integrates (:data:`MAX_HYPERPARAMETERS`)."""
    size = Hyperparameters(components).size
    if size <= MAX_HYPERPARAMETERS:
        return None
    return (
        f"vb='accurate' integrates at most {MAX_HYPERPARAMETERS} variance hyperparameters (a correlated k x k "
        f"term has k (k + 1) / 2); this model has {size}. Use vb='meanfield', method='gibbs', or write "
        "correlated terms as (1 + x || g)"
    )


def fit_accurate(
    problem: VBProblem,
    n_nodes: int | None = None,
    span: float = 4.0,
    importance_weights: bool = True,
    given: GivenNodes | None = None,
    progress: bool = False,
) -> IntegratedResult:
    """EP for ``theta`` given the variance components, integrated over them (see module docstring).

    With ``importance_weights`` (the default) the nodes are weighted by importance-sampled ``p(y | phi)`` where a
    random-intercept term integrates out in closed form (step 3 of the module docstring), else by EP's.  ``given``
    nodes of the same components (:class:`bayesvm.engines.hyper_grid.GivenNodes`) replace the search and
    the weighting: EP at each, with the given weights.  ``n_nodes``: the nodes of a one-hyperparameter line (None:
    :func:`bayesvm.engines.hyper_grid.line_nodes` of the components).  ``progress``: count the nodes fitted on
    a bar that appears once the fit has lasted a few seconds (:func:`bayesvm.engines.progress.counter`).
    """
    refuse(scope_refusal(problem.components))  # (the routes refuse first: supports_vb)
    if problem.is_sparse:  # SuperLU is single-threaded; the elimination's dense complement is not
        width = problem.elimination.q if problem.elimination is not None else 1
    else:
        width = problem.D.shape[1]
    with blas_threads(width, problem.n):
        order, problem = sorted_by_level(problem)
        rows = RowsInMemory(problem, order)
        return integrate_ep(problem, rows, n_nodes, span, importance_weights, given, progress)


class SiteRows(Protocol):
    """Where the accurate fit's rows and EP's per-row sites live: in memory (:class:`RowsInMemory`) or in the
    partitions of out-of-core data (:class:`bayesvm.engines.linear.stream_ep.StreamedRows`).  :func:`integrate_ep`
    asks only this of them."""

    #: the converged nodes whose sites are kept as warm starts for their neighbours (None: every one)
    kept_sites: int | None
    #: whether :meth:`run_many` fits several nodes at the cost of one (out of core: one pass for all); else the nodes
    #: are fitted one at a time, each warm-started from the last
    batched: bool

    def mean_field(self):
        """Mean-field VB of the rows (:class:`bayesvm.engines.linear.vb.VBResult`): the start."""
        ...

    def start_sites(self, warm) -> object:
        """Mean-field VB's sites ``tau_i = E[1/a_i]``, ``nu_i = y_i (1 + E[1/a_i])`` (Alg. 2 step 2)."""
        ...

    def run(self, precisions: list[np.ndarray], sites: object, **settings) -> EPState:
        """Parallel EP from ``sites`` for fixed component precisions (:func:`run_ep`'s ``settings``)."""
        ...

    def run_many(self, precisions: list[list[np.ndarray]], sites: list, **settings) -> list[EPState]:
        """:meth:`run` at several nodes."""
        ...

    def extrapolated(self, requests: list[tuple[list, np.ndarray]]) -> list:
        """For each ``(sites, c)`` of ``requests``, ``sites[0] + sum_k c_k (sites[k] - sites[0])``, the precisions at
        least 0 (:func:`bayesvm.engines.hinge_sites.extrapolated_sites` of every row; out of core all in one
        pass)."""
        ...

    def chi(self, state: EPState) -> np.ndarray:
        """``E[(1 - y_i f_i)^2]`` of every row under ``state.theta`` (in the data's row order; empty out of core)."""
        ...

    def evidence(self, hyperparameters) -> NodeEvidence | None:
        """The importance-sampled ``log p(y | phi)`` of the rows (step 3 of the module docstring), or None."""
        ...


class RowsInMemory:
    """The rows of an in-memory problem (sorted by level; ``order`` undoes it) and their sites as arrays."""

    kept_sites = None
    batched = False

    def __init__(self, problem: VBProblem, order: np.ndarray | None) -> None:
        self.problem, self.order = problem, order

    def mean_field(self):
        return fit_vb(self.problem)

    def start_sites(self, warm) -> tuple[np.ndarray, np.ndarray]:
        return row_terms(self.problem.y, 1.0 / np.sqrt(warm.chi), self.problem.weights)

    def run(self, precisions: list[np.ndarray], sites: tuple, **settings) -> EPState:
        return run_ep(self.problem, precisions, *sites, **settings)

    def run_many(self, precisions: list[list[np.ndarray]], sites: list, **settings) -> list[EPState]:
        return [self.run(p, s, **settings) for p, s in zip(precisions, sites)]

    def extrapolated(self, requests: list[tuple[list, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [extrapolated_sites(sites, coefficients) for sites, coefficients in requests]

    def chi(self, state: EPState) -> np.ndarray:
        return _unsort(_chi(self.problem, state), self.order)

    def evidence(self, hyperparameters) -> NodeEvidence | None:
        return node_evidence(self.problem, hyperparameters)


def integrate_ep(
    problem: VBProblem,
    rows: SiteRows,
    n_nodes: int | None,
    span: float,
    importance_weights: bool,
    given: GivenNodes | None,
    progress: bool = False,
) -> IntegratedResult:
    """The accurate fit of the module docstring on ``rows``; ``problem`` gives the prior and the components
    (``n_nodes`` None: :func:`bayesvm.engines.hyper_grid.line_nodes` of them; ``progress``: the nodes fitted
    counted on a bar, :func:`bayesvm.engines.progress.counter`)."""
    with counter(progress, "accurate VB: EP at values of the variance parameters", "nodes") as tick:
        return _integrate_ep(problem, rows, n_nodes, span, importance_weights, given, tick)


def _integrate_ep(problem, rows, n_nodes, span, importance_weights, given, tick) -> IntegratedResult:
    start = time.perf_counter()
    n_nodes = line_nodes(problem.components) if n_nodes is None else n_nodes
    warm = rows.mean_field()  # mean-field VB: the starting sites and the scale of the variances
    sites0 = rows.start_sites(warm)
    if not problem.components:
        state = rows.run([], sites0)
        chi = rows.chi(state)
        return IntegratedResult(
            np.zeros((1, 0)),
            [],
            np.ones(1),
            [state.theta],
            np.zeros(1),
            chi,
            False,
            True,
            state.n_iter,
            time.perf_counter() - start,
            log_evidence=state.log_evidence,
        )
    hyper = Hyperparameters(problem.components)
    fits = NodeFits(rows, hyper, sites0, tick)
    log_post, many = fits.log_post, (fits.log_post_many if rows.batched else None)
    if given is not None and given.components == tuple(comp.name for comp in problem.components):
        grid, evidence = given_grid(log_post, given, many), None
    else:  # the mean-field values start the search (VB shrinks variances, so the mode lies above)
        first, search = hyper.start(warm.components), hyper.start(warm.components, inflate=0.5)
        grid = integrate(log_post, first, search, n_nodes, span, many)
        evidence = rows.evidence(hyper) if importance_weights else None
    node_weights = None
    if evidence is not None:

        def state_at(phi: np.ndarray) -> EPState:
            log_post(phi)
            return fits.cache[node_key(phi)]

        try:
            grid, node_weights = _importance_weighted(grid, evidence, hyper, state_at, many)
        finally:
            evidence.release()
    nodes, keep, weights, logp = grid.nodes, grid.keep, grid.weights, grid.logp
    states = []
    for t in nodes:  # the cache holds every node; a node's key can differ in the last digit from its first
        log_post(t)  # evaluation's (phi* + axes @ z against a matrix product): log_post fills the cache where needed
        states.append(fits.cache[node_key(t)])
    chi = sum(wk * rows.chi(st) for wk, st, k in zip(weights, states, keep) if k) / weights[keep].sum()
    covs = [hyper.covariances(t) for t in nodes[keep]]
    return IntegratedResult(
        nodes=nodes[keep],
        covariances=[np.stack([c[j] for c in covs]) for j in range(len(problem.components))],
        weights=weights[keep] / weights[keep].sum(),
        thetas=[st.theta for st, k in zip(states, keep) if k],
        node_log_posterior=logp[keep],
        chi=chi,
        has_component=True,
        converged=bool(np.all(np.isfinite(logp))) and grid.tails_ok,
        n_iter=fits.n_iter,
        elapsed=time.perf_counter() - start,
        axes=grid.axes,
        step=grid.step,
        design=grid.design,
        center=grid.center,
        lattice=grid.lattice[keep],
        hyperparameters=hyper,
        failed_nodes=int(np.sum(~np.isfinite(logp))),
        tails_ok=grid.tails_ok,
        log_evidence=grid.log_evidence,
        node_weights=node_weights,
    )


def node_key(phi) -> tuple:
    """The cache key of a node ``phi`` (rounded to 12 decimals)."""
    return tuple(np.round(np.atleast_1d(np.asarray(phi, dtype=float)), 12))


class NodeFits:
    """EP at the nodes of the variance parameters, cached, for :func:`integrate_ep`.

    :meth:`log_post` is ``log p(phi | y)`` up to a constant: EP's ``log Z_EP(phi)`` plus the log prior of ``phi``.  A
    new node warm-starts from the sites of the nearest converged fits extrapolated linearly to it
    (:meth:`extrapolation`), else from the nearest one's, at the damping that last worked, and goes
    through :data:`EP_ATTEMPTS` (then from the mean-field sites) until EP converges; where it never does the node
    carries no weight and the fit is reported as not converged.  :meth:`log_post_many` fits several new nodes at once
    where the rows can (``rows.batched``: one pass over out-of-core data for all of them).
    """

    def __init__(self, rows: SiteRows, hyperparameters: Hyperparameters, start_sites: object, tick=None) -> None:
        self.rows, self.hyper, self.start_sites = rows, hyperparameters, start_sites
        self.tick = tick  # called once per node fitted (a progress bar's update), or None
        self.cache: dict[tuple, EPState] = {}
        self.schedule = 0  # the damping that last worked: neighbouring nodes start there (EP_ATTEMPTS)
        self.solved: list[EPState] = []  # converged evaluations, for warm starts, at the rows of ``solved_at``
        self.solved_at = np.empty((0, 0))  # one row per converged evaluation: its phi
        self.n_iter = 0  # EP sweeps in all

    def remember(self, phi: np.ndarray, state: EPState, damping: float) -> None:
        """A converged fit: a warm start for its neighbours, and its damping for the next node."""
        self.solved.append(state)
        self.solved_at = np.vstack([self.solved_at.reshape(-1, phi.size), phi])
        if self.rows.kept_sites is not None and len(self.solved) > self.rows.kept_sites:  # the oldest's sites go
            self.solved.pop(0).sites = None
            self.solved_at = self.solved_at[1:]
        self.schedule = next(i for i, (d, _) in enumerate(EP_ATTEMPTS) if d == damping)

    def nearest(self, phi: np.ndarray) -> EPState | None:
        if not self.solved:
            return None
        return self.solved[int(np.argmin(np.sum((self.solved_at - phi) ** 2, axis=1)))]

    def extrapolation(self, phi: np.ndarray) -> tuple[list, np.ndarray] | None:
        """``(sites s_k, coefficients c_k)`` of the ``d + 1`` nearest converged fits (``d`` hyperparameters) that
        extrapolate linearly to ``phi``: with ``phi = p_0 + sum_k c_k (p_k - p_0)``, the start
        ``s_0 + sum_k c_k (s_k - s_0)``.  EP's sites are smooth in ``phi``, so that start is off by ``O(h^2)`` where the
        nearest fit's is off by ``O(h)`` (``h`` the spacing), and EP converges in fewer sweeps to the same fixed point.
        None where fewer fits are converged (or keep their sites) or the nearest do not span ``phi`` (``sum |c_k|``
        above :data:`EXTRAPOLATION_REACH`)."""
        d = phi.size
        if len(self.solved) < d + 1:
            return None
        order = np.argsort(np.sum((self.solved_at - phi) ** 2, axis=1), kind="stable")[: d + 1]
        spans = (self.solved_at[order[1:]] - self.solved_at[order[0]]).T  # (d, d): one column per other fit
        try:
            coefficients = np.linalg.solve(spans, phi - self.solved_at[order[0]])
        except np.linalg.LinAlgError:
            return None
        if not np.all(np.isfinite(coefficients)) or np.sum(np.abs(coefficients)) > EXTRAPOLATION_REACH:
            return None
        sites = [self.solved[k].sites for k in order]
        return None if any(site is None for site in sites) else (sites, coefficients)

    def extrapolated_starts(self, phis: list) -> list:
        """The extrapolated start (:meth:`extrapolation`) at each of ``phis``, None where there is none; the rows
        combine the sites of all of them at once (out of core: one pass)."""
        requests = [self.extrapolation(phi) for phi in phis]
        wanted = [request for request in requests if request is not None]
        combined = iter(self.rows.extrapolated(wanted) if wanted else [])
        return [None if request is None else next(combined) for request in requests]

    def attempts(self, phi: np.ndarray) -> list[tuple]:
        """``(start sites, damping, sweeps)`` of a new node in turn: its extrapolated start at the damping that last
        worked, then :func:`_attempts` from the nearest converged fit's sites (None: the mean-field sites)."""
        nearest = self.nearest(phi)
        if nearest is None:
            return _attempts([], self.schedule)
        extrapolated = self.extrapolated_starts([phi])[0]
        first = [] if extrapolated is None else [(extrapolated, *EP_ATTEMPTS[self.schedule])]
        return first + _attempts([nearest.sites], self.schedule)

    def log_post(self, phi) -> float:
        phi = np.atleast_1d(np.asarray(phi, dtype=float))
        key = node_key(phi)
        if key not in self.cache:
            precisions = self.hyper.precisions(phi)
            state = None
            # warm starts from the converged evaluations; from the mean-field sites if they fail
            for start_sites, damping, sweeps in self.attempts(phi):
                sites = self.start_sites if start_sites is None else start_sites
                try:
                    state = self.rows.run(precisions, sites, tol=EP_TOL, damping=damping, max_iter=sweeps)
                except np.linalg.LinAlgError:  # variances so extreme that the precision is singular
                    continue
                self.n_iter += state.n_iter
                if state.converged:
                    self.remember(phi, state, damping)
                    break
            else:  # EP did not converge here even with strong damping: reported (fit.converged is False)
                state = EPState(None, self.start_sites, -np.inf, 0, False) if state is None else state
                state.log_evidence = -np.inf
            self.cache[key] = state
            if self.tick is not None:
                self.tick()
        return self.cache[key].log_evidence + self.hyper.log_prior(phi)

    def log_post_many(self, phis: list) -> np.ndarray:
        """:meth:`log_post` at each of ``phis``, the new ones first fitted together (:meth:`SiteRows.run_many`), each
        from its nearest converged fit at the last damping that worked; one that does not converge there goes through
        :meth:`log_post`'s attempts."""
        fresh: dict[tuple, np.ndarray] = {}
        for phi in phis:
            fresh.setdefault(node_key(phi), np.atleast_1d(np.asarray(phi, dtype=float)))
        fresh = {key: phi for key, phi in fresh.items() if key not in self.cache}
        if len(fresh) > 1:
            damping, sweeps = EP_ATTEMPTS[self.schedule]
            nearest = [self.nearest(phi) for phi in fresh.values()]
            starts = [
                extrapolated if extrapolated is not None else self.start_sites if near is None else near.sites
                for extrapolated, near in zip(self.extrapolated_starts(list(fresh.values())), nearest)
            ]
            try:
                states = self.rows.run_many(
                    [self.hyper.precisions(phi) for phi in fresh.values()],
                    starts,
                    tol=EP_TOL, damping=damping, max_iter=sweeps,
                )  # fmt: skip
            except np.linalg.LinAlgError:
                states = []  # (each on its own, below)
            for (key, phi), state in zip(fresh.items(), states):
                self.n_iter += state.n_iter
                if state.converged:
                    self.remember(phi, state, damping)
                    self.cache[key] = state
                    if self.tick is not None:
                        self.tick()
        return np.array([self.log_post(phi) for phi in phis], dtype=float)


def _importance_weighted(grid: HyperGrid, evidence: NodeEvidence, hyper: Hyperparameters, state_at, fit_many=None):
    """The grid reweighted by importance-sampled ``log p(y | phi)`` (step 3 of the module docstring), its lattice
    grown where the new weights put mass near its edge; EP's grid where the importance weights are unreliable.

    ``state_at(phi)`` is the EP fit at ``phi`` (cached); ``fit_many(phis)``, where given, makes the EP fits of several
    new nodes at once first (:func:`bayesvm.engines.hyper_grid.integrate`'s ``many``).  Returns
    ``(grid, NodeWeights)``.
    """
    evaluated: list[tuple[np.ndarray, float]] = []  # (phi, effective sample size fraction) of every estimate

    def log_post(phi: np.ndarray) -> float:
        state = state_at(phi)
        if state.theta is None or not np.isfinite(state.log_evidence):
            return -np.inf  # EP failed here: no weight either way (the fit is reported as not converged)
        estimate = evidence(phi, state.theta)
        evaluated.append((np.atleast_1d(np.asarray(phi, dtype=float)), estimate.ess_fraction))
        return estimate.log_evidence + hyper.log_prior(phi)

    def log_post_many(phis: list) -> np.ndarray:
        if fit_many is not None:
            fit_many(phis)
        return np.array([log_post(phi) for phi in phis], dtype=float)

    lattice, log_rule, tails_ok = grid.lattice, grid.log_rule, grid.tails_ok
    try:
        logp = np.array([log_post(t) if np.isfinite(lp) else -np.inf for t, lp in zip(grid.nodes, grid.logp)])
        if grid.design == "lattice":
            lattice, logp, tails_ok = extend_lattice(
                lattice, logp, grid.step, lambda z: log_post(grid.center + grid.axes @ z),
                lambda zs: log_post_many([grid.center + grid.axes @ z for z in zs]),
            )  # fmt: skip
            log_rule = np.zeros(lattice.shape[0])
    except UnreliableEvidence as exc:
        return grid, NodeWeights("EP", evidence.draws, 0.0, float("nan"), str(exc), evidence.levels)
    if not evaluated or not np.any(np.isfinite(logp)):  # unreachable after integrate(), which needs one EP fit
        reason = "no node had an EP fit to sample from"
        return grid, NodeWeights("EP", evidence.draws, 0.0, float("nan"), reason, evidence.levels)
    new = weighted_grid(grid.center + lattice @ grid.axes.T, lattice, logp, log_rule, grid, tails_ok and grid.tails_ok)
    for _ in range(RECENTRINGS):  # a Gauss-Hermite rule on the reweighted posterior's moments: its own EP fits
        recentred = recentred_rule(new, logp)
        if recentred is None:
            break
        center, axes = recentred
        nodes = center + lattice @ axes.T
        try:
            moved = log_post_many(list(nodes))
        except UnreliableEvidence:
            break
        if not np.any(np.isfinite(moved)):
            break
        shape = replace(new, center=center, axes=axes)
        new, logp = weighted_grid(nodes, lattice, moved, log_rule, shape, new.tails_ok), moved
    # each node's own estimate: the nearest evaluation (a node's phi can differ in the last digit from the one it was
    # evaluated at, computed by a matrix product instead of a matrix-vector one); EP failures carry no weight
    points = np.array([phi for phi, _ in evaluated]).reshape(len(evaluated), -1)
    nearest = np.argmin(np.sum((new.nodes[:, None, :] - points[None, :, :]) ** 2, axis=2), axis=1)
    fractions = np.array([fraction for _, fraction in evaluated])[nearest]
    ess_fraction = float(new.weights @ fractions)
    shift = float(new.log_evidence - grid.log_evidence)
    if ess_fraction < MIN_ESS_FRACTION:
        reason = f"the importance draws' effective sample size was {ess_fraction:.0%} of {evidence.draws} per node"
        return grid, NodeWeights("EP", evidence.draws, ess_fraction, shift, reason, evidence.levels)
    return new, NodeWeights("importance", evidence.draws, ess_fraction, shift, levels=evidence.levels)


#: At most this many re-centrings of a Gauss-Hermite rule on the importance-weighted moments
#: (:func:`bayesvm.engines.hyper_grid.recentred_rule`); each costs one EP fit and one evidence estimate per node.
RECENTRINGS = 2


#: EP attempts at a node: (start, damping, sweeps).  Parallel EP with damping 0.7 oscillates where the prior
#: is weak along a direction the data barely constrain (quasi-separation: every node above the mode failed
#: at 0.7 and converged at 0.3 in 90-310 sweeps); stronger damping and more sweeps are tried in turn.
EP_ATTEMPTS = ((0.7, 200), (0.3, 1000), (0.1, 4000))


def accurate_failure(result: IntegratedResult) -> str:
    """What went wrong in an accurate fit that did not converge, and what to run instead."""
    parts = []
    if result.failed_nodes:
        parts.append(
            f"EP did not converge at {result.failed_nodes} node(s) of the variance parameters, even with damping "
            f"{EP_ATTEMPTS[-1][0]} and {EP_ATTEMPTS[-1][1]} sweeps; those nodes are missing from the integral"
        )
    if not result.tails_ok:
        parts.append(
            f"the posterior of the variance parameters still carried more than {TAIL_MASS:g} of its mass beyond the "
            f"lattice's edge at its largest ({MAX_EXTENSION_STEPS} steps or {MAX_LATTICE_NODES} nodes); its tail is "
            "cut off"
        )
    return (
        "accurate VB did not converge: " + "; ".join(parts) + ". Its intervals are too narrow where the missing "
        "part of the posterior lies: use method='gibbs' (long chains) for inference"
    )


#: :meth:`NodeFits.extrapolation` extrapolates at most this far: ``sum |c_k|`` of the node's coordinates in the
#: nearest converged fits (1 for the next node of a line, walking outwards).
EXTRAPOLATION_REACH = 1.5


def _attempts(warm: list, first: int = 0) -> list[tuple]:
    """``(start sites, damping, sweeps)``: warm starts first, then the mean-field sites (None), each with the damping
    schedule from ``EP_ATTEMPTS[first]`` on (where the previous node needed strong damping, its neighbours start
    there)."""
    return [(start, damping, sweeps) for start in [*warm, None] for damping, sweeps in EP_ATTEMPTS[first:]]


def _chi(problem: VBProblem, state: EPState) -> np.ndarray:
    if problem.is_sparse:
        mean_f, var_f = state.theta.predictor(problem.D, training=True)
        return (1.0 - problem.y * mean_f) ** 2 + var_f
    codes = None if problem.blocked is None else problem.blocked.codes
    values = None if problem.blocked is None else problem.blocked.values
    mean_f, var_f = state.theta.predictor(problem.D, codes, values, problem.row_pattern)
    return (1.0 - problem.y * mean_f) ** 2 + var_f


def _unsort(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return values if order is None else values[np.argsort(order)]
