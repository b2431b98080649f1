"""Prior specifications: inert, frozen records with no maths (DESIGN rule 1).

The engines read these records; nothing here computes a density.

Defaults follow Luts & Ormerod (2014, section 3.1): vague ``N(0, 1e8)`` fixed effects and
``IG(0.01, 0.01)`` for the learned penalty's variance; single-column random-effect terms get a half-t
prior on their SD, ``sigma ~ t_3^+(0, 2.5)`` (Gelman 2006; Huang & Wand 2013), which stays sensible
where the data barely identify the variance (the paper's ``IG(0.01, 0.01)`` there lets it run off to
``10^9``).  :meth:`PriorSet.paper` restores the paper's ``IG(0.01, 0.01)`` for every variance.
A correlated random-effect term
``(1 + x | g)`` with ``k`` columns gets an inverse-Wishart ``IW(df, scale)`` covariance;
by default ``df = k + 1`` and ``scale = I_k``, the choice under which every correlation
is marginally uniform on (-1, 1) (Gelman & Hill 2007, section 13.3) and each variance has
a proper, heavy-tailed ``IG(1, 1/2)`` marginal.  In one dimension ``IW(df, scale)`` is
``IG(df/2, scale/2)``, so ``IG(A, B)`` corresponds to ``IW(2A, 2B)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .errors import BayesvmError


class VariancePrior:
    """A prior of one variance (a single-column random-effect term, a ``gp()`` amplitude, the learned penalty).

    Records of this kind say only their parameters; the engines find each record's law (its VB, Gibbs, EM and EP
    steps) in :data:`bayesvm.engines.variance_prior.LAWS`."""

    def for_column(self, spread: float) -> VariancePrior:
        """The prior of a slope term whose column has SD ``spread`` (the record itself: a prior on the variance's
        own scale; :class:`HalfT` puts its scale in the column's units)."""
        return self


@dataclass(frozen=True)
class InverseGamma(VariancePrior):
    """``IG(a, b)`` prior for one variance: density ``b^a / Gamma(a) x^(-a-1) exp(-b/x)``."""

    a: float = 0.01
    b: float = 0.01

    def __post_init__(self) -> None:
        if not (np.isfinite(self.a) and np.isfinite(self.b) and self.a > 0 and self.b > 0):
            raise BayesvmError(f"InverseGamma needs a > 0 and b > 0, got a={self.a}, b={self.b}")


@dataclass(frozen=True)
class HalfT(VariancePrior):
    """Half-t prior on a standard deviation: ``sigma ~ t_nu^+(0, scale)``.

    Fitted through the auxiliary form of Huang & Wand (2013): ``sigma^2 | a ~ IG(nu/2, nu/a)``,
    ``a ~ IG(1/2, 1/scale^2)``, which keeps every engine conjugate.  ``nu=1`` is the half-Cauchy;
    the default ``nu=3, scale=2.5`` is brms's default prior for group-level SDs.  The scale is on the
    decision function's scale (the margin is 1) for an intercept term; for a slope term it is divided by
    the SD of the slope's column, so the prior does not depend on the column's units.
    """

    nu: float = 3.0
    scale: float = 2.5

    def __post_init__(self) -> None:
        if not (np.isfinite(self.nu) and np.isfinite(self.scale) and self.nu > 0 and self.scale > 0):
            raise BayesvmError(f"HalfT needs nu > 0 and scale > 0, got nu={self.nu}, scale={self.scale}")

    def for_column(self, spread: float) -> HalfT:
        """The scale divided by the column's SD ``spread`` (unchanged for a constant column, ``spread`` 0), so that
        the prior does not depend on the column's units."""
        return self if spread <= 0.0 else HalfT(self.nu, self.scale / spread)


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
class ImputationPrior:
    """Prior of the imputation model ``d_i ~ N(mu, Sigma)`` (Luts & Ormerod 2014, section 3.3).

    The model is set on the standardised predictors (each centred and scaled by its observed mean
    and SD).  ``mu ~ N(0, mean_variance I)`` (paper: 1e8); ``Sigma ~ IW(df, scale I)`` with
    ``scale = 0.01`` (paper) and ``df = None`` meaning ``d + 1`` for ``d`` predictors: the paper's
    ``df = 3`` is improper once ``d >= 4`` (an inverse Wishart needs ``df > d - 1``).
    """

    mean_variance: float = 1e8
    df: float | None = None
    scale: float = 0.01

    def resolve(self, d: int) -> tuple[float, np.ndarray]:
        df = float(d + 1) if self.df is None else float(self.df)
        if not df > d - 1:
            raise BayesvmError(f"ImputationPrior df must exceed d - 1 = {d - 1} for {d} predictors, got {df}")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise BayesvmError(f"ImputationPrior scale must be positive, got {self.scale}")
        return df, self.scale * np.eye(d)


@dataclass(frozen=True)
class PriorSet:
    """All hyperparameters of the linear Bayesian SVM.

    Parameters
    ----------
    fixed_variance
        ``sigma_beta^2``: prior variance of every unpenalised fixed effect (paper: 1e8).
    penalty
        Prior of the slopes' shared variance ``sigma_u^2 = 1 / (4 alpha)`` when ``penalty="learn"`` (a ridge prior
        ``slopes ~ N(0, sigma_u^2)`` with its own variance): the paper's :class:`InverseGamma` ``IG(A_u, B_u)``
        (Example 1; default ``IG(0.01, 0.01)``), :class:`HalfT` on ``sigma_u``, or any :class:`VariancePrior` whose
        law the engines know.  ``bsvm()`` without ``priors`` puts ``HalfT()`` here where the fixed effects separate
        the classes (under ``IG(0.01, 0.01)`` the variance's posterior then has no finite mean).
    random
        Prior of the variance of each single-column random-effect term (and ``gp()`` amplitude): :class:`HalfT` on its
        SD (default ``HalfT(3, 2.5)``), :class:`InverseGamma` on the variance (the paper's ``IG(0.01, 0.01)``), or any
        :class:`VariancePrior` whose law the engines know.
    correlated
        Inverse-Wishart prior for each correlated multi-column term.
    imputation
        Prior of the imputation model (``missing="impute"``).
    """

    fixed_variance: float = 1e8
    penalty: VariancePrior = field(default_factory=InverseGamma)
    random: VariancePrior = field(default_factory=HalfT)
    correlated: InverseWishart = field(default_factory=InverseWishart)
    imputation: ImputationPrior = field(default_factory=ImputationPrior)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.fixed_variance) and self.fixed_variance > 0):
            raise BayesvmError(f"fixed_variance must be positive and finite, got {self.fixed_variance}")
        for name in ("penalty", "random"):
            if not isinstance(getattr(self, name), VariancePrior):
                raise BayesvmError(
                    f"PriorSet({name}=...) must be a variance prior (InverseGamma, HalfT, ...), got {getattr(self, name)!r}"
                )

    @classmethod
    def paper(cls, **changes) -> PriorSet:
        """The priors of Luts & Ormerod (2014, section 3.1): ``IG(0.01, 0.01)`` for every variance (the
        papers' examples reproduce exactly with these); ``changes`` override any field."""
        return cls(**{"random": InverseGamma(0.01, 0.01), **changes})


