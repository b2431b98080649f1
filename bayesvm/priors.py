"""Prior specifications: inert, frozen records with no maths (DESIGN rule 1).

The engines read these records; nothing here computes a density.

Defaults are those of Luts & Ormerod (2014, section 3.1): vague ``N(0, 1e8)`` fixed
effects and ``IG(0.01, 0.01)`` variance components.  A correlated random-effect term
``(1 + x | g)`` with ``k`` columns gets an inverse-Wishart ``IW(df, scale)`` covariance;
by default ``df = k + 1`` and ``scale = I_k``, the choice under which every correlation
is marginally uniform on (-1, 1) (Gelman & Hill 2007, section 13.3) and each variance has
a proper, heavy-tailed ``IG(1, 1/2)`` marginal.  In one dimension ``IW(df, scale)`` is
``IG(df/2, scale/2)``, so ``IG(A, B)`` corresponds to ``IW(2A, 2B)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import BayesvmError


@dataclass(frozen=True)
class InverseGamma:
    """``IG(a, b)`` prior for one variance: density ``b^a / Gamma(a) x^(-a-1) exp(-b/x)``."""

    a: float = 0.01
    b: float = 0.01

    def __post_init__(self) -> None:
        if not (np.isfinite(self.a) and np.isfinite(self.b) and self.a > 0 and self.b > 0):
            raise BayesvmError(f"InverseGamma needs a > 0 and b > 0, got a={self.a}, b={self.b}")


@dataclass(frozen=True)
class InverseWishart:
    """``IW(df, scale)`` prior for a ``k x k`` covariance matrix.

    ``df=None`` means ``k + 1``; ``scale=None`` means the identity ``I_k``.
    The prior must be proper: ``df > k - 1`` and ``scale`` symmetric positive definite.
    """

    df: float | None = None
    scale: float | None = None

    def resolve(self, k: int) -> tuple[float, np.ndarray]:
        """Return ``(df, scale matrix)`` for a ``k``-dimensional term."""
        df = float(k + 1) if self.df is None else float(self.df)
        if not df > k - 1:
            raise BayesvmError(f"InverseWishart df must exceed k - 1 = {k - 1} for a {k}-column term, got {df}")
        scale = 1.0 if self.scale is None else self.scale
        psi = np.asarray(scale, dtype=float)
        if psi.ndim == 0:
            if not psi > 0:
                raise BayesvmError(f"InverseWishart scale must be positive, got {scale}")
            psi = float(psi) * np.eye(k)
        if psi.shape != (k, k) or not np.allclose(psi, psi.T):
            raise BayesvmError(f"InverseWishart scale must be a symmetric {k} x {k} matrix")
        if np.linalg.eigvalsh(psi).min() <= 0:
            raise BayesvmError("InverseWishart scale must be positive definite")
        return df, psi


@dataclass(frozen=True)
class PriorSet:
    """All hyperparameters of the linear Bayesian SVM.

    Parameters
    ----------
    fixed_variance
        ``sigma_beta^2``: prior variance of every unpenalised fixed effect (paper: 1e8).
    penalty
        ``IG(A_u, B_u)`` for the shared slope variance when ``penalty="learn"``
        (Example 1; ``sigma_u^2 = 1 / (4 alpha)``).
    random
        ``IG(A, B)`` for the variance of each single-column random-effect term.
    correlated
        Inverse-Wishart prior for each correlated multi-column term.
    """

    fixed_variance: float = 1e8
    penalty: InverseGamma = field(default_factory=InverseGamma)
    random: InverseGamma = field(default_factory=InverseGamma)
    correlated: InverseWishart = field(default_factory=InverseWishart)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.fixed_variance) and self.fixed_variance > 0):
            raise BayesvmError(f"fixed_variance must be positive and finite, got {self.fixed_variance}")
