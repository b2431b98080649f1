"""Inputs shared by the variable-selection engines, and Laplace-zero VB (Luts & Ormerod 2014, Alg. 3).

Model (section 3.2), with ``X = [X_f, X_s]`` the standardised fixed-effect design, ``beta`` the
unpenalised coefficients (intercept, ``unpenalized=`` terms; ``N(0, 1/lambda_j)``) and the
penalised slopes ``gamma_k v_k``:

* ``v_k | b_k, sigma^2 ~ N(0, sigma^2 s_k^2 / b_k)``, ``b_k ~ IG(1, 1/2)`` (so ``v_k ~ Laplace(0, sigma s_k)``),
* ``gamma_k ~ Bernoulli(rho)``, ``sigma^2 ~ IG(A, B)``, hinge pseudo-likelihood augmented by ``a_i``.

Factorisation ``q(beta, v) q(sigma^2) prod_i q(a_i) prod_k q(b_k) q(gamma_k)``.  With
``theta = (beta, v)``, ``g = (1, ..., 1, mu_gamma)`` (one per column of X), ``Omega_g = g g' + diag(g (1 - g))``,
``G = X' W X`` and ``r = X' Y (1 + w)``, the coordinate updates are (derived here; Alg. 3 numbering):

* step 2-3: ``q(theta) = N(mu, P^{-1})``, ``P = G o Omega_g + diag(lambda, E[1/sigma^2] E[b] / s^2)``,
  ``mu = P^{-1} (g o r)``;
* step 5: ``q(b_k) = GIG(-1/2, psi_k, 1)`` = inverse Gaussian with mean ``psi_k^{-1/2}`` and shape 1,
  ``psi_k = E[v_k^2] E[1/sigma^2] / s_k^2``; ``E[b_k] = psi_k^{-1/2}``;
* step 6-7: ``mu_gamma_k = expit(eta_k)``, ``eta_k = logit(rho) + mu_k r_k - G_kk E[v_k^2] / 2
  - sum_{j != k} G_kj g_j E[theta_j v_k]``, one k at a time (each uses the updated ``g``).  Only ``G``,
  ``r`` and ``E[theta theta']`` enter, so a sweep over k costs ``O(m q)``, never ``O(n m^2)``;
* step 10: ``chi_i = 1 - 2 y_i x_i'(g o mu) + x_i' (Omega_g o E[theta theta']) x_i``, ``w_i = chi_i^{-1/2}``;
* step 11: ``q(sigma^2) = IG(A + m/2, B + sum_k E[b_k] E[v_k^2] / (2 s_k^2))``.

Lower bound (written term by term in :func:`_prior_bound` and the data term; the printed one has typos, e.g. its
``-1' mu_b^{-1} / 2`` is ``-1' mu_b^{-1}`` when every term is kept):
``data(E f, E (1 - y f)^2, chi) + sum_j [log lambda_j - log 2 pi - lambda_j E theta_j^2] / 2``
``+ sum_k [-log(2 pi)/2 - log s_k + log(pi/2)/2 - sqrt(psi_k) + E[b_k](psi_k - E[v_k^2] E[1/sigma^2] / s_k^2) / 2]``
``+ A log B - log Gamma(A) - A_q log B_q + log Gamma(A_q) + (B_q - B) E[1/sigma^2]``
``+ sum_k KL-free Bernoulli terms mu log(rho / mu) + (1 - mu) log((1 - rho) / (1 - mu))``
``+ (q/2)(1 + log 2 pi) + log|P^{-1}| / 2``.
Every ``E[log b_k]``, ``E[1/b_k]`` and ``E[log sigma^2]`` cancels between ``log p`` and ``log q``.

**Random effects**: the columns of each random-effect term join ``theta`` as one more block, with
``g = 1`` and prior precision ``E[Sigma^{-1}]`` of its ``q(Sigma)`` (inverse gamma, half-t or inverse
Wishart: :func:`bayesvm.engines.components.update_component`, Alg. 2 step 4).  They enter ``P`` beside the slopes,
are updated after step 3 from ``E[u_j u_j']`` and add :func:`bayesvm.engines.components.component_bound` to the bound;
nothing else in Alg. 3 changes, because the indicators act on the slopes alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import scipy.linalg as sla
from scipy.special import expit, gammaln, logit, xlogy

from ...linalg.dense import blas_threads
from ...model.output import EngineOutput
from ...model.problems import SelectionProblem, VarianceComponent
from ...priors import LaplaceZero
from ..augmentation import CHI_FLOOR
from ..components import (
    ComponentPosterior,
    component_bound,
    decode_components,
    encode_components,
    initial_component,
    update_component,
)
from ..squarem import ascend
from .message import MessageSweep

LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass
class SelectionVBResult(EngineOutput):
    """Output of a selection-prior VB fit: Laplace-zero (Alg. 3) or spike-and-slab
    (:mod:`bayesvm.engines.selection.spike_slab_vb`).

    Attributes
    ----------
    mean, cov
        ``q(theta) = N(mean, cov)`` for ``theta = (beta, v)`` in the columns of X.
    include
        ``(q,)`` ``g``: 1 for unpenalised columns, ``mu_gamma`` for the penalised ones.
    expected_b, sigma2_shape, sigma2_scale
        ``E[b_k]`` and ``q(sigma^2) = IG(shape, scale)`` (Laplace-zero; ``None`` for the spike-and-slab fit of
        :mod:`bayesvm.engines.selection.spike_slab_vb`, whose slab variance is fixed).
    components
        ``q`` of each random-effect term's (co)variance.
    lower_bound
        After every sweep.
    """

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): q(gamma) x q(theta): a spike-and-Gaussian mixture per slope.
    posterior_form: ClassVar[str] = "selection"

    mean: np.ndarray
    cov: np.ndarray
    include: np.ndarray
    selected: np.ndarray
    expected_b: np.ndarray | None
    sigma2_shape: float | None
    sigma2_scale: float | None
    lower_bound: np.ndarray
    converged: bool
    n_iter: int
    decreases: list[int]
    elapsed: float
    components: list[ComponentPosterior] = field(default_factory=list)
    #: Lasso with a learned scale: ``q(kappa)`` of ``kappa = 1 / nu`` (:class:`bayesvm.engines.selection.lasso_vb.ScaleMoments`)
    scale_law: object = None

    @property
    def p_include(self) -> np.ndarray:
        return self.include[self.selected]

    @property
    def scale_estimate(self) -> tuple[str, float] | None:
        """The prior's learned scale (the engine-output contract): ``E[sigma_u^2]`` under ``q(sigma_u^2)`` (Laplace-zero,
        Alg. 3), ``E[nu]`` under ``q(1/nu)`` (lasso with a learned scale); ``None`` when the scale is fixed."""
        if self.sigma2_shape is not None:
            return "E[{s}^2]", self.sigma2_scale / (self.sigma2_shape - 1.0)
        if self.scale_law is not None:
            return "E[{s}]", float(self.scale_law.mean_inverse)
        return None

    @property
    def second_moment(self) -> np.ndarray:
        """``E_q[c c']`` of the effective coefficients ``c = g o theta``: ``Omega_g o E[theta theta']``."""
        g = self.include
        omega_g = np.outer(g, g)
        np.fill_diagonal(omega_g, g)
        return omega_g * (self.cov + np.outer(self.mean, self.mean))

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(coefficients, gamma)``: ``theta ~ q(theta)`` and ``gamma ~ q(gamma)`` independently, as the
        effective coefficients ``g o theta`` (``(size, q)``, exact zeros where excluded) and ``(size, m)``."""
        theta = rng.multivariate_normal(self.mean, self.cov, size=size, method="cholesky")
        gamma = rng.random((size, self.selected.size)) < self.p_include
        keep = np.ones((size, self.mean.size))
        keep[:, self.selected] = gamma
        return keep * theta, gamma.astype(np.int8)

    @property
    def coef_mean(self) -> np.ndarray:
        """Model-averaged coefficients ``E_q[gamma v] = mu_gamma mu_v`` (the paper's classification rule)."""
        return self.include * self.mean


