"""Gaussian-process terms ``gp(x1, x2, ...)`` of a formula: a nonlinear effect as a dense basis block.

A term ``gp(age, bmi)`` adds a function ``g(age, bmi)`` to the linear predictor with a Gaussian-process
prior, approximated through ``m`` inducing locations ``U`` (the subset-of-regressors / DTC prior of
Quinonero-Candela & Rasmussen 2005, the approximation Wenzel et al. 2017 section 4.2 fit by SVI):

    g(x) = phi(x)' v,   phi(x) = L^-1 k(U, x),   L L' = K_UU,   v ~ N(0, sigma_g^2 I_m),

so that ``Cov(g(x), g(x')) = sigma_g^2 k(x, U) K_UU^-1 k(U, x')``, the Nystrom approximation of the kernel
``sigma_g^2 k`` (``k`` with unit variance).  As mgcv does for its smooths, the basis is centred on the
training rows (``phi(x) - mean_i phi(x_i)``): ``g`` sums to zero over the data, so the intercept, not the GP,
carries the overall level and the two are not confounded (an uncentred GP with a long lengthscale is
nearly a second intercept, and its amplitude then has a long, unidentified tail).  ``phi`` is the whitened basis; its coefficients ``v`` share one
variance ``sigma_g^2`` (the GP's amplitude), exactly as the levels of a random intercept share theirs, so
the term enters every engine as one more variance component on dense columns and composes with random
effects, selection priors and imputation of other predictors.

Syntax (brms's ``gp()`` and mgcv's ``s()`` are the models): ``gp(x1, ..., k=20, lengthscale=None,
kernel="rbf")``.  ``k`` is the number of inducing locations (default :data:`DEFAULT_BASIS` per term,
at most the number of distinct input rows); the inputs are standardised internally and ``lengthscale``
is on that scale (default: the median distance between input rows, the heuristic of ``kernel=`` fits);
``kernel`` is ``"rbf"`` or ``"matern52"``.

This module is a record and its basis: no engine or result code (DESIGN section 2).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.linalg import cholesky, solve_triangular

from ..errors import DesignError, FormulaError
from ..kernels import RBF, Matern52
from ..memory import check_memory

#: Inducing locations of a ``gp()`` term when ``k`` is not given.
DEFAULT_BASIS = 20
#: Most inducing locations a ``gp()`` term may ask for (its basis is ``n x k``, its kernel matrix ``k x k``).
MAX_BASIS = 1000
#: Kernels a ``gp()`` term may name.
GP_KERNELS = {"rbf": RBF, "matern52": Matern52}
#: Jitter added to the diagonal of ``K_UU`` (unit-variance kernel) before its Cholesky factor.
JITTER = 1e-6

_CALL = re.compile(r"(?<![\w.`])gp\s*\(")
_NAME = re.compile(r"^(?:[A-Za-z_.][A-Za-z0-9_.]*|`[^`]+`)$")


@dataclass(frozen=True)
class GpSpec:
    """One ``gp(...)`` call as written.

    Attributes
    ----------
    variables
        Input columns.
    k
        Number of inducing locations (``None``: :data:`DEFAULT_BASIS`).
    lengthscale
        On the standardised inputs (``None``: median heuristic).
    kernel
        ``"rbf"`` or ``"matern52"``.
    """

    variables: tuple[str, ...]
    k: int | None = None
    lengthscale: float | None = None
    kernel: str = "rbf"

    @property
    def label(self) -> str:
        return f"gp({', '.join(self.variables)})"


def _split_arguments(inner: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for pos, char in enumerate(inner):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:pos])
            start = pos + 1
    parts.append(inner[start:])
    return [part.strip() for part in parts]


def _option(name: str, text: str, call: str) -> object:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if name == "kernel" and re.fullmatch(r"[A-Za-z0-9]+", text):
            value = text  # gp(x, kernel=matern52), as R users write it
        else:
            raise FormulaError(f"{call}: option {name}={text} must be a constant") from None
    if name == "k":
        if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_BASIS:
            raise FormulaError(
                f"{call}: k (the number of inducing locations) must be an integer from 2 to {MAX_BASIS}, got {text}"
            )
        return value
    if name == "lengthscale":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
            raise FormulaError(f"{call}: lengthscale must be a positive number, got {text}")
        return float(value)
    if not isinstance(value, str) or value.lower() not in GP_KERNELS:
        raise FormulaError(f"{call}: kernel must be one of {sorted(GP_KERNELS)}, got {text}")
    return value.lower()


def parse_gp(inner: str, formula: str) -> GpSpec:
    """Read the arguments of one ``gp(...)`` call."""
    call = f"gp({inner})"
    variables: list[str] = []
    options: dict[str, object] = {}
    for argument in _split_arguments(inner):
        if not argument:
            raise FormulaError(f"{call} in {formula!r} has an empty argument")
        name, eq, value = argument.partition("=")
        if eq and not value.startswith("="):
            name = name.strip()
            if name not in ("k", "lengthscale", "kernel"):
                raise FormulaError(f"{call} in {formula!r}: unknown option {name!r} (k, lengthscale, kernel)")
            options[name] = _option(name, value.strip(), call)
            continue
        if options:
            raise FormulaError(f"{call} in {formula!r}: the input columns come before the options")
        if not _NAME.match(argument):
            raise FormulaError(
                f"{call} in {formula!r}: inputs must be column names (got {argument!r}); transform them in the data"
            )
        variables.append(argument[1:-1] if argument.startswith("`") else argument)
    if not variables:
        raise FormulaError(f"{call} in {formula!r} names no input column")
    if len(set(variables)) != len(variables):
        raise FormulaError(f"{call} in {formula!r} names a column twice")
    return GpSpec(tuple(variables), **options)


def extract_gp_terms(rhs: str, formula: str) -> tuple[str, tuple[GpSpec, ...]]:
    """Remove every top-level ``gp(...)`` term from the right-hand side; return the rest and the terms."""
    specs: list[GpSpec] = []
    pieces, last = [], 0
    depth_at = np.cumsum([1 if c == "(" else -1 if c == ")" else 0 for c in rhs]) if rhs else np.zeros(0)
    for match in _CALL.finditer(rhs):
        start = match.start()
        if start < last:
            continue
        if start > 0 and depth_at[start - 1] != 0:
            raise FormulaError(f"gp() term in {formula!r} must be a top-level term, not inside another term")
        open_pos = match.end() - 1
        depth, end = 0, None
        for pos in range(open_pos, len(rhs)):
            depth += 1 if rhs[pos] == "(" else -1 if rhs[pos] == ")" else 0
            if depth == 0:
                end = pos + 1
                break
        if end is None:
            raise FormulaError(f"unbalanced parentheses in gp() term of {formula!r}")
        before, after = rhs[last:start].rstrip(), rhs[end:].lstrip()
        if before and not before.endswith("+"):
            raise FormulaError(
                f"gp() term {rhs[start:end]!r} in {formula!r} must be added with '+' (interactions with a GP "
                "term are a GP over more inputs: gp(x1, x2))"
            )
        if after and not after.startswith(("+", "-")):
            raise FormulaError(f"gp() term {rhs[start:end]!r} in {formula!r} must be followed by '+' or end it")
        specs.append(parse_gp(rhs[open_pos + 1 : end - 1], formula))
        pieces.append(rhs[last:start])
        last = end
    pieces.append(rhs[last:])
    labels = [spec.label for spec in specs]
    if len(set(labels)) != len(labels):
        raise FormulaError(f"formula {formula!r} has the same gp() term twice")
    return "".join(pieces), tuple(specs)


@dataclass(frozen=True, eq=False)
class GpTerm:
    """A fitted ``gp()`` term's basis (module docstring).

    Attributes
    ----------
    spec
        The call as written.
    center, scale
        Standardisation of the inputs (training means and SDs).
    locations
        ``(m, d)`` inducing locations on the standardised scale.
    lengthscale
        On the standardised scale.
    factor
        Lower Cholesky factor ``L`` of ``K_UU + jitter I`` (unit-variance kernel).
    offset
        ``(m,)`` mean of the uncentred basis over the training rows (subtracted: module docstring).
    """

    spec: GpSpec
    center: np.ndarray
    scale: np.ndarray
    locations: np.ndarray
    lengthscale: float
    factor: np.ndarray
    offset: np.ndarray

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def n_basis(self) -> int:
        return self.locations.shape[0]

    @property
    def column_names(self) -> list[str]:
        return [f"{self.label}[{j + 1}]" for j in range(self.n_basis)]

    def kernel(self):
        return GP_KERNELS[self.spec.kernel](lengthscale=self.lengthscale, variance=1.0, learn=False)

    def basis(self, values: np.ndarray) -> np.ndarray:
        """``phi(x)`` of every row of the raw inputs ``values`` (``n x d``): ``(n, m)``."""
        inputs = (np.asarray(values, dtype=float) - self.center) / self.scale
        cross = self.kernel().matrix(self.locations, inputs)  # (m, n)
        return solve_triangular(self.factor, cross, lower=True, check_finite=False).T - self.offset


def _locations(inputs: np.ndarray, m: int) -> np.ndarray:
    """``m`` inducing locations: quantiles of one input; k-means (seeded, deterministic) of several."""
    unique = np.unique(inputs, axis=0)
    if unique.shape[0] <= m:
        return unique
    if inputs.shape[1] == 1:
        return np.unique(np.quantile(unique[:, 0], np.linspace(0.0, 1.0, m)))[:, None]
    centres, _ = kmeans2(unique, unique[np.linspace(0, unique.shape[0] - 1, m).astype(int)], minit="matrix",
                         iter=20, seed=np.random.default_rng(0))  # fmt: skip
    return np.unique(centres, axis=0)


def _median_distance(inputs: np.ndarray) -> float:
    rows = inputs if inputs.shape[0] <= 1000 else inputs[np.random.default_rng(0).choice(inputs.shape[0], 1000, False)]
    d2 = np.sum((rows[:, None, :] - rows[None, :, :]) ** 2, axis=-1)
    positive = np.sqrt(d2[d2 > 0])
    return float(np.median(positive)) if positive.size else 1.0


def build_gp_term(spec: GpSpec, values: np.ndarray) -> GpTerm:
    """The basis of ``spec`` from the training rows' raw inputs ``values`` (``n x d``).

    Raises
    ------
    DesignError
        If an input is constant (a GP of it is a constant, aliased with the intercept) or has fewer than two
        distinct values.
    """
    values = np.asarray(values, dtype=float)
    center = values.mean(axis=0)
    scale = values.std(axis=0, ddof=1) if values.shape[0] > 1 else np.zeros(values.shape[1])
    flat = [name for name, s in zip(spec.variables, scale) if not s > 0]
    if flat:
        raise DesignError(
            f"{spec.label}: input {flat} is constant in the data; a smooth function of a constant is the intercept"
        )
    inputs = (values - center) / scale
    m = spec.k if spec.k is not None else DEFAULT_BASIS
    check_memory(
        3 * 8.0 * (values.shape[0] * m + m * m),
        f"{spec.label}: its basis ({values.shape[0]:,} rows x {m:,} inducing locations)",
        "ask for fewer inducing locations (k=)",
    )
    locations = _locations(inputs, m)
    lengthscale = spec.lengthscale if spec.lengthscale is not None else _median_distance(inputs)
    kernel = GP_KERNELS[spec.kernel](lengthscale=lengthscale, variance=1.0, learn=False)
    gram = kernel.matrix(locations) + JITTER * np.eye(locations.shape[0])
    factor = cholesky(gram, lower=True, check_finite=False)
    term = GpTerm(spec, center, scale, locations, lengthscale, factor, offset=np.zeros(locations.shape[0]))
    return replace(term, offset=term.basis(values).mean(axis=0))
