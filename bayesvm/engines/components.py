"""A variance component as a block: what every engine asks of a random-effect term or the learned penalty.

A component (:class:`bayesvm.model.problems.VarianceComponent`) owns coefficient vectors ``u_j`` (``J`` levels of
``k`` columns, at ``comp.index`` of ``theta_d``, or of each level's block of ``theta_b`` when ``comp.blocked``) with
``u_j ~ N(0, Sigma)``, ``Sigma`` a variance ``sigma^2`` under its law (:mod:`bayesvm.engines.variance_prior`; the
learned penalty's ``sigma_u^2``, Luts & Ormerod 2014 Example 1) or ``Sigma ~ IW(nu, Psi)`` for a correlated term.
The engines ask it, through the functions here, for:

* its **prior precision** given ``Sigma``: ``Sigma^{-1}`` on each level's coefficients, added to the fixed effects'
  diagonal (:func:`prior_precisions` dense, :func:`sparse_prior` sparse; the ``blockdiag`` of Alg. 2 step 2);
* its **coefficients at one draw** (:func:`component_values`: Gibbs's and EM's variance steps, the joint log prior);
* mean-field VB's **coordinate step** of ``q(Sigma)`` from ``S = sum_j E[u_j u_j']`` (:func:`second_moments`,
  :func:`update_component`: ``q(sigma^2) = IG(A + J/2, B + S/2)``, Alg. 2 step 4, or
  ``q(Sigma) = IW(nu + J, Psi + S)``), its start (:func:`initial_component`) and its **lower-bound term**
  ``E[log p(u | Sigma)] + E[log p(Sigma)] - E[log q(Sigma)]`` (:func:`component_bound`), and SQUAREM's unconstrained
  coordinates of ``q(Sigma)`` (:func:`encode_components`, :func:`decode_components`);
* Gibbs's **draw** of ``Sigma`` given the coefficients (:func:`draw_components`: ``IG(A + J/2, B + sum u^2 / 2)``,
  Luts & Ormerod Appendix A, or ``IW(nu + J, Psi + sum_j u_j u_j')``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import digamma, multigammaln

from ..linalg.dense import GaussianPosterior
from ..model.problems import VarianceComponent, VBProblem
from . import variance_prior

LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass
class ComponentPosterior:
    """``q`` of one variance component: ``IG(shape, rate)`` or ``IW(df, scale)``; with a half-t prior also
    ``q(a) = IG((nu + 1)/2, aux_rate)`` of its auxiliary variable (:mod:`bayesvm.engines.variance_prior`)."""

    shape: float
    scale: np.ndarray  # IG: B_q as a 1x1 array; IW: Psi_q
    aux_rate: float | None = None

    def expected_precision(self) -> np.ndarray:
        """``E[1/sigma^2]`` (1x1) or ``E[Sigma^{-1}] = df Psi_q^{-1}``."""
        if self.scale.shape == (1, 1):
            return np.array([[self.shape / self.scale[0, 0]]])
        return self.shape * np.linalg.inv(self.scale)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``(size, k, k)`` draws from ``q``: inverse gamma (``k = 1``) or inverse Wishart."""
        from scipy import stats

        if self.scale.shape == (1, 1):
            var = stats.invgamma.rvs(self.shape, scale=self.scale[0, 0], size=size, random_state=rng)
            return np.reshape(var, (size, 1, 1))
        sigma = stats.invwishart(df=self.shape, scale=self.scale).rvs(size=size, random_state=rng)
        return np.reshape(sigma, (size,) + self.scale.shape)

    def expected_covariance(self) -> np.ndarray:
        """``E[sigma^2] = B / (A - 1)`` or ``E[Sigma] = Psi / (nu - k - 1)``; NaN where undefined."""
        k = self.scale.shape[0]
        denom = self.shape - 1.0 if k == 1 else self.shape - k - 1.0
        return self.scale / denom if denom > 0 else np.full_like(self.scale, np.nan)