# ----- shrinkage and selection priors for the penalised slopes --------------------------
class SelectionPrior:
    """A prior on the penalised slopes (``bsvm(prior=...)``): a selection prior (a point mass at zero) or a shrinkage
    prior.

    Records of this kind say their parameters and the facts the face and the model read; the engines find each
    record's law (its VB, Gibbs, EM and EP steps) in :data:`bayesvm.engines.selection.laws.LAWS`."""

    #: a slope is exactly 0 with positive probability (inclusion probabilities exist)
    point_mass: ClassVar[bool] = False
    #: each slope's scale is the prior's times its predictor's SD ``s_k`` (else ``s_k = 1``)
    scaled_by_predictor_sd: ClassVar[bool] = True
    #: the ``method`` values that fit it
    methods: ClassVar[tuple[str, ...]] = ("vb",)

    @property
    def learns_scale(self) -> bool:
        """Whether the fit learns a scale of the prior."""
        return False


@dataclass(frozen=True)
class LaplaceZero(SelectionPrior):
    """Laplace-zero prior (Luts & Ormerod 2014, section 3.2; Wand & Ormerod 2011).

    Each penalised slope is ``gamma_k v_k`` with ``gamma_k ~ Bernoulli(rho)`` and
    ``v_k ~ Laplace(0, sigma_u)`` (written as ``N(0, sigma_u^2 / b_k)``, ``b_k ~ IG(1, 1/2)``);
    the scale ``sigma_u^2 ~ variance`` (``IG(A_u, B_u)``, paper default ``IG(0.01, 0.01)``) is learned.
    Fitted by ``method="vb"`` (Alg. 3) or ``method="gibbs"`` (Appendix B).
    """

    rho: float = 0.01
    variance: InverseGamma = field(default_factory=InverseGamma)

    point_mass: ClassVar[bool] = True
    scaled_by_predictor_sd: ClassVar[bool] = False
    methods: ClassVar[tuple[str, ...]] = ("vb", "gibbs", "svi")

    @property
    def learns_scale(self) -> bool:
        """The Laplace scale ``sigma_u`` is always learned."""
        return True

    def __post_init__(self) -> None:
        if not (np.isfinite(self.rho) and 0 < self.rho <= 1):
            raise BayesvmError(f"LaplaceZero rho must lie in (0, 1], got {self.rho}")


