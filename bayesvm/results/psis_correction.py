"""PSIS-corrected fixed effects for the accurate VB fit (Yao, Vehtari, Simpson & Gelman 2018, section 2.3).

**Why.**  The accurate fit integrates the variance parameters over a lattice and weights its nodes by
importance-sampled evidence (:mod:`bayesvm.engines.linear.node_evidence`), so the variance components match a long
Gibbs run.  At each node, though, the coefficients are EP's Gaussian, and EP's error there reaches the fixed effects:
geepack's ``ohio`` (``resp ~ age + smoke + (1 | id)``) gives ``age`` -0.080 (SD 0.029) where Gibbs gives -0.047
(SD 0.022); toenail's visit effect sits 0.46 Gibbs SDs off.  The PSIS check that every fit ends with
(:func:`bayesvm.results.vb_check.check_at_fit_end`) already has what is needed to remove that error: draws of
``(theta_d, phi)`` from q with the random intercepts integrated out exactly, and their Pareto-smoothed weights.  When
its k-hat is at most 0.7 the importance-weighted moments are reliable (the paper's criterion), and on ``ohio`` they
give ``age`` -0.046 (SD 0.022).

**What changes.**  For each fixed effect ``j`` (on the model's scale), over the check's draws: ``shift_j`` = weighted
mean - plain mean and ``ratio_j`` = weighted SD / plain SD (both over the same draws, so most of the draws' own noise
cancels).  A fixed effect is corrected only where the difference is larger than its Monte Carlo error could make it:
``|shift_j|`` or ``|log ratio_j|`` above ``Z`` = :data:`SIGNIFICANCE` times its delta-method standard error from the
same draws (:func:`theta_moments`), so a fit EP already gets right is left exactly as it was.  A fixed effect whose
mean moves also takes the weighted SD when its Monte Carlo error is at most :data:`MOVED_SD_MAX_LOG_SE` in the log, even
below ``Z``: q's marginal of that coordinate is then shown to be off, so its SD is no longer the better estimate
(``ohio``'s ``age``: mean moved by 17 of its standard errors, SD ratio 0.76 at 2.6; kept at q's, the reported SD was
0.029 against Gibbs's 0.022).  Every node's Gaussian is
then carried by the same affine map (:func:`correct_fixed`, :meth:`bayesvm.linalg.dense.GaussianPosterior.moved`): the
fixed effects' mixture mean moves by ``s`` and their SDs scale by ``ratio`` (correlations and node weights stay), every
other dense coefficient keeps its conditional given them, and each node's random effects keep their conditional given
``theta_d`` (their means follow through EP's gain ``G = P_bb^{-1} P_bd``).  The summary, ``fixef``, ``ranef``,
predictions and draws all read the corrected nodes.  The variance components are not touched (their weights are
already importance sampled).  ``summary()`` says which fixed effects moved; the check is then run again on the
corrected q with fresh draws, so its verdict is about what is reported.

**Where q is far.**  Where the marginal check's k-hat exceeds 0.7, its weighted moments cannot be trusted; an adapted
proposal's can (:mod:`bayesvm.results.adaptive_check`: geepack's muscatine, q's k-hat 1.5, the age polynomial 2.2
Gibbs SDs off; after adaptation within 0.12).  The correction then moves q's exact mixture moments onto the adapted
weighted ones, under the same significance rule.

**Where not.**  Only the accurate fit on the dense path (the sparse and Schur representations keep EP's nodes), only
where the check is the marginal one (a random-intercept term integrated out in closed form), its k-hat (or the adapted
proposal's) is at most 0.7 and its ESS at least :data:`MIN_ESS`, and never with ``Checks(vb_check="ignore")``.  Without random effects EP is close
to exact already and the correction can do harm: on R's ``mtcars`` (``am ~ wt + hp``, 32 nearly separated rows, a
learned penalty whose variance has a long tail) EP's SDs are 15% narrow in that tail, importance sampling from q cannot
see it, and the weighted draws would move ``wt`` 0.10 posterior SDs away from exact quadrature's mean.  Where the check
is only usable (k-hat 0.5-0.7) the estimates are rougher: lme4's ``cbpp`` (k-hat 0.62) gets its period SDs closer to
Gibbs's but its intercept 0.19 Gibbs SDs off (EP's: 0.02).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..linalg.dense import GaussianPosterior

#: A coordinate is corrected where its shift (or log SD ratio) exceeds this many Monte Carlo standard errors.
SIGNIFICANCE = 3.0
#: A coordinate whose mean is corrected also takes the weighted SD when that SD's log has at most this Monte Carlo
#: error (about 15%), significant or not (module docstring).
MOVED_SD_MAX_LOG_SE = 0.15
#: Below this effective sample size of the check's weights nothing is corrected (the moments would be noise).
MIN_ESS = 100.0
#: ``summary()`` lists the fixed effects whose mean moved by at least this many SDs or whose SD changed by this share.
SHOWN = 0.01


@dataclass(frozen=True)
class ThetaMoments:
    """Plain and importance-weighted moments of the check's ``theta_d`` draws (the model's coefficient scale), with
    the Monte Carlo standard errors of their differences (:func:`theta_moments`)."""

    mean: np.ndarray
    sd: np.ndarray
    weighted_mean: np.ndarray
    weighted_sd: np.ndarray
    ess: float
    shift_se: np.ndarray
    log_ratio_se: np.ndarray


def theta_moments(theta_d: np.ndarray, weights: np.ndarray) -> ThetaMoments:
    """:class:`ThetaMoments` of draws ``theta_d (S, q)`` under normalised ``weights (S,)``.

    The weighted mean minus the plain one is ``sum_s d_s x_s`` with ``d_s = w_s - 1/S``; its delta-method standard
    error (Owen 2013, eq. 9.8, for the difference) is ``sqrt(sum_s d_s^2 (x_s - mu_w)^2)``.  The same for the
    variances, ``sqrt(sum_s d_s^2 ((x_s - mu_w)^2 - v_w)^2)``, over ``2 v_w`` for the log of the SD ratio.  Unlike
    ``1 / sqrt(ESS)`` these follow how the weights load on each coordinate."""
    weighted_mean = weights @ theta_d
    centred = (theta_d - weighted_mean) ** 2
    weighted_var = weights @ centred
    excess = (weights - 1.0 / weights.size)[:, None] ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio_se = np.sqrt(np.sum(excess * (centred - weighted_var) ** 2, axis=0)) / (2.0 * weighted_var)
    return ThetaMoments(
        mean=theta_d.mean(axis=0),
        sd=theta_d.std(axis=0),
        weighted_mean=weighted_mean,
        weighted_sd=np.sqrt(weighted_var),
        ess=float(1.0 / np.sum(weights**2)),
        shift_se=np.sqrt(np.sum(excess * centred, axis=0)),
        log_ratio_se=np.where(weighted_var > 0, log_ratio_se, np.inf),
    )


@dataclass(frozen=True)
class FixedCorrection:
    """What the correction did: the fixed effects it changed (original scale, as reported), how far each mean moved
    in EP's SDs and the ratio of the SDs, and the check it came from (k-hat, draws, ESS)."""

    names: tuple[str, ...]
    shift: np.ndarray
    sd_ratio: np.ndarray
    khat: float
    draws: int
    ess: float
    #: where the weighted draws came from when not from q (an adapted proposal's description), else ""
    source: str = ""

    def describe(self) -> str:
        """One line for ``summary()``."""
        shown = [
            f"{name} {shift:+.2f} SD, SD x{ratio:.2f}"
            for name, shift, ratio in zip(self.names, self.shift, self.sd_ratio)
            if abs(shift) >= SHOWN or abs(ratio - 1.0) >= SHOWN
        ]
        rest = len(self.names) - len(shown)
        moved = ", ".join(shown) + (f"; {rest} more by less than {SHOWN} SD" if rest else "")
        source = f"; {self.source}" if self.source else ""
        return (
            f"Coefficients corrected by PSIS (k-hat {self.khat:.2f}, ESS {self.ess:.0f} of {self.draws} draws{source}; "
            f"EP's mean moved, in EP's SDs): {moved}"
        )


