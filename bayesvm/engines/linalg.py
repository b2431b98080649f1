"""Structured Gaussian algebra for ``theta = (theta_d, theta_b)``.

``theta_d`` holds the dense columns ``D`` (fixed effects plus the random effects of the
smaller grouping factors); ``theta_b`` holds the random effects of one grouping factor
with ``J`` levels and ``K`` terms per level.  Row ``i`` of the full design is
``c_i = (d_i, e_{l(i)} (x) z_i)``, so the precision

    P = [[P_dd, P_db], [P_bd, blockdiag(P_1, ..., P_J)]]

has a block-diagonal ``theta_b`` part and is factorised by the Schur complement
``S = P_dd - P_db P_bb^{-1} P_bd`` (DESIGN section 5): a sweep costs
``O(n q^2 + J K^3 + J K q^2 + q^3)`` and never forms a ``(q + J K)``-square matrix.

Identities used (``G_l = P_l^{-1} P_{l,d}``, ``h_i = G_{l(i)}' z_i``):

* ``mu_d = S^{-1} (r_d - G' r_b)``, ``mu_l = P_l^{-1} r_l - G_l mu_d``;
* ``Cov(theta_d) = S^{-1}``, ``Cov(theta_l) = P_l^{-1} + G_l S^{-1} G_l'``;
* ``c_i' P^{-1} c_i = (d_i - h_i)' S^{-1} (d_i - h_i) + z_i' P_l^{-1} z_i``;
* ``log|P| = log|S| + sum_l log|P_l|``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp


@dataclass(frozen=True)
class BlockedFactor:
    """The grouping factor eliminated by the Schur complement.

    ``codes[i]`` is the level of row ``i`` (``-1``: no random effect, e.g. an unseen level),
    ``values[i]`` its ``K`` term values.
    """

    codes: np.ndarray
    values: np.ndarray
    n_levels: int

    @property
    def K(self) -> int:
        return self.values.shape[1]

    def aggregator(self) -> sp.csr_matrix:
        """Sparse ``J x n`` matrix summing rows into their levels."""
        n = len(self.codes)
        seen = self.codes >= 0
        return sp.csr_matrix(
            (np.ones(int(seen.sum())), (self.codes[seen], np.flatnonzero(seen))), shape=(self.n_levels, n)
        )


@dataclass(frozen=True)
class GaussianPosterior:
    """``q(theta) = N(mu, P^{-1})`` in structured form.

    Attributes
    ----------
    mean_d, cov_d
        Mean and covariance of ``theta_d``.
    chol_schur
        Lower Cholesky factor of the Schur complement ``S`` (``cov_d = S^{-1}``).
    mean_b, cov_b
        ``(J, K)`` means and ``(J, K, K)`` marginal covariances of the blocked effects.
    gain
        ``G = P_bb^{-1} P_bd`` as ``(J, K, q)``.
    chol_blocks
        Lower Cholesky factors of the ``P_l``, ``(J, K, K)``.
    logdet_precision
        ``log |P|``.
    """

    mean_d: np.ndarray
    cov_d: np.ndarray
    chol_schur: np.ndarray
    mean_b: np.ndarray
    cov_b: np.ndarray
    gain: np.ndarray
    chol_blocks: np.ndarray
    block_inv: np.ndarray
    logdet_precision: float

    @property
    def dim(self) -> int:
        return self.mean_d.size + self.mean_b.size

    def predictor(
        self, D: np.ndarray, codes: np.ndarray | None, values: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f_i = d_i' theta_d + z_i' theta_{l(i)}`` under q, row by row.

        Rows with ``codes == -1`` get no blocked random effect.
        """
        mean = D @ self.mean_d
        if codes is None or self.mean_b.size == 0:
            resid = D
            var_b = np.zeros(D.shape[0])
        else:
            seen = codes >= 0
            z = np.where(seen[:, None], values, 0.0)
            idx = np.where(seen, codes, 0)
            mean = mean + np.einsum("nk,nk->n", z, self.mean_b[idx])
            resid = D - np.einsum("nk,nkq->nq", z, self.gain[idx])
            var_b = np.einsum("nk,nkl,nl->n", z, self.block_inv[idx], z)
        half = sla.solve_triangular(self.chol_schur, resid.T, lower=True, check_finite=False)
        return mean, np.einsum("qn,qn->n", half, half) + var_b

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Joint draws: ``theta_d`` of shape ``(size, q)`` and ``theta_b`` of shape ``(size, J, K)``."""
        q = self.mean_d.size
        eps_d = rng.standard_normal((size, q))
        dev_d = sla.solve_triangular(self.chol_schur.T, eps_d.T, lower=False, check_finite=False).T
        theta_d = self.mean_d + dev_d
        if self.mean_b.size == 0:
            return theta_d, np.zeros((size,) + self.mean_b.shape)
        eps_b = rng.standard_normal((size,) + self.mean_b.shape)
        # theta_l | theta_d ~ N(mu_l - G_l (theta_d - mu_d), P_l^{-1}); L_l' x = eps gives Cov P_l^{-1}
        lt = np.swapaxes(self.chol_blocks, -1, -2)
        dev_b = np.linalg.solve(lt[None], eps_b[..., None])[..., 0]
        theta_b = self.mean_b - np.einsum("jkq,sq->sjk", self.gain, dev_d) + dev_b
        return theta_d, theta_b


def gaussian_posterior(
    D: np.ndarray,
    w: np.ndarray,
    rhs_weights: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    aggregator: sp.csr_matrix | None,
    prior_b: np.ndarray | None,
) -> GaussianPosterior:
    """Solve for ``q(theta) = N(P^{-1} C' r, P^{-1})`` with ``P = C' diag(w) C + prior``.

    Parameters
    ----------
    D
        Dense columns, ``(n, q)``.
    w
        Observation weights ``E[1/a_i]``.
    rhs_weights
        ``y_i (1 + E[1/a_i])`` so that the linear term is ``C' rhs_weights``.
    prior_dd
        Prior precision of ``theta_d`` (``q x q``).
    blocked, aggregator, prior_b
        The blocked factor, its ``J x n`` aggregator and its per-level prior precision ``(K, K)``.
    """
    q = D.shape[1]
    WD = D * w[:, None]
    schur = D.T @ WD + prior_dd
    rhs = D.T @ rhs_weights
    if blocked is None:
        J, K = 0, 0
        gain = np.zeros((0, 0, q))
        chol_blocks = block_inv = np.zeros((0, 0, 0))
        mean_b_part = np.zeros((0, 0))
        logdet_b = 0.0
    else:
        J, K = blocked.n_levels, blocked.K
        z = blocked.values
        outer = (z * w[:, None])[:, :, None] * z[:, None, :]
        blocks = np.asarray(aggregator @ outer.reshape(len(w), K * K)).reshape(J, K, K) + prior_b
        cross = np.stack([np.asarray(aggregator @ (WD * z[:, [a]])) for a in range(K)], axis=1)  # (J, K, q)
        rhs_b = np.asarray(aggregator @ (z * rhs_weights[:, None]))  # (J, K)
        chol_blocks = np.linalg.cholesky(blocks)
        eye_k = np.broadcast_to(np.eye(K), blocks.shape)
        block_inv = _batched_cho_solve(chol_blocks, eye_k)
        gain = block_inv @ cross
        mean_b_part = np.einsum("jkl,jl->jk", block_inv, rhs_b)
        schur = schur - np.einsum("jkq,jkr->qr", cross, gain)
        rhs = rhs - np.einsum("jkq,jk->q", gain, rhs_b)
        logdet_b = 2.0 * float(np.sum(np.log(np.diagonal(chol_blocks, axis1=1, axis2=2))))
    chol = sla.cholesky(schur, lower=True, check_finite=False)
    mean_d = sla.cho_solve((chol, True), rhs, check_finite=False)
    chol_inv = sla.solve_triangular(chol, np.eye(q), lower=True, check_finite=False)
    cov_d = chol_inv.T @ chol_inv
    if J:
        mean_b = mean_b_part - gain @ mean_d
        half = gain @ chol_inv.T  # (J, K, q)
        cov_b = block_inv + half @ np.swapaxes(half, -1, -2)
    else:
        mean_b = mean_b_part
        cov_b = np.zeros((0, 0, 0))
    logdet = 2.0 * float(np.sum(np.log(np.diag(chol)))) + logdet_b
    return GaussianPosterior(
        mean_d=mean_d,
        cov_d=cov_d,
        chol_schur=chol,
        mean_b=mean_b,
        cov_b=cov_b,
        gain=gain,
        chol_blocks=chol_blocks,
        block_inv=block_inv,
        logdet_precision=logdet,
    )


def _batched_cho_solve(chol: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve ``L L' x = rhs`` for a stack of small lower-triangular ``L``."""
    half = np.linalg.solve(chol, rhs)
    return np.linalg.solve(np.swapaxes(chol, -1, -2), half)
