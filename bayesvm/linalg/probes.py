"""``q(theta)`` on the sparse path without a factorisation: conjugate gradients and Rao-Blackwellised probes.

The exact sparse path (:mod:`bayesvm.linalg.schur`) eliminates the largest term ``A`` and
factorises the Schur complement ``S = P_RR - P_RA G`` (``G = P_AA^{-1} P_AR``) on the other ``q``
coefficients ``R``.  For crossed factors ``S`` is dense, so each sweep costs ``q^3``.  This module only *applies*
``S`` to vectors
(``S v = P_RR v - P_RA (G v)``, two sparse products) and replaces every factorisation:

* the mean ``mu_R = S^{-1} (r_R - G' r_A)`` by preconditioned conjugate gradients (block-Jacobi:
  a dense block on the few fixed-effect columns ``F``, the diagonal of ``S`` elsewhere), then
  ``mu_A = P_l^{-1} r_l - G mu_R`` (Alg. 2 steps 2-3, as in the exact path);
* the covariances with the few fixed-effect columns ``F`` exactly, by ``|F|`` more conjugate-gradient
  solves ``Sigma_RF = S^{-1} E_F``; everything else is estimated given ``x_F`` (``x_F`` regressed out);
* the other variances by ``s`` probes ``x_R`` with ``Cov(x_R) = S^{-1}``, drawn by perturbation
  (Papandreou & Yuille 2010): ``z = C' W^{1/2} e + prior^{1/2} e'`` has ``Cov(z) = P`` for any ``e, e'``
  with identity covariance (random signs here), and ``x_R = S^{-1} (z_R - G' z_A)`` by the same
  conjugate gradients.  Every estimate is a second-moment identity, Rao-Blackwellised twice (Siden,
  Lindgren, Bolin & Villani 2018): ``A`` is integrated out exactly given ``R``, then one coordinate
  ``j`` of ``R`` given the rest, for row ``i`` the row's column with the largest ``t_ij^2 / S_jj``:

      c_i' Sigma c_i = z_i' P_l^{-1} z_i + t_ij^2 / S_jj + E[(t_i' x_R - t_ij (S x_R)_j / S_jj)^2],

  ``t_i = d_i - G_l' z_i`` (so ``t_i' x_R = E[c_i' x | x_R]``), and likewise for the eliminated term's
  own variances (``t = -G_l' e_k``).  Only the last expectation is estimated, by the mean over the
  probes, with its Monte Carlo standard error.  Where ``S`` is diagonal outside ``F`` (nested
  factors) the estimates are exact;
* ``log|S| = log|S_NN| - log|Sigma_FF|`` (``N``: the columns outside ``F``), with ``log|S_NN|`` by
  stochastic Lanczos quadrature (Ubaru, Chen & Saad 2017) on ``D^{-1/2} S_NN D^{-1/2}`` with ``s``
  Rademacher vectors.

The probes' random numbers are fixed by ``seed`` (common random numbers), so a VB sweep is a
deterministic map and converges like the exact one; its answer differs from the exact VB answer by
the stated Monte Carlo error (:attr:`ProbePosterior.report`).  Memory is ``O(nnz(C) + q s)``: ``S``
and ``Sigma`` are never formed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve, eigh_tridiagonal, solve_triangular
from scipy.sparse.csgraph import connected_components

from .schur import EliminationLayout, TermElimination, eliminate_term, gaussian_log_density, per_level

#: Relative residual at which conjugate gradients stop for the mean and for ``solve``.
MEAN_RTOL = 1e-10

#: Relative residual at which conjugate gradients stop for the probes.  Their Monte Carlo error is far
#: larger, but a looser solve makes the sweep map noisy at the level the convergence test looks at
#: (where the probes are exact, e.g. nested factors, the bound then wobbles at 1e-8).
PROBE_RTOL = 1e-8

#: Most conjugate-gradient iterations before :class:`ProbeSolveError`.
MAX_CG_ITER = 2000

#: Most Lanczos steps for the log-determinant; it stops earlier once the quadrature settles.
MAX_LANCZOS = 80

#: Rows processed at once when drawing probes and estimating row variances.
ROW_CHUNK = 32_768

#: Most columns in the dense block ``F`` of the preconditioner.
MAX_DENSE_BLOCK = 2000


class ProbeSolveError(np.linalg.LinAlgError):
    """Conjugate gradients did not converge (the posterior precision is numerically singular)."""


@dataclass(frozen=True)
class ProbeReport:
    """Monte Carlo error of a probe posterior.

    Attributes
    ----------
    probes
        Number of probes ``s``.
    row_variance_rse
        Median and largest relative standard error of the training rows' ``Var(f_i)``.
    logdet, logdet_se
        The estimate of ``log|P|`` and its standard error.
    cg_iterations
        Conjugate-gradient iterations for the mean and for the probes.
    """

    probes: int
    row_variance_rse: tuple[float, float]
    logdet: float
    logdet_se: float
    cg_iterations: tuple[int, int]


class SchurOperator:
    """``S = P_RR - P_RA G`` as an operator, with the block-Jacobi preconditioner ``M``: ``S_FF`` (dense,
    Cholesky) on the columns ``F`` of ``dense_block``, the diagonal of ``S`` on the others (``single``)."""

    P_RR: sp.csr_matrix  # P_RR = D' W D + the prior's R x R part
    gain_m: sp.csr_matrix  # G on the pattern
    cross_t: sp.csr_matrix  # P_RA
    diag: np.ndarray  # diag(S)
    F: np.ndarray  # the preconditioner's dense columns
    single: np.ndarray  # the others
    chol_F: tuple  # Cholesky of S_FF (scipy's cho_factor); absent where F is empty

    def __init__(self, layout: EliminationLayout, w: np.ndarray, term: TermElimination, dense_block: np.ndarray):
        lay = layout
        d = lay.C_rest
        self.P_RR = (d.T @ sp.diags(w) @ d + term.prior_rest).tocsr()
        cross_m, self.gain_m = lay.level_matrix(term.cross), lay.level_matrix(term.gain)
        self.cross_t = cross_m.T.tocsr()
        self.diag = self.P_RR.diagonal() - np.bincount(
            lay.key_col, weights=np.sum(term.cross * term.gain, axis=1), minlength=lay.q
        )
        if np.any(self.diag <= 0):
            raise ProbeSolveError("the posterior precision is not positive definite")
        self.F = np.asarray(dense_block, dtype=int)
        self.single = np.ones(lay.q, dtype=bool)
        self.single[self.F] = False
        if self.F.size:
            block = self.P_RR[self.F][:, self.F].toarray() - (cross_m[:, self.F].T @ self.gain_m[:, self.F]).toarray()
            try:
                self.chol_F = cho_factor(block, lower=True)
            except np.linalg.LinAlgError as exc:
                raise ProbeSolveError("the posterior precision is not positive definite") from exc

    def __call__(self, v: np.ndarray) -> np.ndarray:
        return self.P_RR @ v - self.cross_t @ (self.gain_m @ v)

    def precondition(self, r: np.ndarray) -> np.ndarray:
        """``M^{-1} r`` for a vector or the columns of a matrix."""
        out = r / self.diag[:, None] if r.ndim == 2 else r / self.diag
        if self.F.size:
            out[self.F] = cho_solve(self.chol_F, r[self.F])
        return out

    def solve(self, b: np.ndarray, rtol: float) -> tuple[np.ndarray, int]:
        """``S^{-1} b`` for the columns of ``b`` by preconditioned conjugate gradients."""
        b = b.reshape(b.shape[0], -1)
        x = np.zeros_like(b)
        r = b.copy()
        norm_b = np.linalg.norm(b, axis=0)
        norm_b[norm_b == 0] = 1.0
        z = self.precondition(r)
        p = z.copy()
        rz = np.sum(r * z, axis=0)
        for it in range(1, MAX_CG_ITER + 1):
            if np.max(np.linalg.norm(r, axis=0) / norm_b) <= rtol:
                return x, it - 1
            sp_ = self(p)
            curv = np.sum(p * sp_, axis=0)
            alpha = np.divide(rz, curv, out=np.zeros_like(rz), where=curv > 0)
            x += alpha * p
            r -= alpha * sp_
            z = self.precondition(r)
            rz_new = np.sum(r * z, axis=0)
            beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
            p = z + beta * p
            rz = rz_new
        raise ProbeSolveError(
            f"conjugate gradients did not reach a relative residual of {rtol:g} in {MAX_CG_ITER} steps"
        )

    def logdet_outside_block(self, rng: np.random.Generator, probes: int) -> tuple[float, float]:
        """``log|S_NN|`` on the columns ``N`` outside ``F`` and its standard error, by stochastic Lanczos
        quadrature with Rademacher vectors on ``D^{-1/2} S_NN D^{-1/2}`` (``D = diag S_NN``)."""
        N = np.flatnonzero(self.single)
        if N.size == 0:
            return 0.0, 0.0
        scale = 1.0 / np.sqrt(self.diag[N])[:, None]
        full = np.zeros((self.diag.size, probes))

        def apply(v: np.ndarray) -> np.ndarray:
            full[N] = scale * v
            return scale * self(full)[N]

        v = rng.choice(np.array([-1.0, 1.0]), size=(N.size, probes))
        norm2 = np.sum(v * v, axis=0)
        v_cur, v_prev = v / np.sqrt(norm2), np.zeros_like(v)
        alphas, betas = [], []
        beta_prev = np.zeros(probes)
        active = np.ones(probes, dtype=bool)
        previous = None
        for step in range(MAX_LANCZOS):
            w = apply(v_cur)
            w -= beta_prev * v_prev
            alpha = np.sum(v_cur * w, axis=0)
            w -= alpha * v_cur
            beta = np.linalg.norm(w, axis=0)
            alphas.append(np.where(active, alpha, 0.0))
            active &= beta > 1e-12 * np.abs(alpha).max()
            betas.append(np.where(active, beta, 0.0))
            v_prev, v_cur = v_cur, np.divide(w, beta, out=np.zeros_like(w), where=active)
            beta_prev = betas[-1]
            if step % 4 == 3 or not active.any():
                values = self._quadrature(np.array(alphas), np.array(betas), norm2)
                if previous is not None and np.max(np.abs(values - previous)) <= 1e-7 * max(1.0, np.abs(values).max()):
                    break
                previous = values
                if not active.any():
                    break
        values = self._quadrature(np.array(alphas), np.array(betas), norm2)
        log_diag = float(np.sum(np.log(self.diag[N])))
        return log_diag + float(np.mean(values)), float(np.std(values, ddof=1) / np.sqrt(probes))

    @staticmethod
    def _quadrature(alphas: np.ndarray, betas: np.ndarray, norm2: np.ndarray) -> np.ndarray:
        """``||v||^2 e_1' log(T) e_1`` for each column's Lanczos tridiagonal ``T`` (Gauss quadrature)."""
        out = np.empty(alphas.shape[1])
        for c in range(alphas.shape[1]):
            a, b = alphas[:, c], betas[:-1, c]
            size = a.size
            stop = np.flatnonzero(b == 0)
            if stop.size:
                size = int(stop[0]) + 1
            theta, vecs = eigh_tridiagonal(a[:size], b[: size - 1])
            out[c] = norm2[c] * float(np.sum(vecs[0] ** 2 * np.log(theta)))
        return out


def _prior_factor(blocks: sp.csr_matrix) -> sp.csr_matrix:
    """A sparse ``F`` with ``F F' = blocks`` for a block-diagonal positive semi-definite prior (small blocks)."""
    q = blocks.shape[0]
    _, label = connected_components(blocks, directed=False)
    order = np.argsort(label, kind="stable")
    sizes = np.bincount(label)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    rows, cols, vals = [], [], []
    for size in np.unique(sizes):
        comps = np.flatnonzero(sizes == size)
        idx = order[starts[comps][:, None] + np.arange(size)]  # (B, size)
        pick_r = np.broadcast_to(idx[:, :, None], (idx.shape[0], size, size)).ravel()
        pick_c = np.broadcast_to(idx[:, None, :], (idx.shape[0], size, size)).ravel()
        dense = np.asarray(blocks[pick_r, pick_c]).reshape(-1, size, size)
        vals_, vecs = np.linalg.eigh(dense)
        factor = vecs * np.sqrt(np.clip(vals_, 0.0, None))[:, None, :]
        rows.append(np.broadcast_to(idx[:, :, None], factor.shape).ravel())
        cols.append(np.broadcast_to(idx[:, None, :], factor.shape).ravel())
        vals.append(factor.ravel())
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(q, q))


