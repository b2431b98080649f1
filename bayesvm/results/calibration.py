"""Calibrated predictive probabilities: one definition for every fit.

The Bayesian SVM's decision function ``f`` has a posterior (VB, EP, Gibbs, EM's mode, a kernel's ``q(f)``)
but no likelihood that turns it into a probability: the hinge pseudo-likelihood normalised over the two
classes, ``expit(4 f)`` inside the margin, is a fixed, steep link nothing in the data sets (it is kept as
``predict(kind="pseudo")``).  ``predict(kind="prob")`` is instead

    P(y = +1 | x) = E_theta E_s  Phi( g(m) / sqrt(1 + (g(m) / m)^2 (c v + s)) ),               (1)

where ``m, v`` are the posterior mean and variance of ``f(x)``; ``s`` is the variance a new group level's
random effect adds (``z' Sigma z`` integrated over the posterior of ``Sigma``; 0 for seen levels); and
``theta`` is the *calibration map*: an increasing ``g`` with ``g(0) = 0`` and its own shape on each side of
the decision boundary (imbalanced classes are not equally sure on both sides), and a factor ``c`` on the
posterior variance of ``f`` (which the approximations and the pseudo-likelihood get wrong in different
directions).  For the linear map ``g(f) = a_side f`` and a fixed ``theta``, (1) is exactly
``P(a f + e > 0)`` with ``e ~ N(0, 1)`` and ``f ~ N(m, c v + s)``: the probit model on the decision scale,
as Wenzel et al. (2017, section 4.4) use with ``a = c = 1``.  The flexible map lets ``log g'`` step
smoothly at ``|f| = 0.5, 1, 1.5``; the adaptive map at five quantiles of ``|m|`` on each side (a hinge fit
can squeeze ``f`` into narrow bands where the risk still varies steeply).  Both propagate the variance
through the secant slope ``g(m) / m`` in place of ``a`` (so that a wide predictive, such as a new group
level's, tends to ``Phi(m / sqrt(V))`` whatever the bends).

*How theta is learned.*  Like ``SVC(probability=True)`` (Platt 1999), from out-of-sample predictions of the
training rows: the same model is refitted on K - 1 folds and predicts the held-out fold
(:mod:`bayesvm.results.crossfit`), giving ``(m_i, v_i, E s_i, y_i)`` for every row.  Unlike Platt scaling, theta
gets a posterior: the probit log-likelihood of those predictions plus normal priors centred on the unit
probit link (``log a, log c ~ N(0, 1)``, each step of ``log g'`` ``~ N(0, 0.75^2)``), a Laplace fit per map
family, the three families averaged by their Laplace evidence, and (1) averaged over each family's posterior
with fixed antithetic draws.

*Why it never flips a class.*  ``g(m)`` has the sign of ``m`` for every ``theta`` and the denominator is
positive, so every term of (1) is on the same side of 1/2 as ``m``: ``predict(kind="class")`` is the sign
of the posterior mean of ``f`` for every fit and engine, and ``prob > 0.5`` agrees with it by construction
(no intercept, unlike Platt's sigmoid, which is how scikit-learn's ``predict`` and ``predict_proba`` come to
disagree).

*Class weights.*  A fit whose rows weigh ``omega_y`` by class (:mod:`bayesvm.model.class_weights`) puts its boundary
where the *weighted* classes balance, so the map is learned with each prediction's probit log-likelihood times its
row's weight: it is ``P_w(y = +1 | f)`` in the population with class ``y`` counted ``omega_y`` times, where ``f = 0``
is the even odds that the map's missing intercept assumes.  Bayes' rule takes it back to the data's classes,
``P = (P_w / omega_+) / (P_w / omega_+ + (1 - P_w) / omega_-)`` (the prior correction of case-control sampling), so
the probabilities stay calibrated while the classes follow the weighted boundary; they then part at ``1/2``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize
from scipy.special import expit, log_ndtr, ndtr

#: Prior SD of ``log a`` and ``log c`` (centred at 0: the unit probit link on ``f``)
PRIOR_SD = 1.0
#: Prior SD of each step of ``log g'`` at a knot of the flexible map (0: the linear map)
STEP_PRIOR_SD = 0.75
#: Knots of the flexible map on ``|f|`` (the hinge's margin is at 1) and the width of their smooth steps
KNOTS = np.array([0.5, 1.0, 1.5])
KNOT_WIDTH = 0.1
#: Most predictions a map is learned from (:func:`fit_calibration_map`), and the seed of the subset beyond it
MAP_MAX_ROWS = 50_000
MAP_SUBSET_SEED = 2017
#: Bounds on the prior centre of ``log a`` set from the predictions' scale (:func:`decision_scale_center`)
SCALE_CENTER_BOUNDS = (-12.0, 5.0)
#: Quantiles of ``|m|`` on each side where the adaptive map's knots sit, and the smallest share of rows a
#: side needs for them (fewer: no adaptive map)
ADAPTIVE_QUANTILES = np.arange(1, 6) / 6.0
ADAPTIVE_MIN_ROWS = 60
#: Draws from each map's Laplace posterior that the probability averages over (antithetic pairs, fixed)
MAP_DRAWS = 32
FAMILIES = ("linear", "flexible", "adaptive")
_GRID = np.linspace(0.0, 6.0, 1201)
_GRID_STEP = float(_GRID[1] - _GRID[0])
_FIXED_KNOTS = np.vstack([KNOTS, np.full(KNOTS.size, KNOT_WIDTH)])  # (location, width) per knot
_HALF = np.random.default_rng(20171).standard_normal((MAP_DRAWS // 2, 1 + 4 * ADAPTIVE_QUANTILES.size))
_UNIT_DRAWS = np.vstack([_HALF, -_HALF])


def _width(family: str, knots: int = KNOTS.size) -> int:
    return 3 if family == "linear" else 3 + 2 * knots


def _prior_sd(family: str, knots: int = KNOTS.size) -> np.ndarray:
    if family == "linear":
        return np.full(3, PRIOR_SD)
    side = np.r_[PRIOR_SD, np.full(knots, STEP_PRIOR_SD)]
    return np.r_[side, side, PRIOR_SD]


def adaptive_knots(mean: np.ndarray) -> np.ndarray | None:
    """Knots of the adaptive map: ``(side, location/width, knot)``, at quantiles of ``|m|`` on each side.

    A hinge fit can squeeze ``f`` into a narrow band (a dominant binary predictor puts most rows at
    ``|f| ~ 1``, and the risk then varies steeply within the band); fixed knots cannot follow that, knots at
    the data's quantiles can.  Each knot's step is as wide as 0.3 of the median spacing of its side's knots
    (at least 0.01, twice the integration grid's step), so neighbouring steps overlap little.  ``None`` when a side has fewer than
    ``ADAPTIVE_MIN_ROWS`` rows or its quantiles are not distinct.
    """
    sides = []
    for rows in (mean > 0, ~(mean > 0)):
        x = np.abs(mean[rows])
        if x.size < ADAPTIVE_MIN_ROWS:
            return None
        where = np.quantile(x, ADAPTIVE_QUANTILES)
        spacing = np.diff(where)
        if np.any(spacing <= 1e-9) or where[-1] >= _GRID[-1]:
            return None
        sides.append(np.vstack([where, np.full(where.size, max(0.3 * float(np.median(spacing)), 0.01))]))
    return np.stack(sides)


def _side_link(params: np.ndarray, x: np.ndarray, knots: np.ndarray = _FIXED_KNOTS) -> tuple[np.ndarray, np.ndarray]:
    """``g`` and ``g'`` at ``x = |m| >= 0`` for one side: ``log g'(x) = log a + sum_k eta_k step((x - t_k) / w_k)``.

    ``knots`` holds the locations ``t_k`` (row 0) and widths ``w_k`` (row 1); ``g`` is the integral of
    ``g'`` from 0 (trapezoids on a fixed grid, linear beyond it).
    """
    if params.size == 1:
        slope = np.exp(params[0])
        return slope * x, np.full_like(x, slope)
    steps = expit((_GRID[:, None] - knots[0][None, :]) / knots[1][None, :])
    log_slope = params[0] + steps @ params[1:]
    slope = np.exp(log_slope)
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (slope[1:] + slope[:-1]) * np.diff(_GRID))])
    cell, frac = _grid_cells(x)
    g = integral[cell] + frac * (integral[cell + 1] - integral[cell]) + slope[-1] * np.maximum(x - _GRID[-1], 0.0)
    return g, slope[cell] + frac * (slope[cell + 1] - slope[cell])


def _side_link_jacobian(params: np.ndarray, x: np.ndarray, knots: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`_side_link`'s ``g`` and ``g'`` at ``x``, and ``d g / d params`` (rows, params).

    Linear: ``g = a x``, so ``d g / d log a = g``.  Bent: ``g'`` on the grid is ``exp(log g')`` with
    ``d g'_j / d params = g'_j (1, step_j)``; the trapezoid integral is linear in the grid's ``g'``, so its
    derivative is the same cumulative sum of the derivatives, interpolated at ``x`` as ``g`` is.
    """
    if params.size == 1:
        g, slope = _side_link(params, x, knots)
        return g, slope, g[:, None]
    steps = expit((_GRID[:, None] - knots[0][None, :]) / knots[1][None, :])
    slope = np.exp(params[0] + steps @ params[1:])
    d_slope = slope[:, None] * np.hstack([np.ones((_GRID.size, 1)), steps])  # (grid, params)
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (slope[1:] + slope[:-1]) * np.diff(_GRID))])
    d_integral = np.vstack(
        [np.zeros((1, params.size)), np.cumsum(0.5 * (d_slope[1:] + d_slope[:-1]) * np.diff(_GRID)[:, None], axis=0)]
    )
    cell, frac = _grid_cells(x)
    beyond = np.maximum(x - _GRID[-1], 0.0)
    g = integral[cell] + frac * (integral[cell + 1] - integral[cell]) + slope[-1] * beyond
    d_g = d_integral[cell] + frac[:, None] * (d_integral[cell + 1] - d_integral[cell]) + np.outer(beyond, d_slope[-1])
    return g, slope[cell] + frac * (slope[cell + 1] - slope[cell]), d_g


