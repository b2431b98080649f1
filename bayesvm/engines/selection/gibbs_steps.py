"""Each selection prior's step of the Gibbs sampler (Luts & Ormerod 2014, Appendix B; Polson & Scott 2011, sections
4.1-4.2), written in the complete-data sufficient statistics ``G = X' diag(omega) X`` and ``r = X' Y (1 + omega)`` that
:mod:`bayesvm.engines.selection.gibbs` forms once per iteration; each prior's law names its step
(:mod:`bayesvm.engines.selection.laws`):

* Laplace-zero (Appendix B): ``theta = (beta, v) | gamma, b, sigma^2, omega`` in one block
  (precision ``T G T + diag(lambda, b / (sigma^2 s^2))``, ``T = diag(1, gamma)``), then
  ``sigma^2 ~ IG(A + m/2, B + sum b_k v_k^2 / (2 s_k^2))``, ``b_k ~ InverseGaussian(sigma s_k / |v_k|, 1)``
  and, for each k in turn, the pair ``(gamma_k, v_k)`` from its exact joint conditional: ``gamma_k`` with
  ``v_k`` integrated out (a one-dimensional Gaussian integral), then ``v_k | gamma_k``.  Appendix B draws
  ``gamma_k | v_k`` instead; drawing the pair is the same Gibbs sampler blocked, and it lets a
  variable re-enter the model without waiting for ``v_k`` to wander into the data's range.
* Spike-and-slab (section 4.2): for each j, ``gamma_j | gamma_{-j}, omega`` with every coefficient
  integrated out (eq. 17): ``log p(gamma | omega) = log p(gamma) + log|P_g|/2 - log|G_g + P_g|/2
  + r_g' (G_g + P_g)^{-1} r_g / 2``, where ``P_g`` is the prior precision of the included columns;
  ``G_g`` and ``r_g`` are sub-blocks of ``G`` and ``r``, so a model move costs one Cholesky of the
  included block and never touches the n rows.  Then ``beta_g ~ N((G_g + P_g)^{-1} r_g, (G_g + P_g)^{-1})``.
* Lasso (section 4.1, ``alpha = 1``): ``beta | tau, nu, omega`` in one block (prior precision
  ``1 / (nu^2 s_j^2 tau_j)``), ``1/nu ~ Gamma(a + m, b + sum |beta_j| / s_j)`` (``tau`` integrated
  out; when ``nu`` is learned), ``1/tau_j ~ InverseGaussian(nu s_j / |beta_j|, 1)``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from scipy.special import expit, gammaln, logit

from ...linalg.dense import spd_inverse
from ...model.problems import SelectionProblem
from ..inverse_gaussian import draw_inverse_gaussian
from .vb import LOG_2PI


def draw_gaussian(precision: np.ndarray, rhs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw from ``N(P^{-1} rhs, P^{-1})`` by a Cholesky factor of ``P``."""
    chol = sla.cholesky(precision, lower=True)
    mean = sla.cho_solve((chol, True), rhs)
    return mean + sla.solve_triangular(chol, rng.standard_normal(rhs.size), lower=True, trans="T")