@dataclass(frozen=True, eq=False)
class _RowParts:
    """Rows split as the layout splits columns: level of the eliminated term, its values, the rest (CSR)."""

    level: np.ndarray
    z: np.ndarray
    rest: sp.csr_matrix
    entry_pos: np.ndarray  # position of each stored entry of ``rest`` in the layout's pattern, -1 outside


def _row_parts(layout: EliminationLayout, C: sp.csr_matrix) -> _RowParts:
    lay = layout
    C = sp.csr_matrix(C)
    level_of, term_of, _ = lay.column_role
    n = C.shape[0]
    entry_row = np.repeat(np.arange(n), np.diff(C.indptr))
    in_term = (level_of[C.indices] >= 0) & (C.data != 0)
    level = np.full(n, -1)
    level[entry_row[in_term]] = level_of[C.indices[in_term]]
    if np.any(level[entry_row[in_term]] != level_of[C.indices[in_term]]):
        raise ValueError("a row uses two levels of the eliminated grouping factor")
    z = np.zeros((n, lay.K))
    z[entry_row[in_term], term_of[C.indices[in_term]]] = C.data[in_term]
    rest = C[:, lay.rest].tocsr()
    rest.sort_indices()
    rows = np.repeat(np.arange(n), np.diff(rest.indptr))
    key = level[rows] * lay.q + rest.indices
    at = np.minimum(np.searchsorted(lay.keys, key), max(lay.keys.size - 1, 0))
    found = (level[rows] >= 0) & (lay.keys.size > 0) & (lay.keys[at] == key)
    return _RowParts(level, z, rest, np.where(found, at, -1))


