"""The hyperparameter grid of the accurate fit: where ``p(phi | y)`` is evaluated and how its nodes are weighted.

``phi`` are the variance parameters (:class:`bayesvm.engines.linear.ep.Hyperparameters`); ``log_post(phi)`` is EP's
``log p(y | phi) + log p(phi)`` up to a constant (Rue, Martino & Chopin 2009 integrate the same way).  One
hyperparameter: a walk uphill to the mode and a bounded line search; several: Nelder-Mead.  Then the Hessian's axes at
the mode, ``phi = phi* + axes @ z``, and a lattice in ``z`` (Riemann sum; Gauss-Hermite beyond
:data:`MAX_LATTICE` hyperparameters) grown until the mass beyond its edge is negligible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import logsumexp

from ..errors import BayesvmError


class AccurateFitError(BayesvmError):
    """The accurate fit could not be computed (EP failed everywhere); mean-field VB or Gibbs still work."""


#: Lattice nodes farther than this from the mode (in the standardised ``z``) are skipped: their
#: weight under the Gaussian approximation of ``p(phi | y)`` is below ``e^-8``.
MAX_RADIUS = 4.0


#: Hyperparameters integrated on a lattice (Riemann sum) up to this many, Gauss-Hermite beyond.
MAX_LATTICE = 3


GH_NODES = np.array([-np.sqrt(3.0), 0.0, np.sqrt(3.0)])


GH_WEIGHTS = np.array([1.0, 4.0, 1.0]) / 6.0


def lattice_design(d: int, n_nodes: int, span: float) -> tuple[str, np.ndarray, np.ndarray, float]:
    """``(design, z nodes, log quadrature weights in z, lattice step)``."""
    if d == 1:
        lattice = np.linspace(-span, span, n_nodes)[:, None]
    elif d <= MAX_LATTICE:
        line = np.linspace(-3.0, 3.0, 7 if d == 2 else 5)
        lattice = np.stack(np.meshgrid(*([line] * d), indexing="ij"), axis=-1).reshape(-1, d)
        step = float(line[1] - line[0])
        lattice = lattice[np.sum(lattice**2, axis=1) <= MAX_RADIUS**2]
        return "lattice", lattice, np.zeros(lattice.shape[0]), step
    else:
        grids = np.meshgrid(*([np.arange(3)] * d), indexing="ij")
        index = np.stack(grids, axis=-1).reshape(-1, d)
        z = GH_NODES[index]
        # omega_GH(z) / N(z; 0, I): the node's weight is this times p(phi | y)
        log_w = np.sum(np.log(GH_WEIGHTS[index]), axis=1) + 0.5 * np.sum(z**2, axis=1)
        return "gauss-hermite", z, log_w, float(GH_NODES[2])
    return "lattice", lattice, np.zeros(lattice.shape[0]), float(lattice[1, -1] - lattice[0, -1])


#: One hyperparameter, the variance shared by at least this many coefficient vectors (levels of a term), is integrated
#: on :data:`WIDE_LINE_NODES` nodes instead of 21: its posterior is then close to Gaussian on the scale of its
#: standard deviation, and the Riemann sum of a smooth integrand with a Gaussian weight converges exponentially in the
#: spacing (at a spacing of one SD, the lattices' of two and three hyperparameters, its relative error is about
#: ``exp(-2 pi^2)``).  ``python -m benchmarks.accurate_scale`` compares the two lines.
WIDE_LINE_FROM_LEVELS = 1_000
#: ... over the same span (+-4 SDs: a spacing of one SD); the tails are grown by the same rule.
WIDE_LINE_NODES = 9
#: The nodes of the one-hyperparameter line otherwise (a spacing of 0.4 SD).
LINE_NODES = 21


def line_nodes(components) -> int:
    """The nodes of the one-hyperparameter line for variance components ``components`` (:data:`LINE_NODES`, or
    :data:`WIDE_LINE_NODES` for a single variance shared by :data:`WIDE_LINE_FROM_LEVELS` vectors or more)."""
    if len(components) == 1 and components[0].k == 1 and components[0].n_levels >= WIDE_LINE_FROM_LEVELS:
        return WIDE_LINE_NODES
    return LINE_NODES


@dataclass
class HyperGrid:
    """Nodes of the hyperparameters ``phi = center + axes @ z`` and their normalised weights (see
    :func:`integrate`); ``keep`` marks the nodes whose weight matters."""

    nodes: np.ndarray
    lattice: np.ndarray
    logp: np.ndarray
    log_rule: np.ndarray
    weights: np.ndarray
    keep: np.ndarray
    axes: np.ndarray
    step: float
    design: str
    center: np.ndarray
    tails_ok: bool

    @property
    def log_evidence(self) -> float:
        return grid_log_evidence(self.logp, self.log_rule, self.axes, self.step, self.design)


def integrate(
    log_post, start: np.ndarray, start_search: np.ndarray, n_nodes: int = 21, span: float = 4.0, many=None
) -> HyperGrid:
    """Integrate over hyperparameters ``phi`` given ``log p(phi | y)`` up to a constant (module docstring).

    One hyperparameter: a walk uphill from ``start`` until it turns (:func:`bracket`), then a bounded line
    search; several: Nelder-Mead from ``start_search``.  Then the axes of the Hessian at the mode, the
    lattice (or Gauss-Hermite) nodes, evaluated outwards from the mode, and a lattice grown until its tails
    are negligible.  ``log_post`` is called once per node (the callers cache their EP fits); ``many(phis)``, where
    given, evaluates a list of nodes that do not depend on each other (the finite-difference stencil, the lattice,
    each wave of its extension) in the list's order, e.g. several EP fits in one pass over out-of-core data.
    """
    many = sequential(log_post) if many is None else many
    d = int(np.size(start))
    if d == 1:
        lo, hi = bracket(log_post, float(start[0]))
        opt = minimize_scalar(
            lambda t: -log_post(t), bounds=(lo - 0.5, hi + 0.5), method="bounded", options={"xatol": 1e-3}
        )
        phi_star = np.array([float(opt.x)])
    else:
        start_phi = np.asarray(start_search, dtype=float)
        simplex = np.vstack([start_phi, start_phi + 0.5 * np.eye(d)])  # steps of the scale of posterior SDs
        opt = minimize(
            lambda t: -log_post(t),
            start_phi,
            method="Nelder-Mead",
            options={"xatol": 1e-2, "fatol": 1e-3, "maxiter": 200 * d, "initial_simplex": simplex},
        )
        phi_star = np.asarray(opt.x, dtype=float)
    axes = hyper_axes(log_post, phi_star, many)  # phi = phi* + axes @ z, z ~ N(0, I) near the mode
    design, lattice, log_rule, step = lattice_design(d, n_nodes, span)
    nodes = phi_star + lattice @ axes.T
    logp = np.empty(nodes.shape[0])
    outwards = np.argsort(np.sum(lattice**2, axis=1), kind="stable")  # outwards from the mode
    logp[outwards] = many(list(nodes[outwards]))
    tails_ok = True
    if design == "lattice":  # heavy tails: extend the lattice until the mass beyond its edge is negligible
        lattice, logp, tails_ok = extend_lattice(
            lattice,
            logp,
            step,
            lambda z: log_post(phi_star + axes @ z),
            lambda zs: many([phi_star + axes @ z for z in zs]),
        )
        nodes = phi_star + lattice @ axes.T
        log_rule = np.zeros(lattice.shape[0])
    if not np.any(np.isfinite(logp + log_rule)):
        raise AccurateFitError("accurate VB: expectation propagation converged at no node of the variance parameters")
    shape = HyperGrid(nodes, lattice, logp, log_rule, None, None, axes, step, design, phi_star, tails_ok)
    return weighted_grid(nodes, lattice, logp, log_rule, shape, tails_ok)


@dataclass(frozen=True)
class GivenNodes:
    """Nodes of the variance parameters to fit at instead of integrating (:func:`given_grid`): ``phi`` of each node,
    its weight, its lattice point ``z`` and the grid's shape (``axes``, ``step``, ``design``, ``center``), and the
    components' names they belong to (a problem with other components integrates as usual).

    Cross-fitting's fold fits take the full fit's heaviest nodes (:func:`heaviest_nodes`): the variance parameters
    are learned once, from every row, and each fold refits the coefficients given them."""

    nodes: np.ndarray
    weights: np.ndarray
    lattice: np.ndarray
    axes: np.ndarray
    step: float
    design: str
    center: np.ndarray
    components: tuple[str, ...]


#: :func:`heaviest_nodes` keeps the heaviest nodes that together hold this share of the weight.
GIVEN_MASS = 0.999


def heaviest_nodes(result, mass: float = GIVEN_MASS) -> GivenNodes:
    """The nodes of an accurate fit's output (``IntegratedResult``) holding ``mass`` of its weight, heaviest first,
    with those weights renormalised."""
    order = np.argsort(result.weights, kind="stable")[::-1]
    count = int(np.searchsorted(np.cumsum(result.weights[order]), mass * result.weights.sum()) + 1)
    chosen = order[: min(count, order.size)]
    weights = result.weights[chosen] / result.weights[chosen].sum()
    names = tuple(comp.name for comp in result.hyperparameters.components)
    return GivenNodes(result.nodes[chosen], weights, result.lattice[chosen], result.axes, result.step, result.design,
                      result.center, names)  # fmt: skip


def sequential(log_post):
    """``many(phis)``: ``log_post`` at each of ``phis`` in turn."""
    return lambda phis: np.array([log_post(phi) for phi in phis], dtype=float)


def given_grid(log_post, given: GivenNodes, many=None) -> HyperGrid:
    """The grid of ``given``'s nodes with its weights: EP's ``log p(phi | y)`` evaluated at each (heaviest first, so
    each warm-starts from a converged neighbour) for the record, the weights as given where EP converged (a node where
    it failed carries none, and the fit is reported as not converged)."""
    logp = (sequential(log_post) if many is None else many)(list(given.nodes))
    if not np.any(np.isfinite(logp)):
        raise AccurateFitError("accurate VB: expectation propagation converged at none of the given nodes")
    weights = np.where(np.isfinite(logp), given.weights, 0.0)
    weights = weights / weights.sum()
    log_rule = np.zeros(logp.size)
    return HyperGrid(given.nodes, given.lattice, logp, log_rule, weights, weights > 0, given.axes, given.step,
                     given.design, given.center, True)  # fmt: skip


#: The one-hyperparameter search walks in steps of this size (in ``phi``, a log variance: a factor ``e^0.5``).
BRACKET_STEP = 0.5
#: ... and takes at most this many steps before settling for the last point.
MAX_BRACKET_STEPS = 80


def bracket(log_post, start: float) -> tuple[float, float]:
    """``(lo, hi)`` around a local maximum of ``log_post``: from ``start`` a walk in steps of :data:`BRACKET_STEP`
    uphill (first upwards: mean-field VB shrinks variances, so the mode usually lies above its value) until the next
    step falls; the maximum then lies in ``(lo, hi)``, the neighbours of the best point.  Each step costs one EP fit;
    the walk stops where ``log p(phi | y)`` turns, so on large data (a sharp posterior) it takes three or four fits
    where a fixed scan of the plausible range took nine, the farthest of them the slowest to converge."""
    points = {start: log_post(start)}
    up = start + BRACKET_STEP
    points[up] = log_post(up)
    # uphill; where EP failed at both (-inf), downwards, where variances are small and EP converges most easily
    step = BRACKET_STEP if points[up] > points[start] or points[up] == points[start] > -np.inf else -BRACKET_STEP
    best = up if step > 0 else start
    for _ in range(MAX_BRACKET_STEPS):
        ahead = best + step
        if ahead not in points:
            points[ahead] = log_post(ahead)
        if not points[ahead] > points[best]:
            break
        best = ahead
    return best - BRACKET_STEP, best + BRACKET_STEP


def weighted_grid(nodes, lattice, logp, log_rule, shape: HyperGrid, tails_ok: bool) -> HyperGrid:
    """The grid of ``nodes`` with log posteriors ``logp`` normalised into weights; the axes, step, design and centre
    are ``shape``'s.  A lattice drops the nodes below ``1e-10`` of the mass."""
    log_weights = logp + log_rule
    weights = np.exp(log_weights - log_weights.max())
    weights /= weights.sum()
    keep = weights > 1e-10 if shape.design == "lattice" else weights > 0
    return HyperGrid(
        nodes, lattice, logp, log_rule, weights, keep, shape.axes, shape.step, shape.design, shape.center, tails_ok
    )


