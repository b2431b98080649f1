"""Nonlinear (kernel) Bayesian SVM by variational Bayes: Wenzel et al. (2017), sections 4.1-4.4.

Model: ``f ~ GP(0, k)``, pseudo-likelihood ``exp(-2 max(0, 1 - y_i f(x_i)))`` written with the
Polson-Scott augmentation ``a_i`` (``engines/augmentation.py``); ``q(a_i) = GIG(1/2, 1, chi_i)``.

Batch VB (section 4.1), ``q(f) = N(mu, zeta)`` over the ``n`` training values.  Given ``w_i =
E[1/a_i] = chi_i^(-1/2)`` the optimal factor is ``zeta = (K^-1 + W)^-1`` and ``mu = zeta y(1 + w)``
(their 4.1 with ``Y`` applied, as the derivation from (5) requires); both are computed without
``K^-1`` through ``B = I + W^1/2 K W^1/2`` (Rasmussen & Williams 2006, section 3.4.3):
``mu = K alpha``, ``alpha = b - W^1/2 B^-1 W^1/2 K b``, ``b = y(1 + w)``, and
``diag(zeta) = diag(K) - colsum(V^2)``, ``V = L_B^-1 W^1/2 K``.  The lower bound is
``sum_i data_i - KL(q(f) || N(0, K))`` with the per-observation data term of
:func:`~bayesvm.engines.augmentation.data_lower_bound` and, in the same quantities,
``KL = (tr(B^-1) + mu' alpha - n + log|B|) / 2``.

Inducing points (section 4.2), written whitened: ``u = L_m v`` with ``K_mm = L_m L_m'`` and
``v ~ N(0, I)``, ``q(v) = N(m, S)``.  Then ``kappa_i u = a_i' v`` with ``A = L_m^-1 K_mn`` and
``K~_ii = k_ii - |a_i|^2``, and Wenzel's bound (7)-(8) reads

    L = sum_i [ y_i a_i'm - 1 - sqrt(chi_i) + (chi_i - e_i) / (2 sqrt(chi_i)) ] - KL(N(m, S) || N(0, I)),
    e_i = (1 - y_i a_i'm)^2 + a_i'S a_i + K~_ii.

(Their (8) writes ``B_{1/4}`` and a ``log(alpha_i)/2`` where the Bessel order is ``1/2`` and the
log term ``1/4``; with ``K_{1/2}`` in closed form the data term above is exact.)  The natural-gradient
step (their (9)-(10)) in whitened coordinates is ``Lambda <- (1 - rho) Lambda + rho (I + A W A')``,
``eta <- (1 - rho) eta + rho A y(1 + w)`` with ``Lambda = S^-1``, ``eta = S^-1 m``; ``rho = 1`` is
the exact coordinate-ascent update, used by the full-batch engine.  Whitening changes nothing in
the model; it keeps ``Lambda`` well conditioned where ``K_mm^-1 + kappa' W kappa`` is not.

Hyperparameters (section 4.3, A.3): ``L`` is maximised over the log hyperparameters (and
optionally the inducing locations) with ``q`` and ``chi`` held fixed, alternating with the
variational updates: variational EM, so every step raises ``L``.  With ``q(v)`` fixed, the
gradient is (derived here; checked against finite differences in the tests)

    dL/dA = m c' - (S + m m' - I) A W,   c = y(1 + w),      dL/dk_ii = -w_i / 2,
    dL/dK_mn = L_m^-T dL/dA,    dL/dK_mm = -sym(L_m^-T Phi(dL/dA A') L_m^-1),

``Phi`` = lower triangle with the diagonal halved (the derivative of the Cholesky factor); the
kernel contracts these with its own derivatives (``Kernel.vjp``).  For batch VB ``q(f)`` is held
fixed and ``dL/dK = (K^-1 S K^-1 - K^-1) / 2`` with ``S = zeta + mu mu'``.

Class weights ``omega_i`` (:mod:`bayesvm.model.class_weights`) multiply each row's data term, its ``w_i`` and its
``y_i (1 + w_i)`` (:func:`~bayesvm.engines.augmentation.row_terms`) in every formula above, the gradients included
(each is a sum of the rows' terms).

Prediction (section 4.4): ``f* ~ N(a*'m, k** - |a*|^2 + a*'S a*)`` with ``a* = L_m^-1 k(Z, x*)``
(for batch VB, ``Z = X`` and ``m = L^-1 mu``, ``S = L^-1 zeta L^-T``: the exact GP predictive).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from scipy import linalg, optimize

from ...errors import BayesvmError
from ...kernels import Kernel
from ...linalg.dense import runs_with_blas_threads
from ...model.output import EngineOutput
from ...model.problems import KernelProblem
from ..augmentation import data_lower_bound, row_terms, update_chi
from ..squarem import squarem_ascent

#: Rows per block when a kernel matrix against many rows is formed (prediction, full-batch sums).
ROW_CHUNK = 8192
#: Inner tolerance of the coordinate ascent while the hyperparameters are searched (the final run at the
#: optimum uses ``tol``): on Raetsch's image set (ARD RBF, 100 inducing points) 1e-6 takes a quarter of the
#: sweeps of 1e-8 and reaches the same test error and a bound as high.
SEARCH_TOL = 1e-6
#: Relative jitter added to the diagonal of K_mm (and K for batch VB): jitter * mean(k(x, x)).
JITTER = 1e-6


@dataclass(eq=False)
class KernelVBResult(EngineOutput):
    """Outputs of the kernel engines; ``q(v) = N(mean, cov)`` at the inducing ``locations``."""

    kernel: Kernel
    locations: np.ndarray
    jitter: float
    mean: np.ndarray
    cov: np.ndarray
    chi: np.ndarray | None
    lower_bound: np.ndarray
    converged: bool
    n_iter: int
    elapsed: float
    engine: str  # "batch" | "inducing" | "svi"; "gibbs" | "em" | "accurate" on the whitened features
    decreases: list[int] = field(default_factory=list)
    hyper_trace: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    hyper_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stopping: str = ""
    batch_size: int | None = None
    monitor_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: Gibbs / EM / accurate fits (``engine``) on the whitened features: the VB engine whose ML-II hyperparameters
    #: and locations they keep fixed, and (Gibbs) R-hat and ESS of the decision values at some training rows
    hyperparameters_from: str = ""
    chain_diagnostics: object = None
    batch_locations: bool = False  # the locations are the training inputs (inducing="all")
    #: Gibbs: the draws of ``v`` (chains, draws, M) and the log pseudo-posterior of each (chains, draws)
    weight_draws: np.ndarray | None = None
    log_posterior: np.ndarray | None = None
    #: Cholesky factor of the kernel matrix of the locations (with jitter), computed from the fields above
    _chol: np.ndarray = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        self._chol = jittered_cholesky(self.kernel.matrix(self.locations) + self.jitter * np.eye(len(self.locations)))

    @property
    def posterior_form(self) -> str:
        """Gibbs: draws; EM: a mode; the VB engines and EP: a Gaussian ``q(v)``."""
        return {"gibbs": "sampled", "em": "mode"}.get(self.engine, "variational")

    def features(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(B, r)`` with ``f(x) = B v + e``, ``e ~ N(0, r)`` independent of ``v``, for the rows of ``X``:
        ``B = (L^{-1} K_mx)'`` and ``r = k(x, x) - ||L^{-1} k_m(x)||^2``, the prior variance the inducing points
        leave unexplained (Wenzel et al., section 4.4; 0 at the training rows of a batch fit)."""
        A = linalg.solve_triangular(self._chol, self.kernel.matrix(self.locations, X), lower=True)
        return A.T, np.maximum(self.kernel.diag(X) - np.sum(A * A, axis=0), 0.0)

    def predictor(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``q(f(x))`` for the rows of ``X`` (Wenzel et al., section 4.4)."""
        mean = np.empty(len(X))
        var = np.empty(len(X))
        for start in range(0, len(X), ROW_CHUNK):
            B, residual = self.features(X[start : start + ROW_CHUNK])
            mean[start : start + len(B)] = B @ self.mean
            var[start : start + len(B)] = residual + np.sum(B * (B @ self.cov), axis=1)
        return mean, np.maximum(var, 0.0)

    @property
    def hyperparameters(self) -> dict[str, float]:
        return dict(zip(self.kernel.parameter_labels(), np.exp(self.kernel.log_params())))


def jittered_cholesky(M: np.ndarray) -> np.ndarray:
    try:
        return linalg.cholesky(M, lower=True)
    except linalg.LinAlgError:
        raise BayesvmError(
            "the kernel matrix is not numerically positive definite: the lengthscale is too long or inducing "
            "points coincide; standardise the inputs, shorten the lengthscale or use fewer inducing points"
        ) from None


def absolute_jitter(kernel: Kernel, X: np.ndarray) -> float:
    return JITTER * float(np.mean(kernel.diag(X[: min(len(X), 1000)])))


def gaussian_kl_whitened(m: np.ndarray, S_chol: np.ndarray) -> float:
    """``KL(N(m, S) || N(0, I))`` from the Cholesky factor of ``S``."""
    return 0.5 * (np.sum(S_chol**2) + m @ m - m.size - 2.0 * np.sum(np.log(np.diag(S_chol))))


# ------------------------------------------------------------------------------------------
# inducing points, whitened
# ------------------------------------------------------------------------------------------
@dataclass
class Whitened:
    """``q(v) = N(m, S)`` through its natural parameters ``Lambda = S^-1``, ``eta = S^-1 m``."""

    precision: np.ndarray
    eta: np.ndarray

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        chol = linalg.cholesky(self.precision, lower=True)
        self.mean = linalg.cho_solve((chol, True), self.eta)
        self.cov = linalg.cho_solve((chol, True), np.eye(self.eta.size))
        self.cov_chol = linalg.cholesky(self.cov, lower=True)

    @classmethod
    def prior(cls, M: int) -> Whitened:
        return cls(np.eye(M), np.zeros(M))


def projection(kernel: Kernel, Z: np.ndarray, X: np.ndarray, jitter: float) -> tuple[np.ndarray, np.ndarray]:
    """``(L_m, A = L_m^-1 K_mn)``."""
    Lm = jittered_cholesky(kernel.matrix(Z) + jitter * np.eye(len(Z)))
    return Lm, linalg.solve_triangular(Lm, kernel.matrix(Z, X), lower=True)


def margin_moments(y, A, kdiag, q: Whitened) -> tuple[np.ndarray, np.ndarray]:
    """``(E f_i, e_i = E(1 - y_i f_i)^2)`` under ``q(v)`` and ``p(f | v)``."""
    mean_f = A.T @ q.mean
    var_f = np.sum(A * (q.cov @ A), axis=0) + kdiag - np.sum(A * A, axis=0)
    return mean_f, (1.0 - y * mean_f) ** 2 + np.maximum(var_f, 0.0)


def natural_target(y, A, chi, scale: float = 1.0, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """``(I + s A W A', s A y(1 + w))``: eqs. (9)-(10) at ``rho = 1``, whitened; ``s = n / batch`` (``weights``: the
    rows' class weights)."""
    w, c = row_terms(y, 1.0 / np.sqrt(chi), weights)
    return np.eye(A.shape[0]) + scale * (A * w) @ A.T, scale * A @ c


def hyper_objective(
    kernel, Z, X, y, jitter, q: Whitened | None, chi, scale=1.0, locations=False, projected=None, fixed="v",
    weights=None,
):  # fmt: skip
    """``L`` and its gradient in the log hyperparameters (and ``Z``) with ``q`` and ``chi`` fixed.

    ``q=None`` evaluates the bound collapsed over ``q``: ``q = q*(h, chi)`` (the rho = 1 update), for which
    the gradient with ``q`` fixed is the gradient of the collapsed bound (``q*`` is a stationary point).
    ``scale = n / batch`` scales the data sums of a minibatch.

    ``fixed="v"`` holds the whitened ``q(v)`` fixed (then the KL term does not depend on ``h``);
    ``fixed="u"`` holds ``q(u) = N(L_m m, L_m S L_m')`` fixed, Wenzel et al.'s A.3 (the function values
    at the inducing points stay put while ``h`` moves).  Both give the same ``dL/dK_mn``; for ``K_mm`` the
    second is (derived from their A.3 in whitened quantities, ``S~ = S + m m' - I``)
    ``L_m^-T [s (S~ A W A' + A W A' / 2 - A c m') + S~ / 2] L_m^-1``, symmetrised.  ``weights``: the rows' class
    weights (module docstring).
    """
    Lm, A = projection(kernel, Z, X, jitter) if projected is None else projected
    if q is None:
        q = Whitened(*natural_target(y, A, chi, scale, weights))
    kdiag = kernel.diag(X)
    mean_f, e = margin_moments(y, A, kdiag, q)
    value = scale * data_lower_bound(y, mean_f, e, chi, weights) - gaussian_kl_whitened(q.mean, q.cov_chol)
    w, c = row_terms(y, 1.0 / np.sqrt(chi), weights)
    S_tilde = q.cov + np.outer(q.mean, q.mean) - np.eye(q.mean.size)
    A_bar = scale * (np.outer(q.mean, c) - (S_tilde @ A) * w)  # dL/dA, (M, n)
    P = linalg.solve_triangular(Lm, A_bar, lower=True, trans="T")  # L_m^-T dL/dA
    if fixed == "u":
        AW = A * w
        inner = scale * (S_tilde @ AW @ A.T + 0.5 * AW @ A.T - np.outer(A @ c, q.mean)) + 0.5 * S_tilde
    else:
        inner = -np.tril(A_bar @ A.T)
        inner[np.diag_indices_from(inner)] *= 0.5
    Gm = linalg.solve_triangular(Lm, linalg.solve_triangular(Lm, inner, lower=True, trans="T").T, lower=True, trans="T")
    Gm = 0.5 * (Gm + Gm.T)  # dL/dK_mm: L_m^-T (inner) L_m^-1, symmetrised
    g_diag = -0.5 * scale * w
    grad = kernel.vjp(X, Z, P.T) + kernel.vjp(Z, Z, Gm) + kernel.diag_vjp(X, g_diag)
    if not locations:
        return value, grad
    grad_z = kernel.vjp_x2(X, Z, P.T) + kernel.vjp_x2(Z, Z, 2.0 * Gm)
    return value, np.concatenate([grad, grad_z.ravel()])


def _pack(kernel: Kernel, Z: np.ndarray, locations: bool) -> np.ndarray:
    return np.concatenate([kernel.log_params(), Z.ravel()]) if locations else kernel.log_params()


def _unpack(kernel: Kernel, Z: np.ndarray, x: np.ndarray, locations: bool) -> tuple[Kernel, np.ndarray]:
    k = kernel.log_params().size
    new_kernel = kernel.with_log_params(x[:k]) if k else kernel
    return new_kernel, (x[k:].reshape(Z.shape) if locations else Z)


@dataclass
class _Ascent:
    """Bounds of one coordinate-ascent run at fixed hyperparameters."""

    bounds: list[float]
    decreases: list[int]
    converged: bool


def _ascend(step, chi: np.ndarray, tol: float, max_iter: int) -> tuple[object, np.ndarray, _Ascent]:
    """Alternate ``q <- q*(chi)`` and ``chi <- E(1 - y f)^2`` in SQUAREM cycles (``engines/squarem.py``,
    extrapolating ``log chi``); ``step(chi) -> (q, bound, e)``.

    Returns the last kept ``q``, the ``chi`` it was computed from (the bound's ``chi``) and the bounds
    of the kept sweeps (non-decreasing).
    """

    def sweep(state):
        q, bound, e = step(state[0])
        return SimpleNamespace(state=(update_chi(e),), bound=bound, q=q, chi=state[0])

    out = squarem_ascent(
        sweep, lambda state: np.log(state[0]), lambda x, like: (update_chi(np.exp(x)),), (chi,), tol, max_iter
    )
    return out.last.q, out.last.chi, _Ascent(out.bounds, out.decreases, out.converged)


class _Collapsed:
    """The bound maximised over ``q`` and ``chi`` at given hyperparameters, with its gradient.

    Each evaluation runs the coordinate ascent to ``tol`` from the last evaluation's ``chi`` (warm start).
    At the joint optimum of ``q`` and ``chi`` the gradient with both held fixed is the gradient of this
    collapsed bound (envelope theorem), which is what ``gradient(x, q, chi)`` returns.
    """

    def __init__(self, run, gradient, chi: np.ndarray, tol: float, max_iter: int):
        self.run, self.gradient, self.chi, self.tol, self.max_iter = run, gradient, chi, tol, max_iter
        self.evaluations = 0

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        self.evaluations += 1
        q, chi, ascent = _ascend(self.run(x), self.chi, self.tol, self.max_iter)
        self.chi = chi
        return ascent.bounds[-1], self.gradient(x, q, chi)


#: A hyperparameter search whose line search failed still found the optimum where the bound's gradient is below this
#: share of the bound: the inner ascent stops at a relative tolerance of SEARCH_TOL, so the collapsed bound is only
#: that smooth, and L-BFGS-B's line search fails on that noise at the optimum ("ABNORMAL")
FLAT_GRADIENT = 1e-4


def _flat(res) -> bool:
    """L-BFGS-B stopped where the bound is flat to within the noise of the inner ascent (:data:`FLAT_GRADIENT`)."""
    return bool(np.isfinite(res.fun) and np.max(np.abs(res.jac), initial=0.0) <= FLAT_GRADIENT * max(1.0, abs(res.fun)))


def _learn(collapsed: _Collapsed, x0: np.ndarray, max_steps: int, labels: list[str], radius: float = 8.0):
    """L-BFGS-B on the collapsed bound (Wenzel et al. section 4.3, empirical Bayes / ML-II), each log
    hyperparameter within ``radius`` of its start.

    Returns the best point, the bound after every accepted step (a non-decreasing sequence), the trace of the
    points, and ``""`` or why the search cannot be trusted: a hyperparameter (``labels``: the first
    ``len(labels)`` entries of ``x``) that ended at the edge of its range, where the bound still rose (on classes the
    kernel separates, the amplitude grows without limit: ML-II has no maximum), or an optimiser that stopped
    without converging.
    """
    accepted: list[float] = []
    cache: dict[bytes, float] = {}

    def negative(x):
        try:
            value, grad = collapsed(x)
        except (BayesvmError, linalg.LinAlgError):
            return np.inf, np.zeros_like(x)
        if not np.isfinite(value):
            return np.inf, np.zeros_like(x)
        cache[x.tobytes()] = value
        return -value, -grad

    start = negative(x0)[0]
    accepted.append(-start)
    trace = [x0.copy()]

    def record(x):
        accepted.append(cache.get(x.tobytes(), np.nan))
        trace.append(x.copy())

    bounds = [(v - radius, v + radius) for v in x0]
    res = optimize.minimize(
        negative, x0, jac=True, method="L-BFGS-B", bounds=bounds, callback=record, options={"maxiter": max_steps}
    )
    best = res.x if np.isfinite(res.fun) and res.fun <= start else x0
    k = len(labels)
    edge = np.abs(np.abs(best[:k] - x0[:k]) - radius) < 1e-6
    if edge.any():
        names = ", ".join(f"{label} = {np.exp(v):.3g}" for label, v in zip(np.asarray(labels)[edge], best[:k][edge]))
        problem = (
            f"the kernel hyperparameter(s) {names} ended at the edge of the search range (e^{radius:g} times or "
            f"e^-{radius:g} times the start) with the lower bound still rising: ML-II has no maximum, as when the "
            "kernel separates the classes; fix the hyperparameter (e.g. RBF(variance=1.0, learn=('lengthscale',))) or "
            "compare method='gibbs'"
        )
    elif not res.success and not _flat(res):
        problem = f"the hyperparameter search (L-BFGS-B) stopped without converging: {res.message}"
    else:
        problem = ""
    return best, np.array(accepted), np.array(trace), problem


@runs_with_blas_threads(lambda problem, locations, **_: len(locations))
def fit_inducing(
    problem: KernelProblem,
    locations: np.ndarray,
    *,
    tol: float = 1e-8,
    max_iter: int = 1000,
    learn: bool = True,
    learn_locations: bool = False,
    max_hyper_steps: int = 100,
    jitter: float | None = None,
) -> KernelVBResult:
    """Full-batch inducing-point VB (Wenzel et al. 2017, section 4.2 with ``rho = 1``; 4.3 for learning).

    At fixed hyperparameters the engine alternates ``chi <- E(1 - y f)^2`` (step 7 of their Alg. 1) and
    ``q(v)`` by the natural-gradient step with ``rho = 1`` (steps 9-14, exact coordinate ascent) until the
    bound rises by less than ``tol`` relative.  When anything is learned, L-BFGS-B maximises that converged
    bound over the log hyperparameters (and the locations) first, using the gradient of the module
    docstring, and the ascent is then rerun at the optimum; ``lower_bound`` is that final run.
    """
    t0 = time.perf_counter()
    X, y, kernel, weights = problem.X, problem.y, problem.kernel, problem.weights
    Z0 = np.array(locations, dtype=float)
    jitter = absolute_jitter(kernel, X) if jitter is None else jitter
    learning = learn and (kernel.log_params().size > 0 or learn_locations)

    last: dict = {}  # the projection of the latest run(x), reused by gradient(x, ...)

    def run(x):
        kern, Z = _unpack(kernel, Z0, x, learn_locations)
        Lm, A = projection(kern, Z, X, jitter)
        kdiag = kern.diag(X)
        last.update(x=x.copy(), projected=(Lm, A))

        def step(chi):
            q = Whitened(*natural_target(y, A, chi, weights=weights))
            mean_f, e = margin_moments(y, A, kdiag, q)
            return q, data_lower_bound(y, mean_f, e, chi, weights) - gaussian_kl_whitened(q.mean, q.cov_chol), e

        return step

    def gradient(x, q, chi):
        kern, Z = _unpack(kernel, Z0, x, learn_locations)
        projected = last["projected"] if np.array_equal(last.get("x"), x) else None
        return hyper_objective(
            kern, Z, X, y, jitter, q, chi, locations=learn_locations, projected=projected, weights=weights
        )[1]

    Lm, A = projection(kernel, Z0, X, jitter)
    chi0 = update_chi(margin_moments(y, A, kernel.diag(X), Whitened.prior(len(Z0)))[1])
    x = _pack(kernel, Z0, learn_locations)
    hyper_bounds, trace, hyper_problem = np.zeros(0), x[None, :], ""
    if learning:
        collapsed = _Collapsed(run, gradient, chi0, max(tol, SEARCH_TOL), max_iter)
        x, hyper_bounds, trace, hyper_problem = _learn(collapsed, x, max_hyper_steps, kernel.parameter_labels())
        chi0 = collapsed.chi
    kernel, Z = _unpack(kernel, Z0, x, learn_locations)
    q, chi, ascent = _ascend(run(x), chi0, tol, max_iter)
    return KernelVBResult(
        kernel=kernel, locations=Z, jitter=jitter, mean=q.mean, cov=q.cov, chi=chi,
        lower_bound=np.array(ascent.bounds), converged=ascent.converged and not hyper_problem, n_iter=len(ascent.bounds),
        elapsed=time.perf_counter() - t0, engine="inducing", decreases=ascent.decreases,
        stopping=hyper_problem,
        hyper_trace=trace[:, : kernel.log_params().size], hyper_bounds=hyper_bounds,
    )  # fmt: skip


@dataclass
class _BatchQ:
    """``q(f)`` from the site precisions ``w`` under prior covariance ``K`` (see module docstring)."""

    mu: np.ndarray
    var: np.ndarray
    alpha: np.ndarray
    sw: np.ndarray
    LB: np.ndarray
    LB_inv: np.ndarray
    kl: float


def _batch_q(K: np.ndarray, y: np.ndarray, chi: np.ndarray, weights=None) -> _BatchQ:
    """Section 4.1's update ``zeta = (K^-1 + W)^-1``, ``mu = zeta y(1 + w)`` through ``B = I + W^1/2 K W^1/2``
    (``weights``: the rows' class weights)."""
    n = y.size
    w, b = row_terms(y, 1.0 / np.sqrt(chi), weights)
    sw = np.sqrt(w)
    LB = linalg.cholesky(np.eye(n) + sw[:, None] * K * sw[None, :], lower=True)
    alpha = b - sw * linalg.cho_solve((LB, True), sw * (K @ b))
    mu = K @ alpha
    V = linalg.solve_triangular(LB, sw[:, None] * K, lower=True)
    var = np.diag(K) - np.sum(V * V, axis=0)
    LB_inv = linalg.solve_triangular(LB, np.eye(n), lower=True)
    kl = 0.5 * (np.sum(LB_inv**2) + mu @ alpha - n + 2.0 * np.sum(np.log(np.diag(LB))))
    return _BatchQ(mu=mu, var=np.maximum(var, 0.0), alpha=alpha, sw=sw, LB=LB, LB_inv=LB_inv, kl=kl)


def _batch_bound(y: np.ndarray, q: _BatchQ, chi: np.ndarray, weights=None) -> float:
    e = (1.0 - y * q.mu) ** 2 + q.var
    return data_lower_bound(y, q.mu, e, chi, weights) - q.kl


def _batch_collapsed(kernel: Kernel, X: np.ndarray, y: np.ndarray, jitter: float, chi: np.ndarray, weights=None):
    """The bound at ``q*(h, chi)`` and its gradient in the log hyperparameters.

    With ``q`` fixed the bound depends on ``h`` only through ``-KL(q || N(0, K_h))``, whose gradient is
    ``<dK, (K^-1 S K^-1 - K^-1) / 2>``, ``S = zeta + mu mu'``; at ``q*`` that matrix is
    ``alpha alpha' - W^1/2 B^-1 W^1/2`` (no ``K^-1`` needed), and because ``q*`` is a stationary point
    this is also the gradient of the collapsed bound.
    """
    q = _batch_q(kernel.matrix(X) + jitter * np.eye(len(X)), y, chi, weights)
    return _batch_bound(y, q, chi, weights), _batch_gradient(kernel, X, q)


def _batch_gradient(kernel: Kernel, X: np.ndarray, q: _BatchQ) -> np.ndarray:
    """``<dK, (alpha alpha' - W^1/2 B^-1 W^1/2) / 2>`` in the log hyperparameters (see :func:`_batch_collapsed`)."""
    B_inv = q.LB_inv.T @ q.LB_inv
    G = 0.5 * (np.outer(q.alpha, q.alpha) - q.sw[:, None] * B_inv * q.sw[None, :])
    return kernel.vjp(X, X, G)


@runs_with_blas_threads(lambda problem, **_: problem.n)
def fit_batch(
    problem: KernelProblem,
    *,
    tol: float = 1e-8,
    max_iter: int = 1000,
    learn: bool = True,
    max_hyper_steps: int = 100,
    jitter: float | None = None,
) -> KernelVBResult:
    """Batch VB with the full ``n x n`` kernel (Wenzel et al. 2017, section 4.1), O(n^3) per iteration.

    At fixed hyperparameters: alternate ``q(f)`` given ``chi`` (section 4.1's zeta and mu) and
    ``chi <- E(1 - y f)^2`` until the bound rises by less than ``tol`` relative.  Learned hyperparameters
    maximise that converged bound first (L-BFGS-B, gradient in :func:`_batch_collapsed`).
    """
    t0 = time.perf_counter()
    X, y, kernel, weights = problem.X, problem.y, problem.kernel, problem.weights
    n = y.size
    jitter = absolute_jitter(kernel, X) if jitter is None else jitter
    learning = learn and kernel.log_params().size > 0

    def run(x):
        K = kernel.with_log_params(x).matrix(X) + jitter * np.eye(n)

        def step(chi):
            q = _batch_q(K, y, chi, weights)
            return q, _batch_bound(y, q, chi, weights), (1.0 - y * q.mu) ** 2 + q.var

        return step

    def gradient(x, q, chi):
        return _batch_gradient(kernel.with_log_params(x), X, q)

    chi0 = update_chi(1.0 + kernel.diag(X))  # E(1 - y f)^2 under the prior
    x = kernel.log_params()
    hyper_bounds, trace, hyper_problem = np.zeros(0), x[None, :], ""
    if learning:
        collapsed = _Collapsed(run, gradient, chi0, max(tol, SEARCH_TOL), max_iter)
        x, hyper_bounds, trace, hyper_problem = _learn(collapsed, x, max_hyper_steps, kernel.parameter_labels())
        chi0 = collapsed.chi
    kernel = kernel.with_log_params(x)
    q, chi, ascent = _ascend(run(x), chi0, tol, max_iter)
    # whitened form for prediction: m = L^-1 mu, S = L^-1 zeta L^-T with zeta = K - V'V
    K = kernel.matrix(X) + jitter * np.eye(n)
    L = jittered_cholesky(K)
    m = linalg.solve_triangular(L, q.mu, lower=True)
    V = linalg.solve_triangular(q.LB, q.sw[:, None] * K, lower=True)
    R = linalg.solve_triangular(L, V.T, lower=True)  # L^-1 V', so L^-1 zeta L^-T = I - R R'
    S = np.eye(n) - R @ R.T
    return KernelVBResult(
        kernel=kernel, locations=X.copy(), jitter=jitter, mean=m, cov=0.5 * (S + S.T), chi=chi,
        lower_bound=np.array(ascent.bounds), converged=ascent.converged and not hyper_problem, n_iter=len(ascent.bounds),
        elapsed=time.perf_counter() - t0, engine="batch", decreases=ascent.decreases,
        stopping=hyper_problem,
        hyper_trace=trace, hyper_bounds=hyper_bounds,
    )  # fmt: skip
