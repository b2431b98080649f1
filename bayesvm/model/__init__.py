"""From a design and the user's choices to the engine's inputs, and back to named results.

Owns: penalty handling, prior hyperparameters, internal standardisation and the layout of
``theta``.  Layout: ``theta_d = [fixed effects, random effects of the smaller grouping
factors]``; ``theta_b`` = the random effects of the grouping factor with the most
coefficients, eliminated by the Schur complement (see ``linalg/dense.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from ..errors import BayesvmError, FormulaError
from ..formula.design import Design, NewDesign
from ..formula.frames import MAX_FIXED_COLUMNS
from ..linalg.dense import BlockedFactor
from ..memory import check_memory
from ..priors import PriorSet, SelectionPrior
from .class_weights import ClassWeights, resolve_class_weight
from .problems import ImputationProblem, SelectionProblem, VarianceComponent, VBProblem


def gp_source(i: int) -> int:
    """``VarianceComponent.source`` of the ``i``-th ``gp()`` term."""
    return -2 - i


def gp_index(source: int) -> int | None:
    """The ``gp()`` term a component's ``source`` names, or ``None``."""
    return -2 - source if source <= -2 else None


#: Largest number of dense columns (fixed effects plus random effects outside the largest
#: grouping factor) for the dense Schur complement; beyond it the sparse Cholesky path is used.
MAX_DENSE_COLUMNS = 2000

#: With several grouping factors, a dense part of at least :data:`SPARSE_FROM_COLUMNS` columns goes to the sparse
#: path (the largest factor eliminated onto a dense Schur complement, :mod:`bayesvm.linalg.schur`) once the dense
#: path's row products ``n q^2`` exceed this many multiply-adds a sweep.  The dense path forms ``D' W D`` and the
#: rows' variances over all ``q`` columns on every sweep; the sparse one only touches each row's stored entries and
#: factorises the ``q x q`` complement (``benchmarks/scale.py`` times both).
MAX_DENSE_WORK = 5e8
#: Below this many dense columns the dense path stays: the sparse path's index work costs about as much as the dense
#: products, which numba sums over each row's and level's nonzero columns only (:mod:`bayesvm.linalg.row_pattern`).
SPARSE_FROM_COLUMNS = 256


def validate_penalty(penalty: object) -> float | str | None:
    """``"learn"``, ``None`` or a positive finite float."""
    if penalty is None or (isinstance(penalty, str) and penalty == "learn"):
        return penalty
    if isinstance(penalty, str) and penalty.lower() == "none":
        return None
    if isinstance(penalty, str):
        raise BayesvmError(f"penalty must be 'learn', None or a positive number, got {penalty!r}")
    if isinstance(penalty, bool):
        raise BayesvmError(f"penalty must be 'learn', None or a positive number, got {penalty!r}")
    try:
        value = float(penalty)
    except (TypeError, ValueError):
        raise BayesvmError(f"penalty must be 'learn', None or a positive number, got {penalty!r}") from None
    if not (np.isfinite(value) and value > 0):
        raise BayesvmError(f"penalty (alpha) must be a positive finite number, got {penalty!r}")
    return value


