"""From a design and the user's kernel choices to the kernel engines' inputs (Wenzel et al. 2017).

Owns: the inputs (the formula's fixed-effect columns without the intercept), their internal
standardisation, the data-dependent kernel defaults and the choice of inducing points.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.cluster.vq import kmeans2

from ..errors import BayesvmError
from ..formula.design import Design
from ..kernels import Kernel, kernel_from
from ..memory import check_memory
from .class_weights import ClassWeights, resolve_class_weight
from .problems import KernelProblem

#: Default number of inducing points (Wenzel et al. section 4.2): ``min(n, DEFAULT_INDUCING)``.
DEFAULT_INDUCING = 100
#: k-means runs on at most this many rows (a seeded random subset beyond it).
KMEANS_ROWS = 20000
INDUCING_METHODS = ("kmeans", "random")


@dataclass(frozen=True, eq=False)
class KernelModel:
    """A kernel Bayesian SVM ready for an engine.

    Attributes
    ----------
    design
        The design (fixed part only) it was built from.
    columns
        Columns of ``design.X`` used as inputs (all but the intercept).
    center, scale
        ``inputs = (X[:, columns] - center) / scale``.
    kernel
        The kernel with data-dependent defaults filled in (starting values when learned).
    locations
        Inducing locations on the standardised scale, or ``None`` for batch VB on every row.
    """

    design: Design
    columns: tuple[int, ...]
    center: np.ndarray
    scale: np.ndarray
    kernel: Kernel
    locations: np.ndarray | None
    inducing_method: str
    class_weights: ClassWeights | None = None

    # the parts of LinearModel's interface that results code reads
    prior = None
    penalty = None
    unpenalized: tuple[str, ...] = ()

    @property
    def input_names(self) -> list[str]:
        return [self.design.x_names[j] for j in self.columns]

    def inputs(self, X: np.ndarray) -> np.ndarray:
        return (X[:, list(self.columns)] - self.center) / self.scale

    def problem(self) -> KernelProblem:
        X = self.inputs(self.design.X)
        y = self.design.y if len(self.design.y) == len(X) else np.zeros(len(X))  # out of core: inputs sample only
        weights = None if self.class_weights is None else self.class_weights.rows(y)
        return KernelProblem(X=X, y=y, kernel=self.kernel, weights=weights)

    def new_inputs(self, newdata: pd.DataFrame) -> np.ndarray:
        return self.inputs(self.design.rematerialize(newdata, include_random=False).X)


def choose_locations(
    inputs: np.ndarray, inducing: object, method: str, rng: np.random.Generator, center, scale
) -> np.ndarray | None:
    """Inducing locations (standardised scale), or ``None`` for batch VB (``inducing="all"``)."""
    n, d = inputs.shape
    if isinstance(inducing, str):
        if inducing != "all":
            raise BayesvmError(f"inducing must be a number of points, 'all' or an array of locations, got {inducing!r}")
        return None
    if inducing is None:
        inducing = min(n, DEFAULT_INDUCING)
    if isinstance(inducing, (int, np.integer)) and not isinstance(inducing, bool):
        M = int(inducing)
        if M < 1:
            raise BayesvmError(f"inducing must be at least 1, got {M}")
        if M > n:
            warnings.warn(
                f"inducing={M:,} is more than the {n:,} training rows: every row is an inducing point "
                "(as inducing='all' with the inducing-point engine)",
                UserWarning,
                stacklevel=4,
            )
        if M >= n:
            return inputs.copy()
        if method == "random":
            return inputs[rng.choice(n, M, replace=False)].copy()
        rows = inputs if n <= KMEANS_ROWS else inputs[rng.choice(n, KMEANS_ROWS, replace=False)]
        distinct = np.unique(rows, axis=0)
        if len(distinct) <= M:
            return distinct
        seed = int(rng.integers(2**31))
        centres, _ = kmeans2(rows, M, minit="++", seed=seed)
        return centres
    locations = np.asarray(inducing, dtype=float)
    if locations.ndim != 2 or locations.shape[1] != d:
        raise BayesvmError(
            f"inducing locations must be an array of shape (M, {d}) on the scale of the inputs {d} column(s), "
            f"got shape {locations.shape}"
        )
    if not np.all(np.isfinite(locations)):
        raise BayesvmError("inducing locations must be finite")
    return (locations - center) / scale


def _check_kernel_memory(n: int, inducing: object) -> None:
    """Refuse, before any kernel matrix exists, a fit whose kernel matrices would not fit in memory."""
    if isinstance(inducing, str):  # "all": n x n kernel, its Cholesky factor and two more n x n matrices
        if inducing != "all":
            return  # choose_locations refuses it by name
        check_memory(
            4 * 8.0 * n * n,
            f"the full kernel matrix of {n:,} rows (inducing='all' or pcvm())",
            "use inducing points instead (bsvm(..., kernel=..., inducing=100)), or method='svi' for many rows",
        )
        return
    if inducing is None:
        M = min(n, DEFAULT_INDUCING)
    elif isinstance(inducing, (int, np.integer)) and not isinstance(inducing, bool):
        M = min(int(inducing), n)
    elif np.ndim(inducing) == 2:
        M = np.shape(inducing)[0]
    else:
        return  # choose_locations refuses it by name
    check_memory(
        8.0 * (3 * n * M + 4 * M * M),
        f"{M:,} inducing points on {n:,} rows",
        "use fewer inducing points (inducing=100 is usually enough), or method='svi' with a smaller batch_size",
    )


def build_kernel_model(
    design: Design,
    kernel: Kernel,
    standardize: bool,
    inducing: object,
    inducing_method: str,
    seed: int | None,
    class_weight: object = None,
) -> KernelModel:
    """Validate the design for a kernel fit, standardise the inputs and pick the inducing points; ``class_weight``
    as :func:`bayesvm.model.build_model` takes it."""
    kernel = kernel_from(kernel)
    if design.gp_terms:
        raise BayesvmError(
            f"kernel= makes the whole fixed part one Gaussian process, and the formula also has "
            f"{[t.label for t in design.gp_terms]}: use one or the other (gp() terms compose with linear terms and "
            "random effects; kernel= is the shorthand for y ~ gp(all inputs))"
        )
    if design.re_terms:
        raise BayesvmError(
            "kernel= is the shorthand for a model whose whole fixed part is one Gaussian process, with no additive "
            f"blocks beside it; for random effects {[t.bar.group_name for t in design.re_terms]} next to a nonlinear "
            "effect write the GP as a formula term: y ~ gp(x1, x2) + (1 | g)"
        )
    if design.imputation is not None:
        raise BayesvmError(
            "with kernel= every predictor is a GP input, and a GP is nonlinear in its inputs: the conditional of a "
            "missing input is not Gaussian, so the imputation model does not apply; use missing='drop', or put the "
            "imputed predictors in the linear part beside a gp() term: y ~ x_missing + gp(x1, x2)"
        )
    if inducing_method not in INDUCING_METHODS:
        raise BayesvmError(f"inducing_method must be one of {INDUCING_METHODS}, got {inducing_method!r}")
    columns = tuple(j for j, name in enumerate(design.x_names) if name != "(Intercept)")
    if not columns:
        raise BayesvmError("a kernel needs at least one input: the formula's fixed part has only an intercept")
    X = design.X[:, list(columns)]  # (out-of-core data: the prototype rows)
    center, scale = np.zeros(len(columns)), np.ones(len(columns))
    if standardize and design.n > 1:
        mean, sd = (m[list(columns)] for m in design.column_moments())
        movable = sd > 0
        center[movable] = mean[movable]
        scale[movable] = sd[movable]
    inputs = (X - center) / scale
    _check_kernel_memory(design.n, inducing)
    rng = np.random.default_rng(seed)
    kernel = kernel.resolved(inputs, rng)
    locations = choose_locations(inputs, inducing, inducing_method, rng, center, scale)
    class_weights = None
    if class_weight is not None and design.y.size:  # (out-of-core designs hold no responses: refused before)
        class_weights = resolve_class_weight(
            class_weight, design.y, (design.response.negative, design.response.positive)
        )
    return KernelModel(
        design=design, columns=columns, center=center, scale=scale, kernel=kernel, locations=locations,
        inducing_method=inducing_method, class_weights=class_weights,
    )  # fmt: skip
