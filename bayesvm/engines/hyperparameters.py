"""The accurate fit's hyperparameters ``phi``: the unconstrained parameters of the variance components, their prior
density and the map to covariances and precisions (:mod:`bayesvm.engines.linear.ep` integrates over them)."""

from __future__ import annotations

import numpy as np
from scipy.special import multigammaln

from ..model.problems import VarianceComponent
from . import variance_prior
from .components import ComponentPosterior


class Hyperparameters:
    """The unconstrained hyperparameters ``phi`` of the variance components.

    ``log sigma^2`` for a single-column component (prior ``IG(a, b)``); the log-Cholesky parameters
    ``(log L_11, ..., log L_kk, L_21, L_31, L_32, ...)`` of ``Sigma = L L'`` for a ``k x k`` term
    (prior ``IW(df, Psi)``); a single-column component's prior is IG or half-t
    (:func:`bayesvm.engines.variance_prior.log_density`).  ``log_prior`` is the log density of ``phi`` (prior times Jacobian), up
    to a constant; ``log_jacobian`` maps a density of ``phi`` to one of the covariances.
    """

    components: tuple[VarianceComponent, ...]
    sizes: list[int]
    starts: np.ndarray

    def __init__(self, components: tuple[VarianceComponent, ...]):
        self.components = components
        self.sizes = [c.k * (c.k + 1) // 2 for c in components]
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)

    @property
    def size(self) -> int:
        return int(self.starts[-1])

    def _split(self, phi: np.ndarray):
        for c, comp in enumerate(self.components):
            yield comp, phi[self.starts[c] : self.starts[c + 1]]

    def _cholesky(self, k: int, part: np.ndarray) -> np.ndarray:
        """The ``k x k`` Cholesky factor of one draw's log-Cholesky parameters."""
        return self._cholesky_of_draws(k, part[None])[0]

    def covariances(self, phi: np.ndarray) -> list[np.ndarray]:
        """The components' covariances at ``phi`` (:meth:`covariances_of_draws` of one draw)."""
        return [c[0] for c in self.covariances_of_draws(phi)]

    def precisions(self, phi: np.ndarray) -> list[np.ndarray]:
        out = []
        for comp, part in self._split(np.asarray(phi, dtype=float)):
            if comp.k == 1:
                out.append(np.array([[np.exp(-part[0])]]))
            else:
                L_inv = np.linalg.inv(self._cholesky(comp.k, part))  # k x k triangular
                out.append(L_inv.T @ L_inv)
        return out

    def log_jacobian(self, phi: np.ndarray) -> float:
        """``log |d (covariances) / d phi|``: ``log sigma^2`` per single-column component, and
        ``k log 2 + sum_i (k - i + 2) log L_ii`` (``i`` from 1) per ``k x k`` term (:meth:`log_jacobians` of one
        draw)."""
        return float(self.log_jacobians(phi)[0])

    def log_prior(self, phi: np.ndarray) -> float:
        """``log p(phi)`` with every constant: the prior of the covariances plus :meth:`log_jacobian`
        (:meth:`log_priors` of one draw)."""
        return float(self.log_priors(phi)[0])

    # ----- many draws at once: phi (S, d) -----------------------------------------------------------------------
    def _cholesky_of_draws(self, k: int, parts: np.ndarray) -> np.ndarray:
        """``(S, k, k)`` Cholesky factors of the draws' log-Cholesky parameters ``parts (S, k (k + 1) / 2)``."""
        L = np.zeros((parts.shape[0], k, k))
        diagonal, lower = np.diag_indices(k), np.tril_indices(k, -1)
        L[:, diagonal[0], diagonal[1]] = np.exp(parts[:, :k])
        L[:, lower[0], lower[1]] = parts[:, k:]
        return L

    def _parts_of_draws(self, phi: np.ndarray):
        phi = np.atleast_2d(np.asarray(phi, dtype=float))
        for c, comp in enumerate(self.components):
            yield comp, phi[:, self.starts[c] : self.starts[c + 1]]

    def covariances_of_draws(self, phi: np.ndarray) -> list[np.ndarray]:
        """:meth:`covariances` of each row of ``phi (S, d)``: one ``(S, k, k)`` array per component."""
        out = []
        for comp, parts in self._parts_of_draws(phi):
            if comp.k == 1:
                out.append(np.exp(parts)[:, :, None])
            else:
                L = self._cholesky_of_draws(comp.k, parts)
                out.append(L @ np.swapaxes(L, 1, 2))
        return out

    def log_jacobians(self, phi: np.ndarray) -> np.ndarray:
        """:meth:`log_jacobian` of each row of ``phi (S, d)``."""
        total = np.zeros(np.atleast_2d(phi).shape[0])
        for comp, parts in self._parts_of_draws(phi):
            k = comp.k
            total += parts[:, 0] if k == 1 else k * np.log(2.0) + parts[:, :k] @ (k + 1 - np.arange(k))
        return total

    def log_priors(self, phi: np.ndarray) -> np.ndarray:
        """:meth:`log_prior` of each row of ``phi (S, d)``: ``log p(covariances) + log |Jacobian|``, with the
        inverse-Wishart's ``tr(Psi Sigma^-1) = sum((L^-1 Psi) o L^-1)`` from the draws' inverse factors."""
        total = self.log_jacobians(phi)
        for comp, parts in self._parts_of_draws(phi):
            if comp.k == 1:
                total += variance_prior.log_density(comp, np.exp(parts[:, 0]))
            else:
                L_inv = np.linalg.inv(self._cholesky_of_draws(comp.k, parts))
                trace = np.sum((L_inv @ comp.prior_scale) * L_inv, axis=(1, 2))  # tr(Psi Sigma^-1) per draw
                logdet = 2.0 * np.sum(parts[:, : comp.k], axis=1)
                total += -0.5 * (comp.prior_df + comp.k + 1.0) * logdet - 0.5 * trace
                total += _log_wishart_constant(comp.prior_df, comp.prior_scale)
        return total

    def start(self, posteriors: list[ComponentPosterior], inflate: float = 0.0) -> np.ndarray:
        """``phi`` at the mean-field means, with the variances multiplied by ``e^inflate``
        (mean-field VB shrinks them)."""
        out = []
        for comp, post in zip(self.components, posteriors):
            mean = post.expected_covariance()
            if not np.all(np.isfinite(mean)) or np.linalg.eigvalsh(mean).min() <= 0:
                mean = post.scale / post.shape
            mean = mean * np.exp(inflate)
            if comp.k == 1:
                out.append([np.log(mean[0, 0])])
            else:
                L = np.linalg.cholesky(mean)
                out.append(np.concatenate([np.log(np.diag(L)), L[np.tril_indices(comp.k, -1)]]))
        return np.concatenate(out) if out else np.zeros(0)


def _log_wishart_constant(df: float, scale: np.ndarray) -> float:
    """``log`` of the inverse-Wishart normaliser ``|Psi|^(nu/2) / (2^(nu k/2) Gamma_k(nu/2))``."""
    k = scale.shape[0]
    return 0.5 * df * float(np.linalg.slogdet(scale)[1]) - 0.5 * df * k * np.log(2.0) - float(multigammaln(0.5 * df, k))