def correction_map(moments: ThetaMoments) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(corrected, shift, ratio)``: which coordinates differ beyond Monte Carlo error (module docstring), and the
    shift and SD ratio to apply (0 and 1 elsewhere)."""
    sd = moments.sd
    positive = sd > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.where(positive & (moments.weighted_sd > 0), np.log(moments.weighted_sd / sd), 0.0)
    difference = moments.weighted_mean - moments.mean
    # a floor far below any Monte Carlo error, for weights that are (numerically) equal
    moves_mean = positive & (np.abs(difference) > SIGNIFICANCE * np.maximum(moments.shift_se, 1e-9 * sd))
    # a coordinate whose mean q demonstrably gets wrong: its SD from q is no longer the better estimate either
    moves_sd = positive & (
        (np.abs(log_ratio) > SIGNIFICANCE * np.maximum(moments.log_ratio_se, 1e-9))
        | (moves_mean & (moments.log_ratio_se <= MOVED_SD_MAX_LOG_SE))
    )
    shift = np.where(moves_mean, difference, 0.0)
    ratio = np.where(moves_sd, np.exp(log_ratio), 1.0)
    return moves_mean | moves_sd, shift, ratio


def correct_fixed(fit, moments: ThetaMoments, khat: float, draws: int, source: str = ""):
    """The fit with every node of its accurate result carried by the correction map (module docstring): a new fit
    whose result holds the moved nodes and the :class:`FixedCorrection` (``fit`` and its result stay as they are);
    None where no fixed effect differs beyond Monte Carlo error, the ESS is below :data:`MIN_ESS` or a node is not on
    the dense path.

    Only the fixed effects (the first ``p`` model columns) are tested and moved: ``f -> c_f + s_f + A (f - c_f)``.
    Every other dense coefficient (a ``gp()`` term's basis, a term not integrated out) keeps its conditional given
    them under the mixture's covariance ``S``: ``r -> r + B (f' - f)`` with ``B = S_rf S_ff^{-1}``.  Testing those
    coordinates one by one would shift single basis coefficients against their strong posterior correlations (a
    ``gp(age, k=12)`` term: one coefficient moved by 0.14 of its SD put the fitted function 0.6 SD off at an age)."""
    result = fit.result
    if moments.ess < MIN_ESS or not all(isinstance(t, GaussianPosterior) for t in result.thetas):
        return None
    p = fit.model.design.p
    corrected, shift_fixed, ratio = correction_map(_leading(moments, p))
    if not corrected.any():
        return None
    before, before_sd = _reported(fit)
    center, cov = mixture_moments(result)
    q = center.size
    matrix, shift = np.eye(q), np.zeros(q)
    matrix[:p, :p] = np.diag(ratio)
    shift[:p] = shift_fixed
    if q > p:  # the other coefficients' regression on the fixed effects under the mixture
        try:
            regression = np.linalg.solve(cov[:p, :p], cov[:p, p:]).T
        except np.linalg.LinAlgError:  # a singular covariance: leave EP's nodes as they are (never break the fit)
            return None
        matrix[p:, :p] = regression @ (np.diag(ratio) - np.eye(p))
        shift[p:] = regression @ shift_fixed
    moved_nodes = replace(result, thetas=[t.moved(center, shift, matrix) for t in result.thetas])
    corrected_fit = replace(fit, result=moved_nodes)
    after, after_sd = _reported(corrected_fit)
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = np.where(before_sd > 0, (after - before) / before_sd, 0.0)
        scaled = np.where(before_sd > 0, after_sd / before_sd, 1.0)
    changed = (np.abs(moved) > 1e-9) | (np.abs(scaled - 1.0) > 1e-9)
    names = list(fit.model.design.x_names)
    record = FixedCorrection(
        names=tuple(n for n, c in zip(names, changed) if c), shift=moved[changed], sd_ratio=scaled[changed],
        khat=float(khat), draws=int(draws), ess=moments.ess, source=source,
    )  # fmt: skip
    return replace(corrected_fit, result=replace(moved_nodes, fixed_correction=record))


def mixture_moments(result) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ``theta_d`` under an accurate fit's mixture of node Gaussians (weights ``w_k``):
    ``sum_k w_k mu_k`` and ``sum_k w_k (S_k + (mu_k - mu)(mu_k - mu)')``."""
    weights = np.asarray(result.weights, dtype=float)
    center = sum(w * t.mean_d for w, t in zip(weights, result.thetas))
    cov = sum(w * (t.cov_d + np.outer(t.mean_d - center, t.mean_d - center)) for w, t in zip(weights, result.thetas))
    return center, cov


def _leading(moments: ThetaMoments, p: int) -> ThetaMoments:
    """The moments of the first ``p`` coordinates (the fixed effects)."""
    return ThetaMoments(
        mean=moments.mean[:p], sd=moments.sd[:p], weighted_mean=moments.weighted_mean[:p],
        weighted_sd=moments.weighted_sd[:p], ess=moments.ess, shift_se=moments.shift_se[:p],
        log_ratio_se=moments.log_ratio_se[:p],
    )  # fmt: skip


def _reported(fit) -> tuple[np.ndarray, np.ndarray]:
    """The fixed effects' posterior means and SDs as ``summary()`` reports them (original scale)."""
    return fit.fixef.to_numpy(dtype=float), np.sqrt(np.diag(fit.fixef_cov.to_numpy(dtype=float)))
