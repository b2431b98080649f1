"""Accurate VB for selection priors: expectation propagation with one site per slope, integrated over the
variance parameters and the prior's scale.

Model (the selection engines' layout, :class:`bayesvm.model.problems.SelectionProblem`): ``theta`` holds every
column of ``X``; the unpenalised coefficients have ``N(0, 1/lambda_j)``, each random-effect term ``N(0, Sigma_c)``
per level, and each penalised slope ``beta_k`` its own prior ``s_k(beta_k)``:

* spike-and-slab (Polson & Scott 2011, eq. 16): ``(1 - pi) delta_0 + pi N(0, S_k)``, ``S_k = nu^2 s_k^2``;
* lasso (Polson & Scott's ``alpha = 1``): ``Laplace(0, b_k)``, ``b_k = nu s_k``, density ``exp(-|beta| / b) / (2 b)``;
* Laplace-zero (Luts & Ormerod 2014, section 3.2): ``(1 - rho) delta_0 + rho Laplace(0, sigma_u)``
  (``v ~ N(0, sigma_u^2 / b)``, ``b ~ IG(1, 1/2)`` is that Laplace: ``sigma_u^2 / b`` is exponential with mean
  ``2 sigma_u^2``).

Given the hyperparameters, the pseudo-posterior is ``N(theta; 0, Lambda^-1) prod_i t_i(f_i) prod_k s_k(beta_k)``
with the hinge sites ``t_i`` of :mod:`bayesvm.engines.linear.ep`.  EP (Minka 2001) gives every site a Gaussian
``exp(-tau f^2 / 2 + nu f)``; a slope's site acts on the projection ``beta_k = e_k' theta``, so the sites are
rows of ``C = [X; E]`` and the posterior precision is ``C' diag(tau) C + Lambda``: one dense Cholesky
(:func:`bayesvm.linalg.dense.gaussian_posterior`).  Each slope's tilted distribution
``N(beta; m, v) s(beta)`` under its cavity ``N(m, v)`` has closed-form moments, which the prior's law gives
(:mod:`bayesvm.engines.selection.laws`, derived in :mod:`bayesvm.engines.selection.tilted`).

A tilted variance above the cavity's (the spike and the slab both carrying mass) needs a negative site
precision; it is kept (the moments then match) unless the sites together make ``q`` improper, after which every
slope site's precision is kept at 0 or above for the rest of the run (as the hinge sites' always are).  The posterior
inclusion probability of a slope is its tilted weight of the slab, ``P(beta > 0)`` and the mean given inclusion come
from the same tilted distribution (Hernandez-Lobato, Hernandez-Lobato & Dupont 2013 use the same site approximation
for spike-and-slab linear models).

The selected slopes have no Gaussian prior of their own; for a finite determinant they carry the tiny precision
:data:`SLOPE_BASE_PRECISION`, and the EP evidence (Rasmussen & Williams 2006, eq. 3.65 with every site a row of
``C``) is corrected for it by ``m/2 log(2 pi / kappa)``: ``N(beta; 0, 1/kappa)`` is ``(2 pi / kappa)^(-1/2)``
to relative ``kappa beta^2 / 2`` over the slopes' range.

The hyperparameters ``phi`` -- each random-effect term's (:class:`bayesvm.engines.linear.ep.Hyperparameters`),
``log sigma_u^2`` for Laplace-zero (prior ``IG(A_u, B_u)``), ``log nu`` for a lasso with a learned scale
(``1/nu ~ Gamma(a, b)``) -- are integrated on the lattice of :func:`bayesvm.engines.hyper_grid.integrate`
(spike-and-slab and a fixed lasso scale have none of their own).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from ...linalg.dense import GaussianPosterior, blas_threads, gaussian_posterior
from ...model.problems import SelectionProblem
from ..augmentation import row_terms
from ..hinge_sites import cavities, damped_sites, ep_log_evidence, final_cavities, weighted_tilted_moments
from ..hyper_grid import integrate
from ..hyperparameters import Hyperparameters
from ..linear.ep import EP_ATTEMPTS, EP_TOL, IntegratedResult
from ..parallel_ep import parallel_sweeps
from .laws import law_of
from .tilted import SlopeTilted

LOG_2PI = float(np.log(2.0 * np.pi))
#: Prior precision the selected slopes carry beside their sites (``N(0, 10^8)``, the vague prior of the
#: unpenalised coefficients); the evidence is corrected for it.
SLOPE_BASE_PRECISION = 1e-8


# ----- the slope sites ---------------------------------------------------------------------------------
def slope_tilted(prior, m: np.ndarray, v: np.ndarray, width: np.ndarray) -> SlopeTilted:
    """Tilted moments of each slope's site under its cavity ``N(m, v)`` (the prior's law,
    :mod:`bayesvm.engines.selection.tilted`); ``width`` is the slab variance ``S_k`` (spike-and-slab) or the
    Laplace scale ``b_k`` (lasso, Laplace-zero)."""
    tilted = law_of(prior).tilted(m, v, width)
    tilted.cavity_mean, tilted.cavity_var, tilted.width = m, v, width
    return tilted


@dataclass
class SlopeMarginals:
    """A selection prior's slopes under the accurate fit, averaged over the nodes: the inclusion probability,
    ``P(beta > 0)`` and the mean given inclusion (engine scale), from each slope's tilted distribution; ``scale``
    the posterior mean of the prior's learned scale (``sigma_u`` for Laplace-zero, ``nu`` for the lasso; ``None``
    when fixed), ``node_scale`` its value at each node; ``tilted`` each node's tilted distributions."""

    prior: object
    selected: np.ndarray
    p_include: np.ndarray
    p_positive: np.ndarray
    mean_if_included: np.ndarray
    tilted: list[SlopeTilted]
    scale: float | None = None
    node_scale: np.ndarray | None = None
    #: per slope, the posterior weight of the nodes where its site had to be floored at precision 0 (a negative one
    #: made q improper there), so that its tilted moments are not matched: its numbers are unreliable
    floored_weight: np.ndarray | None = None

    @property
    def unreliable(self) -> np.ndarray:
        """The slopes (positions among the selected) whose site was floored at nodes of more than 10% weight."""
        if self.floored_weight is None:
            return np.zeros(0, dtype=int)
        return np.flatnonzero(self.floored_weight > 0.1)

    def carry(self, theta_d: np.ndarray, node: np.ndarray, thetas: list[GaussianPosterior]) -> np.ndarray:
        """Draws of ``q(theta)`` with each slope carried to its tilted distribution: ``beta = F^-1(Phi(z))`` with
        ``z`` the slope's standardised Gaussian draw at its node (a Gaussian copula: the marginals are EP's tilted
        distributions, point mass included, and the dependence is that of ``q``)."""
        out = theta_d.copy()
        sel = self.selected
        for k in np.unique(node):
            rows = node == k
            mean, sd = thetas[k].mean_d[sel], np.sqrt(thetas[k].variance()[sel])
            u = ndtr((theta_d[np.ix_(rows, sel)] - mean) / sd)
            out[np.ix_(rows, sel)] = law_of(self.prior).quantile(self.tilted[k], u)
        return out