#: A Gauss-Hermite rule is re-centred when its nodes' weights (reweighted by importance-sampled evidence) put the
#: mean of ``z`` at least this far from the rule's centre (in the rule's standardised units), ...
RECENTRE_SHIFT = 0.25
#: ... its axes rescaled by the weighted spread of ``z``, each direction's scale kept within this factor of 1.
RECENTRE_SCALE = 2.0


def recentred_rule(grid: HyperGrid, logp: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(center, axes)`` of a Gauss-Hermite rule matched to the weighted moments of ``z`` under ``logp`` (a better
    ``log p(phi | y)`` at ``grid``'s nodes than the one the rule was centred on), or None where the rule's centre is
    close enough (:data:`RECENTRE_SHIFT`).

    The 3-point rule integrates ``g(z) N(z; 0, I)`` with ``g = p / N`` exactly for polynomial ``g`` of low degree;
    where the reweighted posterior's mean has moved from the rule's centre, ``g`` grows towards one edge of the rule
    and three points a side cannot follow it (simulated correlated slopes: variances 10% low).  Centred on the new
    moments, ``g`` is nearly flat again.
    """
    log_weights = logp + grid.log_rule
    if grid.design != "gauss-hermite" or not np.any(np.isfinite(log_weights)):
        return None
    weights = np.exp(log_weights - np.max(log_weights))
    weights /= weights.sum()
    mean = weights @ grid.lattice
    if np.linalg.norm(mean) < RECENTRE_SHIFT:
        return None
    centred = grid.lattice - mean
    spread = (centred * weights[:, None]).T @ centred
    values, vectors = np.linalg.eigh(spread)
    # (the 3-point rule's second moment is exact for a Gaussian; a direction outside the limits is kept at them)
    scales = np.sqrt(np.clip(values, RECENTRE_SCALE**-2, RECENTRE_SCALE**2))
    return grid.center + grid.axes @ mean, grid.axes @ (vectors * scales)


def grid_log_evidence(logp: np.ndarray, log_rule: np.ndarray, axes: np.ndarray, step: float, design: str) -> float:
    """``log p(y) = log int p(y | phi) p(phi) d phi`` from EP's ``log p(y | phi)`` at the nodes.

    ``phi = phi* + axes @ z``, so ``d phi = |det axes| dz``.  On the lattice each node stands for its cell
    of volume ``step^d``; the Gauss-Hermite rule integrates ``g(z) N(z; 0, I)`` with ``g = p / N``, and
    ``log_rule`` already holds ``log omega + |z|^2 / 2``, leaving ``(d / 2) log 2 pi``.  Nodes where EP
    failed contribute nothing (the fit is then reported as not converged).
    """
    d = axes.shape[0]
    log_volume = float(np.linalg.slogdet(axes)[1])
    if design == "lattice":
        log_volume += d * np.log(step)
    else:
        log_volume += 0.5 * d * np.log(2.0 * np.pi)
    return float(logsumexp(logp + log_rule)) + log_volume


#: The lattice grows until the posterior mass beyond its edge, extrapolated from how fast the outer shells'
#: masses fall, is below this fraction of the mass inside ...
TAIL_MASS = 1e-3


#: ... adding at most this many steps beyond the initial span on each side (each step one EP fit per node),
#: and stopping before the lattice would exceed this many nodes (a shell of a 3-dimensional ball at 20 steps
#: holds thousands): a tail that needs more is reported as cut off (``fit.converged`` False).  Two random
#: intercepts whose variances are near zero, with a learned penalty, need 600-750 nodes (simulated, 150 and 400
#: rows, three seeds each; Fair's affairs from statsmodels, 2,000 rows, 585): at 300 every one of them was cut off.
MAX_EXTENSION_STEPS = 40


MAX_LATTICE_NODES = 1000


#: With several hyperparameters a new shell node is evaluated only next to a node (diagonals included) that holds
#: at least this fraction of the lattice's mass, so that the heavy tail of one direction (a variance near zero) does
#: not grow the whole ball, whose other nodes are negligible (a 120-row random-intercept fit with a learned penalty:
#: 207 EP fits on the shells, 104 of them below ``1e-10`` of the mass).  A skipped node's neighbours inside hold
#: less than this each, so together the skipped nodes of a shell hold far less than :data:`TAIL_MASS`.
FRONTIER_MASS = 1e-6


#: The narrowest scale of a direction of ``phi`` the axes may take: below it a direction counts as known exactly.
MIN_SCALE = 1e-4
#: The widest: beyond it a direction counts as flat (the lattice then spans the prior's plausible range in steps of
#: this many units of ``phi``).
MAX_SCALE = 20.0


def hyper_axes(log_post, phi_star: np.ndarray, many=None) -> np.ndarray:
    """``A`` with ``A A' = H^{-1}`` for the Hessian ``H`` of ``-log p(phi | y)`` at the mode.

    A finite-difference step that reaches a point where EP failed (``-inf``), or a flat or
    indefinite direction, must not collapse the lattice onto the mode: the step is widened, and a
    direction's scale is kept between :data:`MIN_SCALE` and :data:`MAX_SCALE` in ``phi``.  Where a direction is
    narrower than half the step (many levels: ``p(phi | y)`` sharpens as one over the square root of their
    number), the Hessian is taken again with a step of that scale, so the lattice resolves the posterior with all
    its nodes instead of the few that a floor on the scale would leave inside it.  ``many``: as :func:`integrate`'s,
    given the stencil of each Hessian first.
    """
    many = sequential(log_post) if many is None else many
    for h in (0.05, 0.2, 0.5):
        hessian = _hessian(log_post, phi_star, h, many)
        if np.all(np.isfinite(hessian)):
            break
    else:
        hessian = -np.eye(phi_star.size)
    eigval, eigvec = np.linalg.eigh(-hessian)
    narrowest = 1.0 / np.sqrt(max(float(eigval.max()), 1.0 / MAX_SCALE**2))
    if narrowest < 0.5 * h:
        finer = _hessian(log_post, phi_star, max(narrowest, MIN_SCALE), many)
        if np.all(np.isfinite(finer)):
            eigval, eigvec = np.linalg.eigh(-finer)
    eigval = np.clip(eigval, 1.0 / MAX_SCALE**2, 1.0 / MIN_SCALE**2)
    return eigvec / np.sqrt(eigval)


def extend_lattice(
    lattice: np.ndarray, logp: np.ndarray, step: float, log_post_z, many_z=None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Add shells of lattice nodes (same spacing) until the mass beyond the edge is negligible.

    The mass beyond the edge is extrapolated geometrically from the two outermost shells: with ``m_1``
    the outermost shell's mass and ``rho = m_1 / m_0`` its ratio to the shell inside, the tail holds about
    ``m_1 rho / (1 - rho)``; the lattice grows while that exceeds :data:`TAIL_MASS` of the total (or
    ``rho >= 1``).  A heavy tail (a weak penalty under quasi-separation, a variance near zero under a
    half-t prior) is followed as far as it carries mass.  New nodes are the core's own grid points (multiples of
    ``step``); with several hyperparameters a shell is added in waves, each wave the grid points next to a node
    holding at least :data:`FRONTIER_MASS` of the mass, so the lattice grows where the tail lies.  Returns the
    lattice, its log posteriors and whether the tail became negligible.  ``many_z(zs)``: ``log_post_z`` at several
    new nodes (:func:`integrate`'s ``many``).
    """
    many_z = sequential(log_post_z) if many_z is None else many_z
    d = lattice.shape[1]
    ball = d > 1

    def radii(points: np.ndarray) -> np.ndarray:
        return np.sqrt(np.sum(points**2, axis=1)) if ball else np.abs(points[:, 0])

    def relative_weights(logp: np.ndarray) -> np.ndarray:
        finite = np.isfinite(logp)
        top = float(np.max(logp[finite])) if finite.any() else 0.0
        return np.where(finite, np.exp(np.where(finite, logp, top) - top), 0.0)

    radius = float(np.max(radii(lattice)))
    for _ in range(MAX_EXTENSION_STEPS + 1):
        weights = relative_weights(logp)
        r = radii(lattice)
        outer = r > radius - step / 2
        inner = (r > radius - 1.5 * step) & ~outer
        m1, m0 = float(weights[outer].sum()), float(weights[inner].sum())
        rho = m1 / m0 if m0 > 0 else np.inf
        tail = m1 * rho / (1.0 - rho) if rho < 1 else np.inf
        if m1 <= 1e-12 * weights.sum() or tail <= TAIL_MASS * weights.sum():
            return lattice, logp, True
        if _ >= MAX_EXTENSION_STEPS:
            break
        radius += step
        if not ball:
            # a side whose outermost node failed (EP did not converge there: no mass, and the fit is reported as not
            # converged) is not extended: farther out along it EP fails again, each failure costing every attempt of
            # EP_ATTEMPTS
            sides = [
                s for s in (-1.0, 1.0) if np.isfinite(logp[np.argmin(np.abs(lattice[:, 0] - s * (radius - step)))])
            ]
            new = np.array([[s * radius] for s in sides])
            if not sides or lattice.shape[0] + len(sides) > MAX_LATTICE_NODES:
                break
            lattice, logp = np.vstack([lattice, new]), np.concatenate([logp, many_z(list(new))])
            continue
        # the nodes of the same lattice (multiples of step) out to the new radius that are not in it yet, taken
        # in waves: each wave the candidates next to a node that holds at least FRONTIER_MASS of the mass
        reach = int(np.ceil(radius / step + 0.5))
        grid = step * np.stack(np.meshgrid(*([np.arange(-reach, reach + 1)] * d), indexing="ij"), axis=-1)
        grid = grid.reshape(-1, d)
        known = {tuple(k) for k in np.rint(lattice / step).astype(int)}
        fresh = np.array([tuple(k) not in known for k in np.rint(grid / step).astype(int)])
        candidates = grid[fresh & (radii(grid) <= radius + step / 2 + 1e-9)]
        first_wave = True
        while candidates.size:
            near = _near_heavy(candidates, lattice, weights, step)
            if not near.any():
                if not first_wave:
                    break
                near[:] = True  # the shell as a whole still carries the tail the extrapolation saw
            if lattice.shape[0] + int(near.sum()) > MAX_LATTICE_NODES:
                return lattice, logp, False
            wave, candidates = candidates[near], candidates[~near]
            lattice, logp = np.vstack([lattice, wave]), np.concatenate([logp, many_z(list(wave))])
            weights = relative_weights(logp)
            first_wave = False
    return lattice, logp, False


def _near_heavy(candidates: np.ndarray, lattice: np.ndarray, weights: np.ndarray, step: float) -> np.ndarray:
    """Which ``candidates`` are next to (diagonals included) a lattice node with at least :data:`FRONTIER_MASS` of
    the mass."""
    heavy = lattice[weights >= FRONTIER_MASS * weights.sum()]
    reach = step * np.sqrt(lattice.shape[1]) * (1.0 + 1e-9)
    return np.any(np.sum((candidates[:, None, :] - heavy[None, :, :]) ** 2, axis=2) <= reach**2, axis=1)


def _hessian(func, x: np.ndarray, h: float, many=None) -> np.ndarray:
    """Central finite-difference Hessian of a scalar function (non-finite where a point is ``-inf``: EP failed there,
    and :func:`hyper_axes` widens the step); ``many`` evaluates the whole stencil first, in the order below."""
    with np.errstate(invalid="ignore"):  # -inf - (-inf)
        return _finite_differences(func, x, h, many)


def _stencil(x: np.ndarray, h: float) -> list[np.ndarray]:
    """The points :func:`_finite_differences` evaluates, in its order."""
    d, points = x.size, [x]
    for i in range(d):
        e_i = np.eye(d)[i] * h
        points += [x + e_i, x - e_i]
        for j in range(i):
            e_j = np.eye(d)[j] * h
            points += [x + e_i + e_j, x + e_i - e_j, x - e_i + e_j, x - e_i - e_j]
    return points


def _finite_differences(func, x: np.ndarray, h: float, many=None) -> np.ndarray:
    d = x.size
    values = iter((sequential(func) if many is None else many)(_stencil(x, h)))
    out = np.empty((d, d))
    f0 = next(values)
    for i in range(d):
        out[i, i] = (next(values) - 2.0 * f0 + next(values)) / h**2
        for j in range(i):
            out[i, j] = out[j, i] = (next(values) - next(values) - next(values) + next(values)) / (4.0 * h * h)
    return out