@dataclass(frozen=True)
class SpikeSlab(SelectionPrior):
    """Spike-and-slab prior (Polson & Scott 2011, section 4.2, eq. 16).

    ``gamma_j ~ Bernoulli(pi)``; an included slope is ``N(0, nu^2 s_j^2)`` with ``s_j`` the SD of its
    predictor (1 after standardisation); an excluded one is exactly 0.  ``nu = 100`` (the paper's
    choice) makes the slab nearly flat, so included coefficients are hardly shrunk.  Fitted by
    ``method="gibbs"`` (model moves from the collapsed conditional, eq. 17) or ``method="vb"`` (a
    spike-and-Gaussian factor per slope, Carbonetto & Stephens 2012:
    :mod:`bayesvm.engines.selection.spike_slab_vb`).
    """

    pi: float = 0.01
    nu: float = 100.0

    point_mass: ClassVar[bool] = True
    methods: ClassVar[tuple[str, ...]] = ("vb", "gibbs", "svi")

    @property
    def learns_scale(self) -> bool:
        """The slab's scale ``nu`` is fixed."""
        return False

    def __post_init__(self) -> None:
        if not (np.isfinite(self.pi) and 0 < self.pi < 1):
            raise BayesvmError(f"SpikeSlab pi must lie in (0, 1), got {self.pi}")
        if not (np.isfinite(self.nu) and self.nu > 0):
            raise BayesvmError(f"SpikeSlab nu must be positive and finite, got {self.nu}")


@dataclass(frozen=True)
class Lasso(SelectionPrior):
    """Lasso (double-exponential, Polson & Scott's ``alpha = 1``) prior: ``p(beta_j) ∝ exp(-|beta_j| / (nu s_j))``.

    ``s_j`` is the SD of the predictor (1 after standardisation).  With ``nu=None`` the scale is learned
    under ``1/nu ~ Gamma(a, b)`` (shape ``a``, rate ``b``; default ``Gamma(1, 1)``).  The pseudo-posterior
    is ``exp(-2 sum hinge - sum |beta_j| / (nu s_j))``, so its mode minimises the L1-penalised hinge loss
    ``sum hinge + sum |beta_j| / (2 nu s_j)``.  Fitted by ``method="em"`` (EM, or ECME when ``nu``
    is learned), ``method="gibbs"`` and ``method="vb"`` (Park & Casella's normal scale mixture:
    :mod:`bayesvm.engines.selection.lasso_vb`).  The lasso has no mass at zero: a Gibbs fit reports no
    inclusion probabilities.
    """

    nu: float | None = None
    a: float = 1.0
    b: float = 1.0

    #: no mass at zero: a posterior has no inclusion probabilities (a mode's zeros are exact, though)
    methods: ClassVar[tuple[str, ...]] = ("vb", "em", "gibbs", "svi")

    @property
    def learns_scale(self) -> bool:
        """``nu=None``: the scale is learned."""
        return self.nu is None

    def __post_init__(self) -> None:
        if self.nu is not None and not (np.isfinite(self.nu) and self.nu > 0):
            raise BayesvmError(f"Lasso nu must be positive and finite (or None to learn it), got {self.nu}")
        if not (np.isfinite(self.a) and np.isfinite(self.b) and self.a >= 1 and self.b > 0):
            raise BayesvmError(f"Lasso needs a >= 1 and b > 0 for the Gamma prior on 1/nu, got a={self.a}, b={self.b}")