class LaplaceZeroStep:
    """Appendix B with the pair ``(gamma_k, v_k)`` drawn jointly (module docstring)."""

    def __init__(self, problem: SelectionProblem, rng: np.random.Generator):
        self.p, self.rng = problem, rng
        self.theta = np.zeros(problem.q)
        self.gamma = np.ones(problem.m, dtype=np.int8)
        self.b = np.ones(problem.m)
        self.sigma2 = float(np.exp(rng.normal(0.0, 0.5)))
        self.s2 = problem.prior_scale**2
        self.logit_rho = logit(problem.prior.rho) if problem.prior.rho < 1 else np.inf

    @property
    def scale(self) -> float:
        return float(np.sqrt(self.sigma2))

    def update(self, gram: np.ndarray, r: np.ndarray) -> np.ndarray:
        p, rng, sel = self.p, self.rng, self.p.selected
        t = np.ones(p.q)
        t[sel] = self.gamma
        lam = p.fixed_precision.copy()
        lam[sel] = self.b / (self.sigma2 * self.s2)
        precision = gram * np.outer(t, t)
        precision[np.diag_indices(p.q)] += lam
        self.theta = draw_gaussian(precision, t * r, rng)  # theta = (beta, v) | rest
        v = self.theta[sel]
        prior = p.prior.variance
        rate = prior.b + 0.5 * float(np.sum(self.b * v**2 / self.s2))
        self.sigma2 = rate / rng.gamma(prior.a + 0.5 * p.m)  # sigma^2 | v, b
        self.b = draw_inverse_gaussian(
            np.sqrt(self.sigma2 * self.s2) / np.maximum(np.abs(v), 1e-300), 1.0, rng
        )  # b_k | v_k, sigma
        if self.logit_rho < np.inf:
            self._pairs(gram, r, t)
        t[sel] = self.gamma
        return t * self.theta

    def _pairs(self, gram: np.ndarray, r: np.ndarray, t: np.ndarray) -> None:
        """``(gamma_k, v_k) | rest`` for each k: ``gamma_k`` with ``v_k`` integrated out, then ``v_k``."""
        sel, theta, rng = self.p.selected, self.theta, self.rng
        coef = t * theta
        uniforms = rng.random(sel.size)
        normals = rng.standard_normal(sel.size)
        for j, k in enumerate(sel):
            lam = self.b[j] / (self.sigma2 * self.s2[j])
            c = r[k] - (gram[k] @ coef - gram[k, k] * coef[k])
            post = gram[k, k] + lam
            log_bf = 0.5 * np.log(lam / post) + 0.5 * c * c / post
            include = uniforms[j] < expit(self.logit_rho + log_bf)
            value = c / post + normals[j] / np.sqrt(post) if include else normals[j] / np.sqrt(lam)
            self.gamma[j] = include
            theta[k] = value
            coef[k] = value if include else 0.0

    def swap_log_prior(self, j: int, k: int, sign: float, coef: np.ndarray) -> float:
        """Log ratio of ``prod_k Laplace(v_k; 0, sigma s_k)`` (``b`` integrated out) after the swap of
        :mod:`bayesvm.engines.selection.moves`: ``v_k' = sign v_j``, ``v_j' = sign v_k``."""
        sel, scale = self.p.selected, np.sqrt(self.sigma2) * self.p.prior_scale
        vj, vk = abs(self.theta[sel[j]]), abs(self.theta[sel[k]])
        return float(-(vj / scale[k] + vk / scale[j] - vj / scale[j] - vk / scale[k]))

    def apply_swap(self, j: int, k: int, sign: float, coef: np.ndarray) -> None:
        sel = self.p.selected
        self.theta[sel[j]], self.theta[sel[k]] = sign * self.theta[sel[k]], sign * self.theta[sel[j]]
        self.gamma[j], self.gamma[k] = 0, 1

    def pair_priors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The included slopes' priors ``Laplace(0, sigma s_j)`` (``b_j`` integrated out) and ``logit(rho)``, for
        :class:`bayesvm.engines.selection.marginal_pairs.MarginalPairs`."""
        m = self.p.m
        inv_scale = 1.0 / (np.sqrt(self.sigma2) * self.p.prior_scale)
        return np.zeros(m), inv_scale, np.full(m, self.logit_rho)

    def apply_pairs(self, include: np.ndarray, value: np.ndarray) -> None:
        """Sets ``(gamma, v)``; an excluded ``v_j`` is drawn from its Laplace prior."""
        sel, moved = self.p.selected, include >= 0
        prior_draws = self.rng.laplace(0.0, np.sqrt(self.sigma2) * self.p.prior_scale)
        self.gamma[moved] = include[moved]
        self.theta[sel[moved]] = np.where(include[moved] == 1, value[moved], prior_draws[moved])

    def apply_line(self, coef: np.ndarray) -> None:
        """Sets the unpenalised coefficients and the included slopes moved by
        :class:`bayesvm.engines.selection.directions.LineMoves` (the excluded values stay)."""
        sel = self.p.selected
        free = self.p.unselected
        self.theta[free] = coef[free]
        on = self.gamma.astype(bool)
        self.theta[sel[on]] = coef[sel[on]]

    def after_moves(self) -> None:
        """``b | v, sigma^2`` afresh: the moves changed ``(gamma, v)`` with ``b`` integrated out."""
        v = self.theta[self.p.selected]
        self.b = draw_inverse_gaussian(np.sqrt(self.sigma2 * self.s2) / np.maximum(np.abs(v), 1e-300), 1.0, self.rng)

    def log_prior(self, coef: np.ndarray) -> float:
        """``log p(slopes, sigma^2)``: Laplace-zero (mass ``1 - rho`` at zero) and ``IG(A, B)``."""
        p, sel = self.p, self.p.selected
        rho, sigma = p.prior.rho, np.sqrt(self.sigma2 * self.s2)
        on = self.gamma.astype(bool)
        total = float(np.sum(np.log(rho) - np.log(2.0 * sigma[on]) - np.abs(coef[sel][on]) / sigma[on]))
        if rho < 1:
            total += float(np.sum(~on)) * np.log1p(-rho)
        a, b = p.prior.variance.a, p.prior.variance.b
        return total + a * np.log(b) - gammaln(a) - (a + 1.0) * np.log(self.sigma2) - b / self.sigma2


class SpikeSlabStep:
    """Polson & Scott section 4.2 (eq. 16-17)."""

    def __init__(self, problem: SelectionProblem, rng: np.random.Generator):
        self.p, self.rng = problem, rng
        self.gamma = np.ones(problem.m, dtype=np.int8)
        self.slab = 1.0 / (problem.prior.nu**2 * problem.prior_scale**2)  # prior precision when included
        self.lam = problem.fixed_precision.copy()
        self.lam[problem.selected] = self.slab
        self.logit_pi = logit(problem.prior.pi)
        self.scale = float(problem.prior.nu)

    def update(self, gram: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Model moves by bordering the inverse of ``M_g = G_g + P_g`` (O(|g|^2) per move), then ``beta_g``.

        Adding column k to the included set: with ``u = M_g^{-1} M_{g,k}``, ``d = M_kk - M_{g,k}' u`` and
        ``delta = r_k - u' r_g``, ``log m(g + k) - log m(g) = (log lambda_k - log d + delta^2 / d) / 2``;
        removing an included k uses the same identity read backwards, with ``d = 1 / (M_g^{-1})_kk``
        and ``delta / d = (M_g^{-1} r_g)_k``.
        """
        p, rng, sel = self.p, self.rng, self.p.selected
        mask = np.ones(p.q, dtype=bool)
        mask[sel] = self.gamma.astype(bool)
        active = list(np.flatnonzero(mask))
        matrix = gram.copy()
        matrix[np.diag_indices(p.q)] += self.lam
        inverse = spd_inverse(matrix[np.ix_(active, active)]) if active else np.zeros((0, 0))
        h = inverse @ r[active]
        for j in rng.permutation(p.m):  # gamma_j | gamma_{-j}, omega (eq. 17)
            k = sel[j]
            if self.gamma[j]:
                i = active.index(k)
                d = 1.0 / inverse[i, i]
                log_odds = 0.5 * (np.log(self.lam[k]) - np.log(d) + h[i] ** 2 * d)
                if rng.random() >= expit(self.logit_pi + log_odds):  # drop k
                    col = inverse[:, i]
                    keep = np.arange(len(active)) != i
                    h = (h - col * h[i] / inverse[i, i])[keep]
                    inverse = (inverse - np.outer(col, col) / inverse[i, i])[np.ix_(keep, keep)]
                    active.pop(i)
                    self.gamma[j] = 0
            else:
                border = matrix[active, k]
                u = inverse @ border
                d = matrix[k, k] - border @ u
                delta = r[k] - u @ r[active]
                log_odds = 0.5 * (np.log(self.lam[k]) - np.log(d) + delta * delta / d)
                if rng.random() < expit(self.logit_pi + log_odds):  # add k
                    inverse = np.block([[inverse + np.outer(u, u) / d, -u[:, None] / d], [-u[None, :] / d, 1.0 / d]])
                    h = np.append(h - u * delta / d, delta / d)
                    active.append(k)
                    self.gamma[j] = 1
        active_idx = np.array(active, dtype=int)
        coef = np.zeros(p.q)  # beta_g | gamma, omega
        if active_idx.size:
            coef[active_idx] = draw_gaussian(matrix[np.ix_(active_idx, active_idx)], r[active_idx], rng)
        return coef

    def swap_log_prior(self, j: int, k: int, sign: float, coef: np.ndarray) -> float:
        """Log ratio of the slab densities after moving ``beta_j`` to ``beta_k' = sign beta_j``."""
        value = coef[self.p.selected[j]]
        lam_j, lam_k = self.slab[j], self.slab[k]
        return float(0.5 * np.log(lam_k / lam_j) - 0.5 * value * value * (lam_k - lam_j))

    def apply_swap(self, j: int, k: int, sign: float, coef: np.ndarray) -> None:
        self.gamma[j], self.gamma[k] = 0, 1

    def pair_priors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The slab precisions ``1 / (nu^2 s_j^2)`` and ``logit(pi)``, for
        :class:`bayesvm.engines.selection.marginal_pairs.MarginalPairs`."""
        m = self.p.m
        return np.asarray(self.slab, dtype=float), np.zeros(m), np.full(m, self.logit_pi)

    def apply_pairs(self, include: np.ndarray, value: np.ndarray) -> None:
        moved = include >= 0
        self.gamma[moved] = include[moved]

    def apply_line(self, coef: np.ndarray) -> None:
        """Nothing to keep: the coefficients are drawn afresh each update."""

    def after_moves(self) -> None:
        """Nothing was integrated out but ``omega`` (the coefficients are drawn afresh each update)."""

    def log_prior(self, coef: np.ndarray) -> float:
        """``log p(gamma) + log N(beta_g; 0, nu^2 s^2)`` of the included slopes."""
        p, sel = self.p, self.p.selected
        on = self.gamma.astype(bool)
        pi = p.prior.pi
        total = float(np.sum(on)) * np.log(pi) + float(np.sum(~on)) * np.log1p(-pi)
        lam = self.slab[on]
        return total + 0.5 * float(np.sum(np.log(lam) - LOG_2PI - lam * coef[sel][on] ** 2))


class LassoStep:
    """Polson & Scott section 4.1 with ``alpha = 1`` (steps 1-4)."""

    def __init__(self, problem: SelectionProblem, rng: np.random.Generator):
        self.p, self.rng = problem, rng
        self.gamma = np.ones(problem.m, dtype=np.int8)
        self.learn = problem.prior.nu is None
        self.nu = float(np.exp(rng.normal(0.0, 0.5))) if self.learn else float(problem.prior.nu)
        self.inv_tau = np.ones(problem.m)
        self.s = problem.prior_scale

    @property
    def scale(self) -> float:
        return self.nu

    def update(self, gram: np.ndarray, r: np.ndarray) -> np.ndarray:
        p, rng, sel = self.p, self.rng, self.p.selected
        lam = p.fixed_precision.copy()
        lam[sel] = self.inv_tau / (self.nu**2 * self.s**2)
        precision = gram.copy()
        precision[np.diag_indices(p.q)] += lam
        beta = draw_gaussian(precision, r, rng)  # step 1
        scaled = np.maximum(np.abs(beta[sel]) / self.s, 1e-300)
        if self.learn:  # step 4: 1/nu | beta ~ Gamma(a + m, b + sum |beta_j| / s_j)
            prior = p.prior
            self.nu = 1.0 / rng.gamma(prior.a + p.m, 1.0 / (prior.b + float(np.sum(scaled))))
        self.inv_tau = draw_inverse_gaussian(self.nu / scaled, 1.0, rng)  # step 3
        return beta

    def log_prior(self, coef: np.ndarray) -> float:
        """``sum log Laplace(beta_j; nu s_j)`` plus the ``Gamma(a, b)`` log density of ``1/nu`` when learned."""
        p, sel = self.p, self.p.selected
        scale = self.nu * self.s
        total = float(np.sum(-np.log(2.0 * scale) - np.abs(coef[sel]) / scale))
        if self.learn:
            a, b, inv_nu = p.prior.a, p.prior.b, 1.0 / self.nu
            total += a * np.log(b) - gammaln(a) + (a - 1.0) * np.log(inv_nu) - b * inv_nu
        return total
