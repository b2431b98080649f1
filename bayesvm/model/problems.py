"""The model's records: what the model layer hands the engines (DESIGN rule 4: immutable inputs).

One record per model family, built by :mod:`bayesvm.model` (linear and mixed models, selection priors,
imputation) and :mod:`bayesvm.model.kernel` (kernel models), consumed by the engines in
:mod:`bayesvm.engines`: ``VBProblem`` (the responses, the design ``C = [X, Z]``, fixed prior precisions and the
variance components over its columns; every linear engine), ``SelectionProblem`` (the same with a selection
prior on the slopes), ``ImputationProblem`` (a ``VBProblem`` with missing predictor values and their
imputation model) and ``KernelProblem`` (standardised inputs, labels and a kernel).  The records import the
linear-algebra backend (:mod:`bayesvm.linalg`) for their layouts, never an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from ..kernels import Kernel
from ..linalg.dense import BlockedFactor
from ..linalg.probes import MAX_DENSE_BLOCK
from ..linalg.row_pattern import RowPattern, row_pattern
from ..linalg.row_sums import weighted_gram
from ..linalg.schur import EliminationLayout, elimination_layout
from ..priors import LaplaceZero, Lasso, SpikeSlab, VariancePrior

#: Variance components with at most this many coefficients (a learned penalty on a few slopes, a factor
#: with few levels) join the fixed effects in the probe engine's dense preconditioner block.
SMALL_COMPONENT = 64


#: ``VarianceComponent.source`` of the learned penalty (the slopes' shared variance).
PENALTY_SOURCE = -1


@dataclass(frozen=True)
class VarianceComponent:
    """A group of coefficients sharing an IG variance (``k = 1``) or an IW covariance (``k > 1``).

    Attributes
    ----------
    name
        Label used in results.
    index
        ``(J, k)`` positions: into ``theta_d`` when ``blocked`` is False, else the ``k``
        positions within each level's block of ``theta_b`` (shape ``(1, k)``).
    blocked
        Whether the coefficients live in the Schur-eliminated factor.
    prior
        The variance's prior (``k = 1``): a record of :mod:`bayesvm.priors` (``InverseGamma``, ``HalfT``, ...), whose
        law :mod:`bayesvm.engines.variance_prior` finds; None for a covariance (``k > 1``).
    prior_df, prior_scale
        ``IW(nu, Psi)`` hyperparameters (``k > 1``).
    n_levels
        ``J``, the number of ``k``-vectors sharing the variance.
    source
        Caller's tag: the random-effect term's index ``t``, :data:`PENALTY_SOURCE` for the learned penalty, ``-2 - i``
        for ``gp()`` term ``i``.
    """

    name: str
    index: np.ndarray
    blocked: bool
    n_levels: int
    prior: VariancePrior | None = None
    prior_df: float = 0.0
    prior_scale: np.ndarray | None = None
    source: int = PENALTY_SOURCE

    @property
    def k(self) -> int:
        return self.index.shape[1]

    @property
    def is_wishart(self) -> bool:
        return self.k > 1

    def check_prior(self) -> None:
        """Raise ``ValueError`` unless a variance (``k = 1``) carries a variance prior's record and a covariance none
        (a loaded file's component is checked before an engine or ``summary()`` asks its law)."""
        index = getattr(self, "index", None)
        if not (isinstance(index, np.ndarray) and index.ndim == 2):
            raise ValueError(f"the variance component {getattr(self, 'name', '?')!r} has no (levels, k) index")
        if (index.shape[1] == 1) != isinstance(self.prior, VariancePrior):
            raise ValueError(f"the variance component {self.name!r} does not carry a prior of its kind: {self.prior!r}")


@dataclass(frozen=True)
class VBProblem:
    """Immutable inputs of the VB engine (DESIGN rule 4).

    ``D`` is a dense array (with ``blocked`` the Schur-eliminated factor, or None) or a
    ``scipy.sparse`` matrix holding the whole design ``C`` (sparse Cholesky path, no
    ``blocked``).  ``fixed_precision[j]`` is the prior precision of ``theta_d[j]`` when it is not in a
    variance component (0 for component-governed columns).  ``probes`` (sparse path only) estimates the
    variances with that many Rao-Blackwellised probes and conjugate gradients instead of a factorisation
    (:mod:`bayesvm.linalg.probes`), their random numbers fixed by ``probe_seed``.  ``weights`` holds each row's
    class weight ``omega_i`` (:mod:`bayesvm.model.class_weights`), or None where every row weighs 1.
    """

    y: np.ndarray
    D: np.ndarray
    fixed_precision: np.ndarray
    components: tuple[VarianceComponent, ...]
    blocked: BlockedFactor | None = None
    probes: int | None = None
    probe_seed: int = 0
    weights: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.y.size

    @property
    def is_sparse(self) -> bool:
        return sp.issparse(self.D)

    def check_shapes(self) -> None:
        """Raise ``ValueError`` unless ``y`` holds every row of ``D`` and the blocked factor has ``D``'s rows (a loaded
        file's problem is checked before the compiled sums and evidence loops index all three by row).  An out-of-core
        fit's problem keeps the rows of one partition in ``D`` and every row's ``y``."""
        rows = self.D.shape[0] if getattr(self.D, "ndim", 0) == 2 else -1
        if not (isinstance(self.y, np.ndarray) and self.y.ndim == 1 and 0 <= rows <= self.y.size):
            raise ValueError("the problem's response does not hold every row of its design")
        weights = self.weights
        if weights is not None and not (
            isinstance(weights, np.ndarray) and weights.shape == self.y.shape and np.all(weights > 0)
        ):
            raise ValueError("the problem's class weights are not one positive number per row")
        if self.blocked is not None:
            self.blocked.check_shapes(rows)

    def take(self, rows: np.ndarray) -> VBProblem:
        """The problem on ``rows`` (a subset or an order of the rows of a dense in-memory design), the same prior."""
        blocked = None if self.blocked is None else self.blocked.take(rows)
        weights = None if self.weights is None else self.weights[rows]
        return replace(self, y=self.y[rows], D=self.D[rows], blocked=blocked, weights=weights)

    @cached_property
    def row_pattern(self) -> RowPattern | None:
        """Dense path: each row's and each blocked level's nonzero columns where the dense part is wide and mostly
        zero (a second factor's indicators), for the sums of :func:`bayesvm.linalg.dense.gaussian_posterior`; else
        None (:mod:`bayesvm.linalg.row_pattern`)."""
        if self.is_sparse:
            return None
        blocked = self.blocked
        return row_pattern(
            self.D, None if blocked is None else blocked.codes, 0 if blocked is None else blocked.n_levels
        )

    @cached_property
    def elimination(self) -> EliminationLayout | None:
        """Sparse path: the layout that eliminates the largest single term onto a dense Schur complement
        (:mod:`bayesvm.linalg.schur`), or ``None`` where the general sparse factorisation serves."""
        if not self.is_sparse or not self.components:
            return None
        largest = max(self.components, key=lambda c: c.index.size)
        return elimination_layout(self.D, largest.index)

    @cached_property
    def probe_layout(self) -> tuple[EliminationLayout, np.ndarray]:
        """With ``probes``: the layout eliminating the largest term (``S`` only applied, so any size) and the
        rest positions preconditioned as one dense block: the columns outside the large variance components."""
        if not self.is_sparse or not self.components:
            raise ValueError("probes apply to the sparse path (several large grouping factors) only")
        largest = max(self.components, key=lambda c: c.index.size)
        layout = elimination_layout(self.D, largest.index, dense_complement=False)
        if layout is None:
            raise ValueError("probes need each row to use one level of the largest grouping factor")
        outside = np.ones(self.D.shape[1], dtype=bool)
        for comp in self.components:
            if comp.index.size > SMALL_COMPONENT:
                outside[comp.index.ravel()] = False
        _, _, pos = layout.column_role
        block = np.sort(pos[np.flatnonzero(outside & (pos >= 0))])
        return layout, block if block.size <= MAX_DENSE_BLOCK else block[:0]


def sorted_by_level(problem: VBProblem) -> tuple[np.ndarray | None, VBProblem]:
    """The problem with each level's rows of the blocked factor contiguous, so per-level sums
    need no gather, and the row order used (``None`` when nothing is blocked)."""
    if problem.blocked is None:
        return None, problem
    order = problem.blocked.sorted_order()
    return order, problem.take(order)


@dataclass(frozen=True)
class SelectionProblem:
    """Inputs of the selection engines.

    Attributes
    ----------
    y
        Responses in {-1, +1}.
    X
        ``(n, q)`` dense standardised fixed-effect design.
    selected
        Positions (into the columns of X) of the penalised slopes, ``m`` of them.
    fixed_precision
        ``(q,)`` prior precisions of the unpenalised coefficients (entries at ``selected`` unused).
    prior
        The :mod:`bayesvm.priors` selection prior.
    prior_scale
        ``(m,)`` ``s_k``: the penalised predictors' SDs on the engine's scale (Polson & Scott's
        ``sigma_j``; 1 after standardisation; 1 for Laplace-zero, as in Luts & Ormerod).
    components
        The random-effect terms: columns of X (``index``, ``(J, k)``) whose prior is ``N(0, Sigma)`` per level
        with a learned ``Sigma`` (their ``fixed_precision`` entries are unused).
    weights
        Each row's class weight (:mod:`bayesvm.model.class_weights`), or None where every row weighs 1.
    """

    y: np.ndarray
    X: np.ndarray
    selected: np.ndarray
    fixed_precision: np.ndarray
    prior: LaplaceZero | SpikeSlab | Lasso
    prior_scale: np.ndarray
    components: tuple[VarianceComponent, ...] = ()
    weights: np.ndarray | None = None

    @property
    def q(self) -> int:
        return self.X.shape[1]

    @property
    def m(self) -> int:
        return self.selected.size

    @property
    def unselected(self) -> np.ndarray:
        """Columns with their own fixed normal prior: neither penalised nor in a random-effect term."""
        mask = np.ones(self.q, dtype=bool)
        mask[self.selected] = False
        for comp in self.components:
            mask[comp.index.ravel()] = False
        return np.flatnonzero(mask)

    @property
    def component_columns(self) -> np.ndarray:
        """Columns of X in a random-effect term."""
        return np.concatenate([np.zeros(0, dtype=int)] + [c.index.ravel() for c in self.components])

    @cached_property
    def _split(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, sp.csr_matrix]:
        """Fixed-effect positions, component positions, the fixed columns and the (sparse) component columns."""
        cols = self.component_columns
        mask = np.ones(self.q, dtype=bool)
        mask[cols] = False
        fixed = np.flatnonzero(mask)
        return fixed, cols, np.ascontiguousarray(self.X[:, fixed]), sp.csr_matrix(self.X[:, cols])

    def weighted_gram(self, w: np.ndarray) -> np.ndarray:
        """``X' diag(w) X``; with random effects by blocks, the random-effect columns sparse (each row meets one
        level per term), so the cost is ``O(n p^2 + nnz(Z) p)`` instead of ``O(n q^2)``."""
        if not self.components:
            return weighted_gram(self.X, w)
        fixed, cols, X_fixed, Z = self._split
        gram = np.empty((self.q, self.q))
        gram[np.ix_(fixed, fixed)] = weighted_gram(X_fixed, w)
        zw = Z.T.multiply(w[None, :]).tocsr()
        cross = np.asarray(zw @ X_fixed)
        gram[np.ix_(cols, fixed)] = cross
        gram[np.ix_(fixed, cols)] = cross.T
        gram[np.ix_(cols, cols)] = (zw @ Z).toarray()
        return gram

    def add_component_precisions(self, precision: np.ndarray, covariances: list[np.ndarray]) -> None:
        """``precision += blockdiag(Sigma_c^{-1} per level)`` for each random-effect term, in place; ``covariances``
        holds each term's ``Sigma_c^{-1}`` (its expectation under VB, a draw's inverse under Gibbs)."""
        for comp, inv in zip(self.components, covariances):
            idx = comp.index
            precision[idx[:, :, None], idx[:, None, :]] += inv[None, :, :]


@dataclass(frozen=True, eq=False)
class ImputationProblem:
    """Inputs: the regression problem and the imputation model (rows in the regression's order).

    ``z`` is ``(n, V)`` with 0 at missing entries; ``missing`` marks them.
    """

    base: VBProblem
    columns: np.ndarray
    alpha: np.ndarray
    gamma: np.ndarray
    z: np.ndarray
    missing: np.ndarray
    mean_variance: float
    df: float
    scale: np.ndarray
    mode: str = "joint"  # "joint": the paper's model (this module); "mi": bayesvm.engines.imputation.multiple

    @property
    def V(self) -> int:
        return self.z.shape[1]

    def design(self, z: np.ndarray):
        """The engine's design with the imputed columns at ``z`` (a CSR matrix on the sparse path)."""
        if sp.issparse(self.base.D):  # the fixed-effect columns lead: rebuild them densely, keep the rest
            width = int(np.max(self.columns)) + 1
            head = self.base.D[:, :width].toarray()
            head[:, self.columns] = self.alpha + self.gamma * z
            return sp.hstack([sp.csr_matrix(head), self.base.D[:, width:]], format="csr")
        D = self.base.D.copy()
        D[:, self.columns] = self.alpha + self.gamma * z
        return D

    def sorted(self) -> tuple[np.ndarray | None, ImputationProblem]:
        order, base = sorted_by_level(self.base)
        if order is None:
            return None, self
        return order, ImputationProblem(
            base, self.columns, self.alpha, self.gamma, self.z[order], self.missing[order],
            self.mean_variance, self.df, self.scale, self.mode,
        )  # fmt: skip


@dataclass(frozen=True, eq=False)
class KernelProblem:
    """Training inputs (already standardised), labels in {-1, +1}, the starting kernel and each row's class weight
    (:mod:`bayesvm.model.class_weights`; None: every row 1)."""

    X: np.ndarray
    y: np.ndarray
    kernel: Kernel
    weights: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.y.size