@dataclass(frozen=True, eq=False)
class ProbePosterior:
    """``q(theta) = N(mu, P^{-1})`` with its variances estimated by probes (same role as ``SchurSparsePosterior``).

    ``Sigma = Lambda Lambda' + Sigma_perp``: ``Lambda`` holds the exact covariances with the fixed
    effects ``F`` (whitened: ``Sigma[:, F] L_F^{-T}`` with ``Sigma_FF = L_F L_F'``; ``load_R`` on ``R``,
    ``load_A`` as ``(J, K, p)`` on the eliminated term), and ``Sigma_perp`` is the covariance given
    ``x_F``, estimated from the probes with ``x_F`` regressed out: ``x_perp`` ``(q, s)`` (zero on ``F``),
    ``Sx_perp = S x_perp``, ``cond`` the Rao-Blackwell residuals ``x_perp,j - (S x_perp)_j / S_jj``
    (``E[x_j | x_-j]`` given ``x_F = 0``; zero on ``F``) and ``Gx = G x_perp`` ``(J, K, s)``
    (``-E[x_A | x_R]``).
    """

    layout: EliminationLayout
    op: SchurOperator
    term: TermElimination
    mean_d: np.ndarray
    load_R: np.ndarray
    load_A: np.ndarray
    x_perp: np.ndarray
    cond: np.ndarray
    Sx_perp: np.ndarray
    Gx: np.ndarray
    logdet_precision: float
    logdet_se: float
    weights: np.ndarray
    prior: sp.csr_matrix
    cg_iterations: tuple[int, int]

    @property
    def dim(self) -> int:
        return self.mean_d.size

    @property
    def probes(self) -> int:
        return self.x_perp.shape[1]

    @property
    def mean_b(self) -> np.ndarray:
        return np.zeros((0, 0))

    # --- exact pieces: solves and draws ---------------------------------------------------------
    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """``P^{-1} rhs`` for ``rhs`` of shape ``(N,)`` or ``(N, m)`` (conjugate gradients to :data:`MEAN_RTOL`)."""
        lay = self.layout
        rhs = np.asarray(rhs, dtype=float)
        b = rhs.reshape(rhs.shape[0], -1)
        b_A = b[lay.eliminated.ravel()].reshape(lay.J, lay.K, -1)
        x_R, _ = self.op.solve(b[lay.rest] - self.op.gain_m.T @ b_A.reshape(lay.J * lay.K, -1), MEAN_RTOL)
        x_A = np.einsum("jkl,jlm->jkm", self.term.block_inv, b_A).reshape(lay.J * lay.K, -1) - self.op.gain_m @ x_R
        out = np.empty_like(b)
        out[lay.rest], out[lay.eliminated.ravel()] = x_R, x_A
        return out[:, 0] if rhs.ndim == 1 else out

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact draws (to the solver's tolerance): ``x_R`` by perturbation, then ``x_A | x_R``."""
        lay = self.layout
        out = np.empty((self.dim, size))
        chol_b = np.linalg.cholesky(self.term.block_inv)
        for start in range(0, size, 256):
            m = min(256, size - start)
            dev_R, _ = self.op.solve(
                _perturbation(lay, self.op, self.term, self.weights, self.prior, rng, m), MEAN_RTOL
            )
            eps = rng.standard_normal((lay.J, lay.K, m))
            dev_A = np.einsum("jkl,jlm->jkm", chol_b, eps).reshape(lay.J * lay.K, m) - self.op.gain_m @ dev_R
            out[lay.rest, start : start + m] = dev_R
            out[lay.eliminated.ravel(), start : start + m] = dev_A
        return self.mean_d + out.T, np.zeros((size, 0, 0))

    def log_density(self, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
        """``log q(theta)`` for draws ``(S, N)``, with the estimated ``log|P|``."""
        return gaussian_log_density(
            self.layout.C, self.weights, self.prior, self.mean_d, self.logdet_precision, theta_d
        )

    # --- Rao-Blackwellised estimates ------------------------------------------------------------
    def variance(self) -> np.ndarray:
        lay = self.layout
        out = np.empty(self.dim)
        out[lay.rest] = np.sum(self.load_R**2, axis=1) + np.where(
            self.op.single, 1.0 / self.op.diag + np.mean(self.cond**2, axis=1), 0.0
        )
        block_var = np.diagonal(self.term.block_inv, axis1=1, axis2=2)
        load = np.sum(self.load_A**2, axis=2)
        gain_j, inv_s, rho = self._level_coordinates
        conditional = gain_j**2 * inv_s[:, None] + np.mean(rho**2, axis=2)
        out[lay.eliminated.ravel()] = (load + block_var + conditional).ravel()
        return out

    @cached_property
    def _level_coordinates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The second Rao-Blackwell level for the eliminated term (as for rows): each level ``l`` conditions
        ``G_l x_perp`` on one coordinate ``j`` of its pattern (largest ``sum_k G_ljk^2 / S_jj``), so
        ``Cov(G_l x_perp) = g_j g_j' / S_jj + E[rho rho']`` with ``rho = G_l x_perp - g_j (S x_perp)_j / S_jj``.

        Returns ``g_j`` ``(J, K)``, ``1 / S_jj`` ``(J,)`` (0 where the pattern has no coordinate outside
        ``F``) and ``rho`` ``(J, K, s)``.
        """
        lay, term = self.layout, self.term
        J, K = lay.J, lay.K
        cols = lay.key_col
        score = np.where(self.op.single[cols], np.sum(term.gain**2, axis=1) / self.op.diag[cols], -1.0)
        gain_j, inv_s = np.zeros((J, K)), np.zeros(J)
        coord = np.zeros(J, dtype=int)
        has = np.flatnonzero(np.diff(lay.level_ptr) > 0)
        if has.size:
            starts = lay.level_ptr[has]
            best = np.maximum.reduceat(score, starts)
            lengths = np.diff(np.append(starts, score.size))
            position = np.where(score == np.repeat(best, lengths), np.arange(score.size), score.size)
            first = np.minimum.reduceat(position, starts)
            ok = score[first] >= 0
            levels, entries = has[ok], first[ok]
            coord[levels] = cols[entries]
            gain_j[levels] = term.gain[entries]
            inv_s[levels] = 1.0 / self.op.diag[cols[entries]]
        shift = (self.Sx_perp[coord] * inv_s[:, None])[:, None, :]  # (J, 1, s); 0 where no coordinate
        return gain_j, inv_s, self.Gx - gain_j[:, :, None] * shift

    def cov_entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``Sigma[rows, cols]`` (broadcast), Rao-Blackwellised: exactly given the rest within a block (a level of
        the eliminated term, a preconditioner block of ``R``), by the probes' conditional means across blocks."""
        rows, cols = np.broadcast_arrays(np.asarray(rows), np.asarray(cols))
        shape = rows.shape
        rows, cols = rows.ravel(), cols.ravel()
        out = np.empty(rows.size)
        for start in range(0, rows.size, 4096):
            out[start : start + 4096] = self._cov_chunk(rows[start : start + 4096], cols[start : start + 4096])
        return out.reshape(shape)

    def _cov_chunk(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        level, term, pos = self.layout.column_role
        in_A, in_B = level[a] >= 0, level[b] >= 0

        def loading(idx: np.ndarray, on_A: np.ndarray) -> np.ndarray:
            out = np.empty((idx.size, self.load_R.shape[1]))
            out[on_A] = self.load_A[level[idx[on_A]], term[idx[on_A]]]
            out[~on_A] = self.load_R[pos[idx[~on_A]]]
            return out

        est = np.sum(loading(a, in_A) * loading(b, in_B), axis=1)  # the exact part through x_F
        # given x_F; both in the eliminated term: E[Cov(. | x_R)] + Cov(G x_perp): within a level exactly
        # given x_R and Rao-Blackwellised over the level's coordinate j; across levels by the probes
        both = in_A & in_B
        la, lb, ka, kb = level[a[both]], level[b[both]], term[a[both]], term[b[both]]
        perp = np.mean(self.Gx[la, ka] * self.Gx[lb, kb], axis=1)
        same = la == lb
        gain_j, inv_s, rho = self._level_coordinates
        l, k1, k2 = la[same], ka[same], kb[same]
        perp[same] = (
            self.term.block_inv[l, k1, k2]
            + gain_j[l, k1] * gain_j[l, k2] * inv_s[l]
            + np.mean(rho[l, k1] * rho[l, k2], axis=1)
        )
        est[both] += perp
        # one in each: Cov(x_A, x_r) = Cov(E[x_A | x_R], x_r) = -Cov(G x_perp, x_r)
        mixed = in_A != in_B
        a_m, b_m = np.where(in_A, a, b)[mixed], np.where(in_A, b, a)[mixed]
        est[mixed] -= np.mean(self.Gx[level[a_m], term[a_m]] * self.x_perp[pos[b_m]], axis=1)
        # both in R: on the diagonal 1 / S_jj plus the conditional means' variance; off it
        # Cov(x_a, x_b) = Cov(E[x_a | x_-a], x_b), symmetrised
        rest = ~in_A & ~in_B
        pa, pb = pos[a[rest]], pos[b[rest]]
        ca, cb, xa, xb = self.cond[pa], self.cond[pb], self.x_perp[pa], self.x_perp[pb]
        diagonal = pa == pb
        perp = np.where(diagonal, np.mean(ca * cb, axis=1), 0.5 * np.mean(ca * xb + xa * cb, axis=1))
        on_N = diagonal & self.op.single[pa]
        perp[on_N] += 1.0 / self.op.diag[pa[on_N]]
        est[rest] += perp
        return est

    @cached_property
    def _training_parts(self) -> tuple[_RowParts, np.ndarray, np.ndarray]:
        parts = _RowParts(self.layout.row_level, self.layout.z, self.layout.C_rest, self.layout.entry_pos)
        return (parts, *self._coordinates(parts))

    def _coordinates(self, parts: _RowParts) -> tuple[np.ndarray, np.ndarray]:
        """Each row's second Rao-Blackwell coordinate ``j`` (``-1``: none) and ``t_ij``."""
        d = parts.rest
        n = d.shape[0]
        rows = np.repeat(np.arange(n), np.diff(d.indptr))
        g = np.zeros(d.nnz)
        inside = parts.entry_pos >= 0
        g[inside] = np.einsum("ek,ek->e", parts.z[rows[inside]], self.term.gain[parts.entry_pos[inside]])
        t = d.data - g
        score = np.where(self.op.single[d.indices], t**2 / self.op.diag[d.indices], -1.0)
        # each row's first entry of largest score (segment reductions: no sort)
        coord, t_j = np.full(n, -1), np.zeros(n)
        has = np.flatnonzero(np.diff(d.indptr) > 0)
        if has.size:
            starts = d.indptr[has]
            best = np.maximum.reduceat(score, starts)
            position = np.where(score == np.repeat(best, np.diff(np.append(starts, d.nnz))), np.arange(d.nnz), d.nnz)
            first = np.minimum.reduceat(position, starts)
            ok = score[first] >= 0
            coord[has[ok]] = d.indices[first[ok]]
            t_j[has[ok]] = t[first[ok]]
        return coord, t_j

    def _row_variances(
        self, parts: _RowParts, coord: np.ndarray, t_j: np.ndarray, with_error: bool = True
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``Var(f_i)`` and (``with_error``) its Monte Carlo standard error for each row, in chunks of
        :data:`ROW_CHUNK` rows."""
        n = parts.level.size
        var, se = np.empty(n), np.empty(n) if with_error else None
        s_diag = self.op.diag
        for start in range(0, n, ROW_CHUNK):
            sl = slice(start, min(start + ROW_CHUNK, n))
            lev, z, j, tj = parts.level[sl], parts.z[sl], coord[sl], t_j[sl]
            seen = lev >= 0
            tx = parts.rest[sl] @ self.x_perp
            load = parts.rest[sl] @ self.load_R
            exact = np.zeros(lev.size)
            if np.any(seen):
                tx[seen] -= np.einsum("ik,iks->is", z[seen], self.Gx[lev[seen]])
                load[seen] += np.einsum("ik,ikp->ip", z[seen], self.load_A[lev[seen]])
                exact[seen] = np.einsum("ik,ikl,il->i", z[seen], self.term.block_inv[lev[seen]], z[seen])
            exact += np.sum(load**2, axis=1)
            has = j >= 0
            tx[has] -= (tj[has] / s_diag[j[has]])[:, None] * self.Sx_perp[j[has]]
            exact[has] += tj[has] ** 2 / s_diag[j[has]]
            sq = tx**2
            var[sl] = exact + sq.mean(axis=1)
            if with_error:
                se[sl] = sq.std(axis=1, ddof=1) / np.sqrt(self.probes)
        return var, se

    def predictor(
        self, C: sp.csr_matrix, codes: None = None, values: None = None, training: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and (estimated) variance of ``f_i = c_i' theta`` for any rows of the design's columns."""
        C = sp.csr_matrix(C)
        mean = C @ self.mean_d
        if training:
            parts, coord, t_j = self._training_parts
        else:
            parts = _row_parts(self.layout, C)
            coord, t_j = self._coordinates(parts)
        return mean, self._row_variances(parts, coord, t_j, with_error=False)[0]

    @cached_property
    def report(self) -> ProbeReport:
        parts, coord, t_j = self._training_parts
        var, se = self._row_variances(parts, coord, t_j)
        rse = se / np.maximum(var, np.finfo(float).tiny)
        return ProbeReport(
            probes=self.probes,
            row_variance_rse=(float(np.median(rse)), float(np.max(rse))),
            logdet=self.logdet_precision,
            logdet_se=self.logdet_se,
            cg_iterations=self.cg_iterations,
        )


def _perturbation(
    layout: EliminationLayout,
    op: SchurOperator,
    term: TermElimination,
    w: np.ndarray,
    prior: sp.csr_matrix,
    rng: np.random.Generator,
    size: int,
    rademacher: bool = False,
) -> np.ndarray:
    """``z_R - G' z_A`` for ``z ~ N(0, P)``, i.e. ``size`` draws from ``N(0, S)`` (rows in chunks).

    ``z = C' W^{1/2} e + prior^{1/2} e'`` with ``e, e'`` standard normal; with ``rademacher`` they are random
    signs instead (four times cheaper to generate).  The probes only need ``Cov(z) = P``, which either gives:
    every estimate in :class:`ProbePosterior` is a second-moment identity, exact for any such ``z``.
    """

    def noise(shape: tuple[int, int]) -> np.ndarray:
        if rademacher:
            return rng.integers(0, 2, shape, dtype=np.int8) * 2.0 - 1.0
        return rng.standard_normal(shape)

    lay = layout
    J, K = lay.J, lay.K
    root_w = np.sqrt(w)
    z_R = np.zeros((lay.q, size))
    z_A = np.zeros((J * K, size))
    d = lay.C_rest
    for start in range(0, lay.row_level.size, ROW_CHUNK):
        stop = min(start + ROW_CHUNK, lay.row_level.size)
        e = noise((stop - start, size))
        e *= root_w[start:stop, None]
        z_R += d[start:stop].T @ e
        lev = lay.row_level[start:stop]
        seen = np.flatnonzero(lev >= 0)
        for k in range(K):
            member = sp.csr_matrix((lay.z[start + seen, k], (lev[seen] * K + k, seen)), shape=(J * K, stop - start))
            z_A += member @ e
    prior_R = _prior_factor(term.prior_rest)
    z_R += prior_R @ noise((lay.q, size))
    vals, vecs = np.linalg.eigh(term.prior_blocks)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))[:, None, :]
    z_A += np.einsum("jkl,jls->jks", root, noise((J * K, size)).reshape(J, K, size)).reshape(J * K, size)
    return z_R - op.gain_m.T @ z_A


def probe_posterior(
    layout: EliminationLayout,
    w: np.ndarray,
    rhs_weights: np.ndarray,
    prior: sp.spmatrix,
    probes: int,
    seed: int,
    dense_block: np.ndarray,
) -> ProbePosterior:
    """``q(theta)`` for ``P = C' diag(w) C + prior`` with probe-estimated variances (Alg. 2 steps 2-3).

    ``dense_block`` lists the rest positions (``0..q-1``) preconditioned as one dense block (the fixed
    effects); ``seed`` fixes the probes' random numbers, so equal inputs give equal outputs.
    """
    lay = layout
    w = np.asarray(w, dtype=float)
    prior = sp.csr_matrix(prior)
    term = eliminate_term(lay, w, prior)
    op = SchurOperator(lay, w, term, dense_block)
    # mean: mu_R = S^{-1} (r_R - G' r_A), mu_A = P_l^{-1} r_l - G mu_R
    r_A = per_level(lay, rhs_weights)
    # exact covariances with the fixed effects: Sigma_RF = S^{-1} E_F (p more right-hand sides)
    F = op.F
    unit = np.zeros((lay.q, F.size))
    unit[F, np.arange(F.size)] = 1.0
    solved, mean_iter = op.solve(
        np.column_stack([lay.C_rest.T @ rhs_weights - op.gain_m.T @ r_A.ravel(), unit]), MEAN_RTOL
    )
    mu_R, cov_RF = solved[:, 0], solved[:, 1:]
    mu_A = np.einsum("jkl,jl->jk", term.block_inv, r_A).ravel() - op.gain_m @ mu_R
    mean = np.empty(lay.C.shape[1])
    mean[lay.rest], mean[lay.eliminated.ravel()] = mu_R, mu_A
    if F.size:
        cov_FF = 0.5 * (cov_RF[F] + cov_RF[F].T)
        chol_F = np.linalg.cholesky(cov_FF)
        load_R = solve_triangular(chol_F, cov_RF.T, lower=True).T  # Sigma_RF L_F^{-T}
    else:
        load_R = np.zeros((lay.q, 0))
    load_A = -(op.gain_m @ load_R).reshape(lay.J, lay.K, F.size)  # Sigma_AF = -G Sigma_RF
    # probes x_R ~ N(0, S^{-1}) with fixed random numbers, x_F regressed out; and log|S|
    probe_rng, lanczos_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    x_R, probe_iter = op.solve(_perturbation(lay, op, term, w, prior, probe_rng, probes, rademacher=True), PROBE_RTOL)
    if F.size:
        x_R -= cov_RF @ np.linalg.solve(cov_FF, x_R[F])
        x_R[F] = 0.0
    Sx = op(x_R)
    cond = np.where(op.single[:, None], x_R - Sx / op.diag[:, None], 0.0)
    Gx = (op.gain_m @ x_R).reshape(lay.J, lay.K, probes)
    # log|S| = log|S_NN| + log|S / S_NN| = log|S_NN| - log|Sigma_FF|
    logdet_S, logdet_se = op.logdet_outside_block(lanczos_rng, probes)
    if F.size:
        logdet_S -= 2.0 * float(np.sum(np.log(np.diag(chol_F))))
    return ProbePosterior(
        layout=lay,
        op=op,
        term=term,
        mean_d=mean,
        load_R=load_R,
        load_A=load_A,
        x_perp=x_R,
        cond=cond,
        Sx_perp=Sx,
        Gx=Gx,
        logdet_precision=logdet_S + term.logdet_blocks,
        logdet_se=logdet_se,
        weights=w,
        prior=prior,
        cg_iterations=(mean_iter, probe_iter),
    )