def fit_laplace_zero_vb(
    problem: SelectionProblem, tol: float = 1e-8, max_iter: int = 500, accelerate: bool = True
) -> SelectionVBResult:
    """Alg. 3 (``accelerate=False``: the paper's plain iteration) with BLAS threading chosen by
    :func:`linalg.blas_threads`."""
    if not isinstance(problem.prior, LaplaceZero):
        raise TypeError("fit_laplace_zero_vb needs a LaplaceZero prior")
    with blas_threads(problem.q):
        return fit_by_ascent(LaplaceZeroAscent(problem), problem, tol, max_iter, accelerate)


@dataclass
class _Sweep:
    """The factors one Alg. 3 sweep (or one SVI step) produced; ``state`` and ``bound`` are set by
    :class:`~bayesvm.engines.selection.message.MessageSweep` after ``q(a)``."""

    rest: tuple  # (g, psi, sigma2_scale, components)
    mean: np.ndarray
    cov: np.ndarray
    expected_b: np.ndarray
    prior_bound: float
    second: np.ndarray  # E[theta theta']
    state: tuple = ()  # (chi, g, psi, sigma2_scale, components): everything the next sweep starts from
    bound: float = float("nan")

    @property
    def include(self) -> np.ndarray:
        return self.rest[0]


class LaplaceZeroAscent(MessageSweep):
    """Alg. 3 as a map from the state ``(chi, g, psi, B_q)`` to the next sweep."""

    def __init__(self, problem: SelectionProblem):
        self.p = problem
        self.s2 = problem.prior_scale**2
        self.shape = problem.prior.variance.a + 0.5 * problem.m
        self.learn_gamma = problem.prior.rho < 1.0
        self.logit_rho = logit(problem.prior.rho) if self.learn_gamma else np.inf

    def initial_state(self) -> tuple:
        """``E[1/a] = 1``, every slope included, ``E[b] = 1``, ``E[1/sigma^2] = 1``, ``E[Sigma^{-1}] = I``."""
        components = [initial_component(c) for c in self.p.components]
        return np.ones(self.p.y.size), np.ones(self.p.q), np.ones(self.p.m), self.shape, components

    def update(
        self, gram: np.ndarray, r: np.ndarray, g: np.ndarray, psi: np.ndarray, scale: float, components: list
    ) -> _Sweep:
        """Alg. 3 steps 2-7 and 11 and the random-effect terms, given the rows' message ``(G, r)``."""
        problem, sel, s2 = self.p, self.p.selected, self.s2
        q = problem.q
        g = g.copy()
        # steps 2-3: q(beta, v)
        omega_g = np.outer(g, g)
        np.fill_diagonal(omega_g, g)
        inv_sigma2 = self.shape / scale
        prior_precision = problem.fixed_precision.copy()
        prior_precision[sel] = inv_sigma2 / np.sqrt(psi) / s2
        prior_precision[problem.component_columns] = 0.0
        precision = gram * omega_g
        precision[np.diag_indices(q)] += prior_precision
        problem.add_component_precisions(precision, [c.expected_precision() for c in components])
        chol = sla.cho_factor(precision, lower=True)
        cov = sla.cho_solve(chol, np.eye(q))
        mean = sla.cho_solve(chol, g * r)
        second = cov + np.outer(mean, mean)
        # step 5: q(b_k)
        second_v = np.diag(second)[sel]
        psi = second_v * inv_sigma2 / s2
        expected_b = 1.0 / np.sqrt(psi)
        # steps 6-7: q(gamma_k), one k at a time
        if self.learn_gamma:
            for k in sel:
                cross = gram[k] * second[k]
                eta = self.logit_rho + mean[k] * r[k] - 0.5 * cross[k] - (cross @ g - cross[k] * g[k])
                g[k] = expit(eta)
        # step 11: q(sigma^2)
        scale = problem.prior.variance.b + 0.5 * float(np.sum(expected_b * second_v / s2))
        # random-effect terms: Alg. 2 step 4 from E[u_j u_j'] (module docstring)
        seconds = [component_second(c, second) for c in problem.components]
        components = [update_component(c, m, post) for c, m, post in zip(problem.components, seconds, components)]
        bound = _prior_bound(problem, chol, second, g, psi, expected_b, self.shape, scale)
        bound += sum(component_bound(c, post, m) for c, post, m in zip(problem.components, components, seconds))
        return _Sweep((g, psi, scale, components), mean, cov, expected_b, bound, second)

    def row_moments(self, factors: _Sweep, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step 10's ``E f = X (g o mu)`` and ``E (1 - y f)^2 = 1 - 2 y E f + x' (Omega_g o E[theta theta']) x``."""
        g = factors.include
        omega_g = np.outer(g, g)
        np.fill_diagonal(omega_g, g)
        mean_f = X @ (g * factors.mean)
        second_f = np.einsum("ij,ij->i", X @ (omega_g * factors.second), X)
        return mean_f, 1.0 - 2.0 * y * mean_f + second_f

    def fields(self, factors: _Sweep) -> dict:
        """The result's prior-specific fields from the last factors."""
        g, _, scale, components = factors.rest
        return dict(include=g.copy(), expected_b=factors.expected_b, sigma2_shape=self.shape, sigma2_scale=scale,
                    components=components)  # fmt: skip

    # SQUAREM works on an unconstrained encoding of the state
    def encode(self, chi, g, psi, scale, components) -> np.ndarray:
        mu = np.clip(g[self.p.selected], 1e-12, 1.0 - 1e-12)
        return np.concatenate([np.log(chi), logit(mu), np.log(psi), [np.log(scale)], encode_components(components)])

    def decode(self, x: np.ndarray, like: tuple) -> tuple:
        n, m = self.p.y.size, self.p.m
        g = np.ones(self.p.q)
        g[self.p.selected] = expit(x[n : n + m])
        end = n + 2 * m
        components = decode_components(x[end + 1 :], like[4])
        return np.maximum(np.exp(x[:n]), CHI_FLOOR), g, np.exp(x[n + m : end]), float(np.exp(x[end])), components


def fit_by_ascent(
    alg, problem: SelectionProblem, tol: float, max_iter: int, accelerate: bool = True, start: float | None = None
) -> SelectionVBResult:
    """A selection prior's coordinate ascent ``alg`` (Alg. 3's, the lasso's, or either by passes over partitions) in
    SQUAREM cycles with the monotone safeguard (:mod:`bayesvm.engines.squarem`), as its result; ``start``: when the
    fit's clock started (now by default)."""
    start = time.perf_counter() if start is None else start
    ascent = ascend(alg, alg.initial_state(), tol, max_iter, accelerate)
    current = ascent.last
    return SelectionVBResult(
        mean=current.mean,
        cov=current.cov,
        selected=problem.selected,
        lower_bound=np.asarray(ascent.bounds),
        converged=ascent.converged,
        n_iter=ascent.n_sweeps,
        decreases=ascent.decreases,
        elapsed=time.perf_counter() - start,
        **alg.fields(current),
    )


def component_second(comp: VarianceComponent, second: np.ndarray) -> np.ndarray:
    """``sum_j E[u_j u_j']`` (``k x k``) of a random-effect term from ``E[theta theta']``."""
    idx = comp.index
    return second[idx[:, :, None], idx[:, None, :]].sum(axis=0)


def _prior_bound(problem, chol, second, g, psi, expected_b, shape, scale) -> float:
    """``log p(y; q)`` of Alg. 3 without the data term, every constant kept (see the module docstring)."""
    prior = problem.prior
    sel, free = problem.selected, problem.unselected
    a_prior, b_prior = prior.variance.a, prior.variance.b
    inv_sigma2 = shape / scale
    # E[log p(beta)] for the unpenalised coefficients
    lam = problem.fixed_precision[free]
    total = 0.5 * float(np.sum(np.log(lam) - LOG_2PI - lam * np.diag(second)[free]))
    # E[log p(v | b, sigma^2) + log p(b) - log q(b)], E[log sigma^2] moved to the sigma^2 term
    second_v = np.diag(second)[sel]
    s2 = problem.prior_scale**2
    total += float(
        np.sum(
            -0.5 * LOG_2PI
            - 0.5 * np.log(s2)
            + 0.5 * np.log(np.pi / 2.0)
            - np.sqrt(psi)
            + 0.5 * expected_b * (psi - second_v * inv_sigma2 / s2)
        )
    )
    # E[log p(sigma^2) - log q(sigma^2)] - (m/2) E[log sigma^2]
    total += a_prior * np.log(b_prior) - gammaln(a_prior) - shape * np.log(scale) + gammaln(shape)
    total += (scale - b_prior) * inv_sigma2
    # E[log p(gamma) - log q(gamma)]
    mu = g[sel]
    rho = prior.rho
    if rho < 1.0:
        total += float(np.sum(xlogy(mu, rho) - xlogy(mu, mu) + xlogy(1.0 - mu, 1.0 - rho) - xlogy(1.0 - mu, 1.0 - mu)))
    # entropy of q(theta)
    q = second.shape[0]
    total += 0.5 * q * (1.0 + LOG_2PI) - float(np.sum(np.log(np.diag(chol[0]))))
    return float(total)