# ----- the prior's scale --------------------------------------------------------------------------------
def scale_size(prior) -> int:
    """How many hyperparameters the prior's scale adds: ``log sigma_u^2`` (Laplace-zero), ``log nu`` (lasso with
    a learned scale), none otherwise."""
    return law_of(prior).scale_size


def slope_widths(problem: SelectionProblem, phi_scale: np.ndarray) -> np.ndarray:
    """Per slope: the slab variance ``nu^2 s_k^2`` (spike-and-slab) or the Laplace scale (``nu s_k``; Laplace-zero:
    ``sigma_u``, its ``s_k`` being 1)."""
    return law_of(problem.prior).widths(problem.prior_scale, phi_scale)


def scale_log_prior(prior, phi_scale: np.ndarray) -> float:
    """``log p(phi_scale)`` with its Jacobian: ``IG(A_u, B_u)`` of ``sigma_u^2 = e^phi`` (Laplace-zero) or
    ``Gamma(a, b)`` of ``kappa = 1/nu = e^-phi`` (lasso); 0 without a learned scale."""
    return law_of(prior).scale_log_prior(phi_scale) if phi_scale.size else 0.0


# ----- EP at fixed hyperparameters ------------------------------------------------------------------------
@dataclass
class SelectionEPState:
    theta: GaussianPosterior
    tau: np.ndarray  # the sites' precisions: rows, then slopes
    nu: np.ndarray
    log_evidence: float
    n_iter: int
    tilted: SlopeTilted | None
    converged: bool = True
    clipped: bool = False  # the slope sites' precisions were floored at 0 (negative ones had made q improper)
    floored: np.ndarray | None = None  # the slopes whose site sits at that floor (its moments are not matched)


