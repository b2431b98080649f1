"""Covariance kernels for the nonlinear Bayesian SVM (Wenzel et al. 2017, sections 3-4 and A.3).

A kernel is a frozen record of its hyperparameters plus the few products the engines need:

* ``matrix(X1, X2)`` and ``diag(X)``;
* ``vjp(X1, X2, G)``: ``sum_ij G_ij dK_ij / d log(h)`` for every learned hyperparameter ``h``
  (the contraction the lower-bound gradient of Wenzel's A.3 needs; never an ``n x m x p`` array);
* ``diag_vjp(X, g)``: the same for ``diag(K(X, X))``;
* ``vjp_x2(X1, X2, G)``: ``sum_i G_ij d k(x1_i, x2_j) / d x2_j`` (moving inducing points);
* ``diag_vjp_x(X, g)``: ``g_i d k(x_i, x_i) / d x_i``.

Hyperparameters are positive and learned on the log scale.  ``learn=True`` learns all of a
kernel's hyperparameters, ``False`` none, a tuple of names only those.  Kernels add
(``RBF() + Linear()``) and scale (``0.5 * RBF()``); :class:`Sum` is Wenzel's multiple-kernel
form ``k = sum_j gamma_j k_j`` with learnable weights ``gamma_j``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import BayesvmError

__all__ = ["Kernel", "RBF", "Matern52", "Linear", "Constant", "Sum", "NAMED", "kernel_from"]


#: Range of a kernel hyperparameter: its square and its reciprocal's square stay finite and nonzero in float64.
HYPERPARAMETER_RANGE = (1e-150, 1e150)


def _positive(name: str, value: object, owner: str) -> np.ndarray:
    try:
        arr = np.atleast_1d(np.asarray(value, dtype=float))
    except (TypeError, ValueError):
        raise BayesvmError(f"{owner}: {name} must be a positive number, got {value!r}") from None
    low, high = HYPERPARAMETER_RANGE
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise BayesvmError(f"{owner}: {name} must be positive and finite, got {value!r}")
    if np.any(arr < low) or np.any(arr > high):
        raise BayesvmError(f"{owner}: {name} must be between {low:g} and {high:g}, got {value!r}; rescale the inputs")
    return arr


def _learned(learn: bool | tuple[str, ...], names: tuple[str, ...], owner: str) -> tuple[str, ...]:
    if learn is True:
        return names
    if learn is False:
        return ()
    chosen = (learn,) if isinstance(learn, str) else tuple(learn)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise BayesvmError(f"{owner}: learn names unknown hyperparameter(s) {unknown}; choose from {list(names)}")
    return tuple(n for n in names if n in chosen)


class Kernel:
    """Base class: parameter bookkeeping and kernel algebra."""

    #: Hyperparameter names, in ``log_params`` order.
    names: tuple[str, ...] = ()

    # ---- parameters ---------------------------------------------------------------------
    @property
    def learned(self) -> tuple[str, ...]:
        return _learned(self.learn, self.names, type(self).__name__)

    def parameter_labels(self) -> list[str]:
        """One label per entry of :meth:`log_params` (ARD lengthscales get ``[d]``)."""
        labels = []
        for name in self.learned:
            value = np.atleast_1d(getattr(self, name))
            labels += [name] if value.size == 1 else [f"{name}[{d}]" for d in range(value.size)]
        return labels

    def log_params(self) -> np.ndarray:
        parts = [np.log(np.atleast_1d(np.asarray(getattr(self, n), dtype=float))) for n in self.learned]
        return np.concatenate(parts) if parts else np.zeros(0)

    def with_log_params(self, theta: np.ndarray) -> Kernel:
        theta = np.asarray(theta, dtype=float)
        changes, start = {}, 0
        for name in self.learned:
            old = np.atleast_1d(np.asarray(getattr(self, name), dtype=float))
            new = np.exp(theta[start : start + old.size])
            start += old.size
            changes[name] = float(new[0]) if np.ndim(getattr(self, name)) == 0 else new
        return replace(self, **changes)

    def resolved(self, X: np.ndarray, rng: np.random.Generator) -> Kernel:
        """Fill data-dependent defaults (e.g. the median-distance lengthscale)."""
        return self

    def fixed(self) -> Kernel:
        """The same kernel with nothing learned (``learn=False``)."""
        return replace(self, learn=False)

    def describe(self) -> str:
        """``Name(param=value, ...)`` with 4 significant digits."""
        from dataclasses import fields

        parts = []
        for f in fields(self):
            if not f.repr:
                continue
            value = getattr(self, f.name)
            if isinstance(value, tuple) and value and isinstance(value[0], Kernel):
                value = "(" + ", ".join(k.describe() for k in value) + ")"
            elif isinstance(value, np.ndarray):
                value = "[" + ", ".join(f"{v:.4g}" for v in value) + "]"
            elif isinstance(value, float):
                value = f"{value:.4g}"
            elif isinstance(value, tuple) and value and isinstance(value[0], float):
                value = "(" + ", ".join(f"{v:.4g}" for v in value) + ")"
            parts.append(f"{f.name}={value}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # ---- algebra --------------------------------------------------------------------------
    def __add__(self, other: Kernel) -> Sum:
        if not isinstance(other, Kernel):
            return NotImplemented
        left = list(self.kernels) if isinstance(self, Sum) else [self]
        right = list(other.kernels) if isinstance(other, Sum) else [other]
        lw = list(self.weights) if isinstance(self, Sum) else [1.0]
        rw = list(other.weights) if isinstance(other, Sum) else [1.0]
        return Sum(tuple(left + right), tuple(lw + rw))

    def __rmul__(self, weight: float) -> Sum:
        if isinstance(weight, Kernel):
            return NotImplemented
        if isinstance(self, Sum):
            return Sum(self.kernels, tuple(float(weight) * w for w in self.weights), self.learn_weights)
        return Sum((self,), (float(weight),))

    # ---- defaults for stationary kernels ---------------------------------------------------
    def diag_vjp_x(self, X: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.zeros_like(X, dtype=float)


def _sq_dist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d = (A * A).sum(axis=1)[:, None] + (B * B).sum(axis=1)[None, :] - 2.0 * A @ B.T
    return np.maximum(d, 0.0)


def _median_lengthscale(X: np.ndarray, rng: np.random.Generator, size: int = 1000) -> float:
    """Median pairwise distance of (up to ``size``) training inputs: the usual RBF starting value."""
    rows = X if len(X) <= size else X[rng.choice(len(X), size, replace=False)]
    d = np.sqrt(_sq_dist(rows, rows))[np.triu_indices(len(rows), 1)]
    d = d[d > 0]
    return float(np.median(d)) if d.size else 1.0


@dataclass(frozen=True, eq=False)
class _Stationary(Kernel, ABC):
    lengthscale: float | np.ndarray | None = None
    variance: float = 1.0
    learn: bool | tuple[str, ...] = True
    names: tuple[str, ...] = field(default=("lengthscale", "variance"), init=False, repr=False)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if self.lengthscale is not None:
            ls = _positive("lengthscale", self.lengthscale, owner)
            object.__setattr__(self, "lengthscale", float(ls[0]) if np.ndim(self.lengthscale) == 0 else ls)
        object.__setattr__(self, "variance", float(_positive("variance", self.variance, owner)[0]))
        _learned(self.learn, self.names, owner)

    def resolved(self, X: np.ndarray, rng: np.random.Generator) -> Kernel:
        if self.lengthscale is None:
            return replace(self, lengthscale=_median_lengthscale(X, rng))
        ls = np.atleast_1d(self.lengthscale)
        if ls.size not in (1, X.shape[1]):
            raise BayesvmError(
                f"{type(self).__name__}: {ls.size} lengthscales for {X.shape[1]} input columns (give 1 or one per column)"
            )
        return self

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        return X / np.atleast_1d(self.lengthscale)[None, :]

    def diag(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.variance)

    def diag_vjp(self, X: np.ndarray, g: np.ndarray) -> np.ndarray:
        out = []
        for name in self.learned:
            size = np.atleast_1d(getattr(self, name)).size
            out.append(np.zeros(size) if name == "lengthscale" else np.array([self.variance * g.sum()]))
        return np.concatenate(out) if out else np.zeros(0)

    @abstractmethod
    def _radial(self, X1: np.ndarray, X2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(K, H)`` with ``dK_ij / d log ell_d = H_ij (x1_id - x2_jd)^2 / ell_d^2`` (each stationary kernel)."""

    def matrix(self, X1: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        return self._radial(X1, X1 if X2 is None else X2)[0]

    def vjp(self, X1: np.ndarray, X2: np.ndarray, G: np.ndarray) -> np.ndarray:
        K, H = self._radial(X1, X2)
        out = []
        for name in self.learned:
            if name == "variance":
                out.append(np.array([np.sum(G * K)]))
                continue
            A = G * H  # sum_ij A_ij (x1_id - x2_jd)^2 / ell_d^2, per dimension d, by BLAS
            S1, S2 = self._scaled(X1), self._scaled(X2)
            per_dim = (
                (A.sum(axis=1) @ (S1 * S1)) + (A.sum(axis=0) @ (S2 * S2)) - 2.0 * np.einsum("id,id->d", S1, A @ S2)
            )
            out.append(per_dim if np.ndim(self.lengthscale) else np.array([per_dim.sum()]))
        return np.concatenate(out) if out else np.zeros(0)

    def vjp_x2(self, X1: np.ndarray, X2: np.ndarray, G: np.ndarray) -> np.ndarray:
        """``d k / d x2_j = H_ij (x1_i - x2_j) / ell^2``, contracted with ``G`` over ``i``."""
        _, H = self._radial(X1, X2)
        A = G * H
        ell2 = np.atleast_1d(self.lengthscale)[None, :] ** 2
        return (A.T @ X1 - A.sum(axis=0)[:, None] * X2) / ell2


@dataclass(frozen=True, eq=False)
class RBF(_Stationary):
    """Squared-exponential kernel ``variance * exp(-|x - x'|^2 / (2 lengthscale^2))``.

    ``lengthscale`` may be one value or one per input column (ARD); ``None`` starts from the
    median pairwise distance of the (standardised) training inputs.
    """

    def _radial(self, X1, X2):
        S1, S2 = self._scaled(X1), self._scaled(X2)
        K = self.variance * np.exp(-0.5 * _sq_dist(S1, S2))
        return K, K


@dataclass(frozen=True, eq=False)
class Matern52(_Stationary):
    """Matern 5/2 kernel ``variance (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)``, ``r = |x - x'| / lengthscale``."""

    def _radial(self, X1, X2):
        r = np.sqrt(_sq_dist(self._scaled(X1), self._scaled(X2)))
        e = np.exp(-np.sqrt(5.0) * r)
        K = self.variance * (1.0 + np.sqrt(5.0) * r + 5.0 * r * r / 3.0) * e
        # dk/dr = -variance (5/3) r (1 + sqrt5 r) e; dr/dlog ell_d = -((x_d - x'_d)/ell_d)^2 / r
        H = self.variance * (5.0 / 3.0) * (1.0 + np.sqrt(5.0) * r) * e
        return K, H


@dataclass(frozen=True, eq=False)
class Linear(Kernel):
    """Linear kernel ``variance * x'x``: the Bayesian linear SVM without intercept, in kernel form."""

    variance: float = 1.0
    learn: bool | tuple[str, ...] = True
    names: tuple[str, ...] = field(default=("variance",), init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "variance", float(_positive("variance", self.variance, "Linear")[0]))
        _learned(self.learn, self.names, "Linear")

    def matrix(self, X1, X2=None):
        return self.variance * X1 @ (X1 if X2 is None else X2).T

    def diag(self, X):
        return self.variance * (X * X).sum(axis=1)

    def vjp(self, X1, X2, G):
        return np.array([np.sum(G * self.matrix(X1, X2))]) if self.learned else np.zeros(0)

    def diag_vjp(self, X, g):
        return np.array([g @ self.diag(X)]) if self.learned else np.zeros(0)

    def vjp_x2(self, X1, X2, G):
        return self.variance * G.T @ X1

    def diag_vjp_x(self, X, g):
        return 2.0 * self.variance * g[:, None] * X


@dataclass(frozen=True, eq=False)
class Constant(Kernel):
    """Constant kernel ``variance``: adds a random offset (an intercept) to ``f`` when summed with another."""

    variance: float = 1.0
    learn: bool | tuple[str, ...] = True
    names: tuple[str, ...] = field(default=("variance",), init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "variance", float(_positive("variance", self.variance, "Constant")[0]))
        _learned(self.learn, self.names, "Constant")

    def matrix(self, X1, X2=None):
        return np.full((len(X1), len(X1 if X2 is None else X2)), self.variance)

    def diag(self, X):
        return np.full(len(X), self.variance)

    def vjp(self, X1, X2, G):
        return np.array([self.variance * G.sum()]) if self.learned else np.zeros(0)

    def diag_vjp(self, X, g):
        return np.array([self.variance * g.sum()]) if self.learned else np.zeros(0)

    def vjp_x2(self, X1, X2, G):
        return np.zeros_like(X2, dtype=float)


@dataclass(frozen=True, eq=False)
class Sum(Kernel):
    """Weighted sum ``k = sum_j gamma_j k_j`` (Wenzel et al. 2017, A.3, multiple-kernel form).

    ``learn_weights=True`` learns ``log gamma_j`` with the components' own learned hyperparameters.
    """

    kernels: tuple[Kernel, ...] = ()
    weights: tuple[float, ...] | None = None
    learn_weights: bool = False

    def __post_init__(self) -> None:
        kernels = tuple(self.kernels)
        if not kernels or not all(isinstance(k, Kernel) for k in kernels):
            raise BayesvmError("Sum needs one or more kernels")
        weights = (1.0,) * len(kernels) if self.weights is None else tuple(float(w) for w in self.weights)
        if len(weights) != len(kernels):
            raise BayesvmError(f"Sum: {len(weights)} weights for {len(kernels)} kernels")
        _positive("weights", weights, "Sum")
        object.__setattr__(self, "kernels", kernels)
        object.__setattr__(self, "weights", weights)

    @property
    def learned(self) -> tuple[str, ...]:  # bookkeeping is per component
        return ()

    def parameter_labels(self) -> list[str]:
        labels = [f"weight[{j}]" for j in range(len(self.kernels))] if self.learn_weights else []
        for j, k in enumerate(self.kernels):
            labels += [f"{type(k).__name__.lower()}[{j}].{name}" for name in k.parameter_labels()]
        return labels

    def log_params(self) -> np.ndarray:
        parts = [np.log(self.weights)] if self.learn_weights else []
        return np.concatenate(parts + [k.log_params() for k in self.kernels])

    def with_log_params(self, theta: np.ndarray) -> Sum:
        theta = np.asarray(theta, dtype=float)
        start, weights = 0, self.weights
        if self.learn_weights:
            weights, start = tuple(np.exp(theta[: len(self.kernels)])), len(self.kernels)
        kernels = []
        for k in self.kernels:
            size = k.log_params().size
            kernels.append(k.with_log_params(theta[start : start + size]))
            start += size
        return replace(self, kernels=tuple(kernels), weights=weights)

    def resolved(self, X, rng):
        return replace(self, kernels=tuple(k.resolved(X, rng) for k in self.kernels))

    def fixed(self) -> Sum:
        return replace(self, kernels=tuple(k.fixed() for k in self.kernels), learn_weights=False)

    def matrix(self, X1, X2=None):
        return sum(w * k.matrix(X1, X2) for w, k in zip(self.weights, self.kernels))

    def diag(self, X):
        return sum(w * k.diag(X) for w, k in zip(self.weights, self.kernels))

    def _gather(self, whole, part) -> np.ndarray:
        out = [np.array([whole(k) for k in self.kernels])] if self.learn_weights else []
        out += [w * part(k) for w, k in zip(self.weights, self.kernels)]
        return np.concatenate(out)

    def vjp(self, X1, X2, G):
        return self._gather(lambda k: w_sum(G, k.matrix(X1, X2)), lambda k: k.vjp(X1, X2, G)) * self._weight_scale()

    def diag_vjp(self, X, g):
        return self._gather(lambda k: g @ k.diag(X), lambda k: k.diag_vjp(X, g)) * self._weight_scale()

    def _weight_scale(self) -> np.ndarray:
        """d/d log gamma_j of gamma_j (...) = gamma_j (...): scale the weight entries by gamma_j."""
        n = self.log_params().size
        scale = np.ones(n)
        if self.learn_weights:
            scale[: len(self.kernels)] = self.weights
        return scale

    def vjp_x2(self, X1, X2, G):
        return sum(w * k.vjp_x2(X1, X2, G) for w, k in zip(self.weights, self.kernels))

    def diag_vjp_x(self, X, g):
        return sum(w * k.diag_vjp_x(X, g) for w, k in zip(self.weights, self.kernels))


def w_sum(G: np.ndarray, K: np.ndarray) -> float:
    return float(np.sum(G * K))


#: Kernels by the names scikit-learn users write (``SVC(kernel="rbf")``): ``kernel="rbf"`` is ``RBF()``, its
#: hyperparameters learned from the data.
NAMED = {"rbf": RBF, "matern52": Matern52, "linear": Linear}


def kernel_from(value: object, **options) -> Kernel:
    """``value`` as a kernel: a :class:`Kernel` as it is, a name of :data:`NAMED` (any case) as that kernel made with
    ``options``; anything else is refused, naming what is accepted."""
    if isinstance(value, Kernel):
        return value
    if isinstance(value, str) and value.strip().lower() in NAMED:
        return NAMED[value.strip().lower()](**options)
    names = ", ".join(repr(name) for name in NAMED)
    raise BayesvmError(
        f"kernel must be one of {names} or a bayesvm.kernels kernel (RBF(), Matern52(), ...), got {value!r}"
    )