def _grid_cells(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cell of the uniform ``_GRID`` holding each ``min(x, 6)`` and the position in it (what ``np.interp``
    finds by bisection, here by one division: the optimiser calls this a few thousand times per map)."""
    position = np.minimum(x, _GRID[-1]) / _GRID_STEP
    cell = np.minimum(position.astype(np.intp), _GRID.size - 2)
    return cell, position - cell


def _split(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(positive side, negative side, log c)`` parameters of either family."""
    half = (theta.size - 1) // 2
    return theta[:half], theta[half : 2 * half], float(theta[-1])


def probit_probability(
    mean: np.ndarray, var: np.ndarray, theta: np.ndarray, new_var=None, knots: np.ndarray | None = None
) -> np.ndarray:
    """Equation (1) for one map ``theta`` (any family): ``Phi(g(m) / sqrt(1 + (g(m) / m)^2 (c v + s)))``.

    ``new_var`` is ``None``, an array of ``E[s]`` per row, or ``(values (rows, S), weights (S,))``;
    ``knots`` the adaptive map's knots per side (:func:`adaptive_knots`; ``None``: the fixed knots).
    """
    positive, negative, log_c = _split(theta)
    out = np.empty(mean.shape)
    if new_var is None or isinstance(new_var, np.ndarray):
        s_values, s_weights = (np.zeros((mean.size, 1)) if new_var is None else new_var[:, None]), np.ones(1)
    else:
        s_values, s_weights = new_var
    side_knots = (_FIXED_KNOTS, _FIXED_KNOTS) if knots is None else knots
    for params, rows, sign, where in (
        (positive, mean > 0, 1.0, side_knots[0]),
        (negative, ~(mean > 0), -1.0, side_knots[1]),
    ):
        if rows.any():
            x = np.abs(mean[rows])
            g, slope = _side_link(params, x, where)
            # the secant slope g(m) / m carries the spread: exact for the linear map, and for a wide
            # predictive (a new group level) it tends to Phi(m / sqrt(V)) whatever the map's local bends
            slope = np.where(x > 1e-12, g / np.maximum(x, 1e-300), slope)
            spread = np.exp(log_c) * var[rows, None] + s_values[rows]
            out[rows] = ndtr(sign * g[:, None] / np.sqrt(1.0 + slope[:, None] ** 2 * spread)) @ s_weights
    return out


def _negative_log_posterior(
    theta: np.ndarray, mean, var, new_var, y, prior_sd, knots=None, center=0.0, row_weights=None
) -> float:
    """``-log p(y | theta) - log p(theta)`` (the prior's normalising constant included, for the evidence); with
    ``row_weights`` each row's log-likelihood times its weight (module docstring, class weights)."""
    p = probit_probability(mean, var, theta, np.broadcast_to(new_var, mean.shape).astype(float), knots)
    log_p = np.log(np.clip(np.where(y > 0, p, 1.0 - p), 1e-300, 1.0))
    if row_weights is not None:
        log_p = row_weights * log_p
    prior = 0.5 * np.sum(((theta - center) / prior_sd) ** 2) + np.sum(np.log(np.sqrt(2.0 * np.pi) * prior_sd))
    return float(-log_p.sum() + prior)


def _objective_and_gradient(
    theta: np.ndarray, mean, var, new_var, y, prior_sd, knots=None, center=0.0, row_weights=None
):
    """:func:`_negative_log_posterior` and its gradient in ``theta`` (for L-BFGS and the Hessian).

    Per row ``z = sign g / sqrt(D)``, ``D = 1 + (g / m)^2 (c v + s)`` with the secant slope ``g / m``, so
    ``dz/dg = sign D^(-3/2)`` (the secant moves with ``g``) and ``dz/d log c = -sign g (g / m)^2 c v / (2 D^(3/2))``;
    below ``|m| = 1e-12`` the tangent slope stands in for the secant (held fixed: ``dz/dg = sign D^(-1/2)``).
    ``-d log Phi(y z) = -y phi(z) / Phi(y z) dz``, the ratio taken on the log scale.
    """
    positive, negative, log_c = _split(theta)
    new_var = np.broadcast_to(new_var, mean.shape).astype(float)
    side_knots = (_FIXED_KNOTS, _FIXED_KNOTS) if knots is None else knots
    half = positive.size
    grad = np.zeros(theta.size)
    value = 0.0
    c = np.exp(log_c)
    for params, rows, sign, where, offset in (
        (positive, mean > 0, 1.0, side_knots[0], 0),
        (negative, ~(mean > 0), -1.0, side_knots[1], half),
    ):
        if not rows.any():
            continue
        x = np.abs(mean[rows])
        g, tangent, d_g = _side_link_jacobian(params, x, where)
        secant = x > 1e-12
        slope = np.where(secant, g / np.maximum(x, 1e-300), tangent)
        denominator = 1.0 + slope**2 * (c * var[rows] + new_var[rows])
        z = sign * g / np.sqrt(denominator)
        yz = y[rows] * z
        weight = 1.0 if row_weights is None else row_weights[rows]
        log_p = np.maximum(log_ndtr(yz), np.log(1e-300))  # (the clip of _negative_log_posterior)
        value -= float(np.sum(weight * log_p))
        # d(-log p)/dz, with phi(z) / Phi(yz) = exp(log phi(z) - log Phi(yz))
        d_z = -weight * y[rows] * np.exp(-0.5 * z**2 - 0.5 * np.log(2.0 * np.pi) - log_ndtr(yz))
        dz_dg = sign * np.where(secant, denominator**-1.5, denominator**-0.5)
        grad[offset : offset + half] += (d_z * dz_dg) @ d_g
        grad[-1] += float(np.sum(d_z * (-0.5) * sign * g * slope**2 * c * var[rows] * denominator**-1.5))
    value += 0.5 * np.sum(((theta - center) / prior_sd) ** 2) + np.sum(np.log(np.sqrt(2.0 * np.pi) * prior_sd))
    grad += (theta - center) / prior_sd**2
    return value, grad


def _hessian(gradient, x: np.ndarray, step: float = 1e-4) -> np.ndarray:
    """Central finite differences of the analytic ``gradient`` (2 k calls), symmetrised."""
    k = x.size
    out = np.empty((k, k))
    for i in range(k):
        shift = np.zeros(k)
        shift[i] = step
        out[:, i] = (gradient(x + shift) - gradient(x - shift)) / (2.0 * step)
    return 0.5 * (out + out.T)


@dataclass
class MapPosterior:
    """Laplace posterior of one map family: ``mode``, ``cov`` and the log evidence ``log p(y | family)``."""

    family: str
    mode: np.ndarray
    cov: np.ndarray
    log_evidence: float
    #: the adaptive family's knots (:func:`adaptive_knots`); ``None`` for the other families
    knots: np.ndarray | None = None


@dataclass
class CalibrationMap:
    """The learned map from the posterior of ``f`` to ``P(y = +1)`` (equation (1) of this module).

    Three families of monotone, sign-preserving maps ``g`` are fitted and averaged by their posterior
    probabilities (Laplace evidence, equal prior odds): ``linear``, ``g(f) = a_side f``
    (``theta = (log a_+, log a_-, log c)``); ``flexible``, whose log slope steps smoothly at
    ``|f| = 0.5, 1, 1.5`` on each side (the hinge puts many rows at the margin ``|f| = 1``, where the
    relation between ``f`` and the risk often bends); and ``adaptive``, whose steps sit at five quantiles of
    the predictions' ``|f|`` on each side (:func:`adaptive_knots`).  Small or well-described data keep the
    linear map.

    Attributes
    ----------
    maps
        The families' Laplace posteriors.
    weights
        Their posterior probabilities.
    source
        How the training predictions were made, e.g. ``"5-fold cross-fitted"`` or ``"held-out"``.
    n
        Number of predictions it was learned from.
    predictions
        The out-of-sample predictions it was learned from: columns ``mean``, ``var``, ``new_var``, ``y``
        (+1/-1) and ``fold`` (-1 for held-out rows), and ``weight`` for a class-weighted fit;
        :meth:`BSVMFit.calibration` reports on them.
    class_weights
        ``(omega_-, omega_+)`` of a class-weighted fit: the map is learned weighted and its probabilities are
        taken back to the data's classes (module docstring); None without class weights.
    """

    maps: list[MapPosterior]
    weights: np.ndarray
    source: str
    n: int
    predictions: pd.DataFrame = field(repr=False, default=None)
    class_weights: tuple[float, float] | None = None

    def _linear(self) -> MapPosterior:
        return next(m for m in self.maps if m.family == "linear")

    @property
    def slopes(self) -> tuple[float, float]:
        """Posterior-mode slopes ``(a_+, a_-)`` of the linear map on each side of the boundary."""
        mode = self._linear().mode
        return float(np.exp(mode[0])), float(np.exp(mode[1]))

    @property
    def variance_factor(self) -> float:
        """Posterior-mode ``c`` of the linear map, the factor on the posterior variance of ``f``."""
        return float(np.exp(self._linear().mode[2]))

    def describe(self) -> str:
        if self.n == 0:
            return f"the prior's unit probit map on f (a = c = 1): {self.source}"
        a_pos, a_neg = self.slopes
        weights = dict(zip([m.family for m in self.maps], self.weights))
        bent = ", ".join(f"{weights.get(family, 0.0):.2f} on the {family}" for family in FAMILIES[1:])
        return (
            f"probit map on f (slopes {a_pos:.3g} for f > 0, {a_neg:.3g} for f < 0, variance factor "
            f"{self.variance_factor:.3g}; posterior weight {bent} map), learned from "
            f"{self.n:,} {self.source} predictions"
        )


def decision_scale_center(mean: np.ndarray) -> tuple[float, float]:
    """Prior centres of ``(log a_+, log a_-)``: ``-log`` of the median ``|m|`` on each side, within
    :data:`SCALE_CENTER_BOUNDS` (0 for a side without rows).

    The unit probit link is the right prior guess when ``f`` lives on the hinge's scale (most rows near the
    margin ``|f| = 1``).  On separable data the hinge posterior's scale is not identified and a learned
    penalty lets ``f`` run to thousands; ``log a ~ N(0, 1)`` would then hold the map at ``a ~ 1`` (``a =
    1/500`` is 6 prior SDs away) and give certainties the out-of-sample predictions do not support.  Centring
    the prior on the predictions' own scale keeps the map's prior weakly informative on that scale; for a
    fit on the hinge's scale the centre is close to 0.
    """
    out = []
    for rows in (mean > 0, mean < 0):
        size = np.abs(mean[rows])
        size = size[size > 0]
        out.append(float(np.clip(-np.log(np.median(size)), *SCALE_CENTER_BOUNDS)) if size.size else 0.0)
    return out[0], out[1]


def _center(family: str, n_knots: int, scale_center: tuple[float, float]) -> np.ndarray:
    if family == "linear":
        return np.array([scale_center[0], scale_center[1], 0.0])
    steps = np.zeros(n_knots)
    return np.r_[scale_center[0], steps, scale_center[1], steps, 0.0]


def _fit_family(
    family: str,
    mean,
    var,
    new_var,
    y,
    start: np.ndarray | None,
    knots=None,
    scale_center=(0.0, 0.0),
    row_weights=None,
) -> MapPosterior | None:
    n_knots = KNOTS.size if knots is None else knots.shape[-1]
    prior_sd = _prior_sd(family, n_knots)
    center = _center(family, n_knots, scale_center)

    def objective(theta):
        return _objective_and_gradient(theta, mean, var, new_var, y, prior_sd, knots, center, row_weights)

    x0 = center.copy() if start is None else start
    with np.errstate(over="ignore", invalid="ignore"):  # (an overflow leaves a non-finite curvature, refused below)
        theta = minimize(objective, x0, method="L-BFGS-B", jac=True).x
        hessian = _hessian(lambda t: objective(t)[1], theta)
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(hessian))):
        return None  # (decision values so large that the probit's curvature overflows: no Laplace evidence either)
    try:
        factor = cho_factor(hessian)
    except np.linalg.LinAlgError:  # flat or saddle at the optimum: no Laplace evidence for this family
        return None
    log_det = 2.0 * np.sum(np.log(np.diag(factor[0])))
    evidence = -objective(theta)[0] - 0.5 * log_det + 0.5 * theta.size * np.log(2.0 * np.pi)
    return MapPosterior(family, theta, cho_solve(factor, np.eye(theta.size)), float(evidence), knots)


