"""Importance-sampled ``log p(y | phi)`` at a node of the accurate fit, random intercepts integrated exactly.

EP's marginal likelihood ``log Z_EP(phi)`` (:mod:`bayesvm.engines.linear.ep`, step 2) weights the accurate fit's
nodes of the variance parameters ``phi``.  Its error is not constant in ``phi``: it grows with the random-effect
variance (toenail: the importance-sampled value sits 6.4 nats above EP's at the smallest variance of the lattice and
12.4 at the largest), so EP's weights put too little mass on large variances (toenail's patient variance 11.7,
long Gibbs 13.5).

For one random-intercept-like term (one blocked grouping factor carrying a single single-column term: ``(1 | g)``,
``(0 + x | g)``) the pseudo-likelihood integrates over the random effects in closed form, level by level
(:mod:`bayesvm.engines.hinge_levels`):

    I_j = int prod_i exp(-2 max(0, 1 - y_i eta_i - s_i u)) N(u; 0, sigma^2) du,   s_i = y_i v_i,

with ``eta`` the linear predictor of the other coefficients ``theta_d`` (fixed effects and any other terms).  What
is left, ``p(y | phi) = int prod_j I_j(theta_d) p(theta_d | phi) d theta_d``, is over the few coefficients
``theta_d``, and EP's own Gaussian marginal ``q_phi(theta_d)`` at the node is an excellent proposal for it:

    p(y | phi) ~= (1 / S) sum_s prod_j I_j(theta_s) p(theta_s | phi) / q_phi(theta_s),   theta_s ~ q_phi.

The estimate is unbiased for ``p(y | phi)``; its log is what the node's weight needs.  The draws are one fixed set
of standard normals (and their negatives) carried through each node's Cholesky factor, so the estimate is a smooth
function of ``phi`` (common random numbers: differences between nodes are far more precise than each value).
The effective sample size of the weights tells how far to trust it (:class:`NodeEvidence`).  The same integrals
give the marginal PSIS check (:mod:`bayesvm.results.marginal_check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.special import logsumexp

from ...linalg.row_threads import row_pool
from ...model.problems import VBProblem
from ..augmentation import weighted_predictor
from ..components import LOG_2PI, prior_precisions
from ..hinge_levels import LevelLayout, draws_log_integral_sums, pieces, size_classes
from . import compiled_rows
from .sampled_levels import INNER_DRAWS, forget_normals, sampled_log_integrals

#: Draws x groups x (largest group + 1) values processed at a time: about a dozen arrays of this
#: many doubles are alive at once (~400 MB at 4e6).
CHUNK_VALUES = 4e6
#: Draws x rows below which a class's compiled integrals run in the calling thread: a value costs about 80 ns (a few
#: intervals' ``erfc`` pairs per row), handing a half to a row thread some 50 microseconds, so from this many the
#: halves pay (each node's 32 importance draws over toenail's 1,852 rows are threaded).
THREADED_FROM_VALUES = 20_000


def integrable_component(problem: VBProblem) -> int | None:
    """Index of the component whose random effects integrate out in closed form, or None.

    Needs one blocked grouping factor carrying a single single-column term (``(1 | g)``,
    ``(0 + x | g)``), on the dense/Schur path.  Levels of any sizes: they are integrated in classes of similar size
    (:func:`group_log_integrals`).
    """
    if problem.blocked is None or problem.is_sparse or problem.blocked.values.shape[1] != 1:
        return None
    blocked = [c for c, comp in enumerate(problem.components) if comp.blocked]
    if len(blocked) != 1 or problem.components[blocked[0]].k != 1:
        return None
    return blocked[0]


@dataclass(frozen=True)
class LevelClasses:
    """The rows of one blocked factor split for :func:`group_log_integrals`, fixed by the codes and slopes: the rows
    with ``s_i = 0`` (``flat``, their hinge a constant factor) and the levels in classes of similar size
    (:func:`bayesvm.engines.hinge_levels.size_classes`), each its rows' indices and padded layout.  Formed once per
    problem: every node and every check integrates the same levels."""

    flat: np.ndarray
    classes: tuple[tuple[np.ndarray, LevelLayout], ...]


def level_classes(y: np.ndarray, v: np.ndarray, codes: np.ndarray, n_levels: int,
                  weights: np.ndarray | None = None) -> LevelClasses:  # fmt: skip
    """:class:`LevelClasses` of rows ``y``, slopes ``v`` (class weights ``omega`` scale them, as in
    :func:`group_log_integrals`)."""
    if weights is not None:
        v = weights * v
    flat = (y * v) == 0
    classes = []
    for levels, _ in size_classes(codes, n_levels):
        chosen = np.zeros(n_levels, dtype=bool)
        chosen[levels] = True
        rows = chosen[codes]
        local = (np.cumsum(chosen) - 1)[codes[rows]]  # each row's level, numbered within the class
        classes.append((np.flatnonzero(rows), LevelLayout(y[rows], v[rows], local, levels.size)))
    return LevelClasses(np.flatnonzero(flat), tuple(classes))


def group_log_integrals(y: np.ndarray, eta: np.ndarray, v: np.ndarray, codes: np.ndarray, sigma2: np.ndarray,
                        n_levels: int, weights: np.ndarray | None = None,
                        classes: LevelClasses | None = None) -> np.ndarray:  # fmt: skip
    """``sum_j log I_j`` for draws ``eta (S, n)``, ``sigma2 (S,)`` (see the module docstring).

    Rows with class weights ``omega`` (None: every row 1) have the hinge ``omega max(0, 1 - y eta - s u)``, the
    unweighted one of ``omega eta + (1 - omega) y`` and ``omega v`` (:mod:`bayesvm.model.class_weights`).

    The levels are taken in classes of similar size (``classes``, :func:`level_classes` of the same rows, formed here
    when None); within a class :mod:`bayesvm.engines.hinge_levels` computes each ``I_j``: compiled where numba is
    installed (level by level, without the padded ``(S, J, K + 1)`` arrays; a level's kinks sorted by insertion up to
    a few dozen rows, beyond that split at the integrand's mode and ordered only where the sum reaches), else by numpy
    in chunks of draws; the two agree to rounding (tested).  A level without rows contributes ``log 1``.
    """
    # (np.take gathers the class's columns in C order: a boolean mask over the second axis gives a transposed layout
    # that the compiled kernel would copy again)
    columns = lambda rows: np.take(eta, rows, axis=1)  # noqa: E731
    return _by_classes(y, columns, eta.shape[0], v, codes, sigma2, n_levels, weights, classes)


def draws_log_integrals(y: np.ndarray, D: np.ndarray, theta_d: np.ndarray, v: np.ndarray, codes: np.ndarray,
                        sigma2: np.ndarray, n_levels: int, weights: np.ndarray | None = None,
                        classes: LevelClasses | None = None) -> np.ndarray:  # fmt: skip
    """:func:`group_log_integrals` at ``eta = theta_d D'`` for draws ``theta_d (S, q)``, the predictor formed class by
    class (one product of ``theta_d`` and the class's rows of ``D`` each, in the order the compiled kernel reads):
    no ``(S, n)`` predictor and no gather of its columns."""
    columns = lambda rows: theta_d @ D[rows].T  # noqa: E731
    return _by_classes(y, columns, theta_d.shape[0], v, codes, sigma2, n_levels, weights, classes)


def _by_classes(y, columns, S, v, codes, sigma2, n_levels, weights, classes) -> np.ndarray:
    """``sum_j log I_j`` with the draws' predictor at the rows ``rows`` given by ``columns(rows)`` ``(S, len(rows))``:
    the rows with ``s_i = 0`` as a constant factor, then each class of levels."""
    if classes is None:
        classes = level_classes(y, v, codes, n_levels, weights)

    def predictor(rows):  # (the class weights' predictor, row by row)
        return columns(rows) if weights is None else weighted_predictor(y[rows], columns(rows), weights[rows])

    total = np.zeros(S)
    if classes.flat.size:  # rows with s_i = 0 do not involve u: their hinge is a constant factor
        total += -2.0 * np.sum(np.maximum(0.0, 1.0 - y[classes.flat] * predictor(classes.flat)), axis=1)
    for rows, layout in classes.classes:
        total += _class_log_integrals(layout, predictor(rows), sigma2)
    return total


def _class_log_integrals(layout: LevelLayout, eta: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """``sum_j log I_j`` over one class's levels (rows with ``s_i = 0`` excluded by the caller's constant)."""
    S = eta.shape[0]
    if compiled_rows.available():  # the draws in two halves on the package's two row threads (nogil)
        eta = np.ascontiguousarray(eta)
        if eta.size < THREADED_FROM_VALUES:
            return draws_log_integral_sums(layout.y, eta, layout.slope, layout.rows, sigma2)
        halves = [slice(0, S // 2), slice(S // 2, S)]
        sums = row_pool().map(
            lambda h: draws_log_integral_sums(layout.y, eta[h], layout.slope, layout.rows, sigma2[h]), halves
        )
        return np.concatenate(list(sums))
    total = np.zeros(S)
    J, K = layout.shape
    step = max(1, int(CHUNK_VALUES // max(1, J * (K + 1))))
    for first in range(0, S, step):
        part = slice(first, min(S, first + step))
        total[part] += np.sum(pieces(layout, eta[part]).log_integrals(sigma2[part]), axis=1)
    return total


def log_prior_dense(
    problem: VBProblem, theta_d: np.ndarray, covs: list[np.ndarray], skip: int | tuple[int, ...]
) -> np.ndarray:
    """``log p(theta_d | variances)`` for draws ``theta_d (S, q)``; ``covs[c]`` is ``(S, k, k)``; the components in
    ``skip`` (the blocked ones, integrated out by the caller) are left out.

    Each draw's random effects ``u_j ~ N(0, Sigma_s)``: ``-1/2 |L_s^{-1} u_j|^2 - log |L_s| - k/2 log 2 pi`` summed over
    the levels, with ``L_s`` the Cholesky factor of draw ``s``'s covariance; the factors and solves are batched over the
    draws (one call each, not one per draw).
    """
    lam = problem.fixed_precision
    fixed = lam > 0
    total = np.sum(0.5 * np.log(lam[fixed]) - 0.5 * LOG_2PI - 0.5 * lam[fixed] * theta_d[:, fixed] ** 2, axis=1)
    skipped = (skip,) if isinstance(skip, int) else skip
    for c, comp in enumerate(problem.components):
        if c in skipped:
            continue
        u = theta_d[:, comp.index]  # (S, J, k)
        chol = np.linalg.cholesky(covs[c])  # (S, k, k)
        if comp.k == 1:  # the triangular solve is a division
            z = u / chol[:, None, :, 0]
        else:
            z = np.linalg.solve(chol[:, None], u[..., None])[..., 0]  # (S, J, k)
        log_det = np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)), axis=1)  # log |L_s|
        total += -0.5 * np.sum(z**2, axis=(1, 2)) - comp.n_levels * (log_det + 0.5 * comp.k * LOG_2PI)
    return total


def fixed_marginal(theta) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ``theta_d`` (the coefficients not integrated out) under a node's Gaussian."""
    grid = np.arange(theta.mean_d.size)
    return theta.mean_d, theta.cov_entries(grid[:, None], grid[None, :])


def gaussian_transform(mean: np.ndarray, cov: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard normals ``z (S, q)`` carried to ``N(mean, cov)``, and their log densities, through one Cholesky
    factor: positive definite is enough (scipy's density refuses covariances whose eigenvalues span more than about
    1e12, which unstandardised columns on a scale of 1e6 give; this density does not need that)."""
    chol = np.linalg.cholesky(cov)
    log_q = -0.5 * np.sum(z**2, axis=1) - np.sum(np.log(np.diag(chol))) - 0.5 * mean.size * LOG_2PI
    return mean + z @ chol.T, log_q


#: Importance draws per node (half of them the negatives of the other half).  On toenail the reweighted patient
#: variance is 13.33 at 24 draws, 13.40 at 50 and 13.36 at 100; ohio's child variance 1.557 at 24 and 1.545 at 50.
DRAWS = 32
#: Rows x draws per node above which the draws may be fewer: every node takes the first :func:`thinned_draws` of the
#: :data:`DRAWS` (pairs of a normal and its negative), as many as the first node's effective sample size needs for
#: the Monte Carlo variance of :data:`FEW_DRAWS` draws at an effective sample size of :data:`FEW_DRAWS_ESS`.  Every
#: fit of up to 7,500 rows keeps :data:`DRAWS`; above, an effective sample size of 90% leaves the importance weights
#: nearly flat, and the nodes' weights move by less than their Monte Carlo error (20,000 and 2 x 10^5 rows: the same
#: estimates to four decimals).
FEW_DRAWS_FROM_VALUES = 2.4e5
FEW_DRAWS = 8
FEW_DRAWS_ESS = 0.9
#: The importance-sampled values are used only where the effective sample size of the draws, averaged over the
#: nodes by their weights, is at least this fraction of the draws.  Below it a node's estimate is dominated by one
#: or two draws: EP's Gaussian is then far from the marginal posterior inside the node, and reweighting the nodes
#: cannot repair that (the PSIS check reports it).
MIN_ESS_FRACTION = 0.2
#: Where levels are integrated by importance sampling, the variance of the estimated ``sum_j log I_j`` (averaged over
#: the outer draws) may be at most this; more inner draws are taken until it is.  Noise of variance ``V`` in the log
#: weights alone cuts their effective sample size by ``exp(-V)``.
MAX_LEVEL_NOISE = 0.25
#: The most inner draws per level and outer draw.
MAX_INNER_DRAWS = 512
#: Outer draws x rows x inner draws per node beyond which the levels are not sampled (EP's weights are kept and the
#: summary says why): about a quarter of a second per node in the compiled loop.
MAX_SAMPLED_WORK = 5e7


def thinned_draws(ess_fraction: float, draws: int) -> int:
    """The fewest draws, pairs of a normal and its negative and at least :data:`FEW_DRAWS`, whose estimate of
    ``log p(y | phi)`` has at most the Monte Carlo variance of :data:`FEW_DRAWS` draws at an effective sample size of
    :data:`FEW_DRAWS_ESS` (at most ``draws``).

    For ``S`` draws whose weights have an effective sample size of a fraction ``f``, the delta method gives
    ``var(log p_hat) = var(w) / (S E[w]^2) = (1/f - 1) / S``: so ``S >= FEW_DRAWS (1/f - 1) / (1/FEW_DRAWS_ESS - 1)``.
    At ``f >= FEW_DRAWS_ESS`` that is :data:`FEW_DRAWS`; below about ``f = 0.7`` it is every one of 32 draws.
    """
    if not ess_fraction > 0.0:
        return draws
    needed = FEW_DRAWS * (1.0 / ess_fraction - 1.0) / (1.0 / FEW_DRAWS_ESS - 1.0)
    pairs = int(np.ceil(needed / 2.0 - 1e-9))
    return int(min(draws, max(FEW_DRAWS, 2 * pairs)))


class UnreliableEvidence(ArithmeticError):
    """The importance-sampled evidence cannot be computed at a node (the fit then keeps EP's weights)."""


@dataclass
class NodeEstimate:
    """``log p(y | phi)`` estimated at one node, and the effective sample size of its draws (a fraction)."""

    log_evidence: float
    ess_fraction: float


class NodeEvidence:
    """The importance-sampled ``log p(y | phi)`` of the module docstring, for one problem.

    ``component`` is the term integrated out exactly (:func:`integrable_component`), or None: then the blocked
    factor's random-effect vectors (a correlated term, or several terms of one factor) are integrated level by level
    by importance sampling from the node's own conditional of each level given ``theta_d``
    (:mod:`bayesvm.engines.linear.sampled_levels`).  ``hyperparameters`` maps ``phi`` to the components' covariances
    and precisions (:class:`bayesvm.engines.linear.ep.Hyperparameters`).
    """

    def __init__(
        self, problem: VBProblem, component: int | None, hyperparameters, draws: int = DRAWS, seed: int = 0,
        levels: LevelIntegrals | None = None,
    ) -> None:  # fmt: skip
        self.problem = problem
        self.rows = LevelsInMemory(problem) if levels is None else levels
        self.component = component
        self.blocked = tuple(c for c, comp in enumerate(problem.components) if comp.blocked)
        self.hyperparameters = hyperparameters
        self.half = np.random.default_rng(seed).standard_normal(((draws + 1) // 2, problem.D.shape[1]))
        self.z = np.vstack([self.half, -self.half])  # antithetic: a shift of q's mean cancels to first order
        self.draws = self.z.shape[0]
        # (large data: fewer draws where the first node shows they suffice; :data:`FEW_DRAWS_FROM_VALUES`)
        self.may_thin = self.rows.n * self.draws > FEW_DRAWS_FROM_VALUES and self.draws > FEW_DRAWS
        self.seed = seed
        self.levels = "exact" if component is not None else "sampled"
        self.inner = INNER_DRAWS  # inner draws per level (sampled levels), raised where their noise is too large

    def release(self) -> None:
        """Free what the estimates kept between nodes (the sampled levels' inner normals): called once the nodes
        are weighted."""
        if self.levels == "sampled":
            forget_normals()

    def __call__(self, phi: np.ndarray, theta) -> NodeEstimate:
        """The estimate at ``phi`` from the node's Gaussian ``theta`` (its ``theta_d`` marginal is the proposal).

        On large data the first call decides the draws of every call (:data:`FEW_DRAWS_FROM_VALUES`): the first
        :func:`thinned_draws` of them (pairs of a normal and its negative) from then on, this node's estimate
        included, so that every node uses the same draws (common random numbers)."""
        estimate = self._estimate(phi, theta)
        if self.may_thin:
            self.may_thin = False
            draws = thinned_draws(estimate.ess_fraction, self.draws)
            if draws < self.draws:
                half = self.half[: draws // 2]
                self.z = np.vstack([half, -half])
                self.draws = self.z.shape[0]
                estimate = self._estimate(phi, theta)
        return estimate

    def _estimate(self, phi: np.ndarray, theta) -> NodeEstimate:
        """The estimate at ``phi`` from the draws ``self.z``."""
        problem, S = self.problem, self.z.shape[0]
        mean, cov = fixed_marginal(theta)
        try:
            theta_d, log_q = gaussian_transform(mean, cov, self.z)
        except np.linalg.LinAlgError as exc:  # a covariance that is numerically singular (columns on wild scales)
            raise UnreliableEvidence("the node's covariance of the coefficients has no Cholesky factor") from exc
        covs = [np.repeat(c[None], S, axis=0) for c in self.hyperparameters.covariances(phi)]
        if self.component is not None:
            log_p = self.rows.exact_log_integrals(theta_d, covs[self.component][:, 0, 0])
        else:
            log_p = self._sampled_levels(phi, theta, theta_d)
        log_ratio = log_p + log_prior_dense(problem, theta_d, covs, self.blocked) - log_q
        if not np.all(np.isfinite(log_ratio)):
            raise UnreliableEvidence("the pseudo-posterior or q was not finite at an importance draw")
        w = np.exp(log_ratio - log_ratio.max())
        return NodeEstimate(float(logsumexp(log_ratio) - np.log(S)), float(w.sum() ** 2 / np.sum(w**2) / S))

    def _sampled_levels(self, phi: np.ndarray, theta, theta_d: np.ndarray) -> np.ndarray:
        """``sum_j log I_j`` by importance sampling each level from the node's conditional ``u_j | theta_d``."""
        refusal = self.rows.sampled_refusal()
        if refusal is not None:
            raise UnreliableEvidence(refusal)
        rows = int(np.sum(self.problem.blocked.codes >= 0))
        if self.draws * rows * self.inner > MAX_SAMPLED_WORK:
            raise UnreliableEvidence(
                f"integrating the random-effect vectors of {rows} rows by importance sampling at every node would "
                f"cost more than the fit ({self.draws} x {self.inner} draws per row); EP's evidence shrinks a "
                "correlated term's variances, by 10-20% on small data: method='gibbs' gives them"
            )
        _, prior_b = prior_precisions(self.problem, self.hyperparameters.precisions(phi))
        sampled, self.inner = quiet_level_sums(self.problem, theta, theta_d, prior_b, self.inner, self.seed + 1)
        return sampled.log_integrals


class LevelIntegrals(Protocol):
    """The rows whose levels :class:`NodeEvidence` integrates: in memory (:class:`LevelsInMemory`) or in the
    partitions of out-of-core data (:class:`bayesvm.engines.linear.stream_ep.StreamedRows`)."""

    #: the number of rows
    n: int

    def exact_log_integrals(self, theta_d: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
        """``sum_j log I_j`` of the integrable component's levels for draws ``theta_d (S, q)`` and ``sigma2 (S,)``."""
        ...

    def sampled_refusal(self) -> str | None:
        """Why the levels cannot be integrated by importance sampling here (None where they can)."""
        ...


class LevelsInMemory:
    """The rows of an in-memory problem: :func:`group_log_integrals` over its blocked factor (the level classes
    formed at the first call)."""

    def __init__(self, problem: VBProblem) -> None:
        self.problem, self.n, self.classes = problem, problem.n, None

    def exact_log_integrals(self, theta_d: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
        problem, blocked = self.problem, self.problem.blocked
        if self.classes is None:
            self.classes = level_classes(
                problem.y, blocked.values[:, 0], blocked.codes, blocked.n_levels, problem.weights
            )
        return draws_log_integrals(problem.y, problem.D, theta_d, blocked.values[:, 0], blocked.codes, sigma2,
                                   blocked.n_levels, problem.weights, self.classes)  # fmt: skip

    def sampled_refusal(self) -> str | None:
        return None


def quiet_level_sums(problem: VBProblem, theta, theta_d: np.ndarray, prior_b: np.ndarray, inner: int, seed: int):
    """:func:`bayesvm.engines.linear.sampled_levels.sampled_log_integrals` for draws ``theta_d`` of the coefficients
    outside the blocked factor, each level proposed from ``theta``'s conditional ``u_j | theta_d``:
    ``N(mu_j - G_j (theta_d - mu_d), P_jj^{-1})`` with the Schur elimination's gains ``G_j = P_jj^{-1} P_jd``;
    ``prior_b`` is the blocked factor's prior precision per level.  Returns ``(the sums, inner draws used)``: the inner
    draws are doubled until the estimate's noise, averaged over the draws, is at most :data:`MAX_LEVEL_NOISE` (or
    :data:`MAX_INNER_DRAWS` is reached); the noise falls as ``1 / M``."""
    blocked = problem.blocked
    gains = theta.gains.dense()  # (J, K, q)
    conditional_mean = theta.mean_b[None] - np.einsum("jkq,sq->sjk", gains, theta_d - theta.mean_d)
    try:
        chol = np.linalg.cholesky(theta.block_inv)
    except np.linalg.LinAlgError as exc:
        raise UnreliableEvidence("a level's conditional covariance has no Cholesky factor") from exc
    eta = theta_d @ problem.D.T
    while True:
        sampled = sampled_log_integrals(
            problem.y, eta, blocked.values, blocked.codes, conditional_mean, chol, prior_b, problem.weights,
            inner=inner, seed=seed,
        )  # fmt: skip
        noise = float(np.mean(sampled.noise))
        if noise <= MAX_LEVEL_NOISE or inner >= MAX_INNER_DRAWS:
            return sampled, inner
        inner = int(min(MAX_INNER_DRAWS, inner * 2 ** np.ceil(np.log2(noise / MAX_LEVEL_NOISE))))


def sampled_integrable(problem: VBProblem) -> bool:
    """Whether the blocked factor's random effects can be integrated level by level by importance sampling (the
    dense/Schur path with a blocked factor that carries at least one component)."""
    return problem.blocked is not None and not problem.is_sparse and any(comp.blocked for comp in problem.components)


def node_evidence(
    problem: VBProblem, hyperparameters, draws: int = DRAWS, levels: LevelIntegrals | None = None
) -> NodeEvidence | None:
    """The estimator for ``problem`` (its rows in memory, or ``levels``), or None where the random effects cannot be
    integrated level by level (the sparse path, or no blocked factor)."""
    component = integrable_component(problem)
    if component is None and not sampled_integrable(problem):
        return None
    return NodeEvidence(problem, component, hyperparameters, draws, levels=levels)


@dataclass
class NodeWeights:
    """How the accurate fit's nodes were weighted.

    ``method`` is ``"importance"`` (importance-sampled ``p(y | phi)``) or ``"EP"`` (EP's ``Z_EP(phi)``, kept because
    the importance draws' effective sample size, ``ess_fraction`` of ``draws`` averaged over the nodes by their
    weights, fell below :data:`MIN_ESS_FRACTION`, or for the ``reason`` given); ``log_evidence_shift`` is the importance-sampled ``log p(y)`` minus
    EP's.
    """

    method: str
    draws: int
    ess_fraction: float
    log_evidence_shift: float
    #: why EP's weights were kept ("" when the importance-sampled ones are used)
    reason: str = ""
    #: how each level's random effects were integrated: "exact" (one coefficient per level, closed form) or
    #: "sampled" (a vector per level, importance sampling: :mod:`bayesvm.engines.linear.sampled_levels`)
    levels: str = "exact"