def prior_precisions(
    problem: VBProblem, precisions: list[np.ndarray], fixed_diagonal: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Prior precision of ``theta_d`` (``q x q``) and of one level of ``theta_b`` (``K x K``); ``fixed_diagonal``:
    ``diag(problem.fixed_precision)`` computed once by a caller that asks every iteration (it is copied)."""
    prior_dd = np.diag(problem.fixed_precision).astype(float) if fixed_diagonal is None else fixed_diagonal.copy()
    prior_b = None if problem.blocked is None else np.zeros((problem.blocked.K, problem.blocked.K))
    for comp, prec in zip(problem.components, precisions):
        if comp.k == 1:  # (every Gibbs iteration: no index grids for a single column)
            if comp.blocked:
                prior_b[comp.index[0, 0], comp.index[0, 0]] += prec[0, 0]
            else:
                prior_dd[comp.index[:, 0], comp.index[:, 0]] += prec[0, 0]
        elif comp.blocked:
            pos = comp.index[0]
            prior_b[np.ix_(pos, pos)] += prec
        else:
            idx = comp.index
            prior_dd[idx[:, :, None], idx[:, None, :]] += prec[None, :, :]
    return prior_dd, prior_b


def sparse_prior(problem: VBProblem, precisions: list[np.ndarray]) -> sp.csr_matrix:
    """Prior precision of ``theta`` as a sparse block-diagonal matrix (sparse path)."""
    size = problem.D.shape[1]
    rows, cols, vals = [np.arange(size)], [np.arange(size)], [np.asarray(problem.fixed_precision, dtype=float)]
    for comp, prec in zip(problem.components, precisions):
        idx = comp.index
        rows.append(np.broadcast_to(idx[:, :, None], idx.shape + (comp.k,)).ravel())
        cols.append(np.broadcast_to(idx[:, None, :], (idx.shape[0], comp.k, comp.k)).ravel())
        vals.append(np.broadcast_to(prec[None], (idx.shape[0], comp.k, comp.k)).ravel())
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))


def component_values(comp: VarianceComponent, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
    """The component's coefficients ``u_j`` at one value of ``theta``, ``(J, k)``: from ``theta_d (q,)``, or from
    each level's block ``theta_b (J, K)`` where the component is blocked."""
    return theta_b[:, comp.index[0]] if comp.blocked else theta_d[comp.index]


def second_moments(comp: VarianceComponent, theta: GaussianPosterior) -> np.ndarray:
    """``sum_j E[u_j u_j']`` over the component's ``J`` vectors, ``(k, k)``."""
    if comp.blocked:
        pos = comp.index[0]
        mean = theta.mean_b[:, pos]
        cov = theta.cov_b[:, pos[:, None], pos[None, :]]
    else:
        mean = theta.mean_d[comp.index]
        cov = theta.cov_entries(comp.index[:, :, None], comp.index[:, None, :])
    return mean.T @ mean + cov.sum(axis=0)


def initial_component(comp: VarianceComponent) -> ComponentPosterior:
    """A starting ``q`` with ``E[precision] = I``."""
    if comp.is_wishart:
        return ComponentPosterior(shape=comp.prior_df, scale=np.eye(comp.k) * comp.prior_df)
    return variance_prior.initial(comp, ComponentPosterior)


def update_component(
    comp: VarianceComponent, second: np.ndarray, previous: ComponentPosterior | None = None
) -> ComponentPosterior:
    """Alg. 2 step 4 (IG; half-t through its auxiliary variable, given ``previous``) and its inverse-Wishart analogue."""
    if comp.is_wishart:
        return ComponentPosterior(shape=comp.prior_df + comp.n_levels, scale=comp.prior_scale + second)
    return variance_prior.update(comp, float(second[0, 0]), previous, ComponentPosterior)


def component_bound(comp: VarianceComponent, post: ComponentPosterior, second: np.ndarray) -> float:
    """``E[log p(u | component)] + E[log p(component)] - E[log q(component)]``."""
    J, k = comp.n_levels, comp.k
    if not comp.is_wishart:
        shape, rate = post.shape, float(post.scale[0, 0])
        e_log = np.log(rate) - digamma(shape)  # E[log sigma^2] under IG(shape, rate)
        e_inv = shape / rate  # E[1/sigma^2]
        # E[log p(u | sigma^2)]: m independent N(0, sigma^2)
        lik = -0.5 * J * LOG_2PI - 0.5 * J * e_log - 0.5 * e_inv * second[0, 0]
        # E[log p(sigma^2)] - E[log q(sigma^2)] (IG; half-t through its auxiliary variable)
        return float(lik + variance_prior.bound(comp, post))
    df_q, psi_q = post.shape, post.scale
    _, logdet_q = np.linalg.slogdet(psi_q)
    # E[log |Sigma|] under IW(df_q, Psi_q)
    e_logdet = logdet_q - k * np.log(2.0) - float(np.sum(digamma((df_q - np.arange(k)) / 2.0)))
    e_inv = df_q * np.linalg.inv(psi_q)
    # E[log p(u_j | Sigma)] summed over the J levels
    lik = -0.5 * J * k * LOG_2PI - 0.5 * J * e_logdet - 0.5 * float(np.sum(e_inv * second))

    def e_log_iw(df: float, psi: np.ndarray) -> float:
        _, logdet = np.linalg.slogdet(psi)
        return (
            0.5 * df * logdet
            - 0.5 * df * k * np.log(2.0)
            - multigammaln(0.5 * df, k)
            - 0.5 * (df + k + 1.0) * e_logdet
            - 0.5 * float(np.sum(psi * e_inv))
        )

    return float(lik + e_log_iw(comp.prior_df, comp.prior_scale) - e_log_iw(df_q, psi_q))


def encode_components(components: list[ComponentPosterior]) -> np.ndarray:
    """The components' ``q`` as an unconstrained vector (for SQUAREM): log-Cholesky of each scale, log of
    each half-t auxiliary rate; the shapes are fixed by the data and not encoded."""
    parts = [np.zeros(0)]
    for post in components:
        if post.scale.shape == (1, 1):
            parts.append(0.5 * np.log(post.scale[0]))
            if post.aux_rate is not None:
                parts.append([np.log(post.aux_rate)])
            continue
        chol = np.linalg.cholesky(post.scale)
        parts.append(np.log(np.diag(chol)))
        parts.append(chol[np.tril_indices_from(chol, -1)])
    return np.concatenate(parts)


def decode_components(x: np.ndarray, like: list[ComponentPosterior]) -> list[ComponentPosterior]:
    """Inverse of :func:`encode_components`, shapes taken from ``like``."""
    pos, components = 0, []
    for post in like:
        k = post.scale.shape[0]
        chol = np.diag(np.exp(x[pos : pos + k]))
        pos += k
        m = k * (k - 1) // 2
        chol[np.tril_indices(k, -1)] = x[pos : pos + m]
        pos += m
        aux_rate = None
        if post.aux_rate is not None:
            aux_rate = float(np.exp(x[pos]))
            pos += 1
        components.append(ComponentPosterior(shape=post.shape, scale=chol @ chol.T, aux_rate=aux_rate))
    return components


def draw_components(
    components,
    values: list[np.ndarray],
    rng: np.random.Generator,
    aux: list,
    current: list[np.ndarray] | None = None,
    relaxation: float = 0.0,
) -> list[np.ndarray]:
    """One Gibbs draw of every variance component given its coefficients ``values[c]`` (``J x k``): IW, IG, or
    the half-t through its auxiliary variable, kept in ``aux[c]`` between draws (updated in place;
    :mod:`bayesvm.engines.variance_prior`).  With ``relaxation > 0`` and the ``current`` components, the variance of
    each random-effect term (not an inverse-Wishart matrix, not the learned penalty) takes the over-relaxed step of
    its inverse gamma instead (:mod:`bayesvm.engines.overrelax`)."""
    from scipy import stats

    out = []
    for c, (comp, u) in enumerate(zip(components, values)):
        if comp.is_wishart:
            scale = comp.prior_scale + u.T @ u
            out.append(
                np.atleast_2d(stats.invwishart(df=comp.prior_df + comp.n_levels, scale=scale).rvs(random_state=rng))
            )
            continue
        now = None if current is None or comp.source < 0 else float(current[c][0, 0])
        variance, aux[c] = variance_prior.draw(comp, float(np.sum(u**2)), rng, aux[c], now, relaxation)
        out.append(np.array([[variance]]))
    return out