def prior_map(
    source: str = "prior only (too few rows to learn from)", predictions=None, class_weights=None
) -> CalibrationMap:
    """The calibration prior's linear map: ``a = c = 1`` with the prior's spread (nothing learned)."""
    linear = MapPosterior("linear", np.zeros(3), np.diag(_prior_sd("linear") ** 2), 0.0)
    return CalibrationMap([linear], np.ones(1), source, 0, predictions, class_weights)


def class_weights_of(predictions: pd.DataFrame) -> tuple[float, float] | None:
    """``(omega_-, omega_+)`` from the predictions' ``weight`` column (None without one, or where a class has no
    row to say its weight: then 1)."""
    if "weight" not in predictions:
        return None
    y, weight = predictions["y"].to_numpy(float), predictions["weight"].to_numpy(float)
    return tuple(float(weight[y == side][0]) if np.any(y == side) else 1.0 for side in (-1.0, 1.0))


def _stratified_subset(predictions: pd.DataFrame, size: int) -> pd.DataFrame:
    """``size`` rows drawn without replacement, each class in its share (seeded: the same rows every time)."""
    rng = np.random.default_rng(MAP_SUBSET_SEED)
    y = predictions["y"].to_numpy(float)
    keep = []
    for label in (1.0, -1.0):
        rows = np.flatnonzero(y == label)
        take = int(round(size * rows.size / y.size))
        keep.append(rng.choice(rows, size=min(take, rows.size), replace=False))
    return predictions.iloc[np.sort(np.concatenate(keep))]