def prior_precision(problem: SelectionProblem, precisions: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """``Lambda`` (``q x q``) and ``log |Lambda|``: the unpenalised coefficients' ``lambda_j``, each random-effect
    term's ``Sigma_c^-1`` per level, :data:`SLOPE_BASE_PRECISION` on the selected slopes."""
    lam = problem.fixed_precision.astype(float).copy()
    lam[problem.selected] = SLOPE_BASE_PRECISION
    in_component = np.zeros(problem.q, dtype=bool)
    for comp in problem.components:
        in_component[comp.index.ravel()] = True
    lam[in_component] = 0.0
    Lambda = np.diag(lam)
    logdet = float(np.sum(np.log(lam[~in_component])))
    for comp, precision in zip(problem.components, precisions):
        idx = comp.index
        Lambda[idx[:, :, None], idx[:, None, :]] = precision[None]
        logdet += comp.n_levels * float(np.linalg.slogdet(precision)[1])
    return Lambda, logdet


def run_selection_ep(
    problem: SelectionProblem,
    precisions: list[np.ndarray],
    widths: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    max_iter: int = 200,
    tol: float = EP_TOL,
    damping: float = 0.7,
) -> SelectionEPState:
    """Parallel EP over the hinge rows and the slope sites at fixed hyperparameters (module docstring).

    ``tau``, ``nu``: the sites' parameters, the ``n`` rows first, then the ``m`` slopes."""
    X, y, sel, n = problem.X, problem.y, problem.selected, problem.X.shape[0]
    C = np.vstack([X, np.eye(problem.q)[sel]])  # the sites' projections: rows, then the slopes
    Lambda, logdet_prior = prior_precision(problem, precisions)
    tau, nu = tau.copy(), nu.copy()

    def solve(tau, nu):
        theta = gaussian_posterior(C, tau, nu, Lambda, None, None)
        return theta, theta.predictor(C, None, None)

    floor = -np.inf  # the slope sites' precision floor: 0 once a negative one made q improper

    def solve_proper(tau, nu):
        nonlocal floor
        try:
            return tau, solve(tau, nu)
        except np.linalg.LinAlgError:
            if floor == 0.0:
                raise
            floor = 0.0
            tau = np.concatenate([tau[:n], np.maximum(tau[n:], 0.0)])
            return tau, solve(tau, nu)

    def sweep(tau, nu):
        tau, (theta, (mean_f, var_f)) = solve_proper(tau, nu)
        ok, m, v = cavities(mean_f, var_f, tau, nu)
        _, row_mean, row_var = weighted_tilted_moments(y, m[:n], v[:n], problem.weights)
        slopes = slope_tilted(problem.prior, m[n:], v[n:], widths)
        t_mean = np.concatenate([row_mean, slopes.mean])
        t_var = np.maximum(np.concatenate([row_var, slopes.var]), 1e-300)
        # a hinge site is log-concave (its floor 0 is only rounding); a slope site's precision may be negative
        site_floor = np.concatenate([np.zeros(n), np.full(m.size - n, floor)])
        return mean_f, *damped_sites(tau, nu, ok, m, v, t_mean, t_var, damping, site_floor)

    tau, nu, sweeps, converged = parallel_sweeps(sweep, tau, nu, max_iter, tol)
    tau, (theta, (mean_f, var_f)) = solve_proper(tau, nu)
    m, v = final_cavities(mean_f, var_f, tau, nu)
    log_z_rows, _, _ = weighted_tilted_moments(y, m[:n], v[:n], problem.weights)
    slopes = slope_tilted(problem.prior, m[n:], v[n:], widths)
    log_z = np.concatenate([log_z_rows, slopes.log_z])
    # every site a row of C (ep_log_evidence), then the slopes' base prior removed (module docstring)
    log_evidence = ep_log_evidence(logdet_prior, theta.logdet_precision, tau, nu, mean_f, log_z, m, v)
    log_evidence += 0.5 * sel.size * (LOG_2PI - np.log(SLOPE_BASE_PRECISION))
    converged = converged and bool(np.isfinite(log_evidence))
    clipped = floor == 0.0
    floored = (tau[n:] <= 0.0) if clipped else np.zeros(sel.size, dtype=bool)
    return SelectionEPState(theta, tau, nu, float(log_evidence), sweeps, slopes, converged, clipped, floored)


# ----- integrated over the hyperparameters --------------------------------------------------------------
#: Most sweeps a warm start (the nearest solved node's sites) gets at each damping before the cold start is tried: a
#: warm start that converges does so in tens of sweeps, and one that does not can oscillate for the whole budget
#: (a 4-row Laplace-zero fit: 15 warm starts failed after 4,000 sweeps at damping 0.1 where the cold start then
#: converged in 20-30); it gets the full budget of the strongest damping again if the cold start fails too.
WARM_SWEEPS = 500


def _attempt_order(warm: list, schedule) -> list[tuple]:
    """``(start, damping, sweeps)`` in turn: each warm start with at most :data:`WARM_SWEEPS` per damping, then the cold
    start (``None``) with the whole ``schedule``, then the warm starts with the strongest damping's full budget."""
    capped = [(start, d, min(s, WARM_SWEEPS)) for start in warm for d, s in schedule]
    last = [(start, *schedule[-1]) for start in warm if schedule[-1][1] > WARM_SWEEPS]
    return [*capped, *[(None, d, s) for d, s in schedule], *last]


def fit_selection_accurate(
    problem: SelectionProblem, n_nodes: int = 21, span: float = 4.0, stop_at_failure: bool = False
) -> IntegratedResult:
    """EP for ``theta`` with the selection prior's sites, integrated over the variance parameters and the prior's
    scale (module docstring).

    ``stop_at_failure``: raise :class:`~bayesvm.engines.linear.ep.AccurateFitError` at the first node where EP fails
    to converge (every attempt of ``EP_ATTEMPTS``), for a caller that falls back to mean-field VB on any failure (the
    default ``vb``): the rest of the integral is then wasted work.  Without it the failed nodes are left out of the
    integral and the result reports them.

    Returns
    -------
    IntegratedResult
        The mixture over nodes of ``phi`` (each node's ``q(theta)`` over the columns of ``X``), with ``slopes``:
        each penalised slope's inclusion probability, ``P(beta > 0)`` and mean given inclusion, averaged over the
        nodes, and the prior's learned scale.
    """
    with blas_threads(problem.q, problem.X.shape[0]):
        return _fit(problem, n_nodes, span, stop_at_failure)


def _fit(problem: SelectionProblem, n_nodes: int, span: float, stop_at_failure: bool = False) -> IntegratedResult:
    start = time.perf_counter()
    n, m = problem.X.shape[0], problem.m
    hyper = Hyperparameters(problem.components)
    n_scale = scale_size(problem.prior)
    start_components, phi_scale0 = law_of(problem.prior).start(problem)  # where the search over phi starts
    widths0 = slope_widths(problem, phi_scale0)
    rows_tau, rows_nu = row_terms(problem.y, np.ones(n), problem.weights)  # E[1/a] = 1 (chi = 1)
    tau0 = np.concatenate([rows_tau, 1.0 / np.maximum(law_of(problem.prior).prior_variance(widths0), 1e-8)])
    nu0 = np.concatenate([rows_nu, np.zeros(m)])  # and the slopes' prior width
    cache: dict[tuple, SelectionEPState] = {}
    solved: list[tuple[np.ndarray, SelectionEPState]] = []
    counter = {"sweeps": 0, "first": 0}  # first: the damping that last worked (neighbouring nodes start there)

    def evaluate(phi: np.ndarray) -> SelectionEPState:
        key = tuple(np.round(phi, 12))
        if key in cache:
            return cache[key]
        precisions = hyper.precisions(phi[: hyper.size])
        widths = slope_widths(problem, phi[hyper.size :])
        warm_states = [min(solved, key=lambda s: np.sum((s[0] - phi) ** 2))[1]] if solved else []
        state = None
        for start_state, damping, sweeps in _attempt_order(warm_states, EP_ATTEMPTS[counter["first"] :]):
            tau, nu = (tau0, nu0) if start_state is None else (start_state.tau, start_state.nu)
            try:
                state = run_selection_ep(problem, precisions, widths, tau, nu, max_iter=sweeps, damping=damping)
            except np.linalg.LinAlgError:
                continue
            counter["sweeps"] += state.n_iter
            if state.converged:
                solved.append((phi, state))
                counter["first"] = next(i for i, (d, _) in enumerate(EP_ATTEMPTS) if d == damping)
                cache[key] = state
                return state
        if stop_at_failure:
            from ..hyper_grid import AccurateFitError

            damping, sweeps = EP_ATTEMPTS[-1]
            raise AccurateFitError(
                "accurate VB did not converge: EP did not converge at a node of the variance parameters, even with "
                f"damping {damping} and {sweeps} sweeps"
            )
        if state is None:
            state = SelectionEPState(None, tau0, nu0, -np.inf, 0, None, False, floored=np.zeros(m, dtype=bool))
        state.log_evidence = -np.inf  # EP failed here: no weight, and the fit is reported as not converged
        cache[key] = state
        return state

    def log_post(phi) -> float:
        phi = np.atleast_1d(np.asarray(phi, dtype=float))
        state = evaluate(phi)
        return (
            state.log_evidence + hyper.log_prior(phi[: hyper.size]) + scale_log_prior(problem.prior, phi[hyper.size :])
        )

    d = hyper.size + n_scale
    if d == 0:
        state = evaluate(np.zeros(0))
        if state.theta is None:
            from ..hyper_grid import AccurateFitError

            raise AccurateFitError("accurate VB: expectation propagation did not converge for this selection model")
        return _result(problem, hyper, [state], np.zeros((1, 0)), np.ones(1), np.zeros(1), counter["sweeps"],
                       start, None, state.converged)  # fmt: skip
    phi0 = np.concatenate([hyper.start(start_components), phi_scale0])
    phi0_search = np.concatenate([hyper.start(start_components, inflate=0.5), phi_scale0])
    grid = integrate(log_post, phi0, phi0_search, n_nodes, span)
    keep = grid.keep
    states = [evaluate(np.asarray(t, dtype=float)) for t in grid.nodes[keep]]
    weights = grid.weights[keep] / grid.weights[keep].sum()
    converged = bool(np.all(np.isfinite(grid.logp))) and grid.tails_ok
    return _result(problem, hyper, states, grid.nodes[keep], weights, grid.logp[keep], counter["sweeps"], start,
                   grid, converged)  # fmt: skip


def _result(problem, hyper, states, nodes, weights, logp, sweeps, start, grid, converged) -> IntegratedResult:
    n = problem.X.shape[0]
    tilted = [st.tilted for st in states]
    # averages of probabilities over weights summing to 1: kept in [0, 1] against rounding (1 + 2e-16 was reported)
    p_include = np.clip(sum(w * t.p_include for w, t in zip(weights, tilted)), 0.0, 1.0)
    p_positive = np.clip(sum(w * t.p_positive for w, t in zip(weights, tilted)), 0.0, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_if = sum(w * t.p_include * t.mean_if_included for w, t in zip(weights, tilted)) / p_include
    scale = node_scale = None
    if scale_size(problem.prior):
        node_scale = np.array([law_of(problem.prior).scale_value(t[hyper.size :]) for t in nodes])
        scale = float(np.dot(weights, node_scale))
    slopes = SlopeMarginals(
        prior=problem.prior,
        selected=problem.selected,
        p_include=p_include,
        p_positive=p_positive,
        mean_if_included=mean_if,
        tilted=tilted,
        scale=scale,
        node_scale=node_scale,
        floored_weight=sum(w * st.floored.astype(float) for w, st in zip(weights, states)),
    )
    chi = sum(w * _chi(problem.y, st.theta, problem.X) for w, st in zip(weights, states))
    covs = [hyper.covariances(t[: hyper.size]) for t in nodes]
    return IntegratedResult(
        nodes=nodes,
        covariances=[np.stack([c[j] for c in covs]) for j in range(len(problem.components))],
        weights=np.asarray(weights, dtype=float),
        thetas=[st.theta for st in states],
        node_log_posterior=np.asarray(logp, dtype=float),
        chi=chi[:n],
        has_component=bool(problem.components),
        converged=converged,
        n_iter=sweeps,
        elapsed=time.perf_counter() - start,
        axes=None if grid is None else grid.axes,
        step=1.0 if grid is None else grid.step,
        design="lattice" if grid is None else grid.design,
        center=None if grid is None else grid.center,
        lattice=None if grid is None else grid.lattice[grid.keep],
        hyperparameters=hyper,
        failed_nodes=int(not converged) if grid is None else int(np.sum(~np.isfinite(grid.logp))),
        tails_ok=True if grid is None else grid.tails_ok,
        log_evidence=float(states[0].log_evidence) if grid is None else grid.log_evidence,
        slopes=slopes,
    )


def _chi(y: np.ndarray, theta: GaussianPosterior, X: np.ndarray) -> np.ndarray:
    mean_f, var_f = theta.predictor(X, None, None)
    return (1.0 - y * mean_f) ** 2 + var_f


def floored_slopes(model, results) -> list[str]:
    """The penalised columns whose EP site had to be floored at precision 0 in an accurate selection fit (on any of
    the completed data sets of multiple imputation), by name."""
    names = model.design.x_names
    selected = np.flatnonzero(model.penalized)
    positions = sorted({int(k) for r in results if r.slopes is not None for k in r.slopes.unreliable})
    return [names[selected[k]] for k in positions]