@dataclass(frozen=True, eq=False)
class LinearModel:
    """A linear Bayesian SVM ready for an engine.

    Attributes
    ----------
    design
        The design it was built from.
    penalty
        ``"learn"``, ``None`` or ``alpha``.
    priors
        Hyperparameters.
    center, scale
        Internal standardisation of X: ``X_std = (X - center) / scale``.
    dense_terms, blocked_terms
        Indices of ``design.re_terms`` placed in ``theta_d`` and in ``theta_b``.
    sparse
        Whether ``theta_d`` is solved by the sparse Cholesky path (``linalg/sparse.py``).
    prior
        Selection / shrinkage prior of the penalised slopes (``None``: the ``penalty`` decides).
    unpenalized
        Formula terms whose columns keep the vague ``N(0, sigma_beta^2)`` prior.
    class_weights
        The classes' weights in the pseudo-likelihood (:mod:`bayesvm.model.class_weights`), or None.
    """

    design: Design
    penalty: float | str | None
    priors: PriorSet
    center: np.ndarray
    scale: np.ndarray
    dense_terms: tuple[int, ...]
    blocked_terms: tuple[int, ...]
    sparse: bool = False
    prior: SelectionPrior | None = None
    unpenalized: tuple[str, ...] = ()
    class_weights: ClassWeights | None = None

    @property
    def row_weights(self) -> np.ndarray | None:
        """Each training row's class weight ``omega_i``, or None where every row weighs 1."""
        return None if self.class_weights is None else self.class_weights.rows(self.design.y)

    # ----- layout -------------------------------------------------------------------
    @property
    def penalized(self) -> np.ndarray:
        """Boolean mask of penalised fixed effects: every column but the intercept and ``unpenalized`` terms."""
        mask = np.array([name != "(Intercept)" for name in self.design.x_names], dtype=bool)
        columns = self.design.term_columns()
        for term in self.unpenalized:
            mask[columns[term]] = False
        return mask

    # ----- imputation (missing="impute") --------------------------------------------
    def imputation_scaling(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(m, s, alpha, gamma)``: ``z = (d - m) / s`` is the imputation scale and the design column
        on the engine's scale is ``alpha + gamma z``."""
        layout = self.design.imputation
        m, s = layout.observed_mean, layout.observed_sd
        cols = np.asarray(layout.x_columns)
        alpha = (m - self.center[cols]) / self.scale[cols]
        gamma = s / self.scale[cols]
        return m, s, alpha, gamma

    def imputation_problem(self, mode: str = "joint") -> ImputationProblem:
        """Inputs of :mod:`bayesvm.engines.imputation.joint_model` (``mode="joint"``) or :mod:`bayesvm.engines.imputation.multiple` (``"mi"``)."""
        layout = self.design.imputation
        m, s, alpha, gamma = self.imputation_scaling()
        z = np.nan_to_num((layout.values - m) / s, nan=0.0)
        df, scale = self.priors.imputation.resolve(len(layout.variables))
        return ImputationProblem(
            base=self.problem(),
            columns=np.asarray(layout.x_columns),
            alpha=alpha,
            gamma=gamma,
            z=z,
            missing=layout.missing,
            mean_variance=self.priors.imputation.mean_variance,
            df=df,
            scale=scale,
            mode=mode,
        )

    def selection_problem(self) -> SelectionProblem:
        """Inputs of the selection engines (``prior`` set): ``X = [X_std, Z]`` with every random-effect term
        dense (:func:`build_model` puts them there) and its variance components."""
        base = self.problem()
        X = np.asarray(base.D)
        selected = np.flatnonzero(self.penalized)
        if self.prior.scaled_by_predictor_sd:  # Polson & Scott: scale by each predictor's SD (1 after standardisation)
            sd = X[:, selected].std(axis=0, ddof=1) if self.design.n > 1 else np.ones(selected.size)
            prior_scale = np.where(sd > 0, sd, 1.0)
        else:
            prior_scale = np.ones(selected.size)
        return SelectionProblem(
            y=self.design.y,
            X=X,
            selected=selected,
            fixed_precision=base.fixed_precision,
            prior=self.prior,
            prior_scale=prior_scale,
            components=base.components,
            weights=base.weights,
        )

    def dense_offsets(self) -> dict[int, int]:
        """Start of each dense random-effect term in ``theta_d``."""
        offsets, pos = {}, self.design.p
        for t in self.dense_terms:
            offsets[t] = pos
            pos += self.design.re_terms[t].n_levels * self.design.re_terms[t].k
        return offsets

    def gp_offsets(self) -> list[int]:
        """Start of each ``gp()`` term's basis coefficients in ``theta_d`` (after the dense random effects)."""
        pos = self.design.p + sum(
            self.design.re_terms[t].n_levels * self.design.re_terms[t].k for t in self.dense_terms
        )
        out = []
        for term in self.design.gp_terms:
            out.append(pos)
            pos += term.n_basis
        return out

    def blocked_offsets(self) -> dict[int, int]:
        """Start of each blocked term within a level's block of ``theta_b``."""
        offsets, pos = {}, 0
        for t in self.blocked_terms:
            offsets[t] = pos
            pos += self.design.re_terms[t].k
        return offsets

    # ----- engine inputs ------------------------------------------------------------
    def standardized_X(self, X: np.ndarray) -> np.ndarray:
        return (X - self.center) / self.scale

    def dense_matrix(
        self,
        X: np.ndarray,
        codes: tuple[np.ndarray, ...],
        values: tuple[np.ndarray, ...],
        gp_bases: tuple[np.ndarray, ...] = (),
    ):
        """``[X_std, Z of the dense terms, gp() bases]`` for given rows (a CSR matrix on the sparse path)."""
        blocks = [self.design.re_terms[t].z_matrix(codes[t], values[t]) for t in self.dense_terms]
        if self.sparse:
            return sp.hstack(
                [sp.csr_matrix(self.standardized_X(X)), *blocks, *(sp.csr_matrix(b) for b in gp_bases)], format="csr"
            )
        return np.hstack([self.standardized_X(X), *(block.toarray() for block in blocks), *gp_bases])

    def blocked_factor(self, codes: tuple[np.ndarray, ...], values: tuple[np.ndarray, ...]) -> BlockedFactor | None:
        if not self.blocked_terms:
            return None
        first = self.design.re_terms[self.blocked_terms[0]]
        return BlockedFactor(
            codes=codes[self.blocked_terms[0]],
            values=np.hstack([values[t] for t in self.blocked_terms]),
            n_levels=first.n_levels,
        )

    def problem(self) -> VBProblem:
        """The VB engine's inputs."""
        d = self.design
        codes = tuple(term.codes for term in d.re_terms)
        values = tuple(term.values for term in d.re_terms)
        D = self.dense_matrix(d.X, codes, values, d.gp_bases)
        precision = np.zeros(D.shape[1])
        precision[: d.p] = 1.0 / self.priors.fixed_variance
        if isinstance(self.penalty, float):
            precision[: d.p][self.penalized] = 4.0 * self.penalty  # Alg. 1: beta ~ N(0, 1/(4 alpha))
        elif self._learns_penalty():
            precision[np.flatnonzero(self.penalized)] = 0.0  # (their variance is the "penalty" component's)
        return VBProblem(
            y=d.y,
            D=D,
            fixed_precision=precision,
            components=self.variance_components(),
            blocked=self.blocked_factor(codes, values),
            weights=self.row_weights,
        )

    def variance_components(self) -> tuple[VarianceComponent, ...]:
        """The learned variances in ``theta``'s layout, as :meth:`problem` gives them, without forming the design
        matrix: the learned penalty's (Example 1: the slopes share ``sigma_u^2``), each random-effect term's and each
        ``gp()`` term's amplitude.  What an engine's ``supports()`` asks before any engine runs."""
        d = self.design
        components: list[VarianceComponent] = []
        if self._learns_penalty():
            slopes = np.flatnonzero(self.penalized)
            components.append(
                VarianceComponent("penalty", slopes[:, None], False, slopes.size, prior=self.priors.penalty)
            )
        dense_offsets, blocked_offsets = self.dense_offsets(), self.blocked_offsets()
        for t, term in enumerate(d.re_terms):
            if t in dense_offsets:
                index = dense_offsets[t] + np.arange(term.n_levels * term.k).reshape(term.n_levels, term.k)
            else:
                index = (blocked_offsets[t] + np.arange(term.k))[None, :]
            components.append(self._component(t, index, t in blocked_offsets, term.n_levels, term.k))
        for i, (term, start) in enumerate(zip(d.gp_terms, self.gp_offsets())):
            components.append(self._gp_component(i, (start + np.arange(term.n_basis))[:, None]))
        return tuple(components)

    def _learns_penalty(self) -> bool:
        """Whether the slopes' variance is learned (``penalty="learn"``, slopes to act on, no selection prior)."""
        return isinstance(self.penalty, str) and self.penalty == "learn" and self.penalized.any() and self.prior is None

    def _component(self, t: int, index: np.ndarray, blocked: bool, n_levels: int, k: int) -> VarianceComponent:
        name = self.design.re_terms[t].label
        if k == 1:  # (a slope term's prior in units of its column: VariancePrior.for_column)
            values = self.design.re_terms[t].values[:, 0]
            spread = float(np.std(values)) if values.size > 1 else 0.0
            constant = spread <= 1e-12 * max(float(np.max(np.abs(values))), 1e-300)
            prior = self.priors.random.for_column(0.0 if constant else spread)
            return VarianceComponent(name, index, blocked, n_levels, prior=prior, source=t)
        df, scale = self.priors.correlated.resolve(k)
        return VarianceComponent(name, index, blocked, n_levels, prior_df=df, prior_scale=scale, source=t)

    def _gp_component(self, i: int, index: np.ndarray) -> VarianceComponent:
        """The amplitude ``sigma_g^2`` of ``gp()`` term ``i``: its whitened coefficients ``v ~ N(0, sigma_g^2 I)``
        (:mod:`bayesvm.formula.gp_terms`), with the random-effect variance prior (a half-t on ``sigma_g`` on the
        decision function's scale, or the inverse gamma)."""
        name = self.design.gp_terms[i].label
        return VarianceComponent(name, index, False, index.shape[0], prior=self.priors.random, source=gp_source(i))

    def new_inputs(self, new: NewDesign) -> tuple[np.ndarray, BlockedFactor | None]:
        """Dense matrix and blocked factor for new rows (unseen levels have code -1)."""
        D = self.dense_matrix(new.X, new.codes, new.values, new.gp_bases)
        return D, self.blocked_factor(new.codes, new.values)

    def fixed_transform(self) -> np.ndarray:
        """``T`` with ``beta_original = T beta_standardized``."""
        p = self.design.p
        T = np.diag(1.0 / self.scale)
        names = self.design.x_names
        if "(Intercept)" in names:
            i0 = names.index("(Intercept)")
            T[i0, :] -= self.center / self.scale
            T[i0, i0] = 1.0
        return T.reshape(p, p)


def validate_selection(design: Design, prior: object, unpenalized: object) -> tuple[object, tuple[str, ...]]:
    """Check the selection prior and the ``unpenalized`` term names against the design."""
    if prior is not None and not isinstance(prior, SelectionPrior):
        raise BayesvmError(
            f"prior must be bayesvm.priors.LaplaceZero, SpikeSlab or Lasso (or None), got {type(prior).__name__}"
        )
    if unpenalized is None:
        names: tuple[str, ...] = ()
    elif isinstance(unpenalized, str):
        names = (unpenalized,)
    else:
        names = tuple(unpenalized)
    terms = [term for term in design.term_columns() if term != "1"]
    for name in names:
        if not isinstance(name, str) or name not in terms:
            raise FormulaError(f"unpenalized term {name!r} is not a fixed-effect term of the formula; terms: {terms}")
    return prior, names


def _check_fixed_width(design: Design) -> None:
    """Refuse a fixed part wider than :data:`MAX_FIXED_COLUMNS`, naming its widest terms."""
    if design.p <= MAX_FIXED_COLUMNS:
        return
    widths = sorted(((cols.size, term) for term, cols in design.term_columns().items()), reverse=True)[:3]
    shown = ", ".join(f"{term!r} ({width:,} columns)" for width, term in widths)
    raise BayesvmError(
        f"the fixed part has {design.p:,} columns, more than {MAX_FIXED_COLUMNS:,}: every engine factorises their "
        f"{design.p:,} x {design.p:,} precision each sweep; the widest terms are {shown}.  A factor with many levels "
        "belongs in a random-effect term, e.g. (1 | id), which is fitted on its sparse structure; for wide data, "
        "select or reduce the columns first"
    )


def build_model(
    design: Design,
    penalty: object,
    priors: PriorSet,
    standardize: bool,
    max_dense_columns: int = MAX_DENSE_COLUMNS,
    prior: object = None,
    unpenalized: object = None,
    class_weight: object = None,
) -> LinearModel:
    """Decide the standardisation and the dense / blocked split.

    Standardisation (``standardize=True``): every non-constant column of X other than the
    intercept is scaled by its SD (``ddof=1``, as R's ``scale()``) and, when the model has an
    intercept, centred on its mean.

    Layout: one grouping factor, or several whose smaller factors have at most
    ``max_dense_columns`` coefficients (with the fixed effects) and cost at most :data:`MAX_DENSE_WORK`
    a sweep (from :data:`SPARSE_FROM_COLUMNS` columns), use the Schur complement over the largest factor
    densely; otherwise every coefficient goes to the sparse path.

    ``class_weight`` (None, ``"balanced"`` or a mapping of class to weight) weighs each row's hinge loss by its
    class (:func:`bayesvm.model.class_weights.resolve_class_weight`).
    """
    penalty = validate_penalty(penalty)
    class_weights = resolve_class_weight(class_weight, design.y, (design.response.negative, design.response.positive))
    prior, unpenalized = validate_selection(design, prior, unpenalized)
    if prior is not None and not any(n != "(Intercept)" for n in design.x_names):
        raise BayesvmError("a selection prior needs at least one slope in the fixed part of the formula")
    p = design.p
    _check_fixed_width(design)
    center, scale = np.zeros(p), np.ones(p)
    if standardize and design.n > 1:
        mean, sd = design.column_moments()
        movable = (sd > 0) & np.array([n != "(Intercept)" for n in design.x_names])
        scale[movable] = sd[movable]
        if design.has_intercept:
            center[movable] = mean[movable]
    if design.imputation is not None:  # imputed columns: observed values only (X holds placeholders)
        layout = design.imputation
        for j, col in enumerate(layout.x_columns):
            if scale[col] != 1.0 or center[col] != 0.0:  # a standardised column
                scale[col] = layout.observed_sd[j]
                center[col] = layout.observed_mean[j] if design.has_intercept else 0.0
    by_group: dict[str, list[int]] = {}
    for t, term in enumerate(design.re_terms):
        by_group.setdefault(term.group, []).append(t)
    blocked: tuple[int, ...] = ()
    if by_group:
        size = {
            g: design.re_terms[ts[0]].n_levels * sum(design.re_terms[t].k for t in ts) for g, ts in by_group.items()
        }
        biggest = max(size, key=size.get)
        blocked = tuple(by_group[biggest])
    dense = tuple(t for t in range(len(design.re_terms)) if t not in blocked)
    n_gp = sum(term.n_basis for term in design.gp_terms)
    n_dense = p + n_gp + sum(design.re_terms[t].n_levels * design.re_terms[t].k for t in dense)
    sparse = bool(design.re_terms) and n_dense > max_dense_columns
    costly = len(by_group) > 1 and n_dense >= SPARSE_FROM_COLUMNS and float(design.n) * n_dense**2 > MAX_DENSE_WORK
    if costly and design.imputation is None:  # (the joint imputation model needs the dense layout: kept there)
        sparse = True  # several large factors: the dense path's row products dominate (MAX_DENSE_WORK)
    if not sparse and design.X.shape[0] == design.n:  # (out-of-core designs hold no rows in memory)
        # the dense columns D, their weighted copy, the predictor's residuals and a row-sorted copy
        check_memory(
            8.0 * design.n * n_dense * 4 + 8.0 * n_dense**2 * 4,
            f"the dense design ({design.n} rows x {n_dense} columns)",
            "use fewer fixed-effect columns or move many-level factors into random-effect terms",
        )
    if prior is not None and design.re_terms:  # the indicator updates need the dense joint precision
        dense, blocked = tuple(range(len(design.re_terms))), ()
        n_dense = p + n_gp + sum(term.n_levels * term.k for term in design.re_terms)
        if n_dense > max_dense_columns:
            raise BayesvmError(
                f"a selection prior with random effects works on the dense precision of all {n_dense} coefficients "
                f"(each indicator update conditions on every other coefficient), more than {max_dense_columns}: "
                "use fewer levels, drop the prior (penalty='learn' keeps the sparse path) or the random effects"
            )
        sparse = False
    if sparse:
        dense, blocked = tuple(range(len(design.re_terms))), ()
    return LinearModel(
        design=design,
        penalty=penalty,
        priors=priors,
        center=center,
        scale=scale,
        dense_terms=dense,
        blocked_terms=blocked,
        sparse=sparse,
        prior=prior,
        unpenalized=unpenalized,
        class_weights=class_weights,
    )


def all_dense(model, why: str):
    """The model with every random-effect term in the dense columns (no Schur block, no sparse path), for the
    engines that keep one dense ``q`` over all coefficients; refused beyond :data:`MAX_DENSE_COLUMNS`."""
    terms = model.design.re_terms
    if not terms:
        return model
    size = model.design.p + sum(t.n_levels * t.k for t in terms) + sum(t.n_basis for t in model.design.gp_terms)
    if size > MAX_DENSE_COLUMNS:
        raise BayesvmError(
            f"{why} over all {size} coefficients (each step factorises its precision), more than "
            f"{MAX_DENSE_COLUMNS}: use in-memory data with method='vb' (sparse structure) for this many "
            "random-effect levels"
        )
    return replace(model, dense_terms=tuple(range(len(terms))), blocked_terms=(), sparse=False)