def fit_calibration_map(predictions: pd.DataFrame, source: str) -> CalibrationMap:
    """Posterior of the map given out-of-sample predictions (columns ``mean``, ``var``, ``new_var``, ``y``).

    Each family: the mode by L-BFGS on the log posterior (probit log-likelihood of the predictions plus
    the normal priors) with its analytic gradient (:func:`_objective_and_gradient`), the covariance and the
    Laplace evidence from the Hessian by central differences of that gradient.  The flexible family starts at
    the linear mode (its steps at 0).

    Each evaluation of the log posterior passes over every prediction, and the bent families take tens of
    evaluations, so beyond :data:`MAP_MAX_ROWS` predictions the map is learned from a fixed random
    subset of that many (stratified by class, seeded): a map of at most 13 parameters is pinned down long
    before that, and its Laplace posterior is then a little wider than all the rows would make it, never
    narrower.  The map's ``n`` and its description say how many rows it used.
    """
    if len(predictions) > MAP_MAX_ROWS:
        predictions = _stratified_subset(predictions, MAP_MAX_ROWS)
        source = f"{source} (a random {MAP_MAX_ROWS:,} of them)"
    mean = predictions["mean"].to_numpy(float)
    var = np.maximum(predictions["var"].to_numpy(float), 0.0)
    new_var = predictions["new_var"].to_numpy(float)
    y = predictions["y"].to_numpy(float)
    class_weights = class_weights_of(predictions)
    row_weights = None if class_weights is None else predictions["weight"].to_numpy(float)
    scale_center = decision_scale_center(mean)
    linear = _fit_family("linear", mean, var, new_var, y, None, scale_center=scale_center, row_weights=row_weights)
    if linear is None:  # no curvature at the optimum: the prior alone
        return prior_map(f"{source} (no information in {y.size} predictions)", predictions, class_weights)
    maps = [linear]
    for family, knots in (("flexible", None), ("adaptive", adaptive_knots(mean))):
        if family == "adaptive" and knots is None:
            continue
        steps = np.zeros(KNOTS.size if knots is None else knots.shape[-1])
        start = np.r_[linear.mode[0], steps, linear.mode[1], steps, linear.mode[2]]
        fitted = _fit_family(family, mean, var, new_var, y, start, knots, scale_center, row_weights)
        maps += [m for m in [fitted] if m is not None]
    evidence = np.array([m.log_evidence for m in maps])
    weights = np.exp(evidence - evidence.max())
    return CalibrationMap(maps, weights / weights.sum(), source, int(y.size), predictions, class_weights)


