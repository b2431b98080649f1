"""Missing predictors imputed inside the model: VB (Luts & Ormerod 2014, Alg. 4) and Gibbs (Appendix C).

Generalised from the paper's single-penalty model to every model the VB and Gibbs engines fit
(any penalty, random effects on the dense/Schur path).  The imputation variables are numeric
main effects; on the engine's scale each is ``z_j`` (its observed values centred and scaled) and
its design column is ``alpha_j + gamma_j z_j``, so with ``b = gamma o theta_K`` (``K``: their
positions in ``theta_d``) the linear predictor is ``f_i = r_i + z_i' b`` with ``r_i`` free of ``z``.

Imputation model (MCAR): ``z_i ~ N(mu, Sigma)``, ``mu ~ N(0, s_mu^2 I)``, ``Sigma ~ IW(nu, Psi)``.

VB factorisation ``q(theta) q(a) q(components) prod_i q(z_{i,M_i}) q(mu) q(Sigma)``; with
``Lambda = E[Sigma^{-1}] = nu_q Psi_q^{-1}`` the updates, derived here, are:

* ``q(theta)``: the usual update with the design rows at ``E[z_i]`` and the precision increased by
  ``sum_i w_i Cov(c_i)`` (Alg. 4 step 3; only the imputed columns' block);
* ``q(z_{i,M}) = N(P_i^{-1} l_i, P_i^{-1})``, ``P_i = Lambda_MM + w_i E[b b']_MM``,
  ``l_i = (Lambda m_mu)_M - Lambda_MO z_O + y_i (1 + w_i) E[b]_M - w_i (E[r_i b]_M + E[b b']_MO z_O)``
  (steps 6-7; ``E[r_i b]`` includes ``Cov(r_i, b)``, which the paper's ``[Omega]_{-1,1}`` keeps only
  for the intercept);
* ``chi_i = E[(1 - y_i f_i)^2] = (1 - y_i E f_i)^2 + Var_theta(E_z f_i) + tr(E[b b'] Cov(z_i))`` (step 10);
* ``q(mu) = N(S (Lambda sum_i E z_i), S)``, ``S = (s_mu^{-2} I + n Lambda)^{-1}`` (step 13);
* ``q(Sigma) = IW(nu + n, Psi + n S + sum_i [(E z_i - m_mu)(E z_i - m_mu)' + Cov z_i])`` (step 14).

Lower bound: the regression bound of :func:`bayesvm.engines.linear.vb.lower_bound` (its data term with the
``E[(1 - y f)^2]`` above) plus, with ``T = sum_i E[(z_i - mu)(z_i - mu)']``,
``-n V log(2 pi) / 2 - tr(Lambda T) / 2`` (``E log|Sigma|`` cancels against ``q(Sigma)``),
``E log p(mu) - E log q(mu)``, ``E log p(Sigma) - E log q(Sigma)`` without ``E log|Sigma|``, and the
entropies ``sum_i [|M_i| (1 + log 2 pi) + log|Cov z_{i,M}|] / 2``.

Gibbs (Appendix C): ``theta``, ``1/a``, components as in :mod:`bayesvm.engines.linear.gibbs` with the current
``z``; then ``z_{i,M} ~ N(P_i^{-1} l_i, P_i^{-1})`` with the draws in place of the expectations,
``mu | z, Sigma`` and ``Sigma | z, mu ~ IW(nu + n, Psi + sum_i (z_i - mu)(z_i - mu)')``.  The chains start around
the VB fit, overdispersed (:class:`ChainStart` says why: a minor mode at the complete cases' hinge vertex).

With ``ImputationProblem.mode == "mi"`` the same chain runs multiple imputation instead
(:mod:`bayesvm.engines.imputation.multiple`): ``z`` comes from the imputation model's own chain, renewed every
``MI_SETTLE + MI_KEEP * thin`` iterations, and draws are stored only after the ``(theta, a)`` chain has
settled on the new completed data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import scipy.sparse as sp
from scipy import stats
from scipy.special import multigammaln

from ...linalg.dense import blas_threads, gaussian_draw, gaussian_posterior, spd_inverse
from ...model.problems import ImputationProblem
from ..augmentation import inverse_a_mean, row_terms, update_chi
from ..components import (
    LOG_2PI,
    component_values,
    draw_components,
    initial_component,
    prior_precisions,
    second_moments,
    update_component,
)
from ..gibbs_driver import TUNE, GibbsResult, kept_draw_index, run_chains
from ..joint import log_prior, log_pseudo_likelihood
from ..linear.collapsed_variance import CollapsedVariance
from ..linear.gibbs import sparse_coefficient_draw
from ..linear.gibbs_rows import MARGIN_FLOOR, weighted_rows
from ..linear.interweave import ScaleMoves
from ..linear.vb import VBResult, lower_bound
from ..overrelax import RELAXATION
from ..squarem import plain_ascent
from .normal_model import imputation_step, marginal_moments, missing_patterns, start_state


@dataclass
class ImputedVBResult(VBResult):
    """VB output plus ``q(z_mis)``, ``q(mu)`` and ``q(Sigma)`` (rows in the caller's order)."""

    z_mean: np.ndarray = None  # (n, V): observed values and imputed means, standardised
    z_cov: np.ndarray = None  # (n, V, V): Cov(z_i) (zero rows/cols where observed)
    mu_mean: np.ndarray = None
    mu_cov: np.ndarray = None
    sigma_df: float = 0.0
    sigma_scale: np.ndarray = None
    design: np.ndarray = field(default=None, repr=False)  # D at the imputed means

    def imputation_moments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(z mean (n, V), z sd (n, V), E[mu], E[Sigma])`` on the standardised scale (``q(Sigma)`` is
        inverse Wishart: its mean where it exists, else its scale)."""
        V = self.mu_mean.size
        sd = np.sqrt(np.diagonal(self.z_cov, axis1=1, axis2=2))
        sigma = self.sigma_scale / (self.sigma_df - V - 1.0) if self.sigma_df > V + 1 else self.sigma_scale
        return self.z_mean, sd, self.mu_mean, sigma


def _conditional(lam, h, Ebb, Eb, Erb, w, rhs, z, rows, mis):
    """``P_i`` and ``l_i`` of ``z_{i,M}`` for the rows of one pattern (vectorised over rows); ``w`` and ``rhs`` are the
    rows' weights ``w_i`` and linear terms ``y_i (1 + w_i)`` of :func:`~bayesvm.engines.augmentation.row_terms` (each
    times the row's class weight where there are class weights)."""
    obs = ~mis
    P = lam[np.ix_(mis, mis)][None] + w[rows, None, None] * Ebb[np.ix_(mis, mis)][None]
    zo = z[np.ix_(rows, obs)]
    lin = h[mis][None] - zo @ lam[np.ix_(mis, obs)].T
    lin = lin + rhs[rows][:, None] * Eb[mis][None]
    lin = lin - w[rows, None] * (Erb[:, mis] + zo @ Ebb[np.ix_(mis, obs)].T)
    return P, lin


def fit_impute_vb(problem: ImputationProblem, tol: float = 1e-8, max_iter: int = 500) -> ImputedVBResult:
    """Alg. 4, generalised (module docstring), with the BLAS threading of :func:`linalg.blas_threads`."""
    with blas_threads(problem.base.D.shape[1]):
        return _fit_vb(problem, tol, max_iter)


def _fit_vb(problem: ImputationProblem, tol: float, max_iter: int) -> ImputedVBResult:
    start = time.perf_counter()
    order, prob = problem.sorted()
    n, V = prob.z.shape
    # the start: observed values where observed, E[1/a_i] = 1, the imputation model at the observed moments
    z = prob.z.copy()
    state = (
        z, np.zeros((n, V, V)), np.ones(n), [initial_component(c) for c in prob.base.components], z.mean(axis=0),
        prob.scale + np.cov(z, rowvar=False).reshape(V, V) * n,
    )  # fmt: skip
    ascent = plain_ascent(partial(_sweep, prob, missing_patterns(prob.missing)), state, tol, max_iter)
    last = ascent.last
    z, z_cov, chi, components, mu_mean, psi_q = last.state
    D = last.design
    if order is not None:
        back = np.argsort(order)
        z, z_cov, chi, D = z[back], z_cov[back], chi[back], D[back]
    return ImputedVBResult(
        theta=last.theta,
        components=components,
        chi=chi,
        lower_bound=np.asarray(ascent.bounds),
        converged=ascent.converged,
        n_iter=len(ascent.bounds),
        elapsed=time.perf_counter() - start,
        decreases=ascent.decreases,
        z_mean=z,
        z_cov=z_cov,
        mu_mean=mu_mean,
        mu_cov=last.mu_cov,
        sigma_df=prob.df + n,
        sigma_scale=psi_q,
        design=D,
    )


@dataclass(frozen=True)
class JointSweep:
    """One sweep of the joint-imputation VB (module docstring): the state it leaves ``(E z, Cov z, chi, q(components),
    E mu, Psi_q)``, the bound there, and ``q(theta)``, ``Cov(mu)`` and the design rows at ``E z`` it formed."""

    state: tuple
    bound: float
    theta: object
    mu_cov: np.ndarray
    design: np.ndarray


def _sweep(prob, patterns, state: tuple) -> JointSweep:
    """Every factor's update once, in the module docstring's order (Alg. 4, generalised)."""
    z, z_cov, chi, components, mu_mean, psi_q = state
    z, z_cov = z.copy(), z_cov.copy()
    base = prob.base
    y, blocked = base.y, base.blocked
    n, V = z.shape
    K, gamma = prob.columns, prob.gamma
    codes = None if blocked is None else blocked.codes
    values = None if blocked is None else blocked.values
    mis_rows = np.flatnonzero(prob.missing.any(axis=1))
    sigma_df = prob.df + n
    w, rhs = row_terms(y, inverse_a_mean(chi), base.weights)  # (class weights: each row's terms times omega_i)
    lam = sigma_df * np.linalg.inv(psi_q)
    # q(theta): rows at E[z]; precision + sum_i w_i Cov(c_i)
    D = prob.design(z)
    prior_dd, prior_b = prior_precisions(base, [c.expected_precision() for c in components])
    extra = np.einsum("i,ijk->jk", w[mis_rows], z_cov[mis_rows]) * np.outer(gamma, gamma)
    prior_dd[np.ix_(K, K)] += extra
    theta = gaussian_posterior(D, w, rhs, prior_dd, blocked, prior_b)
    # q(z_{i,M})
    Eb = gamma * theta.mean_d[K]
    Ebb = np.outer(gamma, gamma) * (theta.cov_d[np.ix_(K, K)] + np.outer(theta.mean_d[K], theta.mean_d[K]))
    if mis_rows.size:
        D0 = D[mis_rows].copy()
        D0[:, K] = prob.alpha
        mean_r = D0 @ theta.mean_d
        resid = D0
        if codes is not None and theta.mean_b.size:
            zb, lvl = values[mis_rows], codes[mis_rows]
            mean_r = mean_r + np.sum(zb * theta.mean_b[lvl], axis=1)
            resid = D0 - np.einsum("nk,nkq->nq", zb, theta.gains.take(lvl))
        cov_rb = (resid @ theta.cov_d[:, K]) * gamma
        Erb_all = np.zeros((n, V))
        Erb_all[mis_rows] = mean_r[:, None] * Eb[None] + cov_rb
        h = lam @ mu_mean
        for rows, mis in patterns:
            P, lin = _conditional(lam, h, Ebb, Eb, Erb_all[rows], w, rhs, z, rows, mis)
            cov = np.linalg.inv(P)
            z[np.ix_(rows, mis)] = np.einsum("nij,nj->ni", cov, lin)
            block = np.zeros((rows.size, V, V))
            block[:, mis[:, None] & mis[None, :]] = cov.reshape(rows.size, -1)
            z_cov[rows] = block
    # q(a)
    D = prob.design(z)
    mean_f, var_f = theta.predictor(D, codes, values)
    var_f = var_f + np.einsum("jk,ijk->i", Ebb, z_cov)
    expected_sq = (1.0 - y * mean_f) ** 2 + var_f
    chi = update_chi(expected_sq)
    # q(mu), q(Sigma)
    mu_cov = np.linalg.inv(np.eye(V) / prob.mean_variance + n * lam)
    mu_mean = mu_cov @ lam @ z.sum(axis=0)
    dev = z - mu_mean
    psi_q = prob.scale + dev.T @ dev + z_cov.sum(axis=0) + n * mu_cov
    # variance components
    seconds = [second_moments(c, theta) for c in base.components]
    components = [update_component(c, s, p) for c, s, p in zip(base.components, seconds, components)]
    bound = _bound(prob, theta, mean_f, expected_sq, chi, components, seconds, z, z_cov, mu_mean, mu_cov, psi_q)
    return JointSweep((z, z_cov, chi, components, mu_mean, psi_q), bound, theta, mu_cov, D)


def _bound(prob, theta, mean_f, expected_sq, chi, components, seconds, z, z_cov, mu_mean, mu_cov, psi_q) -> float:
    """Regression bound + imputation-model bound (module docstring), every constant kept."""
    base = prob.base
    n, V = z.shape
    # regression part, with E[(1 - y f)^2] including the imputation variance
    total = lower_bound(base, base.y, theta, mean_f, expected_sq, chi, components, seconds, base.weights)
    # imputation model
    df_q = prob.df + n
    lam = df_q * np.linalg.inv(psi_q)
    dev = z - mu_mean
    T = dev.T @ dev + z_cov.sum(axis=0) + n * mu_cov
    total += -0.5 * n * V * LOG_2PI - 0.5 * float(np.sum(lam * T))  # E log p(z | mu, Sigma) w/o E log|Sigma|
    s2 = prob.mean_variance
    total += -0.5 * V * np.log(2 * np.pi * s2) - 0.5 * (mu_mean @ mu_mean + np.trace(mu_cov)) / s2  # E log p(mu)
    total += 0.5 * V * (1.0 + LOG_2PI) + 0.5 * np.linalg.slogdet(mu_cov)[1]  # entropy of q(mu)
    nu, psi = prob.df, prob.scale
    total += (
        0.5 * nu * np.linalg.slogdet(psi)[1]
        - 0.5 * df_q * np.linalg.slogdet(psi_q)[1]
        - 0.5 * (nu - df_q) * V * np.log(2.0)
        - multigammaln(0.5 * nu, V)
        + multigammaln(0.5 * df_q, V)
        - 0.5 * float(np.sum((psi - psi_q) * lam))
    )  # E log p(Sigma) - E log q(Sigma), E log|Sigma| cancelled with the data term's
    for rows, m in missing_patterns(prob.missing):  # entropies of q(z_{i,M}), one pattern at a time
        logdet = np.linalg.slogdet(z_cov[rows][:, m][:, :, m])[1]
        total += 0.5 * rows.size * m.sum() * (1.0 + LOG_2PI) + 0.5 * float(np.sum(logdet))
    return float(total)


# ----- Gibbs (Appendix C) -----------------------------------------------------------------------
@dataclass
class ImputedGibbsDraws:
    """Imputation output of the Gibbs chains (rows in the caller's order)."""

    z_mean: np.ndarray  # (n, V) posterior means (observed values where observed), standardised
    z_var: np.ndarray  # (n, V) posterior variances (0 where observed)
    mu: np.ndarray  # (chains, draws, V)
    sigma: np.ndarray  # (chains, draws, V, V)


#: Multiple imputation inside Gibbs (``mode="mi"``): a new imputation every ``MI_SETTLE + MI_KEEP * thin``
#: iterations (``MI_THIN`` steps of the imputation chain apart, ``MI_BURN`` before the first); the first
#: ``MI_SETTLE`` iterations after each are not stored, so the (theta, a) chain forgets the previous imputation.
#: Updating z every iteration instead (the naive "cut" sampler) is not valid: a depends on z, and theta
#: drawn with a stale a was 2 posterior SDs off on simulated data (Plummer 2015 describes the same failure).
MI_SETTLE, MI_KEEP, MI_THIN, MI_BURN = 20, 20, 5, 100


def storage_schedule(tune: int, draws: int, thin: int, segments: bool) -> np.ndarray:
    """Per iteration: the index of the stored draw, or -1 (tuning, thinning, settling after an imputation)."""
    if not segments:
        return kept_draw_index(tune, draws, thin)
    length = MI_SETTLE + MI_KEEP * thin
    total = tune + length * (-(-draws // MI_KEEP)) + length
    position = np.arange(total) % length
    keep = (np.arange(total) >= tune) & (position >= MI_SETTLE) & ((position - MI_SETTLE) % thin == 0)
    index = np.cumsum(keep) - 1
    keep &= index < draws
    last = int(np.flatnonzero(keep)[-1]) + 1
    return np.where(keep, index, -1)[:last]


#: The chains' spread around the VB fit (:class:`ChainStart`): each missing value starts ``OVERDISPERSION`` times its
#: ``q`` SD from its ``q`` mean (an overdispersed start, Gelman & Rubin 1992), each weight ``w_i`` and each variance at
#: a log-normal(0, 0.5) multiple of its VB value (the spread of the random start).
OVERDISPERSION = 2.0


@dataclass
class ChainStart:
    """Where each chain of the joint model (``mode="joint"``) starts: around its VB fit, overdispersed.

    Why: the joint model's posterior can have a minor mode that a chain started at random falls into and cannot leave.
    On acath (``sigdz ~ age + sex + log_dur + log_chol``, ``log_chol`` missing for 1,246 of 3,504 patients) the
    complete cases' hinge loss is smallest at a vertex with ``age``, ``log_dur`` and ``log_chol`` at 0 (the
    sex-only classifier: VB and Gibbs on the complete cases give those slopes 0.001-0.04), while the joint model's
    imputations, pulled towards their rows' class by the unnormalised pseudo-likelihood, carry the main mode to
    ``log_chol`` 3.3 and ``age`` 0.064 (Luts & Ormerod 2014, section 4.5).  With ``z_mis`` integrated out in closed
    form, the main mode's log density is about 115 higher than the vertex's and the straight path between them
    dips about 30 below the vertex: a chain that starts with untilted imputations and small slopes can settle at the
    vertex for good, which no chain from this start does.
    Where the chain starts does not change what it samples (each step keeps the target); the spread keeps R-hat's
    check of the starts.  Rows are in the caller's order."""

    z_mean: np.ndarray  # (n, V) q means (observed values where observed)
    z_sd: np.ndarray  # (n, V) q SDs (0 where observed)
    w: np.ndarray  # (n,) E_q[1 / a_i]
    covs: list  # each component's covariance under q
    mu: np.ndarray
    sigma: np.ndarray

    @classmethod
    def from_vb(cls, problem: ImputationProblem) -> ChainStart | None:
        """The start from :func:`fit_impute_vb` of ``problem``; ``None`` (the random start) where VB fails or
        gives non-finite values."""
        try:
            with np.errstate(all="ignore"):
                fit = fit_impute_vb(problem)
        except (np.linalg.LinAlgError, FloatingPointError):
            return None
        covs = []
        for component in fit.components:
            cov = component.expected_covariance()  # (NaN where q has no mean: then its scale over its shape)
            covs.append(cov if np.all(np.isfinite(cov)) else component.scale / component.shape)
        start = cls(
            z_mean=fit.z_mean,
            z_sd=np.sqrt(np.diagonal(fit.z_cov, axis1=1, axis2=2)),
            w=inverse_a_mean(fit.chi),
            covs=covs,
            mu=fit.mu_mean,
            sigma=fit.sigma_scale / fit.sigma_df,
        )
        values = [start.z_mean, start.z_sd, start.w, start.mu, start.sigma, *covs]
        return start if all(np.all(np.isfinite(v)) for v in values) else None

    def draw(self, order: np.ndarray | None, missing: np.ndarray, rng: np.random.Generator) -> tuple:
        """One chain's ``(w, covs, z, mu, Sigma)`` in the chain's row ``order`` (``missing`` in that order)."""
        take = (lambda a: a) if order is None else (lambda a: a[order])
        z = take(self.z_mean).copy()
        z[missing] += OVERDISPERSION * take(self.z_sd)[missing] * rng.standard_normal(int(missing.sum()))
        omega = take(self.w) * np.exp(rng.normal(0.0, 0.5, self.w.size))
        covs = [cov * np.exp(rng.normal(0.0, 0.5)) for cov in self.covs]
        return omega, covs, z, self.mu.copy(), self.sigma.copy()


def imputation_schedule(total: int, thin: int) -> np.ndarray:
    """Per iteration: whether a new imputation starts (the segments of :func:`storage_schedule`)."""
    return np.arange(total) % (MI_SETTLE + MI_KEEP * thin) == 0


def run_impute_chain(
    problem: ImputationProblem,
    draws: int,
    tune: int,
    thin: int,
    seed,
    show: bool,
    moves: bool = True,
    start: ChainStart | None = None,
) -> dict:
    with blas_threads(problem.base.D.shape[1]):
        return _chain(problem, draws, tune, thin, seed, show, moves, start)


def _chain(
    problem: ImputationProblem,
    draws: int,
    tune: int,
    thin: int,
    seed,
    show: bool,
    moves: bool = True,
    start: ChainStart | None = None,
) -> dict:
    """One chain of Appendix C (``mode="joint"``) or of the cut multiple-imputation posterior (``mode="mi"``).

    Each iteration: ``theta | w, z``; with ``moves``, the moves of :mod:`bayesvm.engines.linear.interweave` and of
    :mod:`bayesvm.engines.linear.collapsed_variance` on ``(theta, Sigma)`` given the completed design, ``w``
    integrated out (the completed data enter the hinge posterior only through the design, so each move keeps
    ``p(theta, Sigma | z, y)`` and with it the joint target);
    ``w | theta``; ``Sigma | theta``; then the imputations.  ``moves=False`` is the paper's sampler.  ``start``: the
    chain's first ``(w, components, z, mu, Sigma)`` are drawn around a VB fit (:class:`ChainStart`), else at random."""
    rng = np.random.default_rng(seed)
    order, prob = problem.sorted()
    base = prob.base
    y, blocked = base.y, base.blocked
    weights = base.weights  # class weights: margins omega_i on the rows scaled by omega_i, the paper's sampler
    if weights is not None:  # (:mod:`bayesvm.engines.linear.gibbs`; the moves assume unit weights)
        moves = False
    n, V = prob.z.shape
    K, gamma = prob.columns, prob.gamma
    patterns = missing_patterns(prob.missing)
    z = prob.z.copy()
    z[prob.missing] = rng.standard_normal(int(prob.missing.sum()))
    omega = np.exp(rng.normal(0.0, 0.5, n))
    covs = [np.eye(c.k) * np.exp(rng.normal(0.0, 0.5)) for c in base.components]
    aux: list = [None] * len(base.components)  # half-t auxiliary variables
    mu, sigma = np.zeros(V), np.eye(V)
    if start is not None:
        omega, covs, z, mu, sigma = start.draw(order, prob.missing, rng)
    precision_weights, linear_terms = weighted_rows(y, omega, weights)
    if prob.mode == "mi":
        state = start_state(prob, rng)
        z = state.z
    stored = storage_schedule(tune, draws, thin, prob.mode == "mi")
    new_imputation = imputation_schedule(stored.size, thin) if prob.mode == "mi" else None
    total = stored.size
    out = {
        "theta_d": np.empty((draws, base.D.shape[1])),
        "theta_b": None,
        "components": [np.empty((draws, c.k, c.k)) for c in base.components],
        "log_posterior": np.empty(draws),
        "mu": np.empty((draws, V)),
        "sigma": np.empty((draws, V, V)),
        "z_sum": np.zeros((n, V)),
        "z_sq": np.zeros((n, V)),
    }
    steps = range(total)
    mover = intercepts = None
    if show:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="Gibbs", leave=False)
    for step in steps:
        if new_imputation is not None and new_imputation[step]:  # the imputation model's own chain (impute_mi)
            for _ in range(MI_BURN if step == 0 else MI_THIN):
                imputation_step(state, prob, y, patterns, rng)
            mu, sigma = marginal_moments(state.B, state.sigma, y)
        D = prob.design(z)
        if sp.issparse(D):  # (multiple imputation only: z changes at a new imputation, the layout with it)
            if step == 0 or new_imputation[step]:
                current = replace(base, D=D)
            theta_d = sparse_coefficient_draw(
                current, precision_weights, [spd_inverse(c) for c in covs], rng, rhs=linear_terms
            )
            theta_b = np.zeros((0, 0))
        else:
            prior_dd, prior_b = prior_precisions(base, [spd_inverse(c) for c in covs])
            theta_d, theta_b = gaussian_draw(D, precision_weights, linear_terms, prior_dd, blocked, prior_b, rng)
        f = D @ theta_d
        if blocked is not None:
            f = f + np.sum(blocked.values * theta_b[blocked.codes], axis=1)
        if moves:  # before w | theta, which they need (interweave module); the design is this iteration's
            if mover is None or mover.problem.D is not D:
                lines = None if mover is None else mover.directions  # the chain's lines, fixed at its first design
                mover = ScaleMoves(current if sp.issparse(D) else replace(base, D=D), lines)
            if intercepts is None:  # (collapsed_variance: its terms' columns are never imputed)
                intercepts = CollapsedVariance(mover.problem, tune, prob.columns)
            intercepts.level_draws(
                theta_d, theta_b, covs, f, rng
            )  # u | beta, Sigma with w integrated out (fresh arrays)
            theta_d, theta_b, covs, f = mover(theta_d, theta_b, covs, aux, f, rng)
            if intercepts.has_moves:
                theta_d, theta_b, covs, f = intercepts(theta_d, theta_b, covs, aux, f, rng, step)
        margin = 1.0 - y * f if weights is None else weights * (1.0 - y * f)
        omega = rng.wald(1.0 / np.maximum(np.abs(margin), MARGIN_FLOOR), 1.0)
        precision_weights, linear_terms = weighted_rows(y, omega, weights)
        covs = draw_components(
            base.components, [component_values(c, theta_d, theta_b) for c in base.components], rng, aux, covs,
            RELAXATION if moves and step >= tune else 0.0,  # over-relaxed after tuning, as the linear sampler's
        )  # fmt: skip
        if prob.mode != "mi":
            mu, sigma = _joint_imputation_step(prob, z, f, gamma * theta_d[K], mu, sigma, patterns, precision_weights,
                                               linear_terms, rng)  # fmt: skip
        if stored[step] >= 0:
            i = stored[step]
            out["theta_d"][i] = theta_d
            if out["theta_b"] is None:
                out["theta_b"] = np.empty((draws,) + theta_b.shape)
            out["theta_b"][i] = theta_b
            for store, cov in zip(out["components"], covs):
                store[i] = cov
            f_now = prob.design(z) @ theta_d + (f - D @ theta_d)
            log_likelihood = log_pseudo_likelihood(y, f_now, weights)
            out["log_posterior"][i] = log_likelihood + log_prior(base, theta_d, theta_b, covs)
            out["mu"][i], out["sigma"][i] = mu, sigma
            out["z_sum"] += z
            out["z_sq"] += z * z
    if order is not None:
        back = np.argsort(order)
        out["z_sum"], out["z_sq"] = out["z_sum"][back], out["z_sq"][back]
    return out


def _joint_imputation_step(prob, z, f, b, mu, sigma, patterns, precision_weights, linear_terms, rng):
    """Appendix C's imputation steps of the joint model, in place on ``z``: each row's missing entries given the rest
    (``z_{i,M} | theta, w, mu, Sigma``: the hinge's Gaussian augmentation with the imputed columns' coefficients ``b``
    and the normal model, :func:`_conditional`, one pattern of missing columns at a time), then ``mu | z, Sigma`` and
    ``Sigma | z, mu`` (normal and inverse-Wishart); ``f`` is the predictor at the current ``z``.  Returns ``(mu,
    Sigma)``."""
    n, V = z.shape
    r = f - z @ b
    prec = np.linalg.inv(sigma)
    h = prec @ mu
    bb = np.outer(b, b)
    for rows, mis in patterns:
        P, lin = _conditional(prec, h, bb, b, r[rows, None] * b[None], precision_weights, linear_terms, z, rows, mis)
        chol = np.linalg.cholesky(P)
        mean = np.linalg.solve(P, lin[..., None])[..., 0]
        eps = rng.standard_normal(lin.shape)
        dev = np.linalg.solve(np.swapaxes(chol, 1, 2), eps[..., None])[..., 0]  # L^{-T} eps
        z[np.ix_(rows, mis)] = mean + dev
    mu_cov = np.linalg.inv(np.eye(V) / prob.mean_variance + n * prec)
    mu = rng.multivariate_normal(mu_cov @ prec @ z.sum(axis=0), mu_cov)
    dev = z - mu
    sigma = np.atleast_2d(stats.invwishart(df=prob.df + n, scale=prob.scale + dev.T @ dev).rvs(random_state=rng))
    return mu, sigma


@dataclass
class ImputedGibbsResult(GibbsResult):
    """Gibbs draws of the regression plus the imputation summaries (:class:`ImputedGibbsDraws`)."""

    imputation: ImputedGibbsDraws = None
    imputation_mode: str = "joint"

    def imputation_moments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(z mean (n, V), z sd (n, V), E[mu], E[Sigma])`` over the draws, standardised scale."""
        draws = self.imputation
        return draws.z_mean, np.sqrt(draws.z_var), draws.mu.mean(axis=(0, 1)), draws.sigma.mean(axis=(0, 1))


def sample_impute_gibbs(
    problem: ImputationProblem,
    draws: int = 1000,
    tune: int = TUNE,
    chains: int = 4,
    thin: int = 1,
    seed: int | None = None,
    cores: int = 1,
    progress: bool = True,
    _moves: bool = True,
) -> ImputedGibbsResult:
    """Run ``chains`` Appendix-C chains (in parallel processes when ``cores > 1``); ``_moves=False`` runs the paper's
    sampler (kept for comparison: ``benchmarks/gibbs_mixing.py``), from the random start.  With the moves, the joint
    model's chains start around its VB fit (:class:`ChainStart`)."""
    start = time.perf_counter()
    begin = ChainStart.from_vb(problem) if _moves and problem.mode == "joint" else None
    chain = partial(run_impute_chain, start=begin) if _moves else partial(run_impute_chain, moves=False)
    runs = run_chains(chain, problem, draws, tune, thin, chains, seed, cores, progress)
    kept = chains * draws
    z_mean = sum(r["z_sum"] for r in runs) / kept
    z_var = np.maximum(sum(r["z_sq"] for r in runs) / kept - z_mean**2, 0.0) * kept / max(kept - 1, 1)
    z_var[~problem.missing] = 0.0
    return ImputedGibbsResult(
        theta_d=np.stack([r["theta_d"] for r in runs]),
        theta_b=np.stack([r["theta_b"] for r in runs]),
        components=[np.stack([r["components"][c] for r in runs]) for c in range(len(problem.base.components))],
        log_posterior=np.stack([r["log_posterior"] for r in runs]),
        elapsed=time.perf_counter() - start,
        tune=tune,
        thin=thin,
        seed=seed,
        imputation=ImputedGibbsDraws(
            z_mean=z_mean,
            z_var=z_var,
            mu=np.stack([r["mu"] for r in runs]),
            sigma=np.stack([r["sigma"] for r in runs]),
        ),
        imputation_mode=problem.mode,
    )
