"""The random effect of a group level the fit never saw, integrated over its fitted distribution.

A new level ``j`` of a term with covariance ``Sigma`` has ``u_j ~ N(0, Sigma)`` a priori and no data, so for a
row with random-effect values ``z`` the term adds ``z' u_j`` to ``f``: given ``Sigma``, a normal with variance
``s = z' Sigma z`` independent of the rest of ``f``.  Over the posterior of ``Sigma``, ``s`` has

* an inverse gamma law under mean-field VB: ``sigma^2 ~ IG(A, B)`` gives ``s ~ IG(A, z^2 B)``, and
  ``Sigma ~ IW(nu, Psi)`` (k x k) gives ``s ~ IG((nu - k + 1) / 2, z' Psi z / 2)`` (for any fixed ``z``,
  ``z' Sigma z`` is a 1 x 1 inverse Wishart with ``nu - k + 1`` degrees of freedom);
* the weighted nodes of the integrated (accurate) fit, the chains' draws (Gibbs) or the mode (EM).

:func:`new_level_variance` returns quadrature nodes and weights of ``s`` per row (rows seen in every term get
``s = 0``); with several terms the independent laws are convolved on the product grid.  Continuous laws
use Gauss-Legendre nodes in the probability scale, ``s = F^{-1}(u)``, which integrates the bounded,
smooth predictive probability to far better than 1e-3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Gauss-Legendre nodes for a continuous law of ``s``
CONTINUOUS_NODES = 48
#: Draws of a sampled posterior used at most (evenly spaced)
MAX_DRAWS = 4000
#: Product-grid size at most when a row has new levels in several terms
MAX_GRID = 4096

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(CONTINUOUS_NODES)
_U = 0.5 * (_GL_NODES + 1.0)
_U_WEIGHTS = 0.5 * _GL_WEIGHTS


@dataclass(frozen=True)
class ComponentLaw:
    """Posterior of one random-effect covariance: ``inverse_wishart`` (``shape`` = df, ``scale`` = Psi; 1 x 1 is
    the inverse gamma with shape ``shape`` and scale ``scale``) or ``discrete`` (``values`` (S, k, k) with
    ``weights`` (S,))."""

    kind: str
    shape: float = 0.0
    scale: np.ndarray | None = None
    values: np.ndarray | None = None
    weights: np.ndarray | None = None

    def quadratic_form(self, z: np.ndarray, nodes: int) -> tuple[np.ndarray, np.ndarray]:
        """Nodes (rows, S) and weights (S,) of ``s = z' Sigma z`` for each row of ``z`` (rows, k)."""
        from scipy import stats

        if self.kind == "discrete":
            return np.einsum("ij,sjk,ik->is", z, self.values, z), self.weights
        k = z.shape[1]
        if k == 1:
            shape, scale = self.shape, self.scale[0, 0] * z[:, 0] ** 2
        else:
            shape, scale = 0.5 * (self.shape - k + 1.0), 0.5 * np.einsum("ij,jk,ik->i", z, self.scale, z)
        u, w = (_U, _U_WEIGHTS) if nodes == CONTINUOUS_NODES else _legendre01(nodes)
        unit = stats.invgamma.ppf(u, shape)  # IG(shape, 1); IG(shape, b) = b IG(shape, 1)
        return scale[:, None] * unit[None, :], w


def _legendre01(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1.0), 0.5 * w


def discrete_law(values: np.ndarray, weights: np.ndarray | None = None) -> ComponentLaw:
    """A law on draws or nodes ``values`` (S, k, k); equal weights unless given; draws thinned to ``MAX_DRAWS``."""
    values = np.asarray(values, dtype=float)
    if weights is None:
        if values.shape[0] > MAX_DRAWS:
            values = values[np.linspace(0, values.shape[0] - 1, MAX_DRAWS).round().astype(int)]
        weights = np.full(values.shape[0], 1.0 / values.shape[0])
    return ComponentLaw("discrete", values=values, weights=np.asarray(weights, dtype=float))


def new_level_variance(
    laws: list[ComponentLaw], unseen: list[np.ndarray], z: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Quadrature of ``s`` per row: ``(values (rows, S), weights (S,))``, or ``None`` when no row is new.

    Parameters
    ----------
    laws
        Per random-effect term, the posterior law of its covariance.
    unseen
        Per term, a boolean per row: the row's level was not in the training data.
    z
        Per term, the row's random-effect values (rows, k).
    """
    terms = [t for t, mask in enumerate(unseen) if mask.any()]
    if not terms:
        return None
    n = unseen[0].size
    nodes = max(8, int(MAX_GRID ** (1.0 / len(terms))))
    values, weights = np.zeros((n, 1)), np.ones(1)
    for t in terms:
        s, w = laws[t].quadratic_form(z[t], min(nodes, CONTINUOUS_NODES))
        if laws[t].kind == "discrete" and len(terms) > 1 and w.size > nodes:  # keep the product grid small
            keep = np.linspace(0, w.size - 1, nodes).round().astype(int)
            s, w = s[:, keep], np.full(nodes, 1.0 / nodes)
        s = np.where(unseen[t][:, None], s, 0.0)
        values = (values[:, :, None] + s[:, None, :]).reshape(n, -1)
        weights = np.outer(weights, w).ravel()
    return values, weights


def expected_new_variance(new_var: tuple[np.ndarray, np.ndarray] | None, n: int) -> np.ndarray:
    """``E[s]`` per row by the same quadrature (0 without new levels)."""
    if new_var is None:
        return np.zeros(n)
    values, weights = new_var
    return values @ weights
