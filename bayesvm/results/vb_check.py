"""Did the VB fit work?  Pareto-smoothed importance sampling from q (Yao, Vehtari, Simpson & Gelman 2018).

The augmentation variables integrate out, so the marginal pseudo-posterior of the
coefficients and variance components is known up to a constant:

    log p(y, theta, components) = -2 sum_i (1 - y_i f_i)_+ + log p(theta | components) + log p(components).

With draws ``(theta_s, components_s) ~ q`` the log ratios ``log p - log q`` are smoothed by
PSIS; the Pareto shape ``k-hat`` of their upper tail says how far q is from the target:
``k-hat < 0.5`` good, ``0.5-0.7`` usable (importance-weighted estimates are reliable),
``> 0.7`` the approximation is unreliable and no reweighting can rescue it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..checks.findings import IDENTIFIED_FINDINGS
from ..engines.hyperparameters import Hyperparameters
from ..engines.joint import LogPrior
from ..errors import ApproximationWarning, BayesvmError
from ..linalg import compiled
from ..linalg.dense import blas_threads
from ..linalg.dense_rows import draws_hinge_sums
from ..linalg.row_threads import COMPILED_SPLIT_ROWS, in_two_parts
from ..model.problems import PENALTY_SOURCE
from .adaptive_check import AdaptedDraws, adapt, adapted_moments
from .check_draws import DrawStream, increments
from .imputation_check import covers as imputation_covers
from .imputation_check import imputed_log_ratios
from .marginal_check import (
    cell_draws,
    integrable_component,
    marginal_log_p,
    marginal_proposal,
    marginal_ratios,
)
from .psis import normalised_weights, psis
from .psis_correction import ThetaMoments, correct_fixed, mixture_moments, theta_moments

KHAT_GOOD = 0.5
KHAT_LIMIT = 0.7
#: Importance weighting that moves a reported mean by at least this many of q's SDs means q's table is off by that
#: much: the verdict is a CAUTION naming the parameter, whatever k-hat says (with 1,000 draws the weighted mean's own
#: Monte Carlo error is about 0.05-0.1 of those SDs at k-hat 0.35-0.55, up to about 0.2 near 0.7)
SHIFT_LIMIT = 0.5
#: The check runs by itself (at the end of a fit, :func:`check_at_fit_end`, and with ``summary()``) when
#: rows x draws stays below this: it evaluates the exact pseudo-posterior at every draw; larger fits say how to run it
AUTO_CHECK_MAX_VALUES = 2e7
#: The check's first look takes this many draws from q; where the governing k-hat lands within ``BORDER`` of 0.5 or
#: 0.7 it takes ``SECOND_LOOK_DRAWS`` in all (toenail's accurate fit: k-hat from 1,000 draws spreads over 0.18-0.57
#: across seeds, from 4,000 over 0.22-0.39)
FIRST_LOOK_DRAWS = 1000
SECOND_LOOK_DRAWS = 4000
BORDER = 0.1
#: A mean-field fit's first look evaluates the exact posterior at the first of its draws first, look by look: where the
#: governing k-hat from the first ``draws`` is at least ``threshold`` the verdict ("unreliable") stands on them
#: (:func:`_first_look`).  A k-hat estimate spreads: for ratios whose true k is 0.7, 1% of 100 draws give 1.21 or more
#: and 1% of 250 draws 1.15 (Pareto ratios; the accurate fit, whose adaptive step needs the full first look, does not
#: look early)
EARLY_LOOKS = ((100, 1.3), (250, 1.2))
#: Seed of the check run again on a fit that :mod:`bayesvm.results.psis_correction` corrected (not the first check's
#: seed, whose draws the correction was estimated from)
RECHECK_SEED = 1


@dataclass(frozen=True)
class AdaptedCheck:
    """Where q's marginal k-hat exceeded 0.7 on an accurate fit: the adaptive importance sampling that replaced q as
    the proposal (:mod:`bayesvm.results.adaptive_check`): q's k-hat, the final proposal's, its rounds, draws and
    effective sample size."""

    q_khat: float
    khat: float
    rounds: int
    draws: int
    ess: float

    def describe(self) -> str:
        return f"adaptive importance sampling from q's k-hat {self.q_khat:.2f} in {self.rounds} round(s)"


@dataclass(frozen=True)
class VBCheck:
    """Result of the PSIS check of a VB fit.

    Attributes
    ----------
    khat
        Pareto shape of the importance ratios.
    draws
        Number of draws from q used.
    fixef
        Importance-weighted (PSIS-corrected) posterior mean and SD of the fixed effects, original
        scale; ``None`` when ``khat > 0.7``.
    log_evidence
        Importance-sampling estimate of ``log p(y)`` (the hinge pseudo-likelihood model, every constant
        included) and its Monte Carlo standard error, ``log mean(p / q)``; from the marginal ratios where
        they exist, and only when the governing k-hat is at most 0.7 (otherwise ``None``: the estimate's
        variance is then unreliable).
    shift
        Per reported parameter (the marginal set where there is one, else the fixed effects): q's mean over the
        draws, the importance-weighted mean, ``shift`` (their difference in q's SDs) and ``sd_ratio`` (weighted SD
        over q's); ``None`` when the governing k-hat exceeds 0.7.
    suspects
        When the governing k-hat exceeds 0.7: the parameters where q and its weighted draws disagree most
        (:func:`_suspects`), named by the warning and ``summary()`` as where to look first; else empty.
    joint_only
        The number of coefficients k-hat judges at once when the model has random effects the check cannot integrate
        out (a correlated or several-column term, a sparse fit; 0 otherwise).  Importance sampling in that many
        dimensions is far stricter than any summary one reads (a simulated ``(1 + x | g)`` with 40 groups: k-hat 0.90
        for an accurate fit whose means sit within 0.05 Gibbs SDs), so k-hat above 0.7 is then a CAUTION, not a
        failure, and no warning; a mean the weights move (k-hat <= 0.7) still warns.
    """

    khat: float
    draws: int
    fixef: pd.DataFrame | None
    marginal_khat: float | None = None
    marginal: pd.DataFrame | None = None
    log_evidence: tuple[float, float] | None = None
    shift: pd.DataFrame | None = None
    suspects: tuple[str, ...] = ()
    joint_only: int = 0
    #: plain and weighted moments of the governing draws' coefficients (model scale), for
    #: :mod:`bayesvm.results.psis_correction`; None when the governing k-hat exceeds 0.7
    theta_moments: ThetaMoments | None = None
    #: what the target integrates out exactly beyond the augmentation (e.g. a joint-imputation fit's missing values)
    detail: str = ""
    #: the fit that samples this model exactly, as the advice names it
    remedy: str = "method='gibbs'"
    #: where q's marginal k-hat exceeded 0.7: the adapted proposal whose weighted estimates the marginal table, the
    #: shifts and the moments hold (its k-hat then governs); None otherwise
    adapted: AdaptedCheck | None = None

    def largest_shift(self) -> tuple[str, float, float, float] | None:
        """``(parameter, shift in q's SDs, q's mean, weighted mean)`` of the reported parameter whose mean the
        importance weights move most (``shift``: the marginal set where there is one, else the fixed effects), or
        None when there are no weighted estimates (k-hat > 0.7)."""
        if self.shift is None or self.shift.empty:
            return None
        name = str(self.shift["shift"].abs().idxmax())
        row = self.shift.loc[name]
        return name, float(row["shift"]), float(row["q_mean"]), float(row["weighted_mean"])

    @property
    def moved(self) -> tuple[str, float, float, float] | None:
        """:meth:`largest_shift` when it reaches :data:`SHIFT_LIMIT` of q's SDs, else None."""
        largest = self.largest_shift()
        return largest if largest is not None and abs(largest[1]) >= SHIFT_LIMIT else None

    @property
    def governing_khat(self) -> float:
        """The k-hat the verdict rests on: the adapted proposal's where q's marginal one exceeded 0.7 and an adapted
        proposal's did not (:mod:`bayesvm.results.adaptive_check`), else the marginal one where there is one (it
        judges what ``summary()`` reports: fixed effects and variance components), otherwise the joint one."""
        if self.adapted is not None:
            return self.adapted.khat
        return self.khat if self.marginal_khat is None else self.marginal_khat

    @property
    def verdict(self) -> str:
        khat = self.governing_khat
        if khat > KHAT_LIMIT and self.joint_only:
            return (
                f"not judged: k-hat > 0.7 for the joint q of all {self.joint_only} coefficients (strict in high "
                "dimension); compare with method='gibbs' before reporting"
            )
        if khat > KHAT_LIMIT:
            return f"unreliable: q is far from the posterior (k-hat > 0.7); use {self.remedy}"
        if self.moved is not None:
            name, shift, _, _ = self.moved
            return f"usable: prefer the importance-weighted estimates ({name!r} moves by {abs(shift):.1f} of q's SDs)"
        if khat > KHAT_GOOD:
            return "usable: prefer the importance-weighted estimates (0.5 < k-hat <= 0.7)"
        return "good (k-hat <= 0.5)"


def not_run_by_itself(fit) -> str | None:
    """Why the check does not run by itself on this VB fit (at the end of ``bsvm()`` and with ``summary()``), or None
    when it does: it needs the training rows in memory, covers the normal-prior models without imputation, and runs
    by itself up to :data:`AUTO_CHECK_MAX_VALUES` rows x draws."""
    if fit.model.design.X.shape[0] != fit.model.design.n:
        return "no PSIS check for out-of-core data (the check needs every training row in memory)"
    if fit.result.include is not None or fit.model.prior is not None:
        return "no PSIS check for selection fits (compare with method='gibbs')"
    if fit.result.z_cov is not None or getattr(fit.result, "imputation", None) is not None:
        reason = imputation_covers(fit)
        if reason is not None:
            return reason
    n = fit.model.design.n
    if n * FIRST_LOOK_DRAWS > AUTO_CHECK_MAX_VALUES:
        return f"run fit.check_vb() for a PSIS diagnostic (not run automatically for {n} rows)"
    return None


def check_at_fit_end(fit, action: str = "warn"):
    """Run the check at the end of a VB fit (``bsvm()`` calls it) and warn once when it fails; returns ``(fit, kept)``:
    the fit to report (where the check's weights correct the accurate fit's fixed effects,
    :func:`bayesvm.results.psis_correction.correct_fixed`, a new fit with the moved nodes) and what its
    ``end_of_fit_check`` keeps (the check, why it could not run, or None where it was not run).

    A user who reads ``fit.fixef`` or predicts without printing the summary must still hear when q is off (R's geepack
    ``muscatine``, ``obese ~ gender + age + I(age**2) + (1 | id)`` on 9,856 rows, has k-hat 1.5 and an intercept 2
    posterior SDs from a long Gibbs run's).  As rstanarm runs PSIS after its variational fits, the check runs at the
    end of every VB fit it covers (:func:`not_run_by_itself`) and warns (:class:`bayesvm.errors.ApproximationWarning`,
    :func:`check_warning`) when k-hat exceeds 0.7 or the importance weights move a reported mean by half of q's SD or
    more, naming the parameter.
    The check is kept, so ``summary()`` prints the same verdict without running it again.  Not run where the verdict
    would mislead: after an identifiability finding that leaves the posterior shaped by the prior (``summary()`` says
    so instead), or an accurate fit that did not converge (its own warning says so).  A check that cannot run (q's
    covariance refuses a Cholesky factor) never breaks the fit: ``summary()`` says why there is none.

    Parameters
    ----------
    fit
        A :class:`bayesvm.results.fit.BSVMFit` whose ``diagnostics`` are set.
    action
        ``Checks.vb_check``: ``"warn"`` or ``"stop"`` (the fit exists, so it warns); ``"ignore"`` leaves the check to
        ``summary()``.
    """
    if action == "ignore" or not fit.posterior.approximate:
        return fit, None
    if not_run_by_itself(fit) is not None:
        return fit, None
    if fit.posterior.over_nodes and not fit.result.converged:
        return fit, None
    if any(f.check not in IDENTIFIED_FINDINGS and f.action in ("warn", "stop") for f in fit.diagnostics.findings):
        return fit, None
    try:
        check = fit.check_vb(warn=False)
        if fit.posterior.over_nodes and check.marginal_khat is not None and check.theta_moments is not None:
            source = "" if check.adapted is None else check.adapted.describe()
            corrected = correct_fixed(fit, check.theta_moments, check.governing_khat, check.draws, source)
            if corrected is not None:  # the verdict is about what is reported: the corrected q, with fresh draws
                fit, check = corrected, corrected.check_vb(seed=RECHECK_SEED, warn=False)
    except BayesvmError as exc:
        return fit, f"no PSIS check: {exc}"
    message = check_warning(check)
    if message is not None:  # (named at the user's call: this, the fit's post-fit checks, bsvm, the caller)
        warnings.warn(message, ApproximationWarning, stacklevel=4)
    return fit, check


def check_warning(check: VBCheck) -> str | None:
    """The warning a check gives (``fit.check_vb()`` and the fit-time check): k-hat above 0.7, or a reported mean the
    importance weights move by :data:`SHIFT_LIMIT` of q's SDs or more (named, with both values); None otherwise."""
    if check.governing_khat > KHAT_LIMIT and check.joint_only:
        return None  # a CAUTION in summary(): k-hat over every coefficient at once does not single out a summary
    if check.governing_khat > KHAT_LIMIT:
        which = "" if check.marginal_khat is None else " (fixed effects and variance components)"
        where = (
            f" (q and its importance-weighted draws disagree most on {', '.join(repr(n) for n in check.suspects)})"
            if check.suspects
            else ""
        )
        return (
            f"PSIS k-hat{which} = {check.governing_khat:.2f} > {KHAT_LIMIT}: the VB approximation is unreliable for "
            f"this model and data{where}; use {check.remedy} for inference"
        )
    if check.moved is not None:
        name, shift, q_mean, weighted = check.moved
        table = "fixef" if check.marginal is None else "marginal"
        return (
            f"importance weighting moves {name!r} by {abs(shift):.1f} of the VB posterior's SDs ({q_mean:.4g} -> "
            f"{weighted:.4g}; PSIS k-hat {check.governing_khat:.2f}): the VB means are off by that much; report "
            f"fit.check_vb().{table} or use {check.remedy}"
        )
    return None


def _log_q_components(fit, covs: list[np.ndarray]) -> np.ndarray:
    from scipy import stats

    out = np.zeros(covs[0].shape[0] if covs else 0)
    for post, cov in zip(fit.result.components, covs):
        if post.scale.shape == (1, 1):
            out = out + stats.invgamma.logpdf(cov[:, 0, 0], post.shape, scale=post.scale[0, 0])
        else:
            out = out + stats.invwishart(df=post.shape, scale=post.scale).logpdf(np.moveaxis(cov, 0, -1))
    return out


def _mean_field_proposal(fit, rng, draws):
    """Draws from the mean-field q (the coefficients' Gaussian, then each component's inverse-gamma or inverse-Wishart
    factor) and their ``log q``."""
    theta = fit.result.theta
    theta_d, theta_b = theta.sample(rng, draws)
    covs = [post.sample(rng, draws) for post in fit.result.components]
    log_q = theta.log_density(theta_d, theta_b)
    if covs:
        log_q = log_q + _log_q_components(fit, covs)
    return theta_d, theta_b, covs, log_q


def _mixture_proposal(fit, rng, draws):
    """Draws from the accurate fit's mixture, as a density: node k with probability ``w_k``, the
    hyperparameters ``phi`` spread over node k's cell (:func:`cell_draws`), ``theta`` from node k's
    Gaussian.  ``log q`` of the covariances adds the Jacobian of ``phi`` -> covariances
    (``Hyperparameters.log_jacobian``).
    """
    r = fit.result
    if r.has_component:
        nodes, phi, log_q = cell_draws(r, rng, draws)
    else:
        nodes, log_q = np.zeros(draws, dtype=int), np.zeros(draws)
    thetas_d, thetas_b = [], []
    for k, theta in enumerate(r.thetas):
        chosen = np.flatnonzero(nodes == k)
        if chosen.size:
            d, b = theta.sample(rng, chosen.size)
            thetas_d.append((chosen, d))
            thetas_b.append((chosen, b))
            log_q[chosen] += theta.log_density(d, b)
    theta_d = np.empty((draws, r.thetas[0].mean_d.size))
    theta_b = np.empty((draws,) + r.thetas[0].mean_b.shape)
    for chosen, d in thetas_d:
        theta_d[chosen] = d
    for chosen, b in thetas_b:
        theta_b[chosen] = b
    covs = []
    if r.has_component:
        hyper = r.hyperparameters
        covs = hyper.covariances_of_draws(phi)
        log_q = log_q - hyper.log_jacobians(phi)  # density of the covariances
    return theta_d, theta_b, covs, log_q


def check_vb(fit, draws: int | None = None, seed: int | None = 0) -> VBCheck:
    """PSIS diagnostic (and corrected fixed effects) for a variational fit (mean-field or accurate).

    ``draws=None`` takes :data:`FIRST_LOOK_DRAWS` draws from q and, when the governing k-hat lands within
    :data:`BORDER` of a verdict's threshold (0.5 or 0.7), adds draws to :data:`SECOND_LOOK_DRAWS` for that k-hat
    (its Monte Carlo spread shrinks with the tail draws PSIS fits, so that the verdict does not hang on the seed);
    an integer takes exactly that many.  The draws are made in batches of at most
    :data:`bayesvm.results.check_draws.BATCH_DRAWS` (:class:`bayesvm.results.check_draws.DrawStream`), so the memory of
    the predictor draws stays at that many times the rows; a mean-field fit's marginal check draws on a stream of its own (spawned from ``seed``), so
    that its first look can make its draws a look at a time.

    The check runs with the BLAS threading of the engines (:func:`bayesvm.linalg.dense.blas_threads`): on small dense
    designs one BLAS thread, whose idle peers would otherwise spin on the cores the compiled level integrals use."""
    problem = fit.problem
    with blas_threads(problem.D.shape[1], problem.n):
        return _checked(fit, draws, seed)


def _checked(fit, draws: int | None, seed: int | None) -> VBCheck:
    """:func:`check_vb` within its BLAS threading."""
    first = FIRST_LOOK_DRAWS if draws is None else int(draws)
    imputed = fit.result.z_cov is not None  # (a joint-imputation fit: its missing values integrated out)
    marginal_too = integrable_component(fit.problem) is not None
    joint, marginal_stream = _streams(fit, seed, marginal_too)
    sample = (lambda n: _imputed_draws(fit, joint.rng, n)) if imputed else (lambda n: _joint_draws(fit, joint, n))
    if draws is None and not imputed and not (marginal_too and fit.posterior.over_nodes):
        log_ratios, theta_d, coefficients, marginal = _first_look(fit, joint, marginal_stream)
    else:
        log_ratios, theta_d, coefficients = sample(first)
        marginal = _marginal_draws(fit, marginal_stream, first) if marginal_too else None
    log_weights, khat = psis(log_ratios)
    marginal_psis = None if marginal is None else psis(marginal[0])
    if draws is None and marginal is None and near_threshold(khat):
        more = sample(SECOND_LOOK_DRAWS - first)
        log_ratios, theta_d = np.concatenate([log_ratios, more[0]]), np.vstack([theta_d, more[1]])
        log_weights, khat = psis(log_ratios)
    elif draws is None and marginal is not None and near_threshold(marginal_psis[1]):
        marginal = _joined(marginal, _marginal_draws(fit, marginal_stream, SECOND_LOOK_DRAWS - first))
        marginal_psis = psis(marginal[0])
    corrected, shift = _weighted(*_fixef_draws(fit, theta_d), log_weights)
    moments = theta_moments(theta_d, normalised_weights(log_weights))
    marginal_khat, marginal_table, adapted = None, None, None
    evidence = importance_log_evidence(log_ratios) if khat <= KHAT_LIMIT else None
    governing_draws = theta_d.shape[0]
    if marginal is not None:
        marginal_ratios, theta_d, covs, phi = marginal
        governing_draws = theta_d.shape[0]
        log_weights, marginal_khat = marginal_psis
        evidence = importance_log_evidence(marginal_ratios) if marginal_khat <= KHAT_LIMIT else None
        names, values = _marginal_values(fit, theta_d, covs)
        marginal_table, shift = _weighted(names, values, log_weights)
        marginal_table = marginal_table if marginal_khat <= KHAT_LIMIT else None
        moments = theta_moments(theta_d, normalised_weights(log_weights))
        if marginal_khat > KHAT_LIMIT and fit.posterior.over_nodes:
            draws_t = _adapted_draws(fit, marginal_stream.rng, theta_d, phi, log_weights, marginal_khat, first)
            # q is far; an adapted proposal whose k-hat is at most 0.7 gives reliable weighted estimates instead
            if draws_t is not None and draws_t.khat <= KHAT_LIMIT:
                adapted = AdaptedCheck(draws_t.q_khat, draws_t.khat, draws_t.rounds, draws_t.draws, draws_t.ess)
                _, adapted_values = _marginal_values(fit, draws_t.theta_d, draws_t.covs)
                marginal_table, shift = _weighted(names, adapted_values, draws_t.log_weights, q_values=values)
                center, cov = mixture_moments(fit.result)
                moments = adapted_moments(center, np.sqrt(np.diag(cov)), draws_t)
                evidence = importance_log_evidence(draws_t.log_ratios)
                governing_draws = draws_t.draws
    governing = khat if marginal_khat is None else marginal_khat if adapted is None else adapted.khat
    joint_only = coefficients if marginal_khat is None and coefficients > fit.model.design.p else 0
    suspects = _suspects(shift) if governing > KHAT_LIMIT and not joint_only else ()
    return VBCheck(
        khat=khat, draws=governing_draws, fixef=corrected if khat <= KHAT_LIMIT else None,
        marginal_khat=marginal_khat, marginal=marginal_table, log_evidence=evidence,
        shift=shift if governing <= KHAT_LIMIT else None, suspects=suspects, joint_only=joint_only,
        theta_moments=moments if governing <= KHAT_LIMIT else None,
        detail="imputed values integrated out exactly" if imputed else "",
        remedy="method='gibbs', imputation='joint' (this model, sampled)" if imputed else "method='gibbs'",
        adapted=adapted,
    )  # fmt: skip


def _marginal_values(fit, theta_d: np.ndarray, covs: list[np.ndarray]) -> tuple[list[str], np.ndarray]:
    """The marginal check's reported parameters at draws: the fixed effects (original scale) and the single-column
    variance components, ``(names, (draws, parameters))``."""
    names, values = _fixef_draws(fit, theta_d)
    for comp, cov in zip(fit.problem.components, covs):
        if comp.k == 1:
            names.append("penalty sigma_u^2" if comp.source == PENALTY_SOURCE else f"sigma^2 {comp.name}")
            values = np.column_stack([values, cov[:, 0, 0]])
    return names, values


def _adapted_draws(fit, rng, theta_d, phi, log_weights, q_khat: float, draws: int) -> AdaptedDraws | None:
    """:func:`bayesvm.results.adaptive_check.adapt` on the marginal target of this fit; None where a proposal cannot
    be formed (weights that are all zero, a covariance no Cholesky factor takes)."""
    hyper = Hyperparameters(fit.problem.components)
    try:
        with np.errstate(all="ignore"):
            return adapt(
                lambda t, p: marginal_log_p(fit.problem, hyper, t, p), theta_d, phi, log_weights, q_khat, rng, draws
            )
    except (np.linalg.LinAlgError, ValueError, FloatingPointError):
        return None


def near_threshold(khat: float) -> bool:
    """Whether a k-hat from :data:`FIRST_LOOK_DRAWS` draws lies within :data:`BORDER` of a verdict's threshold."""
    return bool(min(abs(khat - KHAT_GOOD), abs(khat - KHAT_LIMIT)) < BORDER)


def _streams(fit, seed: int | None, marginal_too: bool) -> tuple[DrawStream, DrawStream | None]:
    """The joint check's draw stream and the marginal check's (None without one).  A mean-field fit's are two streams
    (the marginal's spawned from ``seed``) split at the early looks' sizes; an accurate fit's share one generator, the
    marginal draws made after the joint ones, in batches (it does not look early)."""
    sequence = np.random.SeedSequence(seed)
    rng = np.random.default_rng(sequence)
    over_nodes = fit.posterior.over_nodes
    points = () if over_nodes else tuple(size for size, _ in EARLY_LOOKS)
    joint = DrawStream(_joint_proposal(fit), fit, rng, points)
    if not marginal_too:
        return joint, None
    marginal_rng = rng if over_nodes else np.random.default_rng(sequence.spawn(1)[0])
    return joint, DrawStream(marginal_proposal, fit, marginal_rng, points)


def _joint_draws(fit, stream: DrawStream, draws: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(log p - log q, fixed-effect draws, number of coefficients)`` of the next ``draws`` draws from the joint q.

    ``log p`` is the exact log pseudo-posterior (hinge pseudo-likelihood, eq. (2) of Polson & Scott, times the
    priors) at each draw of every coefficient and variance."""
    ratios, thetas, coefficients = [], [], 0
    for drawn in stream.take(draws):
        ratios.append(_joint_ratios(fit, *drawn))
        thetas.append(drawn[0])
        coefficients = _coefficients(drawn)
    return np.concatenate(ratios), np.vstack(thetas), coefficients


def _joint_proposal(fit):
    """The joint q's sampler: ``(fit, rng, draws) -> (theta_d, theta_b, covariances, log q)``."""
    return _mixture_proposal if fit.posterior.over_nodes else _mean_field_proposal


def _coefficients(drawn: tuple) -> int:
    """How many coefficients a joint draw holds (fixed part and random effects)."""
    return drawn[0].shape[1] + int(np.prod(drawn[1].shape[1:]))


def _joint_ratios(fit, theta_d, theta_b, covs, log_q) -> np.ndarray:
    """``log p - log q`` at joint draws: the hinge pseudo-likelihood (eq. (2) of Polson & Scott) times the priors."""
    problem = fit.problem
    log_p = -2.0 * hinge_sums(problem, theta_d, theta_b)
    log_p += LogPrior(problem).of_draws(theta_d, theta_b, covs)
    return log_p - log_q


def hinge_sums(problem, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
    """``sum_i omega_i max(0, 1 - y_i f_i)`` at each joint draw: the compiled row loop on a dense design
    (:func:`bayesvm.linalg.dense_rows.draws_hinge_sums`, the draws in two halves on the row threads), else through the
    ``(draws, rows)`` predictor."""
    weights = np.ones(problem.n) if problem.weights is None else problem.weights
    blocked = problem.blocked
    if compiled.available() and isinstance(problem.D, np.ndarray) and problem.D.shape[0] == problem.n:
        codes = np.full(problem.n, -1, dtype=np.int64) if blocked is None else blocked.codes
        values = np.zeros((problem.n, 1)) if blocked is None else blocked.values
        theta_b = np.zeros((theta_d.shape[0], 1, 1)) if blocked is None else np.ascontiguousarray(theta_b)
        D, theta_d, out = np.ascontiguousarray(problem.D), np.ascontiguousarray(theta_d), np.empty(theta_d.shape[0])

        def work(_, part):
            draws_hinge_sums(D, codes, values, problem.y, weights, theta_d[part], theta_b[part], out[part])

        in_two_parts(work, out.size, out.size // 2, out.size * problem.n >= COMPILED_SPLIT_ROWS)
        return out
    f = (problem.D @ theta_d.T).T
    if blocked is not None:
        f = f + np.einsum("nk,snk->sn", blocked.values, theta_b[:, blocked.codes, :])
    return np.maximum(0.0, 1.0 - problem.y * f) @ weights


def _first_look(fit, joint: DrawStream, marginal: DrawStream | None):
    """The first look's :data:`FIRST_LOOK_DRAWS` draws from q, the exact posterior evaluated look by look
    (:data:`EARLY_LOOKS`): where the governing k-hat (the marginal check's where there is one) from the draws so far
    is already at a look's threshold, the verdict stands on them, else the next draws are made and evaluated.  The
    streams make the draws in the looks' sizes, so a first look that goes on gives the numbers of a check of
    :data:`FIRST_LOOK_DRAWS` draws exactly.  Returns ``(log ratios, theta_d, coefficients, marginal)`` as
    :func:`check_vb` uses them.  Not for an accurate fit with the marginal check, whose k-hat above 0.7 adapts the
    proposal from the full first look."""
    ratios, thetas, coefficients, looked = [], [], 0, None
    for size, threshold in EARLY_LOOKS + ((FIRST_LOOK_DRAWS, None),):
        more = size - joint.made
        part = _joint_draws(fit, joint, more)
        ratios.append(part[0])
        thetas.append(part[1])
        coefficients = part[2]
        if marginal is not None:
            drawn = _marginal_draws(fit, marginal, more)
            looked = drawn if looked is None else _joined(looked, drawn)
        if threshold is not None and psis(np.concatenate(ratios) if looked is None else looked[0])[1] >= threshold:
            break
    return np.concatenate(ratios), np.vstack(thetas), coefficients, looked


def _imputed_draws(fit, rng: np.random.Generator, draws: int) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`bayesvm.results.imputation_check.imputed_log_ratios` in batches of at most
    :data:`bayesvm.results.check_draws.BATCH_DRAWS`."""
    problem = fit.model.imputation_problem("joint")  # (the design and its imputation layout, once)
    parts = [imputed_log_ratios(fit, problem, rng, size, _mean_field_proposal) for size in increments(0, draws, ())]
    return np.concatenate([p[0] for p in parts]), np.vstack([p[1] for p in parts]), parts[0][2]


def _marginal_draws(fit, stream: DrawStream, draws: int) -> tuple:
    """:func:`bayesvm.results.marginal_check.marginal_ratios` at the next ``draws`` draws of the marginal q."""
    parts = [marginal_ratios(fit, *drawn) for drawn in stream.take(draws)]
    out = parts[0]
    for part in parts[1:]:
        out = _joined(out, part)
    return out


def _joined(first: tuple, second: tuple) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]:
    """Two batches of marginal draws ``(log ratios, theta_d, covariances, phi)`` as one."""
    return (
        np.concatenate([first[0], second[0]]),
        np.vstack([first[1], second[1]]),
        [np.concatenate([a, b]) for a, b in zip(first[2], second[2])],
        np.vstack([first[3], second[3]]),
    )


#: How many parameters a failed check names as where q and the weighted draws disagree most
SUSPECTS = 3


def _suspects(shift: pd.DataFrame) -> tuple[str, ...]:
    """The reported parameters where q and its importance-weighted draws disagree most, ``|shift| + |log(SD ratio)|``
    (mean and spread, both in q's units), for a check whose k-hat exceeds 0.7: the weighted estimates are then
    unreliable, so this only points where to look first (geepack's muscatine: the age polynomial and the intercept,
    which a long Gibbs run puts 2 SDs from q's; spam: usually ``address``, whose q SD is about half of Gibbs's)."""
    ratio = shift["sd_ratio"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.abs(shift["shift"].to_numpy(dtype=float)) + np.abs(np.log(np.where(ratio > 0, ratio, np.nan)))
    kept = np.flatnonzero(~np.isnan(score))
    order = kept[np.argsort(-score[kept], kind="stable")]
    return tuple(str(shift.index[i]) for i in order[:SUSPECTS])


def importance_log_evidence(log_ratios: np.ndarray) -> tuple[float, float]:
    """``(log mean(w), its standard error)`` for raw importance ratios ``w = p(y, theta) / q(theta)``.

    ``mean(w)`` is unbiased for ``p(y)``; the delta method gives ``se(log mean w) = sd(w) / (sqrt(S) mean(w))``.
    """
    shifted = np.exp(log_ratios - log_ratios.max())
    mean = float(shifted.mean())
    se = float(shifted.std(ddof=1) / (np.sqrt(shifted.size) * mean))
    return float(np.log(mean) + log_ratios.max()), se


def _fixef_draws(fit, theta_d: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The fixed effects of the draws from q on the original scale, ``(names, (draws, p))``."""
    p = fit.model.design.p
    return list(fit.model.design.x_names), theta_d[:, :p] @ fit.model.fixed_transform().T


def _weighted(
    names: list[str], values: np.ndarray, log_weights: np.ndarray, q_values: np.ndarray | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Importance-weighted mean and SD of each column of ``values`` (draws from q), and how far the weights move
    each mean: ``(weighted mean - q's mean) / q's SD``, both over the same draws (so the draws' own noise in q's
    mean cancels).  ``q_values``: draws from q when ``values`` come from another proposal (an adapted one)."""
    weights = normalised_weights(log_weights)
    mean = weights @ values
    sd = np.sqrt(weights @ (values - mean) ** 2)
    reference = values if q_values is None else q_values
    q_mean, q_sd = reference.mean(axis=0), reference.std(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = np.where(q_sd > 0, (mean - q_mean) / q_sd, 0.0)
        ratio = np.where(q_sd > 0, sd / q_sd, np.nan)
    table = pd.DataFrame({"mean": mean, "sd": sd}, index=names)
    return table, pd.DataFrame(
        {"q_mean": q_mean, "weighted_mean": mean, "shift": moved, "sd_ratio": ratio}, index=names
    )
