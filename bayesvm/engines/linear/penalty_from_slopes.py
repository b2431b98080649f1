"""The learned penalty's variance integrated from the slopes' posterior, where the data dominate the slopes.

With the learned penalty the standardised slopes share a variance: ``beta_k | s ~ N(0, s)``, ``s = sigma_u^2`` with
prior ``p(s)`` (``IG(a, b)`` by default; any law of :mod:`bayesvm.engines.variance_prior`).  The accurate fit
(:mod:`bayesvm.engines.linear.ep`) integrates ``phi = (phi_r, t)``, ``t = log s`` and ``phi_r`` the other variance
parameters, on a lattice with one EP fit per node.  Where every slope's data precision dwarfs the prior's ``1 / s``
over the plausible range of ``s``, ``p(theta | y, phi_r, s)`` depends on ``s`` only through a small shift of its
mean, linear in ``1/s``; then, for a fixed ``s0``,

* ``p(theta | y, phi_r, s)`` is EP's Gaussian at ``(phi_r, s0)`` with its mean carried linearly in the slopes' prior
  precision ``lambda = 1/s`` (the mean of ``N((H + lambda I_S)^-1 b, .)`` moves by ``-(H + lambda I_S)^-1 I_S mean
  d lambda``, the same for every ``lambda`` while ``lambda << H``; the coefficients in ``theta_b`` follow through
  their conditional given ``theta_d``, which does not involve ``s``): one EP lattice over ``phi_r`` alone, at ``s0``;
* ``p(t | y, phi_r) = int p(t | beta) p(beta | y, phi_r) dbeta``, with ``p(t | beta) ∝ p(s) s^(1 - m/2)
  exp(-|beta|^2 / (2 s))`` (``IG(a + m/2, b + |beta|^2 / 2)`` under the inverse-gamma prior; the ``m`` slopes'
  conditional, Gibbs step 5 of Polson & Scott 2011), averaged over draws of the slopes from each node's Gaussian;
* ``p(y | phi_r) = p(y | phi_r, s0) p(s0) / p(s0 | y, phi_r)``, the basic marginal likelihood identity (Chib 1995),
  so each node's weight is its EP lattice weight divided by ``p(t0 | y, phi_r)``.

The output is the accurate fit's mixture over the product of the two: every node ``(phi_r, t_j)`` of a lattice
whose ``t`` axis holds cells of :data:`CELL_SD` of ``t``'s conditional SD carries ``phi_r``'s Gaussian with its mean
carried to ``t_j``, with weight ``w(phi_r) P(t in cell j | y, phi_r)``; the summary, predictions, the PSIS check and
the saved file read it as any accurate fit.  Only ``phi_r``'s lattice costs EP fits (a line for one random-effect
variance: nine to 21 nodes in place of a hundred or more; a plane for two terms or a correlated pair, in place of
several hundred).

The regime is checked, not assumed (:func:`slope_response`): EP at the heaviest node with ``s`` at the
:data:`CHECK_TAIL` and ``1 - CHECK_TAIL`` points of its conditional gives the response of the means (the chord's
slope); the mean at ``s0`` must lie within :data:`MAX_CURVATURE` of its SD of that chord and no SD may change by
more than :data:`MAX_SD_CHANGE` across the range.  Otherwise :func:`fit_penalty_from_slopes` returns None and why,
and the caller falls back (the default to mean-field VB, ``vb="accurate"`` to the whole lattice), saying why.  The
same check is made first, before a lattice of two or more dimensions, at mean-field VB's values of ``phi_r`` (three
EP fits): far outside the limits there (:data:`CLEARLY_OUTSIDE`), the lattice is not fitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import logsumexp

from ...linalg.dense import GaussianPosterior
from ...model.problems import PENALTY_SOURCE
from .. import variance_prior
from ..hyper_grid import AccurateFitError, GivenNodes
from ..hyperparameters import Hyperparameters
from .ep import IntegratedResult, fit_accurate
from .vb import fit_vb

#: Each cell of the lattice's penalty axis spans this many conditional SDs of ``t = log s``.
CELL_SD = 0.75
#: ... and the axis reaches this many SDs either side of the heaviest node's conditional mean.
AXIS_SD = 5.0
#: Nodes of the product whose weight is below this share of the largest are left out (their cells hold less mass
#: than the lattice's own tail test leaves beyond its edge).
NEGLIGIBLE = 1e-9
#: Draws of the slopes from each node's Gaussian for ``p(t | y, phi_r)``.
SLOPE_DRAWS = 256
#: Points of the fine grid in ``t`` on which each conditional is normalised.
FINE_POINTS = 1201
#: The check moves ``s`` to these tail points of its conditional (each side).
CHECK_TAIL = 0.005
#: The check's limits: the largest distance of a mean from the chord of its response to ``1 / s``, in its SDs, and the
#: largest relative change of an SD across the conditional's range.
MAX_CURVATURE = 0.05
MAX_SD_CHANGE = 0.05
#: The same check made first at mean-field VB's values of the other variance parameters (three EP fits, before the
#: lattice's) declines where a number exceeds this many times its limit: out of the regime without paying for the
#: lattice (mlmRev's guImmun: an SD changes by 14%).  Nearer the limits the lattice is fitted and its heaviest node
#: decides.
CLEARLY_OUTSIDE = 2.0
#: The first look is made where the other variance parameters number at least this many (a lattice of a hundred EP
#: fits or more; a line of nine to 21 costs little more than the look itself).
FIRST_LOOK_FROM = 2
#: EP fits of the check at the lattice's heaviest node (the two tail points) and of the first look (``s0`` too).
CHECK_FITS, FIRST_LOOK_FITS = 2, 3


@dataclass(frozen=True)
class PenaltyFromSlopes:
    """How the learned penalty's variance was integrated (:mod:`bayesvm.engines.linear.penalty_from_slopes`): the
    value ``s0`` the EP lattice was fitted at, the EP fits made (the lattice's, the check's two and, where made, the
    first look's three), and the check's two numbers (:class:`SlopeResponse`)."""

    fitted_at: float
    ep_nodes: int
    curvature: float
    sd_change: float

    def describe(self) -> str:
        return (
            f"the learned penalty's variance integrated from the slopes' posterior (EP at sigma_u^2 = "
            f"{self.fitted_at:.4g}, the means carried linearly in 1/sigma_u^2 to each of its values; between the "
            f"{100 * CHECK_TAIL:g}% and {100 - 100 * CHECK_TAIL:g}% points of its posterior the means keep within "
            f"{self.curvature:.3f} of their SDs of that line and the SDs within {100 * self.sd_change:.1f}%)"
        )


def penalty_index(problem) -> int | None:
    """The learned penalty's component in ``problem`` (a single-column variance over the dense slopes), or None."""
    for c, comp in enumerate(problem.components):
        if comp.source == PENALTY_SOURCE and comp.k == 1 and not comp.blocked:
            return c
    return None


def fixed_penalty_problem(problem, c: int, variance: float):
    """``problem`` with component ``c`` (the penalty) fixed at ``variance``: its slopes' prior precision ``1 /
    variance`` joins the fixed precisions, and the component leaves the list."""
    fixed = np.asarray(problem.fixed_precision, dtype=float).copy()
    fixed[problem.components[c].index[:, 0]] = 1.0 / variance
    components = tuple(comp for k, comp in enumerate(problem.components) if k != c)
    return replace(problem, fixed_precision=fixed, components=components)


def _slope_squares(theta, slopes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``|beta|^2`` at :data:`SLOPE_DRAWS` draws of the slopes from a node's Gaussian ``theta``."""
    mean = theta.mean_d[slopes]
    cov = theta.cov_entries(slopes[:, None], slopes[None, :])
    scale = np.sqrt(np.maximum(np.diag(cov), 1e-300))
    corr = cov / np.outer(scale, scale) + 1e-10 * np.eye(slopes.size)
    draws = mean + (rng.standard_normal((SLOPE_DRAWS, slopes.size)) @ np.linalg.cholesky(corr).T) * scale
    return np.sum(draws**2, axis=1)


def conditional_log_density(comp, squares: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``log p(t | y, phi_r)`` on the evenly spaced grid ``t`` (a density in ``t = log s``): ``p(t | beta)`` of the
    module docstring at each draw's ``|beta|^2`` (``squares``), each normalised on the grid, averaged over the draws."""
    m = comp.n_levels
    s = np.exp(t)
    log_p = variance_prior.log_density(comp, s)[None, :] + (1.0 - 0.5 * m) * t[None, :]
    log_p = log_p - 0.5 * squares[:, None] / s[None, :]
    log_p -= logsumexp(log_p, axis=1, keepdims=True) + np.log(t[1] - t[0])
    return logsumexp(log_p, axis=0) - np.log(squares.size)


#: The search grid in ``t = log s`` for :func:`fine_grid`: variances from ``e^-40`` to ``e^40``.
SEARCH_GRID = np.linspace(-40.0, 40.0, 4001)


def fine_grid(comp, squares: np.ndarray) -> np.ndarray:
    """:data:`FINE_POINTS` points in ``t`` over where the conditional (:func:`conditional_log_density` of these draws,
    on :data:`SEARCH_GRID`) is within ``e^-60`` of its largest value, a search step beyond either end: it follows the
    prior where the slopes say little (a small ``|beta|^2`` leaves ``b`` in charge) and the slopes where they say
    much."""
    log_density = conditional_log_density(comp, squares, SEARCH_GRID)
    inside = np.flatnonzero(log_density >= log_density.max() - 60.0)
    step = SEARCH_GRID[1] - SEARCH_GRID[0]
    return np.linspace(SEARCH_GRID[inside[0]] - step, SEARCH_GRID[inside[-1]] + step, FINE_POINTS)


@dataclass(frozen=True)
class SlopeResponse:
    """How EP's ``q(theta_d)`` at the heaviest node moves with the slopes' prior precision ``lambda = 1 / s``
    (:func:`slope_response`): ``d mean_d / d lambda`` (``gradient``), the range of ``lambda`` it was measured over, and
    the check's two numbers: how far the mean at ``lambda0`` lies from the line through the two ends (in its SDs) and
    the largest relative change of an SD across the range."""

    gradient: np.ndarray
    low: float
    high: float
    curvature: float
    sd_change: float

    def outside(self, margin: float = 1.0) -> bool:
        """Whether a number exceeds ``margin`` times its limit (:data:`MAX_CURVATURE`, :data:`MAX_SD_CHANGE`)."""
        return self.curvature > margin * MAX_CURVATURE or self.sd_change > margin * MAX_SD_CHANGE


def slope_response(reference, conditional, fit_at, start_variance: float) -> SlopeResponse:
    """EP at the heaviest value of the other variance parameters with the penalty at the :data:`CHECK_TAIL` and
    ``1 - CHECK_TAIL`` points of its conditional ``(t, log density)`` (``fit_at(s)``: the Gaussian there), against
    ``reference`` (EP there at ``s0 = start_variance``).

    The means are a linear function of ``lambda = 1/s`` where the data dominate: ``mean(lambda) = (H + lambda I_S)^-1
    b`` moves by ``-(H + lambda I_S)^-1 I_S mean d lambda``, second order in ``lambda / H``.  The response is the
    chord's slope; the check's numbers measure how far that is from the truth (curvature) and what it leaves out (the
    SDs, taken as constant)."""
    t, log_density = conditional
    mass = np.cumsum(np.exp(log_density - log_density.max()))
    mass /= mass[-1]
    variances = np.exp(np.interp([CHECK_TAIL, 1.0 - CHECK_TAIL], mass, t))
    ends = [fit_at(float(v)) for v in variances]  # (the smallest variance: the largest precision first)
    high, low = 1.0 / variances  # lambda at the two ends
    gradient = (ends[0].mean_d - ends[1].mean_d) / (high - low)
    lam0 = 1.0 / start_variance
    chord = ends[1].mean_d + gradient * (lam0 - low)
    sd0 = np.sqrt(reference.variance())
    curvature = float(np.max(np.abs(chord - reference.mean_d) / sd0, initial=0.0))
    change = 0.0
    for theta in ends:
        for sd_a, sd_b in _sds(reference, theta):
            change = max(change, float(np.max(np.abs(sd_b / sd_a - 1.0), initial=0.0)))
    return SlopeResponse(gradient, float(low), float(high), curvature, change)


def _sds(a, b):
    """The SDs of the coefficients of two Gaussians (the dense part, then the eliminated factor's)."""
    yield np.sqrt(a.variance()), np.sqrt(b.variance())
    if a.mean_b.size:
        sd = lambda theta: np.sqrt(np.diagonal(theta.cov_b, axis1=1, axis2=2))  # noqa: E731
        yield sd(a), sd(b)


def fit_penalty_from_slopes(problem, progress: bool = False, seed: int = 0) -> tuple[IntegratedResult | None, str]:
    """The accurate fit of the module docstring for ``problem`` (the learned penalty among its components,
    :func:`penalty_index`) and ``""``, or None and why not: the check fails, the other parameters' grid is not a
    lattice, or EP did not converge there.

    ``s0`` is the inverse of mean-field VB's ``E[1 / s]``.  The check is made first at mean-field's values of the other
    variance parameters where they number :data:`FIRST_LOOK_FROM` or more (:data:`CLEARLY_OUTSIDE`); then the EP
    lattice over them is :func:`bayesvm.engines.linear.ep.fit_accurate` of the problem with the penalty fixed at
    ``s0`` (``progress``: its bar), and the check's two EP fits are made at the lattice's heaviest node
    (:func:`slope_response`), which decides."""
    began = time.perf_counter()
    c = penalty_index(problem)
    comp = problem.components[c]
    mean_field = fit_vb(problem)
    start = 1.0 / float(mean_field.components[c].expected_precision()[0, 0])
    fixed = fixed_penalty_problem(problem, c, start)
    others = [post for k, post in enumerate(mean_field.components) if k != c]
    first_look = _first_look(problem, c, Hyperparameters(fixed.components), others, start, seed)
    if first_look is not None and first_look.outside(CLEARLY_OUTSIDE):
        return None, _declined(first_look)
    reduced = fit_accurate(fixed, progress=progress)
    if not reduced.converged:
        return None, "EP did not converge at every value of the other variance parameters"
    if reduced.design != "lattice" or not reduced.has_component:
        return None, "the other variance parameters' values are not a lattice"
    if not all(isinstance(theta, GaussianPosterior) for theta in reduced.thetas):
        return None, "the sparse path"  # (only the dense path's Gaussians carry their means)
    slopes = comp.index[:, 0]
    rng = np.random.default_rng(seed)
    squares = [_slope_squares(theta, slopes, rng) for theta in reduced.thetas]
    heaviest = int(np.argmax(reduced.weights))
    t = fine_grid(comp, squares[heaviest])
    log_cond = [conditional_log_density(comp, sq, t) for sq in squares]
    at_node = _fit_at_node(problem, c, reduced.nodes[heaviest])
    response = slope_response(reduced.thetas[heaviest], (t, log_cond[heaviest]), at_node, start)
    if response.outside():
        return None, _declined(response)
    looked = 0 if first_look is None else FIRST_LOOK_FITS
    record = PenaltyFromSlopes(
        start, reduced.weights.size + CHECK_FITS + looked, response.curvature, response.sd_change
    )
    result = _product_mixture(problem, c, reduced, t, log_cond, start, record, response)
    return replace(result, elapsed=time.perf_counter() - began), ""  # (the whole fit: mean-field, lattice, check)


def _fit_at_node(problem, c: int, node: np.ndarray):
    """``variance -> EP's Gaussian`` at the other variance parameters' values ``node`` with the penalty's variance
    fixed there (one EP fit, no importance weighting)."""

    def fit_at(variance: float):
        fixed = fixed_penalty_problem(problem, c, variance)
        names = tuple(other.name for other in fixed.components)
        d = node.size
        given = GivenNodes(node[None], np.ones(1), np.zeros((1, d)), np.eye(d), 1.0, "lattice", node, names)
        return fit_accurate(fixed, importance_weights=False, given=given).thetas[0]

    return fit_at


def _first_look(problem, c: int, other_parameters: Hyperparameters, others, start_variance: float, seed: int):
    """The check at mean-field VB's values of the other variance parameters (their posteriors ``others``), or None
    where they number fewer than :data:`FIRST_LOOK_FROM` or EP fails there (the lattice then decides)."""
    if other_parameters.size < FIRST_LOOK_FROM:
        return None
    try:
        return _response_at(problem, c, other_parameters.start(others), start_variance, seed)
    except AccurateFitError:
        return None


def _response_at(problem, c: int, node: np.ndarray, start_variance: float, seed: int) -> SlopeResponse:
    """:func:`slope_response` at ``node`` (the other variance parameters' values): EP there at ``s0``, the
    conditional of ``t`` from its slopes, and the two fits at its tail points."""
    comp = problem.components[c]
    fit_at = _fit_at_node(problem, c, node)
    reference = fit_at(start_variance)
    squares = _slope_squares(reference, comp.index[:, 0], np.random.default_rng(seed))
    t = fine_grid(comp, squares)
    return slope_response(reference, (t, conditional_log_density(comp, squares, t)), fit_at, start_variance)


def _declined(response: SlopeResponse) -> str:
    """Why the check declines (the reason ``summary()`` gives after "and there")."""
    return (
        f"the slopes' posterior depends on the learned penalty (across its variance's range a mean leaves the line "
        f"in 1/sigma_u^2 by {response.curvature:.2f} of its SD, an SD changes by {100 * response.sd_change:.0f}%)"
    )


def _product_mixture(problem, c, reduced, t, log_cond, start_variance, record, response) -> IntegratedResult:
    """The mixture over ``(phi_r, t_j)`` (module docstring) as an :class:`IntegratedResult` of the full problem."""
    hyper = Hyperparameters(problem.components)
    at = int(hyper.starts[c])  # the penalty's place in phi
    weight = np.exp(log_cond[int(np.argmax(reduced.weights))])
    mean = float(np.sum(weight * t) / weight.sum())
    sd = float(np.sqrt(np.sum(weight * (t - mean) ** 2) / weight.sum()))
    width = CELL_SD * sd
    cells = np.arange(-int(np.ceil(AXIS_SD / CELL_SD)), int(np.ceil(AXIS_SD / CELL_SD)) + 1)
    t0 = np.log(start_variance)
    # each node's cell masses of t (the fine grid summed over each cell) and p(t0 | y, phi_r)
    edges = mean + width * (cells[:, None] + np.array([-0.5, 0.5]))
    spacing = t[1] - t[0]
    masses, at_t0 = [], []
    for log_density in log_cond:
        density = np.exp(log_density)
        cumulative = np.concatenate([[0.0], np.cumsum(density) * spacing])
        grid_edges = np.concatenate([t - spacing / 2, [t[-1] + spacing / 2]])
        cell = np.diff(np.interp(edges, grid_edges, cumulative), axis=1)[:, 0]
        masses.append(cell / cell.sum())
        at_t0.append(float(np.interp(t0, t, log_density)))
    log_outer = np.log(np.maximum(reduced.weights, 1e-300)) - np.array(at_t0)
    outer = np.exp(log_outer - log_outer.max())
    outer /= outer.sum()
    weights = (outer[:, None] * np.array(masses)).ravel()
    keep = weights > NEGLIGIBLE * weights.max()
    K, J = reduced.weights.size, cells.size
    nodes = np.insert(np.repeat(reduced.nodes, J, axis=0), at, np.tile(mean + width * cells, K), axis=1)
    step = reduced.step
    lattice = np.insert(np.repeat(reduced.lattice, J, axis=0), at, np.tile(cells * step, K), axis=1)
    axes = np.insert(np.insert(reduced.axes, at, 0.0, axis=0), at, 0.0, axis=1)
    axes[at, at] = width / step
    center = np.insert(reduced.center, at, mean)
    log_post = (np.repeat(reduced.node_log_posterior - np.array(at_t0), J)
                + np.log(np.maximum(np.array(masses).ravel(), 1e-300)) - np.log(width))  # fmt: skip
    # log p(y) = log p(y | s0) + log p(s0) + log sum_k w_k / p(s0 | y, phi_k), in t (the Jacobian cancels)
    log_prior_t0 = float(variance_prior.log_density(problem.components[c], np.array([start_variance]))[0]) + t0
    log_evidence = reduced.log_evidence + log_prior_t0 + float(logsumexp(np.log(reduced.weights) - np.array(at_t0)))
    covs = hyper.covariances_of_draws(nodes[keep])
    # each node's Gaussian: its phi_r's, the means carried along the response to lambda = 1/s (within its measured
    # range: beyond it the cells hold less than CHECK_TAIL of the mass)
    lam = np.clip(np.exp(-(mean + width * cells)), response.low, response.high)
    zero, identity = np.zeros(reduced.thetas[0].mean_d.size), np.eye(reduced.thetas[0].mean_d.size)
    thetas = [  # (the eliminated factor's covariances do not move: shared, not copied)
        replace(reduced.thetas[k].moved(zero, response.gradient * (lam[j] - 1.0 / start_variance), identity),
                cov_b=reduced.thetas[k].cov_b)
        for k in range(K) for j in range(J) if keep[k * J + j]
    ]  # fmt: skip
    return replace(
        reduced,
        nodes=nodes[keep],
        covariances=covs,
        weights=weights[keep] / weights[keep].sum(),
        thetas=thetas,
        node_log_posterior=log_post[keep],
        axes=axes,
        center=center,
        lattice=lattice[keep],
        hyperparameters=hyper,
        log_evidence=log_evidence,
        penalty_from_slopes=record,
    )


def given_at_fitted_penalty(result, given: GivenNodes) -> GivenNodes:
    """Cross-fitting's nodes (:func:`bayesvm.engines.hyper_grid.heaviest_nodes`) of a fit made here: the
    distinct values of the other variance parameters, each with its total weight, the penalty at ``s0`` (the fold
    fits then make one EP fit per value, as the full fit did; calibration reads the decision values, which the
    penalty's spread barely moves in this regime)."""
    c = penalty_index_of(result)
    at = int(result.hyperparameters.starts[c])
    others = np.delete(given.nodes, at, axis=1)
    keys, inverse = np.unique(np.round(others, 12), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    weights = np.bincount(inverse, weights=given.weights, minlength=keys.shape[0])
    first = np.array([np.flatnonzero(inverse == k)[0] for k in range(keys.shape[0])])
    t0 = np.log(result.penalty_from_slopes.fitted_at)
    nodes = given.nodes[first].copy()
    nodes[:, at] = t0
    lattice = given.lattice[first].copy()
    lattice[:, at] = (t0 - given.center[at]) / given.axes[at, at]
    order = np.argsort(weights, kind="stable")[::-1]
    return replace(given, nodes=nodes[order], weights=weights[order] / weights.sum(), lattice=lattice[order])


def penalty_index_of(result) -> int:
    """The penalty's component among an accurate fit's hyperparameters."""
    return next(c for c, comp in enumerate(result.hyperparameters.components) if comp.source == PENALTY_SOURCE)