def calibrated_probability(
    cmap: CalibrationMap,
    mean: np.ndarray,
    var: np.ndarray,
    new_var: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Equation (1): ``P(y = +1)`` averaged over the map's posterior and, for new group levels, over ``s``.

    Parameters
    ----------
    mean, var
        Posterior mean and variance of ``f`` per row.
    new_var
        ``(values, weights)``: ``values`` (rows, S) are quadrature nodes of ``s`` per row and ``weights`` (S,)
        their weights (:mod:`bayesvm.results.new_levels`); ``None`` when no row has a new level.

    Notes
    -----
    Each family's posterior enters through ``MAP_DRAWS`` fixed antithetic draws from its Laplace normal;
    the families are mixed by their posterior weights.  Every draw of every family is sign-preserving, so
    the average is too.
    """
    mean = np.asarray(mean, dtype=float)
    var = np.maximum(np.asarray(var, dtype=float), 0.0)
    out = np.zeros(mean.shape)
    for posterior, weight in zip(cmap.maps, cmap.weights):
        if weight < 1e-9:
            continue
        k = posterior.mode.size
        root = np.linalg.cholesky(posterior.cov + 1e-12 * np.eye(k))
        draws = posterior.mode + _UNIT_DRAWS[:, :k] @ root.T
        knots = getattr(posterior, "knots", None)  # fits saved before the adaptive family have none
        out += weight * np.mean([probit_probability(mean, var, theta, new_var, knots) for theta in draws], axis=0)
    # keep the class exact where rounding meets 1/2 (a posterior mean of f within ~1e-16 of 0)
    above = np.nextafter(0.5, 1.0)
    out = np.where(mean > 0, np.clip(out, above, 1.0), np.clip(out, 0.0, 0.5))
    class_weights = getattr(cmap, "class_weights", None)  # (maps saved before class weights have none)
    if class_weights is None:
        return out
    negative, positive = class_weights  # Bayes' rule back to the data's classes (module docstring)
    return (out / positive) / (out / positive + (1.0 - out) / negative)


# ----- reporting ----------------------------------------------------------------------------------------
@dataclass
class CalibrationReport:
    """How well predicted probabilities match outcomes: log loss, Brier score, expected calibration error.

    Attributes
    ----------
    source
        ``"cross-validated"`` (the training rows' out-of-fold predictions, each fold's map learned from the
        other folds) or ``"held-out"`` (rows passed as ``newdata``).
    metrics
        One row per probability kind (``prob``: calibrated, ``pseudo``: the raw pseudo-likelihood):
        ``log_loss``, ``brier``, ``ece`` (expected calibration error over ``bins`` equal-width bins),
        ``balanced_error`` and ``n``.
    reliability
        The reliability table of the calibrated probabilities: per bin, ``count``, ``mean_predicted`` and
        ``observed`` (fraction positive).
    """

    source: str
    metrics: pd.DataFrame
    reliability: pd.DataFrame

    def __str__(self) -> str:
        lines = [
            f"Calibration ({self.source}, {int(self.metrics['n'].iloc[0]):,} rows)",
            self.metrics.drop(columns="n").to_string(float_format=lambda x: f"{x:.4f}"),
            "",
            "Reliability (calibrated probabilities):",
            self.reliability.to_string(float_format=lambda x: f"{x:.3f}"),
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return f"<pre>{self}</pre>"


def probability_scores(y: np.ndarray, prob: np.ndarray, bins: int = 10) -> dict[str, float]:
    """Log loss, Brier score, ECE and balanced error of ``P(y = +1)`` against ``y`` in {-1, +1}."""
    positive = y > 0
    p = np.clip(prob, 1e-15, 1.0 - 1e-15)
    log_loss = float(-np.mean(np.where(positive, np.log(p), np.log1p(-p))))
    brier = float(np.mean((prob - positive) ** 2))
    table = reliability_table(y, prob, bins)
    ece = float(np.sum(table["count"] * np.abs(table["mean_predicted"] - table["observed"])) / y.size)
    predicted = prob > 0.5
    recalls = [np.mean(predicted[positive]) if positive.any() else np.nan,
               np.mean(~predicted[~positive]) if (~positive).any() else np.nan]  # fmt: skip
    return {"log_loss": log_loss, "brier": brier, "ece": ece,
            "balanced_error": float(1.0 - np.nanmean(recalls)), "n": int(y.size)}  # fmt: skip


def reliability_table(y: np.ndarray, prob: np.ndarray, bins: int = 10) -> pd.DataFrame:
    """Per equal-width probability bin: ``count``, ``mean_predicted``, ``observed`` (empty bins left out)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, prob, side="right") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    mean_p = np.bincount(which, weights=prob, minlength=bins)
    observed = np.bincount(which, weights=(y > 0).astype(float), minlength=bins)
    keep = counts > 0
    index = pd.Index([f"{edges[b]:.1f}-{edges[b + 1]:.1f}" for b in range(bins)], name="bin")
    return pd.DataFrame(
        {
            "count": counts[keep],
            "mean_predicted": mean_p[keep] / counts[keep],
            "observed": observed[keep] / counts[keep],
        },
        index=index[keep],
    )
